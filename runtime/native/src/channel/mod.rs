//! The backend's end of one connection to the worker: the socket, framing, the handshake, and the two
//! regions (ours for inputs, the worker's for outputs).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::region::{size_for, OwnRegion, PeerRegion};
use crate::sys;
use crate::wire::{
    decode_body, encode, Body, Header, Hello, WireError, FLAG_DECOUPLED, FLAG_NEW_REGION, HEADER_SIZE, KIND_REFUSE,
    KIND_WELCOME,
};

const INITIAL_BUFFER: usize = 64 << 10;
/// A model slower than the spin time is polled for once in this many waits, to notice when it gets fast.
const CHECK_EVERY: u32 = 64;
/// Descriptors received ahead of the messages that announce them (one read may end with the next
/// message's first bytes and its descriptor).
const MAX_PENDING_FDS: usize = 2;

/// The worker's settings, from its WELCOME.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub worker_pid: u32,
    pub inline_threshold: u64,
    pub spin_us: u32,
    pub region_limit: u64,
    pub worker_version: String,
}

mod errors;

pub use errors::{Broken, ConnectError, SendFailed};

/// A received message. Its bytes stay valid until the next receive.
pub struct Incoming<'c> {
    pub header: Header,
    pub meta: &'c [u8],
    pub data: &'c [u8],
    /// The worker's region this message's regional tensors refer to (checked against `header.region_id`).
    pub peer: Option<&'c PeerRegion>,
    /// Our region that its `LOCATION_RECEIVER_REGION` tensors refer to (checked against `peer_region_id`).
    pub own: Option<&'c OwnRegion>,
    /// Why the regions it names cannot be used, if they cannot: its requests fail, the connection goes on.
    pub region_error: Option<String>,
}

/// Polls for a reply before sleeping while recent polls caught theirs (a caught reply spares both processes
/// a wake-up); stops for slow models.
struct Spin {
    limit: Duration,
    catch_rate: f64,
    waits: u32,
}

impl Spin {
    /// Whether this wait polls before it sleeps: while at least half of the recent polls caught their message,
    /// and once in CHECK_EVERY waits otherwise (to notice a model that got fast).
    fn polls(&mut self) -> bool {
        if self.limit.is_zero() {
            return false;
        }
        self.waits = self.waits.wrapping_add(1);
        self.catch_rate >= 0.5 || self.waits % CHECK_EVERY == 0
    }

    /// Whether the poll caught its message (a moving average over about the last eight polls).
    fn record(&mut self, caught: bool) {
        self.catch_rate += (f64::from(u8::from(caught)) - self.catch_rate) * 0.125;
    }
}

pub struct Channel {
    stream: UnixStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of the message returned last, dropped at the next receive.
    consumed: usize,
    fds: VecDeque<OwnedFd>,
    pub settings: Settings,
    own: Option<OwnRegion>,
    own_announced: bool,
    next_region_id: u32,
    peer: Option<PeerRegion>,
    spin: Spin,
    scratch: Vec<u8>,
    /// A message was sent since the last read: its answer cannot have come yet, so the next receive waits
    /// before it reads (one system call fewer per answer).
    awaiting: bool,
    /// An eventfd that ends a wait early (the answers of calls of other models are ready): the wait then
    /// returns no message.
    wake: Option<Arc<OwnedFd>>,
}

impl Channel {
    /// Connect to the worker at `path` and shake hands. `owner` is the user id the worker must run as
    /// (the owner of the connection file). The error says what to fix.
    pub fn connect(
        path: &Path,
        hello: &Hello<'_>,
        decoupled: bool,
        owner: u32,
        timeout: Duration,
    ) -> Result<Channel, ConnectError> {
        let stream = UnixStream::connect(path).map_err(|error| ConnectError::Unreachable {
            model: hello.model_name.to_string(),
            path: path.to_path_buf(),
            error,
        })?;
        let uid = sys::peer_uid(stream.as_fd()).map_err(ConnectError::Credentials)?;
        if uid != owner {
            return Err(ConnectError::WrongUser { path: path.to_path_buf(), uid, owner });
        }
        let mut channel = Channel {
            stream,
            buf: vec![0; INITIAL_BUFFER],
            start: 0,
            end: 0,
            consumed: 0,
            fds: VecDeque::new(),
            settings: Settings {
                worker_pid: 0,
                inline_threshold: 0,
                spin_us: 0,
                region_limit: 0,
                worker_version: String::new(),
            },
            own: None,
            own_announced: false,
            next_region_id: 1,
            peer: None,
            spin: Spin { limit: Duration::ZERO, catch_rate: 1.0, waits: 0 },
            scratch: Vec::new(),
            awaiting: false,
            wake: None,
        };
        let flags = if decoupled { FLAG_DECOUPLED } else { 0 };
        let mut message = Vec::new();
        encode(&Header { flags, ..Header::default() }, &Body::Hello(hello.clone()), &[], &mut message);
        channel.send(&message, false).map_err(|failed| ConnectError::Hello(failed.into_broken()))?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnectError::Timeout { path: path.to_path_buf(), timeout });
            }
            let incoming = channel
                .poll_message(left.as_millis().min(i32::MAX as u128) as i32)
                .map_err(|broken| ConnectError::Handshake { path: path.to_path_buf(), broken })?;
            let Some(incoming) = incoming else { continue };
            let body = decode_body(&incoming.header, incoming.meta).map_err(ConnectError::BadAnswer)?;
            let settings = match (incoming.header.kind, body) {
                (KIND_WELCOME, Body::Welcome(welcome)) => Settings {
                    worker_pid: welcome.worker_pid,
                    inline_threshold: welcome.inline_threshold as u64,
                    spin_us: welcome.spin_us,
                    region_limit: welcome.region_limit,
                    worker_version: welcome.worker_version.to_string(),
                },
                (KIND_REFUSE, Body::Refuse(message)) => {
                    return Err(ConnectError::Refused {
                        model: hello.model_name.to_string(),
                        message: message.to_string(),
                    });
                }
                (kind, _) => return Err(ConnectError::UnexpectedKind(kind)),
            };
            channel.spin.limit = Duration::from_micros(settings.spin_us as u64);
            channel.settings = settings;
            return Ok(channel);
        }
    }

    /// Send a whole encoded message; with `new_region`, our current region's descriptor goes with it.
    pub fn send(&mut self, message: &[u8], new_region: bool) -> Result<(), SendFailed> {
        let fd = if new_region { self.own.as_ref().map(|own| own.fd()) } else { None };
        if let Err(failure) = sys::send_all(self.stream.as_fd(), message, fd) {
            let closed = matches!(failure.error.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset);
            let broken = Broken::Send(failure.error);
            return Err(if closed && failure.sent == 0 {
                SendFailed::Unsent(broken)
            } else {
                SendFailed::Broken(broken)
            });
        }
        if new_region {
            self.own_announced = true;
        }
        self.awaiting = true;
        Ok(())
    }

    /// Encode and send a small control message (CANCEL, ACK).
    pub fn send_control(&mut self, seq: u64, body: &Body<'_>) -> Result<(), Broken> {
        let mut message = std::mem::take(&mut self.scratch);
        encode(&Header { seq, ..Header::default() }, body, &[], &mut message);
        let result = self.send(&message, false).map_err(SendFailed::into_broken);
        self.scratch = message;
        result
    }

    /// Our region, with at least `need` bytes; a new one (created, to be announced with the next message)
    /// when there is none or it is too small. Returns the region and whether the next message must carry
    /// its descriptor. The error (UNAVAILABLE) says why no region of that size can be had.
    pub fn own_region(&mut self, need: u64) -> Result<(&mut OwnRegion, bool), Error> {
        let fits = self.own.as_ref().is_some_and(|own| own.size() >= need);
        if !fits {
            let unavailable = |error: String| Error::unavailable(format!("tritonrt: {error}"));
            let size = size_for(need, self.settings.region_limit).map_err(unavailable)?;
            self.own = None; // the worker's mapping keeps the old region's memory while it needs it
            self.own = Some(OwnRegion::create(self.next_region_id, size).map_err(unavailable)?);
            self.next_region_id = self.next_region_id.wrapping_add(1).max(1);
            self.own_announced = false;
        }
        let announce = !self.own_announced;
        Ok((self.own.as_mut().expect("region set above"), announce))
    }

    /// `need` bytes of our region from `top` on (aligned): their offset, and whether the next message must carry
    /// the region's descriptor. A region without that room is replaced by a new one (the worker's mapping keeps
    /// the old one's memory while it views it), whose space starts at 0.
    pub fn own_space(&mut self, top: u64, need: u64) -> Result<(u64, bool), Error> {
        let start = crate::wire::align(top as usize) as u64;
        if let Some(own) = &self.own {
            if start.checked_add(need).is_some_and(|end| end <= own.size()) {
                return Ok((start, !self.own_announced));
            }
        }
        self.own = None;
        let (_, announce) = self.own_region(need)?;
        Ok((0, announce))
    }

    /// Our current region's id (0: none).
    pub fn own_region_id(&self) -> u32 {
        self.own.as_ref().map_or(0, |own| own.id)
    }

    /// Our current region's size (0: none).
    pub fn own_region_size(&self) -> u64 {
        self.own.as_ref().map_or(0, OwnRegion::size)
    }

    /// Copy `bytes` into our region at `offset`; false when there is no region or they do not fit.
    pub fn own_mapping_copy_in(&mut self, offset: u64, bytes: &[u8]) -> bool {
        self.own.as_mut().is_some_and(|own| own.mapping_mut().copy_in(offset, bytes))
    }

    /// Stop using our region (the worker keeps views of it); the next batch creates a new one.
    pub fn retire_own_region(&mut self) {
        self.own = None;
    }

    /// True once the connection shows the peer closed it, without waiting or consuming anything.
    pub fn peer_closed(&self) -> bool {
        !matches!(sys::probe(self.stream.as_fd()), Ok(sys::Probe::Empty | sys::Probe::Data))
    }

    fn wait(&mut self, timeout_ms: i32) -> Result<bool, Broken> {
        if self.spin.polls() {
            let deadline = Instant::now() + self.spin.limit;
            let mut caught = false;
            while Instant::now() < deadline {
                if sys::probe(self.stream.as_fd()).map_or(true, |probe| probe != sys::Probe::Empty) {
                    caught = true;
                    break;
                }
                sys::yield_cpu();
            }
            self.spin.record(caught);
            if caught {
                return Ok(true);
            }
        }
        match &self.wake {
            Some(wake) => {
                let (readable, woken) =
                    sys::wait_readable_or_woken(self.stream.as_fd(), wake.as_fd(), timeout_ms).map_err(Broken::Wait)?;
                Ok(readable && !woken)
            }
            None => sys::wait_readable(self.stream.as_fd(), timeout_ms).map_err(Broken::Wait),
        }
    }

    /// End waits early when `wake` becomes readable (see `sys::wake`).
    pub fn set_wake(&mut self, wake: Option<Arc<OwnedFd>>) {
        self.wake = wake;
    }

    /// The next message, waiting at most `timeout_ms` (None when it has not come by then).
    pub fn poll_message(&mut self, timeout_ms: i32) -> Result<Option<Incoming<'_>>, Broken> {
        self.start += std::mem::take(&mut self.consumed);
        let header = loop {
            if let Some(header) = self.complete_header()? {
                if self.end - self.start >= header.total_length() {
                    break header;
                }
                self.make_room(header.total_length());
            } else {
                self.make_room(HEADER_SIZE);
            }
            if std::mem::take(&mut self.awaiting) && !self.wait(timeout_ms)? {
                return Ok(None);
            }
            let mut fds = Vec::new();
            let received =
                sys::recv_nowait(self.stream.as_fd(), &mut self.buf[self.end..], &mut fds).map_err(Broken::Read)?;
            self.fds.extend(fds);
            if self.fds.len() > MAX_PENDING_FDS {
                return Err(Broken::ExtraDescriptors);
            }
            match received {
                Some(0) => return Err(Broken::Closed),
                Some(count) => self.end += count,
                None => {
                    if !self.wait(timeout_ms)? {
                        return Ok(None); // what has arrived of the message stays for the next call
                    }
                }
            }
        };
        let total = header.total_length();
        self.consumed = total;
        let mut region_error = None;
        if header.flags & FLAG_NEW_REGION != 0 {
            let fd = self.fds.pop_front().ok_or(Broken::MissingDescriptor)?;
            self.peer = None;
            match PeerRegion::map(header.region_id, fd, header.region_size) {
                Ok(region) => self.peer = Some(region),
                Err(error) => region_error = Some(error),
            }
        }
        if header.region_id != 0
            && self.peer.as_ref().map(|peer| peer.id) != Some(header.region_id)
            && region_error.is_none()
        {
            region_error =
                Some(format!("the message refers to the worker's region {}, which is not mapped", header.region_id));
        }
        if header.peer_region_id != 0 && self.own.as_ref().map(|own| own.id) != Some(header.peer_region_id) {
            region_error =
                Some(format!("the message refers to our region {}, which is not current", header.peer_region_id));
        }
        let message = &self.buf[self.start..self.start + total];
        let meta_end = HEADER_SIZE + header.meta_length as usize;
        Ok(Some(Incoming {
            header,
            meta: &message[HEADER_SIZE..meta_end],
            data: &message[header.data_start()..],
            peer: self.peer.as_ref(),
            own: self.own.as_ref(),
            region_error,
        }))
    }

    fn complete_header(&self) -> Result<Option<Header>, Broken> {
        if self.end - self.start < HEADER_SIZE {
            return Ok(None);
        }
        let bytes: &[u8; HEADER_SIZE] = self.buf[self.start..self.start + HEADER_SIZE].try_into().expect("64 bytes");
        match Header::decode(bytes) {
            Ok(header) => Ok(Some(header)),
            Err(WireError::Version { peer }) => Err(Broken::Version { peer }),
            Err(error) => Err(Broken::Unreadable(error)),
        }
    }

    /// Make room for a message of `total` bytes starting at `start`: move it to the buffer's front, grow.
    fn make_room(&mut self, total: usize) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < total {
            self.buf.resize(total, 0);
        } else if self.end == self.buf.len() {
            let size = self.buf.len() * 2;
            self.buf.resize(size, 0);
        }
    }

    pub fn region_limit(&self) -> u64 {
        self.settings.region_limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_stops_for_a_slow_model_and_comes_back_when_it_gets_fast() {
        let mut spin = Spin { limit: Duration::from_micros(50), catch_rate: 1.0, waits: 0 };
        let mut misses = 0;
        while spin.polls() {
            spin.record(false); // the reply did not come within the time
            misses += 1;
        }
        assert_eq!(misses, 6, "polling stops once most recent polls missed");
        let polled = (0..CHECK_EVERY * 4).filter(|_| spin.polls()).count();
        assert_eq!(polled, 4, "a slow model is polled for once in {CHECK_EVERY} waits");
        while !spin.polls() {}
        for _ in 0..8 {
            spin.record(true);
        }
        assert!((0..10).all(|_| spin.polls()), "a model that got fast is polled for again");
        let mut off = Spin { limit: Duration::ZERO, catch_rate: 1.0, waits: 0 };
        assert!(!(0..CHECK_EVERY * 2).any(|_| off.polls()), "TRITONRT_SPIN_US=0: never");
    }
}
