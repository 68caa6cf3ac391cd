//! Our AF_PACKET driver for rattan's veth cells: batched receive
//! (`recvmmsg`) on the runtime's worker and batched send (`sendmmsg`) on a
//! thread of its own per interface (feature `rattan`); its frame helpers
//! and counters also serve the direct datapath.
//!
//! rattan-core's `AfPacketDriver` makes one `recvfrom` and one `sendto` per
//! packet, both on the runtime's worker. A `sendto` into a veth also runs
//! the receiving namespace's TCP work (the veth delivers the frame in the
//! sender's softirq), so with the driver's one worker every packet of both
//! directions, and both endpoints' TCP, was processed on one core. Here each
//! interface's sends happen on a dedicated thread, fed by a channel:
//! that TCP work runs beside the worker instead of inside it, and whatever
//! queued while a send ran goes out in one `sendmmsg`. Receives drain up to
//! [`RX_BATCH`] frames per `recvmmsg`.
//!
//! Semantics are those of rattan's driver: frames the interface received
//! for this host (`PACKET_HOST`, `PACKET_OTHERHOST`) are taken, all others
//! (outgoing, broadcast, multicast) ignored; frames leave with the
//! interface's MAC as source and its peer's as destination; packet order
//! is kept per interface. The socket buffers are enlarged (root's
//! `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`) so a worker that is busy for a
//! millisecond does not lose frames in the kernel; frames the kernel still
//! dropped are counted ([`SocketCounters`]) and reported at exit.

use std::{
    io, mem,
    os::fd::{AsRawFd, OwnedFd, RawFd},
    sync::{atomic::AtomicU64, OnceLock},
};
#[cfg(feature = "rattan")]
use std::{
    collections::VecDeque,
    os::fd::FromRawFd,
    sync::{atomic::Ordering, Arc},
    thread::JoinHandle,
};

#[cfg(feature = "rattan")]
use crossbeam_channel::{Receiver, Sender, TrySendError};
#[cfg(feature = "rattan")]
use rattan_core::{
    cells::{Packet, StdPacket},
    metal::{
        error::MetalError,
        io::common::{InterfaceDriver, InterfaceReceiver, InterfaceSender},
    },
};
#[cfg(feature = "rattan")]
use rattan_env::veth::VethCell;

#[cfg(feature = "rattan")]
/// Frames taken per `recvmmsg`.
pub const RX_BATCH: usize = 64;
/// Frames given per `sendmmsg` at most.
pub const TX_BATCH: usize = 64;
#[cfg(feature = "rattan")]
/// Largest frame received whole (as rattan's driver: a 64 KiB GRO frame
/// fits); a longer one is truncated by the kernel and dropped here.
const RX_SLOT: usize = 65_537;
#[cfg(feature = "rattan")]
/// Frames waiting for the send thread; beyond it a frame is dropped and
/// counted (a NIC's full transmit ring), never blocking the worker.
const TX_QUEUE: usize = 65_536;
#[cfg(feature = "rattan")]
/// Socket buffer sizes asked for (bytes; the kernel doubles them).
const SOCKET_BUFFER: libc::c_int = 8 << 20;
const ETH_HEADER: usize = 14;
const PACKET_HOST: u8 = 0;
const PACKET_OTHERHOST: u8 = 3;

/// What every interface of this driver counted, summed (read at exit).
#[derive(Default, Debug)]
pub struct SocketCounters {
    /// Frames handed to the link.
    pub received: AtomicU64,
    /// Frames sent out.
    pub sent: AtomicU64,
    /// `recvmmsg`/`sendmmsg` calls (frames per call = batching).
    pub recv_calls: AtomicU64,
    pub send_calls: AtomicU64,
    /// Frames the kernel dropped before we read them (PACKET_STATISTICS).
    pub kernel_drops: AtomicU64,
    /// Frames dropped on the way out: send queue full, send error, runt.
    pub tx_drops: AtomicU64,
    /// Frames longer than a receive slot (truncated, dropped).
    pub truncated: AtomicU64,
}

/// The counters of the process's interfaces (one link per process).
pub fn counters() -> &'static SocketCounters {
    static C: OnceLock<SocketCounters> = OnceLock::new();
    C.get_or_init(SocketCounters::default)
}

/// Whether a frame with this `sll_pkttype` is input for the link.
pub fn is_input(pkttype: u8) -> bool {
    pkttype == PACKET_HOST || pkttype == PACKET_OTHERHOST
}

/// Rewrites a frame's Ethernet addresses in place (destination, source);
/// false for a frame shorter than an Ethernet header.
pub fn readdress(frame: &mut [u8], dst: [u8; 6], src: [u8; 6]) -> bool {
    if frame.len() < ETH_HEADER {
        return false;
    }
    frame[0..6].copy_from_slice(&dst);
    frame[6..12].copy_from_slice(&src);
    true
}

#[cfg(feature = "rattan")]
/// Moves up to `max` items into `batch`: `first`, then whatever is queued
/// in `rx` at once (no waiting).
pub fn fill_batch<T>(first: T, rx: &Receiver<T>, batch: &mut Vec<T>, max: usize) {
    batch.push(first);
    while batch.len() < max {
        match rx.try_recv() {
            Ok(p) => batch.push(p),
            Err(_) => break,
        }
    }
}

/// Sends all of `frames` in order with `send`, a `sendmmsg`-like call that
/// sends a prefix of what it is given and returns its length. A frame the
/// call refuses (an error with nothing sent) is skipped and counted in the
/// result's second field, so one bad frame cannot stall the ones behind
/// it; `EINTR` is retried. Returns (calls made, frames dropped).
pub fn send_all<F>(frames: &[&[u8]], mut send: F) -> (u64, u64)
where
    F: FnMut(&[&[u8]]) -> io::Result<usize>,
{
    let (mut at, mut calls, mut dropped) = (0, 0, 0);
    while at < frames.len() {
        calls += 1;
        match send(&frames[at..]) {
            Ok(0) => {
                // nothing sent and no error: treat as a refusal of the first
                dropped += 1;
                at += 1;
            }
            Ok(n) => at += n.min(frames.len() - at),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!("send of a frame failed, dropped: {e}");
                dropped += 1;
                at += 1;
            }
        }
    }
    (calls, dropped)
}

/// One `sendmmsg` of `frames` (at most [`TX_BATCH`]) to `ifindex` on a
/// bound AF_PACKET socket; the number sent.
pub fn sendmmsg_frames(fd: RawFd, ifindex: i32, frames: &[&[u8]]) -> io::Result<usize> {
    let n = frames.len().min(TX_BATCH);
    // SAFETY: zeroed sockaddr_ll/iovec/mmsghdr are valid plain C structs.
    let mut addrs: [libc::sockaddr_ll; TX_BATCH] = unsafe { mem::zeroed() };
    let mut iovs: [libc::iovec; TX_BATCH] = unsafe { mem::zeroed() };
    let mut hdrs: [libc::mmsghdr; TX_BATCH] = unsafe { mem::zeroed() };
    for i in 0..n {
        let f = frames[i];
        addrs[i].sll_family = libc::AF_PACKET as u16;
        // the frame's EtherType, already in network order
        addrs[i].sll_protocol = u16::from_ne_bytes([f[12], f[13]]);
        addrs[i].sll_ifindex = ifindex;
        addrs[i].sll_halen = 6;
        addrs[i].sll_addr[..6].copy_from_slice(&f[0..6]);
        iovs[i].iov_base = f.as_ptr() as *mut libc::c_void;
        iovs[i].iov_len = f.len();
    }
    for i in 0..n {
        hdrs[i].msg_hdr.msg_name = &mut addrs[i] as *mut libc::sockaddr_ll as *mut libc::c_void;
        hdrs[i].msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_ll>() as u32;
        hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: hdrs[..n] point at addrs/iovs/frames, all alive for the call.
    let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as u32, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

#[cfg(feature = "rattan")]
/// The send side of one interface: hands frames to its send thread.
pub struct BatchSender {
    tx: Option<Sender<StdPacket>>,
    thread: Option<JoinHandle<()>>,
    mac: [u8; 6],
    peer_mac: [u8; 6],
}

#[cfg(feature = "rattan")]
impl BatchSender {
    fn spawn(fd: Arc<OwnedFd>, cell: &VethCell) -> io::Result<Self> {
        let (tx, rx) = crossbeam_channel::bounded::<StdPacket>(TX_QUEUE);
        let ifindex = cell.index as i32;
        let thread = std::thread::Builder::new()
            .name(format!("tx-{}", cell.name))
            .spawn(move || send_thread(&fd, ifindex, &rx))?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            mac: cell.mac_addr.bytes(),
            peer_mac: cell.peer().mac_addr.bytes(),
        })
    }
}

#[cfg(feature = "rattan")]
fn send_thread(fd: &OwnedFd, ifindex: i32, rx: &Receiver<StdPacket>) {
    let c = counters();
    let mut batch = Vec::with_capacity(TX_BATCH);
    // ends when every BatchSender handle is gone (the channel disconnects)
    while let Ok(first) = rx.recv() {
        fill_batch(first, rx, &mut batch, TX_BATCH);
        let frames: Vec<&[u8]> = batch.iter().map(|p| p.as_slice()).collect();
        let (calls, dropped) = send_all(&frames, |f| sendmmsg_frames(fd.as_raw_fd(), ifindex, f));
        c.send_calls.fetch_add(calls, Ordering::Relaxed);
        c.sent.fetch_add(frames.len() as u64 - dropped, Ordering::Relaxed);
        c.tx_drops.fetch_add(dropped, Ordering::Relaxed);
        drop(frames);
        batch.clear();
    }
}

#[cfg(feature = "rattan")]
impl InterfaceSender<StdPacket> for BatchSender {
    fn send(&self, mut packet: StdPacket) -> io::Result<()> {
        if !readdress(packet.as_raw_buffer(), self.peer_mac, self.mac) {
            counters().tx_drops.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let Some(tx) = self.tx.as_ref() else {
            return Ok(());
        };
        match tx.try_send(packet) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                counters().tx_drops.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(TrySendError::Disconnected(_)) => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the interface's send thread has ended",
            )),
        }
    }

    fn send_bulk<Iter, T>(&self, packets: Iter) -> io::Result<usize>
    where
        T: Into<StdPacket>,
        Iter: IntoIterator<Item = T>,
        Iter::IntoIter: ExactSizeIterator,
    {
        let mut n = 0;
        for p in packets {
            self.send(p.into())?;
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(feature = "rattan")]
impl Drop for BatchSender {
    fn drop(&mut self) {
        // disconnect first, so the thread's recv returns and it can be joined
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(feature = "rattan")]
/// The receive side of one interface: frames of the last `recvmmsg` not
/// yet handed out, and the buffers it reads into.
pub struct BatchReceiver {
    fd: Arc<OwnedFd>,
    pending: VecDeque<StdPacket>,
    slab: Vec<u8>,
}

#[cfg(feature = "rattan")]
impl BatchReceiver {
    fn new(fd: Arc<OwnedFd>) -> Self {
        Self {
            fd,
            pending: VecDeque::with_capacity(RX_BATCH),
            slab: vec![0; RX_SLOT * RX_BATCH],
        }
    }

    /// One non-blocking `recvmmsg` into `pending`; WouldBlock when empty.
    fn refill(&mut self) -> io::Result<()> {
        // SAFETY: zeroed plain C structs; pointers set below.
        let mut addrs: [libc::sockaddr_ll; RX_BATCH] = unsafe { mem::zeroed() };
        let mut iovs: [libc::iovec; RX_BATCH] = unsafe { mem::zeroed() };
        let mut hdrs: [libc::mmsghdr; RX_BATCH] = unsafe { mem::zeroed() };
        let base = self.slab.as_mut_ptr();
        for i in 0..RX_BATCH {
            // SAFETY: slot i lies inside the slab.
            iovs[i].iov_base = unsafe { base.add(i * RX_SLOT) } as *mut libc::c_void;
            iovs[i].iov_len = RX_SLOT;
        }
        for i in 0..RX_BATCH {
            hdrs[i].msg_hdr.msg_name = &mut addrs[i] as *mut libc::sockaddr_ll as *mut libc::c_void;
            hdrs[i].msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_ll>() as u32;
            hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the headers point at addrs, iovs and the slab, alive for the call.
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                hdrs.as_mut_ptr(),
                RX_BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let c = counters();
        c.recv_calls.fetch_add(1, Ordering::Relaxed);
        for i in 0..r as usize {
            let h = &hdrs[i];
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                c.truncated.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if h.msg_hdr.msg_namelen as usize != mem::size_of::<libc::sockaddr_ll>()
                || !is_input(addrs[i].sll_pkttype)
            {
                continue;
            }
            let len = h.msg_len as usize;
            let frame = &self.slab[i * RX_SLOT..i * RX_SLOT + len];
            self.pending.push_back(StdPacket::from_raw_buffer(frame));
        }
        c.received.fetch_add(self.pending.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(feature = "rattan")]
impl InterfaceReceiver<StdPacket> for BatchReceiver {
    /// The next frame; `Ok(None)` when a batch held only frames that are
    /// not input; `WouldBlock` when the socket is empty (which clears the
    /// caller's readiness).
    fn receive(&mut self) -> io::Result<Option<StdPacket>> {
        if self.pending.is_empty() {
            self.refill()?;
        }
        Ok(self.pending.pop_front())
    }

    fn receive_bulk(&mut self) -> io::Result<Vec<StdPacket>> {
        if self.pending.is_empty() {
            self.refill()?;
        }
        Ok(self.pending.drain(..).collect())
    }
}

#[cfg(feature = "rattan")]
/// An AF_PACKET socket bound to one veth, its receive side and the handle
/// of its send thread.
pub struct BatchDriver {
    fd: Arc<OwnedFd>,
    sender: Arc<BatchSender>,
    receiver: BatchReceiver,
}

#[cfg(feature = "rattan")]
fn socket_for(cell: &VethCell) -> io::Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // Blocking for sends (the send thread waits for buffer space); receives
    // pass MSG_DONTWAIT.
    // SAFETY: plain syscall; the result is checked and owned at once.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto as i32) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        // SAFETY: an int option of the right size.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &SOCKET_BUFFER as *const libc::c_int as *const libc::c_void,
                mem::size_of::<libc::c_int>() as u32,
            )
        };
        if r < 0 {
            tracing::warn!("cannot enlarge a socket buffer: {}", io::Error::last_os_error());
        }
    }
    bind_to_interface(&fd, proto, cell.index as i32)?;
    Ok(fd)
}

/// Binds the AF_PACKET socket `fd` to the interface `ifindex` for
/// `protocol` (network order), in the namespace the socket was opened in.
pub(crate) fn bind_to_interface(fd: &OwnedFd, protocol: u16, ifindex: i32) -> io::Result<()> {
    // SAFETY: zeroed sockaddr_ll is valid; fields set below.
    let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = protocol;
    addr.sll_ifindex = ifindex;
    // SAFETY: addr is a sockaddr_ll of the size given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
            mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Frames the kernel dropped on `fd` since the last call (PACKET_STATISTICS
/// reads and resets).
pub fn kernel_drops(fd: RawFd) -> u64 {
    let mut st = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
    let mut len = mem::size_of::<libc::tpacket_stats>() as u32;
    // SAFETY: st is a tpacket_stats of the length given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        0
    } else {
        st.tp_drops as u64
    }
}

#[cfg(feature = "rattan")]
impl Drop for BatchReceiver {
    fn drop(&mut self) {
        // rattan keeps only the receiver of a driver: count here (the
        // kernel's counter resets on each read, so nothing counts twice)
        counters()
            .kernel_drops
            .fetch_add(kernel_drops(self.fd.as_raw_fd()), Ordering::Relaxed);
    }
}

#[cfg(feature = "rattan")]
impl InterfaceDriver for BatchDriver {
    type Packet = StdPacket;
    type Sender = BatchSender;
    type Receiver = BatchReceiver;

    fn bind_cell(cell: Arc<VethCell>) -> Result<Vec<Self>, MetalError> {
        // rattan-env can hand over an interface a moment before it accepts a
        // bind (its own driver retries the same way)
        let mut tries = 0;
        let fd = loop {
            match socket_for(&cell) {
                Ok(fd) => break Arc::new(fd),
                Err(e) if tries < 3 => {
                    tries += 1;
                    tracing::warn!("bind to {} failed ({e}), retrying", cell.name);
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => return Err(MetalError::SystemError(nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))),
            }
        };
        let sender = BatchSender::spawn(fd.clone(), &cell)
            .map_err(|e| MetalError::SystemError(nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))))?;
        Ok(vec![Self {
            receiver: BatchReceiver::new(fd.clone()),
            sender: Arc::new(sender),
            fd,
        }])
    }

    fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    fn sender(&self) -> Arc<Self::Sender> {
        self.sender.clone()
    }

    fn receiver(&mut self) -> &mut Self::Receiver {
        &mut self.receiver
    }

    fn into_receiver(self) -> Self::Receiver {
        self.receiver
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_frames_are_those_for_this_host() {
        assert!(is_input(PACKET_HOST));
        assert!(is_input(PACKET_OTHERHOST));
        for other in [1u8, 2, 4] {
            assert!(!is_input(other), "pkttype {other}");
        }
    }

    #[test]
    fn readdress_sets_destination_then_source() {
        let mut f = vec![0u8; 60];
        f[12] = 0x08;
        assert!(readdress(&mut f, [1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]));
        assert_eq!(&f[0..12], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(f[12], 0x08, "EtherType untouched");
        let mut runt = vec![0u8; 13];
        assert!(!readdress(&mut runt, [1; 6], [2; 6]));
        assert_eq!(runt, vec![0u8; 13], "a runt is left as it is");
    }

    #[cfg(feature = "rattan")]
    #[test]
    fn fill_batch_takes_what_is_queued_up_to_the_limit_in_order() {
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 1..=10 {
            tx.send(i).unwrap();
        }
        let mut batch = Vec::new();
        fill_batch(0, &rx, &mut batch, 4);
        assert_eq!(batch, vec![0, 1, 2, 3]);
        batch.clear();
        fill_batch(100, &rx, &mut batch, 64);
        assert_eq!(batch, vec![100, 4, 5, 6, 7, 8, 9, 10], "stops when the queue is empty");
    }

    #[test]
    fn send_all_resends_the_rest_after_a_partial_send() {
        let frames: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i]).collect();
        let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        let mut out = Vec::new();
        // sends at most 3 per call
        let (calls, dropped) = send_all(&refs, |f| {
            let n = f.len().min(3);
            out.extend(f[..n].iter().map(|x| x[0]));
            Ok(n)
        });
        assert_eq!(out, (0..10).collect::<Vec<u8>>());
        assert_eq!((calls, dropped), (4, 0));
    }

    #[test]
    fn send_all_skips_a_refused_frame_and_retries_an_interrupted_call() {
        let frames: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i]).collect();
        let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        let mut out = Vec::new();
        let mut interrupted = false;
        let (calls, dropped) = send_all(&refs, |f| {
            if f[0][0] == 2 {
                return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
            }
            if f[0][0] == 3 && !interrupted {
                interrupted = true;
                return Err(io::Error::from(io::ErrorKind::Interrupted));
            }
            // sends up to the refused frame
            let n = f.iter().take_while(|x| x[0] != 2).count().max(1);
            out.extend(f[..n].iter().map(|x| x[0]));
            Ok(n)
        });
        assert_eq!(out, vec![0, 1, 3, 4]);
        assert_eq!(dropped, 1);
        assert_eq!(calls, 4, "0-1, refusal of 2, EINTR, 3-4");
    }
}
