//! Shared memory regions: the one this side writes (its outgoing region) and its mapping of the peer's.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::sys::{check_peer_region, new_sealed_memfd, Mapping};

const HEADROOM_LIMIT: u64 = 16 << 20;
const GRANULE: u64 = 2 << 20;

/// The size of a new region for a message that needs `need` bytes: the need plus headroom of half of it (at
/// most 16 MiB), rounded up to 2 MiB, never above `limit`. Err when the need itself is above the limit.
pub fn size_for(need: u64, limit: u64) -> Result<u64, String> {
    if need > limit {
        return Err(format!(
            "the tensors of this batch need {need} bytes of shared memory, more than the region limit of {limit} \
             bytes: send smaller requests (or batches), or raise the limit in the tritonrt process that serves the model"
        ));
    }
    let wanted = need.saturating_add((need / 2).min(HEADROOM_LIMIT));
    let rounded = wanted.div_ceil(GRANULE).saturating_mul(GRANULE);
    Ok(rounded.min(limit).max(need))
}

/// This side's outgoing region: an anonymous sealed memfd, mapped read-write.
pub struct OwnRegion {
    pub id: u32,
    fd: OwnedFd,
    map: Mapping,
    size: u64,
}

impl OwnRegion {
    /// Create and reserve a region of `size` bytes; the error says what ran out.
    pub fn create(id: u32, size: u64) -> Result<OwnRegion, String> {
        let reserve = |error: io::Error| {
            format!(
                "cannot reserve {size} bytes of shared memory for this batch's tensors ({error}): the memory limit of \
                 tritonserver's container or host is reached; send smaller requests or give it more memory"
            )
        };
        let fd = new_sealed_memfd(size).map_err(reserve)?;
        let length = usize::try_from(size).map_err(|_| format!("a region of {size} bytes cannot be mapped"))?;
        let map = Mapping::new(fd.as_fd(), length, true).map_err(reserve)?;
        Ok(OwnRegion { id, fd, map, size })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    pub fn mapping_mut(&mut self) -> &mut Mapping {
        &mut self.map
    }
}

/// This side's read-only mapping of the peer's current region.
pub struct PeerRegion {
    pub id: u32,
    map: Mapping,
}

impl PeerRegion {
    /// Map the peer's new region `id`, after checking the descriptor (sealed regular file of `size` bytes).
    pub fn map(id: u32, fd: OwnedFd, size: u64) -> Result<PeerRegion, String> {
        check_peer_region(fd.as_fd(), size).map_err(|e| format!("the peer's region {id} was refused: {e}"))?;
        let length =
            usize::try_from(size).map_err(|_| format!("the peer's region of {size} bytes cannot be mapped"))?;
        let map = Mapping::new(fd.as_fd(), length, false).map_err(|e| format!("cannot map the peer's region: {e}"))?;
        Ok(PeerRegion { id, map })
    }

    pub fn mapping(&self) -> &Mapping {
        &self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_need_with_bounded_headroom() {
        assert_eq!(size_for(1, 1 << 30).unwrap(), 2 << 20);
        assert_eq!(size_for(3 << 20, 1 << 30).unwrap(), 6 << 20); // 4.5 MiB -> 6 MiB
        assert_eq!(size_for(100 << 20, 1 << 30).unwrap(), 116 << 20); // headroom capped at 16 MiB
        assert_eq!(size_for(900 << 20, 1 << 30).unwrap(), 916 << 20);
        assert_eq!(size_for(1020 << 20, 1 << 30).unwrap(), 1 << 30); // capped at the limit
        let error = size_for((1 << 30) + 1, 1 << 30).unwrap_err();
        assert!(error.contains("more than the region limit"), "{error}");
    }

    #[test]
    fn a_peer_region_is_mapped_read_only_after_checks() {
        let mut own = OwnRegion::create(1, 1 << 16).unwrap();
        assert!(own.mapping_mut().copy_in(10, b"data"));
        let peer = PeerRegion::map(1, own.fd().try_clone_to_owned().unwrap(), 1 << 16).unwrap();
        let mut out = [0u8; 4];
        assert!(peer.mapping().copy_out(10, &mut out));
        assert_eq!(&out, b"data");
        assert!(PeerRegion::map(2, own.fd().try_clone_to_owned().unwrap(), 1 << 17).is_err());
    }
}
