//! Portus's unix-socket IPC with the answers to a datagram sent together.
//!
//! Portus 0.9's own `portus::ipc::unix::Socket` sends each message with its
//! own `sendto` the moment the algorithm asks (one `update_field` = one
//! datagram = one syscall and one wakeup of the datapath). At 100 flows a
//! datapath hands Portus ~100 reports a second in a few packed datagrams,
//! and Portus's answers then cost more than the algorithms' own work.
//! [`BatchedUnixSocket`] keeps what Portus sends while it works through a
//! received datagram and sends it, in order and still one message per
//! datagram (what libccp datapaths expect), with one `sendmmsg` just before
//! Portus blocks to receive again. All of Portus runs on the thread that
//! receives (its send handles hold an `Rc`), so nothing waits longer than
//! the rest of the datagram's messages take.
//!
//! Bind path, receive timeout and blocking behaviour are Portus's:
//! `/tmp/ccp/<ipc-name>` ([`crate::cli::UNIX_SOCKET_DIR`]), unlinked and
//! bound again, 1 s read timeout (Portus checks its stop flag between
//! receives).

use portus::ipc::Ipc;
use std::cell::{Cell, RefCell};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tracing::{debug, warn};

/// Messages handed to one `sendmmsg` at most (the kernel's UIO_MAXIOV
/// bounds it at 1024; a few dozen covers a burst of reports).
const SENDMMSG_MAX: usize = 64;

/// A unix datagram socket bound where Portus binds it, whose sends wait for
/// the next receive (see the module doc).
pub struct BatchedUnixSocket {
    sock: UnixDatagram,
    outbox: RefCell<Vec<(Vec<u8>, PathBuf)>>,
    /// Messages that could not be sent (the datapath gone), for the log.
    failed: Cell<u64>,
}

impl BatchedUnixSocket {
    /// Bind `path` (the daemon binds `/tmp/ccp/<ipc-name>`, as Portus does:
    /// the directory created, a stale file removed first), with Portus's 1 s
    /// receive timeout.
    ///
    /// Errors: the directory cannot be created, the path cannot be unlinked
    /// or bound (the io error, with the path).
    pub fn bind(path: &Path) -> std::io::Result<Self> {
        let with_path = |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(with_path)?;
        }
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(with_path(e)),
            _ => {}
        }
        let sock = UnixDatagram::bind(path).map_err(with_path)?;
        sock.set_read_timeout(Some(Duration::from_secs(1)))?;
        Ok(BatchedUnixSocket { sock, outbox: RefCell::new(Vec::new()), failed: Cell::new(0) })
    }

    /// Messages waiting for the next receive.
    pub fn waiting(&self) -> usize {
        self.outbox.borrow().len()
    }

    /// Send everything waiting, in order, `SENDMMSG_MAX` to a syscall. A
    /// message that cannot be sent (its datapath gone: ECONNREFUSED,
    /// ENOENT) is dropped and logged, as Portus drops a failed send; the
    /// rest still go.
    pub fn flush(&self) {
        let msgs = std::mem::take(&mut *self.outbox.borrow_mut());
        let mut at = 0;
        while at < msgs.len() {
            let end = (at + SENDMMSG_MAX).min(msgs.len());
            match send_many(self.sock.as_raw_fd(), &msgs[at..end]) {
                Ok(n) => at += n.max(1),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let failed = self.failed.get() + 1;
                    self.failed.set(failed);
                    // first failure and then every 1000th, to keep the log usable
                    if failed % 1000 == 1 {
                        warn!(target: "ccp", to = %msgs[at].1.display(), error = %e, failed, "cannot send to the datapath");
                    }
                    at += 1;
                }
            }
        }
    }
}

/// One `sendmmsg(2)` of `msgs` (message, destination path): how many were
/// sent (at least 1), or the error of the first.
fn send_many(fd: i32, msgs: &[(Vec<u8>, PathBuf)]) -> std::io::Result<usize> {
    let mut addrs: Vec<libc::sockaddr_un> = Vec::with_capacity(msgs.len());
    let mut addr_lens = Vec::with_capacity(msgs.len());
    for (_, to) in msgs {
        let (addr, len) = sockaddr_un(to)?;
        addrs.push(addr);
        addr_lens.push(len);
    }
    let mut iovs: Vec<libc::iovec> =
        msgs.iter().map(|(m, _)| libc::iovec { iov_base: m.as_ptr() as *mut libc::c_void, iov_len: m.len() }).collect();
    let mut hdrs: Vec<libc::mmsghdr> = (0..msgs.len())
        .map(|i| {
            // SAFETY: msghdr is plain data; zeroed is a valid empty header.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = (&mut addrs[i] as *mut libc::sockaddr_un).cast();
            h.msg_namelen = addr_lens[i];
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            libc::mmsghdr { msg_hdr: h, msg_len: 0 }
        })
        .collect();
    // SAFETY: hdrs, and the addresses and iovecs they point to, live until
    // the call returns; the kernel only reads them (and writes msg_len).
    let n = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), hdrs.len() as libc::c_uint, 0) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `path` as a `sockaddr_un` and its length. Errors: longer than sun_path.
fn sockaddr_un(path: &Path) -> std::io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; zeroed is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: longer than a unix socket path may be ({} bytes)", path.display(), addr.sun_path.len() - 1),
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

impl Ipc for BatchedUnixSocket {
    type Addr = PathBuf;

    fn name() -> String {
        String::from("unix")
    }

    /// Queue `msg` for `to`; it goes out before the next receive. Never fails
    /// here (a failed send is logged by [`BatchedUnixSocket::flush`]).
    fn send(&self, msg: &[u8], to: &PathBuf) -> portus::Result<()> {
        self.outbox.borrow_mut().push((msg.to_vec(), to.clone()));
        Ok(())
    }

    /// Send what waits, then receive one datagram (up to 1 s).
    fn recv(&self, msg: &mut [u8]) -> portus::Result<(usize, PathBuf)> {
        self.flush();
        let (n, addr) = self.sock.recv_from(msg).map_err(portus::Error::from)?;
        match addr.as_pathname() {
            Some(p) => Ok((n, p.to_path_buf())),
            None => {
                debug!(target: "ccp", "datagram from an unbound socket ignored");
                Err(portus::Error(String::from("no recv addr")))
            }
        }
    }

    /// Send what waits, then shut the socket down.
    fn close(&mut self) -> portus::Result<()> {
        self.flush();
        self.sock.shutdown(std::net::Shutdown::Both).map_err(portus::Error::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ccp-unix-ipc-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn sends_wait_for_the_next_receive_and_go_in_order_one_per_datagram() {
        let d = dir("order");
        let portus = BatchedUnixSocket::bind(&d.join("portus")).unwrap();
        let dp_path = d.join("datapath");
        let dp = UnixDatagram::bind(&dp_path).unwrap();
        dp.set_nonblocking(true).unwrap();
        for i in 0..150u32 {
            portus.send(&i.to_le_bytes(), &dp_path).unwrap();
        }
        assert_eq!(portus.waiting(), 150);
        let mut buf = [0u8; 16];
        assert!(dp.recv(&mut buf).is_err(), "nothing sent before the receive");
        // a datagram for Portus, so its receive returns at once
        dp.send_to(b"hello", d.join("portus")).unwrap();
        // the datapath reads as Portus sends (its queue holds max_dgram_qlen)
        let reader = std::thread::spawn(move || {
            dp.set_nonblocking(false).unwrap();
            dp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            (0..150).map(|_| {
                let n = dp.recv(&mut buf).expect("a message within 5 s");
                assert_eq!(n, 4, "one message per datagram");
                u32::from_le_bytes(buf[..4].try_into().unwrap())
            }).collect::<Vec<u32>>()
        });
        let mut rbuf = [0u8; 64];
        let (n, from) = portus.recv(&mut rbuf).unwrap();
        assert_eq!((&rbuf[..n], from), (&b"hello"[..], dp_path.clone()));
        assert_eq!(portus.waiting(), 0);
        assert_eq!(reader.join().unwrap(), (0..150).collect::<Vec<u32>>());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_message_to_a_gone_datapath_is_dropped_and_the_others_still_go() {
        let d = dir("gone");
        let portus = BatchedUnixSocket::bind(&d.join("portus")).unwrap();
        let live_path = d.join("live");
        let live = UnixDatagram::bind(&live_path).unwrap();
        live.set_nonblocking(true).unwrap();
        let gone = d.join("gone");
        portus.send(b"a", &live_path).unwrap();
        portus.send(b"x", &gone).unwrap();
        portus.send(b"b", &live_path).unwrap();
        portus.flush();
        assert_eq!(portus.failed.get(), 1);
        let mut buf = [0u8; 8];
        let got: Vec<u8> = std::iter::from_fn(|| live.recv(&mut buf).ok().map(|_| buf[0])).collect();
        assert_eq!(got, b"ab");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_path_too_long_for_a_unix_socket_is_refused_by_name() {
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
        let err = sockaddr_un(&long).unwrap_err().to_string();
        assert!(err.contains("longer than a unix socket path"), "{err}");
    }
}
