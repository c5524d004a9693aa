//! The 64-byte message header.

use super::{
    align, WireError, FLAG_NEW_REGION, KIND_ACK, KIND_CONTROL_RESULT, KIND_HELLO, MAGIC, MAX_COUNT, MAX_DATA_BYTES,
    MAX_META_BYTES, MAX_REGION_BYTES, VERSION,
};

pub const HEADER_SIZE: usize = 64;

/// The header's fields (magic and version are implied: always ours when encoding, checked when decoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub kind: u16,
    pub flags: u32,
    pub count: u32,
    pub seq: u64,
    pub region_size: u64,
    pub region_id: u32,
    pub peer_region_id: u32,
    pub meta_length: u32,
    pub data_length: u64,
}

fn u16_at(bytes: &[u8; HEADER_SIZE], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8; HEADER_SIZE], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8; HEADER_SIZE], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

impl Header {
    /// Read and check a header: magic, version, kind and every length against the protocol's limits.
    pub fn decode(bytes: &[u8; HEADER_SIZE]) -> Result<Header, WireError> {
        let magic = u32_at(bytes, 0);
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        let version = u16_at(bytes, 4);
        if version != VERSION {
            return Err(WireError::Version { peer: version });
        }
        let header = Header {
            kind: u16_at(bytes, 6),
            flags: u32_at(bytes, 8),
            count: u32_at(bytes, 12),
            seq: u64_at(bytes, 16),
            region_size: u64_at(bytes, 24),
            region_id: u32_at(bytes, 32),
            peer_region_id: u32_at(bytes, 36),
            meta_length: u32_at(bytes, 40),
            data_length: u64_at(bytes, 48),
        };
        if !(KIND_HELLO..=KIND_CONTROL_RESULT).contains(&header.kind) {
            return Err(WireError::BadFrame(format!("unknown message kind {}", header.kind)));
        }
        if header.meta_length > MAX_META_BYTES {
            return Err(WireError::BadFrame(format!(
                "{} bytes of metadata (limit {MAX_META_BYTES})",
                header.meta_length
            )));
        }
        if header.data_length > MAX_DATA_BYTES {
            return Err(WireError::BadFrame(format!(
                "{} bytes of inline data (limit {MAX_DATA_BYTES})",
                header.data_length
            )));
        }
        if header.kind != KIND_ACK && header.count > MAX_COUNT {
            return Err(WireError::BadFrame(format!("{} records (limit {MAX_COUNT})", header.count)));
        }
        let bad_region = header.region_size == 0 || header.region_size > MAX_REGION_BYTES || header.region_id == 0;
        if header.flags & FLAG_NEW_REGION != 0 && bad_region {
            return Err(WireError::BadFrame(format!(
                "new region {} of {} bytes (a region id > 0 and 1 to {MAX_REGION_BYTES} bytes expected)",
                header.region_id, header.region_size
            )));
        }
        Ok(header)
    }

    /// Write the header, with our magic and version.
    pub fn encode(&self, out: &mut [u8]) {
        out[..HEADER_SIZE].fill(0);
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        out[6..8].copy_from_slice(&self.kind.to_le_bytes());
        out[8..12].copy_from_slice(&self.flags.to_le_bytes());
        out[12..16].copy_from_slice(&self.count.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.region_size.to_le_bytes());
        out[32..36].copy_from_slice(&self.region_id.to_le_bytes());
        out[36..40].copy_from_slice(&self.peer_region_id.to_le_bytes());
        out[40..44].copy_from_slice(&self.meta_length.to_le_bytes());
        out[48..56].copy_from_slice(&self.data_length.to_le_bytes());
    }

    /// Where the data section starts, from the message's start.
    pub fn data_start(&self) -> usize {
        align(HEADER_SIZE + self.meta_length as usize)
    }

    /// The whole message's length (the limits checked in `decode` keep it far below usize::MAX).
    pub fn total_length(&self) -> usize {
        self.data_start() + self.data_length as usize
    }

    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{KIND_BATCH, VERSION};

    fn sample() -> Header {
        Header {
            kind: KIND_BATCH,
            flags: 5,
            count: 3,
            seq: 9,
            region_size: 4096,
            region_id: 2,
            peer_region_id: 1,
            meta_length: 100,
            data_length: 7,
        }
    }

    #[test]
    fn round_trip_and_lengths() {
        let mut bytes = [0u8; HEADER_SIZE];
        sample().encode(&mut bytes);
        assert_eq!(&bytes[..4], b"TRTW");
        assert_eq!(Header::decode(&bytes).unwrap(), sample());
        assert_eq!(sample().data_start(), 192);
        assert_eq!(sample().total_length(), 199);
    }

    #[test]
    fn refuses_what_it_cannot_frame() {
        let mut bytes = [0u8; HEADER_SIZE];
        sample().encode(&mut bytes);
        let mut wrong = bytes;
        wrong[0] = b'X';
        assert!(matches!(Header::decode(&wrong), Err(WireError::BadMagic(_))));
        let mut wrong = bytes;
        wrong[4..6].copy_from_slice(&(VERSION + 1).to_le_bytes());
        assert_eq!(Header::decode(&wrong), Err(WireError::Version { peer: VERSION + 1 }));
        let mut wrong = bytes;
        wrong[6] = 99;
        assert!(matches!(Header::decode(&wrong), Err(WireError::BadFrame(_))));
        let mut wrong = bytes;
        wrong[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Header::decode(&wrong), Err(WireError::BadFrame(_))));
        let mut wrong = bytes;
        wrong[48..56].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(Header::decode(&wrong), Err(WireError::BadFrame(_))));
        let mut wrong = bytes;
        wrong[24..32].copy_from_slice(&0u64.to_le_bytes());
        assert!(matches!(Header::decode(&wrong), Err(WireError::BadFrame(_))));
    }
}
