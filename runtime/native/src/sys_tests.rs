//! Unit tests of `sys.rs`: memfds, mappings, sockets and descriptors passed over them.

use super::*;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

#[test]
fn memfd_is_sealed_sized_and_accepted_by_the_peer_check() {
    let fd = new_sealed_memfd(1 << 20).unwrap();
    check_peer_region(fd.as_fd(), 1 << 20).unwrap();
    let wrong = check_peer_region(fd.as_fd(), 4096).unwrap_err();
    assert!(wrong.contains("1048576 bytes"), "{wrong}");
    // SAFETY (test): ftruncate on our own memfd must fail because of the seals.
    assert!(unsafe { ftruncate(fd.as_raw_fd(), 10) } < 0);
}

#[test]
fn an_unsealed_file_is_refused() {
    let file = std::fs::File::open("/proc/self/exe").unwrap();
    let size = file.metadata().unwrap().len();
    let error = check_peer_region(file.as_fd(), size).unwrap_err();
    assert!(error.contains("seal") || error.contains("no seals"), "{error}");
}

#[test]
fn mapping_copies_are_bounds_checked() {
    let fd = new_sealed_memfd(8192).unwrap();
    let mut writer = Mapping::new(fd.as_fd(), 8192, true).unwrap();
    let reader = Mapping::new(fd.as_fd(), 8192, false).unwrap();
    assert!(writer.copy_in(8190, b"ab"));
    assert!(!writer.copy_in(8191, b"ab"));
    assert!(!writer.copy_in(u64::MAX, b"a"));
    let mut out = [0u8; 2];
    assert!(reader.copy_out(8190, &mut out));
    assert_eq!(&out, b"ab");
    assert!(!reader.copy_out(u64::MAX - 1, &mut out));
}

#[test]
fn descriptors_cross_a_socket_with_the_first_byte() {
    let (a, b) = UnixStream::pair().unwrap();
    let region = new_sealed_memfd(4096).unwrap();
    send_all(a.as_fd(), b"hello", Some(region.as_fd())).unwrap();
    send_all(a.as_fd(), b"world", None).unwrap();
    let mut fds = Vec::new();
    let mut buf = [0u8; 64];
    assert!(wait_readable(b.as_fd(), 1000).unwrap());
    let mut got = recv_nowait(b.as_fd(), &mut buf, &mut fds).unwrap().unwrap();
    while got < 10 {
        got += recv_nowait(b.as_fd(), &mut buf[got..], &mut fds).unwrap().unwrap_or(0);
    }
    assert_eq!(&buf[..10], b"helloworld");
    assert_eq!(fds.len(), 1);
    check_peer_region(fds[0].as_fd(), 4096).unwrap();
    assert_eq!(peer_uid(b.as_fd()).unwrap(), std::fs::metadata("/proc/self").unwrap().uid_of());
    drop(a);
    assert_eq!(recv_nowait(b.as_fd(), &mut buf, &mut fds).unwrap(), Some(0));
}

trait UidOf {
    fn uid_of(&self) -> u32;
}
impl UidOf for std::fs::Metadata {
    fn uid_of(&self) -> u32 {
        use std::os::unix::fs::MetadataExt;
        self.uid()
    }
}

#[test]
fn monotonic_clock_advances() {
    let a = monotonic_ns();
    let b = monotonic_ns();
    assert!(b >= a && a > 0);
}
