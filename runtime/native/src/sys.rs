//! The operating system calls that std does not offer: memfd regions, mappings, file descriptors over Unix
//! sockets, poll, the monotonic clock, symbol lookup. Each is wrapped in a safe function; this module and
//! `triton::api` are the only places with `unsafe` code.
//!
//! Constants are Linux's (identical on x86_64 and aarch64); the structure layouts are glibc's on 64-bit
//! Linux, the only platform this backend is built for (a compile error elsewhere). `tests/abi.rs` checks every
//! declaration, layout and constant here against glibc's headers with gcc.

use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

#[cfg(not(all(
    target_os = "linux",
    target_env = "gnu",
    target_pointer_width = "64",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
compile_error!(
    "tritonrt's backend declares glibc's structures and constants as they are on 64-bit Linux (x86_64 or \
     aarch64, glibc): build it for x86_64-unknown-linux-gnu or aarch64-unknown-linux-gnu, where tritonserver runs"
);

const MFD_CLOEXEC: c_uint = 1;
const MFD_ALLOW_SEALING: c_uint = 2;
const F_ADD_SEALS: c_int = 1033;
const F_GET_SEALS: c_int = 1034;
const F_SEAL_SEAL: c_int = 1;
const F_SEAL_SHRINK: c_int = 2;
const F_SEAL_GROW: c_int = 4;
const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const MAP_SHARED: c_int = 1;
const SOL_SOCKET: c_int = 1;
const SCM_RIGHTS: c_int = 1;
const SO_PEERCRED: c_int = 17;
const MSG_PEEK: c_int = 2;
const MSG_CTRUNC: c_int = 8;
const MSG_DONTWAIT: c_int = 0x40;
const MSG_NOSIGNAL: c_int = 0x4000;
const MSG_CMSG_CLOEXEC: c_int = 0x4000_0000;
const POLLIN: i16 = 1;
const POLLRDHUP: i16 = 0x2000;
const CLOCK_MONOTONIC: c_int = 1;
const EFD_CLOEXEC: c_int = 0o2000000;
const EFD_NONBLOCK: c_int = 0o4000;
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
/// The most file descriptors one receive accepts; the protocol sends at most one per message.
const MAX_FDS: usize = 4;

#[repr(C)]
struct IoVec {
    base: *mut c_void,
    len: usize,
}

#[repr(C)]
struct MsgHdr {
    name: *mut c_void,
    name_len: u32,
    iov: *mut IoVec,
    iov_len: usize,
    control: *mut c_void,
    control_len: usize,
    flags: c_int,
}

#[repr(C)]
struct CmsgHdr {
    len: usize,
    level: c_int,
    kind: c_int,
}

#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}

#[repr(C)]
struct TimeSpec {
    sec: i64,
    nsec: c_long,
}

#[repr(C)]
struct UCred {
    pid: i32,
    uid: u32,
    gid: u32,
}

extern "C" {
    fn memfd_create(name: *const c_char, flags: c_uint) -> c_int;
    fn ftruncate(fd: c_int, length: i64) -> c_int;
    fn fallocate(fd: c_int, mode: c_int, offset: i64, len: i64) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
    fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, offset: i64) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
    fn sendmsg(fd: c_int, msg: *const MsgHdr, flags: c_int) -> isize;
    fn recvmsg(fd: c_int, msg: *mut MsgHdr, flags: c_int) -> isize;
    fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize;
    fn poll(fds: *mut PollFd, nfds: u64, timeout: c_int) -> c_int;
    fn getsockopt(fd: c_int, level: c_int, name: c_int, value: *mut c_void, len: *mut u32) -> c_int;
    fn clock_gettime(clock: c_int, ts: *mut TimeSpec) -> c_int;
    fn sched_yield() -> c_int;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn geteuid() -> u32;
    fn eventfd(initval: c_uint, flags: c_int) -> c_int;
    fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize;
    fn write(fd: c_int, buf: *const c_void, count: usize) -> isize;
}

fn check(result: c_int) -> io::Result<c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// A new anonymous shared memory file of exactly `size` bytes, reserved (every page allocated now, so that
/// a memory limit fails here rather than with SIGBUS on first touch) and sealed against resizing.
pub fn new_sealed_memfd(size: u64) -> io::Result<OwnedFd> {
    let length = i64::try_from(size).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the name is a NUL-terminated literal; memfd_create returns a new descriptor or -1.
    let raw = check(unsafe { memfd_create(c"tritonrt".as_ptr(), MFD_CLOEXEC | MFD_ALLOW_SEALING) })?;
    // SAFETY: `raw` is a descriptor we just opened and nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: plain calls on a descriptor we own.
    check(unsafe { ftruncate(fd.as_raw_fd(), length) })?;
    if length > 0 {
        // SAFETY: as above. fallocate returns -1 with errno (ENOMEM/ENOSPC when memory is short).
        check(unsafe { fallocate(fd.as_raw_fd(), 0, 0, length) })?;
    }
    // SAFETY: as above; F_ADD_SEALS takes an int argument.
    check(unsafe { fcntl(fd.as_raw_fd(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) })?;
    Ok(fd)
}

/// Check that a descriptor from the peer is a region we can map safely: a regular file of exactly `size`
/// bytes that can never shrink (so reading the mapping cannot fault with SIGBUS).
pub fn check_peer_region(fd: BorrowedFd<'_>, size: u64) -> Result<(), String> {
    let file = std::fs::File::from(fd.try_clone_to_owned().map_err(|e| format!("cannot duplicate it: {e}"))?);
    let meta = file.metadata().map_err(|e| format!("cannot stat it: {e}"))?;
    use std::os::unix::fs::MetadataExt;
    if meta.mode() & S_IFMT != S_IFREG {
        return Err("it is not a regular file".into());
    }
    if meta.size() != size {
        return Err(format!("it has {} bytes, the message says {size}", meta.size()));
    }
    // SAFETY: F_GET_SEALS on a descriptor we hold; returns the seals or -1.
    let seals = check(unsafe { fcntl(fd.as_raw_fd(), F_GET_SEALS) }).map_err(|e| format!("no seals: {e}"))?;
    if seals & F_SEAL_SHRINK == 0 {
        return Err("it is not sealed against shrinking (F_SEAL_SHRINK)".into());
    }
    Ok(())
}

/// A shared mapping of a whole region. Its bytes may change under us (the peer writes its own region), so
/// they are only ever copied through raw pointers, never borrowed as Rust slices.
pub struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping owns its address range (unmapped only in Drop) and has no thread affinity; its bytes
// are accessed only through the bounds-checked copies below, which take &self or &mut self.
unsafe impl Send for Mapping {}
// SAFETY: shared access only reads (copy_out); writes (copy_in) need &mut self.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `len` bytes of `fd` shared; read-only unless `writable`.
    pub fn new(fd: BorrowedFd<'_>, len: usize, writable: bool) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an empty region cannot be mapped"));
        }
        let prot = if writable { PROT_READ | PROT_WRITE } else { PROT_READ };
        // SAFETY: a fresh mapping chosen by the kernel; the result is checked against MAP_FAILED (-1).
        let address = unsafe { mmap(std::ptr::null_mut(), len, prot, MAP_SHARED, fd.as_raw_fd(), 0) };
        if address as isize == -1 {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(address.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { base, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `count` bytes at `offset` lie inside the mapping (a length read from the peer may be anything).
    pub fn holds(&self, offset: u64, count: u64) -> bool {
        usize::try_from(count).is_ok_and(|count| self.range(offset, count).is_some())
    }

    fn range(&self, offset: u64, count: usize) -> Option<usize> {
        let start = usize::try_from(offset).ok()?;
        (start.checked_add(count)? <= self.len).then_some(start)
    }

    /// Copy `src` into the mapping at `offset`; false (nothing copied) when it does not fit.
    pub fn copy_in(&mut self, offset: u64, src: &[u8]) -> bool {
        let Some(start) = self.range(offset, src.len()) else { return false };
        // SAFETY: start + len is within the mapping (checked above); `src` is a valid slice that cannot
        // overlap a mapping created by mmap for this object.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.as_ptr().add(start), src.len()) };
        true
    }

    /// Copy `dst.len()` bytes from the mapping at `offset`; false (nothing copied) when out of bounds.
    pub fn copy_out(&self, offset: u64, dst: &mut [u8]) -> bool {
        let Some(start) = self.range(offset, dst.len()) else { return false };
        // SAFETY: the source range is within the mapping (checked above); `dst` is a valid exclusive slice.
        unsafe { std::ptr::copy_nonoverlapping(self.base.as_ptr().add(start), dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Copy `count` bytes of the mapping at `offset` to the raw address `dst`; false when out of bounds.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `count` bytes and not overlap this mapping.
    pub unsafe fn copy_out_raw(&self, offset: u64, dst: *mut u8, count: usize) -> bool {
        let Some(start) = self.range(offset, count) else { return false };
        // SAFETY: the source is within the mapping; the caller vouches for `dst`.
        unsafe { std::ptr::copy_nonoverlapping(self.base.as_ptr().add(start), dst, count) };
        true
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned and nothing refers to them after this.
        unsafe { munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Why `send_all` stopped: the error, and how many bytes had been sent before it.
#[derive(Debug)]
pub struct SendFailure {
    pub error: io::Error,
    pub sent: usize,
}

/// Send all of `data` on a stream socket, with `fd` (if any) as SCM_RIGHTS on the first byte. Never raises
/// SIGPIPE (a dead peer is an error, not a signal that kills tritonserver).
pub fn send_all(socket: BorrowedFd<'_>, mut data: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<(), SendFailure> {
    let total = data.len();
    let mut control = [0u64; 4]; // room for one cmsghdr and one int, 8-byte aligned
    let mut attach = fd;
    while !data.is_empty() {
        let mut iov = IoVec { base: data.as_ptr() as *mut c_void, len: data.len() };
        let mut header = MsgHdr {
            name: std::ptr::null_mut(),
            name_len: 0,
            iov: &mut iov,
            iov_len: 1,
            control: std::ptr::null_mut(),
            control_len: 0,
            flags: 0,
        };
        if let Some(fd) = attach {
            let cmsg_len = std::mem::size_of::<CmsgHdr>() + std::mem::size_of::<c_int>();
            let cmsg = CmsgHdr { len: cmsg_len, level: SOL_SOCKET, kind: SCM_RIGHTS };
            let bytes = control.as_mut_ptr().cast::<u8>();
            // SAFETY: `control` has 32 bytes, 8-aligned: the 16-byte header and the 4-byte descriptor fit.
            unsafe {
                std::ptr::write(bytes.cast::<CmsgHdr>(), cmsg);
                std::ptr::write_unaligned(bytes.add(std::mem::size_of::<CmsgHdr>()).cast::<c_int>(), fd.as_raw_fd());
            }
            header.control = control.as_mut_ptr().cast();
            header.control_len = (cmsg_len + 7) & !7;
        }
        // SAFETY: every pointer in `header` refers to live locals or to `data` for the duration of the call.
        let sent = unsafe { sendmsg(socket.as_raw_fd(), &header, MSG_NOSIGNAL) };
        if sent < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(SendFailure { error, sent: total - data.len() });
        }
        attach = None; // the descriptor went with the first bytes
        data = &data[sent as usize..];
    }
    Ok(())
}

/// Receive what has arrived into `buf` (at most its length) without waiting; descriptors that came with
/// it are appended to `fds`. Ok(None): nothing has arrived yet. Ok(Some(0)): the peer closed.
pub fn recv_nowait(socket: BorrowedFd<'_>, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<Option<usize>> {
    let mut control = [0u64; 2 + MAX_FDS]; // cmsghdr (16 bytes) + MAX_FDS ints, 8-aligned
    loop {
        let mut iov = IoVec { base: buf.as_mut_ptr().cast(), len: buf.len() };
        let mut header = MsgHdr {
            name: std::ptr::null_mut(),
            name_len: 0,
            iov: &mut iov,
            iov_len: 1,
            control: control.as_mut_ptr().cast(),
            control_len: std::mem::size_of_val(&control),
            flags: 0,
        };
        // SAFETY: the buffers in `header` are live locals / `buf`, sized as declared.
        let received = unsafe { recvmsg(socket.as_raw_fd(), &mut header, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) };
        if received < 0 {
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(None),
                _ => return Err(error),
            }
        }
        take_fds(&control, header.control_len, fds);
        if header.flags & MSG_CTRUNC != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the peer sent more file descriptors than allowed"));
        }
        return Ok(Some(received as usize));
    }
}

/// Collect the descriptors of the SCM_RIGHTS messages in `control[..len]`.
fn take_fds(control: &[u64], len: usize, fds: &mut Vec<OwnedFd>) {
    let bytes = control.as_ptr().cast::<u8>();
    let total = len.min(std::mem::size_of_val(control));
    let header_size = std::mem::size_of::<CmsgHdr>();
    let mut at = 0usize;
    while at + header_size <= total {
        // SAFETY: at + header_size <= total <= the control buffer's size; cmsg headers are 8-aligned there.
        let cmsg = unsafe { std::ptr::read_unaligned(bytes.add(at).cast::<CmsgHdr>()) };
        if cmsg.len < header_size || at + cmsg.len > total {
            break;
        }
        if cmsg.level == SOL_SOCKET && cmsg.kind == SCM_RIGHTS {
            let count = (cmsg.len - header_size) / std::mem::size_of::<c_int>();
            for index in 0..count {
                // SAFETY: within this cmsg's data (count derived from its length, bounded by `total`).
                let raw: RawFd =
                    unsafe { std::ptr::read_unaligned(bytes.add(at + header_size + index * 4).cast::<c_int>()) };
                if raw >= 0 {
                    // SAFETY: the kernel installed this descriptor in our table for us; nothing else owns it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        }
        at += (cmsg.len + 7) & !7;
    }
}

/// What a socket holds right now, seen without waiting or consuming anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Empty,
    Data,
    Closed,
}

pub fn probe(socket: BorrowedFd<'_>) -> io::Result<Probe> {
    let mut byte = 0u8;
    // SAFETY: a one-byte peek into a local.
    let result = unsafe { recv(socket.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, MSG_PEEK | MSG_DONTWAIT) };
    match result {
        0 => Ok(Probe::Closed),
        1.. => Ok(Probe::Data),
        _ => {
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(Probe::Empty),
                _ => Err(error),
            }
        }
    }
}

/// Sleep until the socket is readable (or closed), at most `timeout_ms` (-1: no limit). True if readable.
pub fn wait_readable(socket: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut entry = PollFd { fd: socket.as_raw_fd(), events: POLLIN | POLLRDHUP, revents: 0 };
    // SAFETY: one pollfd on the stack.
    let result = unsafe { poll(&mut entry, 1, timeout_ms) };
    if result < 0 {
        let error = io::Error::last_os_error();
        return if error.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(error) };
    }
    Ok(result > 0)
}

/// Sleep until the socket or `wake` is readable, at most `timeout_ms`: (socket readable, woken).
pub fn wait_readable_or_woken(
    socket: BorrowedFd<'_>,
    wake: BorrowedFd<'_>,
    timeout_ms: i32,
) -> io::Result<(bool, bool)> {
    let mut entries = [
        PollFd { fd: socket.as_raw_fd(), events: POLLIN | POLLRDHUP, revents: 0 },
        PollFd { fd: wake.as_raw_fd(), events: POLLIN, revents: 0 },
    ];
    // SAFETY: two pollfds on the stack.
    let result = unsafe { poll(entries.as_mut_ptr(), 2, timeout_ms) };
    if result < 0 {
        let error = io::Error::last_os_error();
        return if error.kind() == io::ErrorKind::Interrupted { Ok((false, false)) } else { Err(error) };
    }
    Ok((entries[0].revents != 0, entries[1].revents != 0))
}

/// A non-blocking eventfd: other threads `wake` a thread that waits on it with `wait_readable_or_woken`.
pub fn new_eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd returns a new descriptor or -1.
    let raw = check(unsafe { eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) })?;
    // SAFETY: `raw` is a descriptor we just opened and nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Make an eventfd readable (any number of wakes before `unwake` count as one).
pub fn wake(fd: BorrowedFd<'_>) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from a local; a full counter (EAGAIN) still leaves the eventfd readable.
    unsafe { write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Make an eventfd unreadable again (reads its counter; nothing to read is fine).
pub fn unwake(fd: BorrowedFd<'_>) {
    let mut count = 0u64;
    // SAFETY: reads 8 bytes into a local; a non-blocking eventfd at 0 fails with EAGAIN, which is fine.
    unsafe { read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
}

/// The user id of the process at the other end of a Unix socket.
pub fn peer_uid(socket: BorrowedFd<'_>) -> io::Result<u32> {
    let mut cred = UCred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<UCred>() as u32;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    check(unsafe {
        getsockopt(socket.as_raw_fd(), SOL_SOCKET, SO_PEERCRED, (&mut cred as *mut UCred).cast(), &mut len)
    })?;
    Ok(cred.uid)
}

/// Nanoseconds of CLOCK_MONOTONIC: the clock of Triton's statistics (std::chrono::steady_clock).
pub fn monotonic_ns() -> u64 {
    let mut ts = TimeSpec { sec: 0, nsec: 0 };
    // SAFETY: clock_gettime writes one timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    (ts.sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.nsec as u64)
}

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: no arguments; geteuid cannot fail.
    unsafe { geteuid() }
}

/// Give the CPU to another runnable thread (used while polling for a reply).
pub fn yield_cpu() {
    // SAFETY: no arguments, no memory.
    unsafe { sched_yield() };
}

/// The address of `symbol` in the process's global scope (RTLD_DEFAULT), or null.
pub fn global_symbol(symbol: &CStr) -> *mut c_void {
    // SAFETY: RTLD_DEFAULT is the null handle on glibc; `symbol` is NUL-terminated.
    unsafe { dlsym(std::ptr::null_mut(), symbol.as_ptr()) }
}

#[cfg(test)]
#[path = "sys_tests.rs"]
mod tests;
