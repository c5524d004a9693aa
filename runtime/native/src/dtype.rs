//! Tensor data types (the values of Triton's `TRITONSERVER_DataType`) and overflow-checked sizes.

/// A tensor's element type; the discriminant is Triton's value and the wire's `DTYPE_*` code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DataType {
    Bool = 1,
    Uint8 = 2,
    Uint16 = 3,
    Uint32 = 4,
    Uint64 = 5,
    Int8 = 6,
    Int16 = 7,
    Int32 = 8,
    Int64 = 9,
    Fp16 = 10,
    Fp32 = 11,
    Fp64 = 12,
    Bytes = 13,
    Bf16 = 14,
}

impl DataType {
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
        DataType::Bf16,
    ];

    pub fn from_code(code: u32) -> Option<DataType> {
        DataType::ALL.iter().copied().find(|dtype| *dtype as u32 == code)
    }

    /// Bytes per element; None for BYTES (variable-length elements).
    pub fn element_size(self) -> Option<u64> {
        Some(match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => 1,
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => 2,
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => 4,
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => 8,
            DataType::Bytes => return None,
        })
    }

    /// Triton's name of the type, as clients send it ("FP32").
    pub fn name(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
            DataType::Bf16 => "BF16",
        }
    }
}

/// The element count of `shape`, or an error naming the problem (a negative or overflowing dimension).
pub fn element_count(shape: &[i64]) -> Result<u64, String> {
    let mut count: u64 = 1;
    for &dim in shape {
        let dim = u64::try_from(dim).map_err(|_| format!("shape {shape:?} has a negative dimension"))?;
        count = count.checked_mul(dim).ok_or_else(|| format!("shape {shape:?} has more elements than 2^64"))?;
    }
    Ok(count)
}

/// The byte size a tensor of `dtype` and `shape` must have (for BYTES: the least, 4 bytes per element),
/// computed with overflow checks.
pub fn expected_bytes(dtype: DataType, shape: &[i64]) -> Result<u64, String> {
    let count = element_count(shape)?;
    let size = dtype.element_size().unwrap_or(4);
    count.checked_mul(size).ok_or_else(|| format!("shape {shape:?} of {} needs more than 2^64 bytes", dtype.name()))
}

/// Check that `byte_length` is right for a tensor of `dtype` and `shape`: equal to elements x size, or for
/// BYTES at least 4 bytes per element. The error says what was expected.
pub fn check_byte_length(dtype: DataType, shape: &[i64], byte_length: u64) -> Result<(), String> {
    let expected = expected_bytes(dtype, shape)?;
    if dtype == DataType::Bytes {
        if byte_length < expected {
            return Err(format!(
                "{byte_length} bytes cannot hold the {} length-prefixed BYTES elements of shape {shape:?}",
                expected / 4
            ));
        }
    } else if byte_length != expected {
        return Err(format!("shape {shape:?} of {} needs {expected} bytes, but {byte_length} were sent", dtype.name()));
    }
    Ok(())
}

/// Check a BYTES tensor's serialization: exactly `elements` items, each a 4-byte little-endian length and
/// that many bytes, filling `data` exactly.
pub fn check_bytes_serialization(data: &[u8], elements: u64) -> Result<(), String> {
    let mut at: usize = 0;
    for index in 0..elements {
        let Some(prefix) = data.get(at..at + 4) else {
            return Err(format!("BYTES element {index} of {elements}: its length prefix is past the data's end"));
        };
        let length = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        at += 4;
        if length > data.len() - at {
            return Err(format!("BYTES element {index} of {elements}: its length {length} runs past the data's end"));
        }
        at += length;
    }
    if at != data.len() {
        return Err(format!("BYTES data has {} bytes after its {elements} elements", data.len() - at));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for dtype in DataType::ALL {
            assert_eq!(DataType::from_code(dtype as u32), Some(dtype));
        }
        assert_eq!(DataType::from_code(0), None);
        assert_eq!(DataType::from_code(15), None);
    }

    #[test]
    fn poison_shapes_are_caught_before_any_allocation() {
        // FP32 [1, 2^62]: the element count fits, the byte size does not.
        let error = expected_bytes(DataType::Fp32, &[1, 1 << 62]).unwrap_err();
        assert!(error.contains("2^64 bytes"), "{error}");
        assert!(element_count(&[-1, 3]).unwrap_err().contains("negative"));
        assert!(element_count(&[1 << 40, 1 << 40]).unwrap_err().contains("2^64"));
        let error = check_byte_length(DataType::Fp32, &[1, 4], 12).unwrap_err();
        assert!(error.contains("needs 16 bytes, but 12"), "{error}");
        check_byte_length(DataType::Bytes, &[2], 8).unwrap();
        assert!(check_byte_length(DataType::Bytes, &[3], 8).is_err());
    }

    #[test]
    fn bytes_serialization_is_walked_exactly() {
        let mut data = Vec::new();
        for item in [&b"ab"[..], b"", b"xyz"] {
            data.extend_from_slice(&(item.len() as u32).to_le_bytes());
            data.extend_from_slice(item);
        }
        check_bytes_serialization(&data, 3).unwrap();
        assert!(check_bytes_serialization(&data, 2).unwrap_err().contains("after"));
        assert!(check_bytes_serialization(&data, 4).unwrap_err().contains("prefix"));
        let mut bad = data.clone();
        bad[0] = 200;
        assert!(check_bytes_serialization(&bad, 3).unwrap_err().contains("runs past"));
        check_bytes_serialization(&[], 0).unwrap();
    }
}
