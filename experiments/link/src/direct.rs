//! The direct datapath (`--io direct`, the default): one thread per
//! direction that receives a batch of frames from its veth, runs them
//! through that direction's cells and sends what is due out of the other
//! veth, with no async runtime in between.
//!
//! Why: through rattan-core's routing a frame crossed a task per cell (the
//! veth's receive task, one router task per link between cells, a demux and
//! a send task before the driver), each hop a channel, a wakeup and a
//! `yield_now`; at line rate that, not the cells, was the link's cost. Here
//! a direction is a plain loop:
//!
//! ```text
//!  recvmmsg (up to 64 frames) -> cells (link queue, delays) -> sendmmsg
//!        ^                                                        |
//!        +---- ppoll(socket, stop) until the next cell deadline <-+
//! ```
//!
//! The cells are the same logic as the rattan cells' ([`LinkCore`],
//! [`DelayLine`], [`FlowDelays`]), with the same contract: a packet's
//! timestamp is its logical arrival at a cell and, when it leaves, its
//! logical departure, so a late wakeup does not delay what follows.
//! rattan-env still builds and removes the namespaces and veths.
//!
//! Sockets: each veth has a receiving AF_PACKET socket (all protocols,
//! `PACKET_IGNORE_OUTGOING`: the frames we send are not copied back to us)
//! and a sending one bound to protocol 0 (it receives nothing) that bypasses
//! the qdisc layer (`PACKET_QDISC_BYPASS`; a veth has no queue to honour).
//! Frames taken and frame addressing are those of rattan's driver (see
//! `batchio`); the counters at exit are `batchio::counters()`.

use std::{
    io, mem,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    sync::atomic::Ordering,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio::time::Instant;

use crate::{
    batchio::{self, counters},
    cell::{LinkCore, CLOCK0_RECHECK},
    delay::DelayLine,
    flowdelay::FlowDelays,
    packet::{Packet, StdPacket},
};

/// Largest frame received whole; longer ones are truncated by the kernel,
/// counted and dropped (offloads are off, so frames are at most MTU-sized;
/// 64 KiB leaves room for a GRO frame as rattan's driver does).
const RX_SLOT: usize = 65_537;
/// Frames taken per `recvmmsg` (a millisecond of a 1 Gbit/s link is 83).
const RX_BATCH: usize = 128;
/// A direction whose cells have work within this time does not watch its
/// socket: what arrives meanwhile is read at that wakeup, placed by its
/// kernel timestamp (as if read at once), so a stream of arrivals costs a
/// wakeup per deadline, not one per packet.
const READ_HORIZON: Duration = Duration::from_millis(1);
/// Room for one SCM_TIMESTAMPNS control message.
const CONTROL_BYTES: usize = 64;
const SO_TIMESTAMPNS: libc::c_int = 35;
/// Receive batches taken in a row before the cells run and the sends go out,
/// so a steady stream of arrivals cannot hold back departures.
const RX_ROUNDS: usize = 4;
const SOCKET_BUFFER: libc::c_int = 8 << 20;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// One cell of a direction.
pub enum Stage<P: Packet> {
    /// The trace-driven link (queue, log).
    Link(LinkCore<P>),
    /// A fixed delay.
    Delay(DelayLine<P>),
    /// Extra delays per flow (`--ack-delay`).
    FlowDelay(FlowDelays<P>),
}

impl<P: Packet> Stage<P> {
    fn admit(&mut self, p: P) {
        match self {
            Stage::Link(c) => c.admit(p),
            Stage::Delay(d) => d.admit(p.get_timestamp(), p),
            Stage::FlowDelay(f) => f.admit(p),
        }
    }

    /// The next packet that has left by `now`, its timestamp its logical
    /// departure.
    fn pop(&mut self, now: Instant) -> Option<P> {
        match self {
            Stage::Link(c) => {
                if let Some(p) = c.pop() {
                    return Some(p);
                }
                if c.next_opportunity().is_some_and(|t| t <= now) {
                    c.tick(now);
                    return c.pop();
                }
                None
            }
            Stage::Delay(d) => d.pop_due(now).map(|(due, mut p)| {
                p.delay_until(due);
                p
            }),
            Stage::FlowDelay(f) => f.pop_due(now),
        }
    }

    /// When this cell next has something to do without a new arrival.
    fn next_wake(&self, now: Instant) -> Option<Instant> {
        match self {
            Stage::Link(c) if c.awaits_clock0() => Some(now + CLOCK0_RECHECK),
            Stage::Link(c) => c.next_opportunity(),
            Stage::Delay(d) => d.next_due(),
            Stage::FlowDelay(f) => f.next_due(),
        }
    }
}

/// The cells of one direction, in order.
pub struct Pipeline<P: Packet> {
    stages: Vec<Stage<P>>,
}

impl<P: Packet> Pipeline<P> {
    pub fn new(stages: Vec<Stage<P>>) -> Self {
        Self { stages }
    }

    /// A packet arrives at the first cell (a direction without cells passes
    /// it on at the next [`Pipeline::run`]).
    pub fn admit(&mut self, p: P, out: &mut Vec<P>) {
        match self.stages.first_mut() {
            Some(s) => s.admit(p),
            None => out.push(p),
        }
    }

    /// Moves everything that has left a cell by `now` to the next one, and
    /// what leaves the last cell to `out`, in order.
    pub fn run(&mut self, now: Instant, out: &mut Vec<P>) {
        let n = self.stages.len();
        for i in 0..n {
            while let Some(p) = self.stages[i].pop(now) {
                match self.stages.get_mut(i + 1) {
                    Some(next) => next.admit(p),
                    None => out.push(p),
                }
            }
        }
    }

    /// The earliest time a cell has something to do (None: only an
    /// arrival can change anything).
    pub fn next_wake(&self, now: Instant) -> Option<Instant> {
        self.stages.iter().filter_map(|s| s.next_wake(now)).min()
    }
}

fn set_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: an int option of the right size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            mem::size_of::<libc::c_int>() as u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// An AF_PACKET socket for `protocol` (network order) bound to `ifindex` in
/// the calling thread's network namespace.
fn packet_socket(ifindex: i32, protocol: u16) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is checked and owned at once.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol as i32) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    crate::batchio::bind_to_interface(&fd, protocol, ifindex)?;
    Ok(fd)
}

/// The receiving socket of a veth: every protocol, outgoing frames not
/// looped back, kernel receive timestamps, an 8 MiB buffer.
pub fn rx_socket(ifindex: i32) -> io::Result<OwnedFd> {
    let fd = packet_socket(ifindex, (libc::ETH_P_ALL as u16).to_be())?;
    set_int_option(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, SOCKET_BUFFER)
        .unwrap_or_else(|e| tracing::warn!("cannot enlarge a receive buffer: {e}"));
    // Without it every frame we send on this veth would be copied to us too.
    set_int_option(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        .unwrap_or_else(|e| tracing::warn!("PACKET_IGNORE_OUTGOING unavailable: {e}"));
    // each frame's arrival time, taken when the veth delivered it
    set_int_option(fd.as_raw_fd(), libc::SOL_SOCKET, SO_TIMESTAMPNS, 1)?;
    Ok(fd)
}

/// The sending socket of a veth: protocol 0 (receives nothing), qdisc
/// bypassed, an 8 MiB buffer.
pub fn tx_socket(ifindex: i32) -> io::Result<OwnedFd> {
    let fd = packet_socket(ifindex, 0)?;
    set_int_option(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, SOCKET_BUFFER)
        .unwrap_or_else(|e| tracing::warn!("cannot enlarge a send buffer: {e}"));
    set_int_option(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1)
        .unwrap_or_else(|e| tracing::warn!("PACKET_QDISC_BYPASS unavailable: {e}"));
    Ok(fd)
}

/// Where a direction sends: the veth's sending socket and addresses.
pub struct TxPort {
    pub fd: OwnedFd,
    pub ifindex: i32,
    /// Destination MAC (the peer's, inside the endpoint's namespace).
    pub dst: [u8; 6],
    /// Source MAC (the veth's own).
    pub src: [u8; 6],
}

impl TxPort {
    /// Readdresses and sends `out` in order (emptying it); frames the
    /// kernel refuses are counted in `tx_drops`.
    fn send(&self, out: &mut Vec<StdPacket>) {
        let c = counters();
        let mut runts = 0;
        for p in out.iter_mut() {
            if !batchio::readdress(p.as_raw_buffer(), self.dst, self.src) {
                runts += 1;
            }
        }
        let frames: Vec<&[u8]> = out
            .iter()
            .map(|p| p.as_slice())
            .filter(|f| f.len() >= 14)
            .collect();
        let (mut calls, mut refused) = (0, 0);
        for chunk in frames.chunks(batchio::TX_BATCH) {
            let (k, d) = batchio::send_all(chunk, |f| batchio::sendmmsg_frames(self.fd.as_raw_fd(), self.ifindex, f));
            calls += k;
            refused += d;
        }
        c.send_calls.fetch_add(calls, Ordering::Relaxed);
        c.sent.fetch_add(frames.len() as u64 - refused, Ordering::Relaxed);
        c.tx_drops.fetch_add(runts + refused, Ordering::Relaxed);
        drop(frames);
        out.clear();
    }
}

/// The receive buffers of a direction (one `recvmmsg` worth).
struct RxBatch {
    slab: Vec<u8>,
    addrs: Vec<libc::sockaddr_ll>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    control: Vec<[u64; CONTROL_BYTES / 8]>,
}

// SAFETY: the raw pointers inside point into the struct's own heap buffers,
// which move with it; it is used by one thread at a time.
unsafe impl Send for RxBatch {}

impl RxBatch {
    fn new() -> Self {
        let mut b = Self {
            slab: vec![0; RX_SLOT * RX_BATCH],
            // SAFETY: zeroed plain C structs are valid.
            addrs: vec![unsafe { mem::zeroed() }; RX_BATCH],
            iovs: vec![unsafe { mem::zeroed() }; RX_BATCH],
            hdrs: vec![unsafe { mem::zeroed() }; RX_BATCH],
            control: vec![[0; CONTROL_BYTES / 8]; RX_BATCH],
        };
        let base = b.slab.as_mut_ptr();
        for i in 0..RX_BATCH {
            // SAFETY: slot i lies inside the slab.
            b.iovs[i].iov_base = unsafe { base.add(i * RX_SLOT) } as *mut libc::c_void;
            b.iovs[i].iov_len = RX_SLOT;
        }
        b
    }

    /// One non-blocking `recvmmsg`; `each` gets every input frame and its
    /// kernel receive time (unix time; None if the kernel gave none).
    /// Returns the number of frames the call took (0: the socket was empty).
    fn receive(&mut self, fd: RawFd, mut each: impl FnMut(&[u8], Option<Duration>)) -> io::Result<usize> {
        for i in 0..RX_BATCH {
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = &mut self.addrs[i] as *mut libc::sockaddr_ll as *mut libc::c_void;
            h.msg_namelen = mem::size_of::<libc::sockaddr_ll>() as u32;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_flags = 0;
            h.msg_control = self.control[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = CONTROL_BYTES;
        }
        // SAFETY: the headers point at addrs, iovs and the slab, alive for the call.
        let r = unsafe {
            libc::recvmmsg(fd, self.hdrs.as_mut_ptr(), RX_BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let c = counters();
        c.recv_calls.fetch_add(1, Ordering::Relaxed);
        let mut taken = 0;
        for i in 0..r as usize {
            let h = &self.hdrs[i];
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                c.truncated.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if h.msg_hdr.msg_namelen as usize != mem::size_of::<libc::sockaddr_ll>()
                || !batchio::is_input(self.addrs[i].sll_pkttype)
            {
                continue;
            }
            let len = h.msg_len as usize;
            each(&self.slab[i * RX_SLOT..i * RX_SLOT + len], receive_time(&h.msg_hdr));
            taken += 1;
        }
        c.received.fetch_add(taken, Ordering::Relaxed);
        Ok(r as usize)
    }
}

/// The SCM_TIMESTAMPNS of a received message, as time since the unix epoch.
fn receive_time(msg: &libc::msghdr) -> Option<Duration> {
    // SAFETY: msg is a header recvmmsg filled; its control buffer is ours
    // and msg_controllen says how much of it the kernel wrote.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SO_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                return Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

/// Maps unix times to the monotonic clock, from one reading of both.
struct ClockMap {
    mono: Instant,
    unix: Duration,
}

impl ClockMap {
    fn now() -> Self {
        Self {
            mono: Instant::now(),
            unix: SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default(),
        }
    }

    /// The monotonic time of unix time `at` (never later than the reading).
    fn mono_of(&self, at: Duration) -> Instant {
        let ago = self.unix.saturating_sub(at);
        self.mono.checked_sub(ago).unwrap_or(self.mono)
    }
}

/// Waits until `rx` (if given) is readable, `stop` is readable or `until`
/// has come (None: no deadline). Returns false once `stop` is readable.
fn wait(rx: Option<RawFd>, stop: RawFd, until: Option<Instant>) -> io::Result<bool> {
    let mut fds = [
        // a negative descriptor is ignored by ppoll
        libc::pollfd { fd: rx.unwrap_or(-1), events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: stop, events: libc::POLLIN, revents: 0 },
    ];
    let timeout = until.map(|t| {
        let left = t.saturating_duration_since(Instant::now());
        libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        }
    });
    let tp = timeout.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: fds and the timeout live across the call; no signal mask change.
    let r = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, tp, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(true) } else { Err(e) };
    }
    Ok(fds[1].revents == 0)
}

/// A direction's loop: runs until `stop` (an eventfd) becomes readable.
pub fn run_direction(rx: OwnedFd, tx: TxPort, mut pipeline: Pipeline<StdPacket>, stop: RawFd) -> io::Result<()> {
    let mut batch = RxBatch::new();
    let mut out = Vec::with_capacity(4 * RX_BATCH);
    let result = (|| loop {
        let mut full = false;
        for _ in 0..RX_ROUNDS {
            let clock = ClockMap::now();
            let n = batch.receive(rx.as_raw_fd(), |frame, at| {
                let mut p = StdPacket::from_raw_buffer(frame);
                if let Some(at) = at {
                    p.delay_until(clock.mono_of(at));
                }
                pipeline.admit(p, &mut out)
            })?;
            full = n == RX_BATCH;
            if !full {
                break;
            }
        }
        let now = Instant::now();
        pipeline.run(now, &mut out);
        if !out.is_empty() {
            tx.send(&mut out);
        }
        if full {
            continue;
        }
        let wake = pipeline.next_wake(now);
        let watch = wake.is_none_or(|w| w.saturating_duration_since(now) > READ_HORIZON);
        if !wait(watch.then(|| rx.as_raw_fd()), stop, wake)? {
            return Ok(());
        }
    })();
    counters()
        .kernel_drops
        .fetch_add(batchio::kernel_drops(rx.as_raw_fd()), Ordering::Relaxed);
    result
}

/// An eventfd that stops the direction threads when written.
pub struct StopFd(OwnedFd);

impl StopFd {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked and owned at once.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(raw) }))
    }

    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Makes the descriptor readable for good (every waiter wakes).
    pub fn trigger(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64.
        unsafe { libc::write(self.0.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        cell::{Clock0, LinkCellConfig, LinkStats},
        flowkey::PortSide,
        queue::QueueLimit,
    };
    use std::sync::{atomic::AtomicBool, Arc};

    fn ipv4_frame(tag: u8, dport: u16) -> Vec<u8> {
        // Ethernet + IPv4 (total length 1500) + TCP ports
        let mut f = vec![0u8; 14 + 1500];
        f[12] = 0x08;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&1500u16.to_be_bytes());
        f[23] = 6;
        f[34..36].copy_from_slice(&5201u16.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[60] = tag;
        f
    }

    fn packet(tag: u8, at: Instant) -> StdPacket {
        let mut p = StdPacket::from_raw_buffer(&ipv4_frame(tag, 5202));
        p.delay_until(at);
        p
    }

    fn link(trace: &[u64], clock0: &Clock0, sets: bool) -> LinkCore<StdPacket> {
        LinkCore::new(
            LinkCellConfig {
                schedule: trace.to_vec().into(),
                limit: QueueLimit::Packets(100),
                sets_clock0: sets,
                log: None,
                key_side: PortSide::Destination,
                inject_panic: false,
                once: false,
                trace_ended: Arc::new(AtomicBool::new(false)),
            },
            clock0.clone(),
            Arc::new(LinkStats::default()),
        )
    }

    #[test]
    fn link_then_delay_keeps_logical_times_and_order() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let clock0 = Clock0::default();
        // one opportunity every 2 ms, then 10 ms of delay
        let mut pipe = Pipeline::new(vec![Stage::Link(link(&[2], &clock0, true)), Stage::Delay(DelayLine::new(ms(10)))]);
        let mut out = Vec::new();
        for k in 0..3 {
            pipe.admit(packet(k, t0), &mut out);
        }
        assert_eq!(clock0.get(), Some(t0), "the first packet set time 0");
        assert!(out.is_empty());
        // the link's opportunities at 2, 4, 6 ms; each packet then waits 10 ms
        assert_eq!(pipe.next_wake(t0), Some(t0 + ms(2)));
        pipe.run(t0 + ms(11), &mut out);
        assert!(out.is_empty(), "nothing before 2 + 10 ms");
        assert_eq!(pipe.next_wake(t0 + ms(11)), Some(t0 + ms(12)), "the first one's delay ends at 12 ms");
        // woken late (at 30 ms): all leave, each timestamped with its logical departure
        pipe.run(t0 + ms(30), &mut out);
        let got: Vec<(u8, Instant)> = out.iter().map(|p| (p.as_slice()[60], p.get_timestamp())).collect();
        assert_eq!(got, vec![(0, t0 + ms(12)), (1, t0 + ms(14)), (2, t0 + ms(16))]);
    }

    #[test]
    fn a_direction_before_time_0_passes_packets_and_looks_again() {
        let clock0 = Clock0::default();
        let t0 = Instant::now();
        let mut pipe = Pipeline::new(vec![Stage::Link(link(&[1], &clock0, false))]);
        let mut out = Vec::new();
        assert_eq!(pipe.next_wake(t0), Some(t0 + CLOCK0_RECHECK));
        pipe.admit(packet(7, t0), &mut out);
        pipe.run(t0, &mut out);
        assert_eq!(out.len(), 1, "unshaped before time 0");
        clock0.set(t0);
        assert_eq!(pipe.next_wake(t0), Some(t0 + Duration::from_millis(1)));
    }

    #[test]
    fn flow_delays_hold_only_their_port() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut pipe = Pipeline::new(vec![Stage::FlowDelay(FlowDelays::new(&[(5201, ms(5))]))]);
        let mut out = Vec::new();
        // flowkey on the ACK path reads the source port: 5201 in ipv4_frame
        pipe.admit(packet(1, t0), &mut out);
        let mut other = StdPacket::from_raw_buffer(&ipv4_frame(2, 5202));
        other.as_raw_buffer()[34..36].copy_from_slice(&6000u16.to_be_bytes());
        other.delay_until(t0);
        pipe.admit(other, &mut out);
        pipe.run(t0, &mut out);
        assert_eq!(out.iter().map(|p| p.as_slice()[60]).collect::<Vec<_>>(), vec![2]);
        pipe.run(t0 + ms(5), &mut out);
        assert_eq!(out.iter().map(|p| p.as_slice()[60]).collect::<Vec<_>>(), vec![2, 1]);
    }

    #[test]
    fn an_empty_pipeline_forwards_at_once() {
        let mut pipe: Pipeline<StdPacket> = Pipeline::new(vec![]);
        let mut out = Vec::new();
        pipe.admit(packet(3, Instant::now()), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(pipe.next_wake(Instant::now()), None);
    }

    #[test]
    fn kernel_receive_times_map_to_the_monotonic_clock() {
        let c = ClockMap::now();
        let ms = Duration::from_millis;
        assert_eq!(c.mono_of(c.unix - ms(5)), c.mono - ms(5));
        assert_eq!(c.mono_of(c.unix + ms(5)), c.mono, "never in the future");
    }

    #[test]
    fn the_stop_fd_ends_a_wait_at_once() {
        let stop = StopFd::new().unwrap();
        let (a, _b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let start = std::time::Instant::now();
        assert!(wait(Some(a.as_raw_fd()), stop.raw(), Some(Instant::now() + Duration::from_millis(20))).unwrap(), "deadline");
        assert!(start.elapsed() >= Duration::from_millis(20));
        stop.trigger();
        assert!(!wait(Some(a.as_raw_fd()), stop.raw(), None).unwrap(), "stopped");
        assert!(!wait(None, stop.raw(), None).unwrap(), "stopped, socket not watched");
    }
}
