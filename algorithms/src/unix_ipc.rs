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
//!
//! Security, as the datapath's side (datapath/src/ipc.rs): whoever can send
//! to this socket can report measurements for any flow and so steer every
//! flow's cwnd, and whoever can write its directory can replace the socket.
//! Portus itself creates /tmp/ccp with the umask and takes datagrams from
//! anyone. Here
//! - the socket's directory is created mode 0700; an existing one must be a
//!   real directory (not a symlink) owned by root or by this daemon's user
//!   that nobody else can write, else binding fails naming the directory
//!   and what is wrong ([`secure_socket_dir`]); one others can merely enter
//!   is tightened to 0700;
//! - each datagram carries its sender's kernel-checked credentials
//!   (SO_PASSCRED / SCM_CREDENTIALS); one whose uid is neither root nor this
//!   daemon's is dropped, counted and logged at warn (the first and every
//!   1000th) ([`BatchedUnixSocket::dropped_untrusted`]).

use ccplab_util::unix::recv_with_creds;
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
    /// Datagrams dropped because their sender was neither root nor this
    /// daemon's user.
    dropped_untrusted: Cell<u64>,
    /// This daemon's effective uid (trusted besides root).
    euid: u32,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Create `dir` mode 0700, or check an existing one: a real directory (not a
/// symlink) owned by root or `euid` that neither group nor others can write;
/// one others can merely enter is tightened to 0700.
///
/// Errors: one line naming the directory and what is wrong (another user's
/// /tmp/ccp, a group/world-writable one, a symlink or file), or the io error.
pub fn secure_socket_dir(dir: &Path, euid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let refuse = |what: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, format!("{}: {what}; refusing to bind there", dir.display()));
    match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(std::io::Error::new(e.kind(), format!("{}: cannot create: {e}", dir.display()))),
    }
    let md = std::fs::symlink_metadata(dir)?;
    if !md.file_type().is_dir() {
        return Err(refuse("not a directory (a symlink or file there could redirect the socket)".into()));
    }
    if md.uid() != 0 && md.uid() != euid {
        return Err(refuse(format!("owned by uid {}, not root or this daemon's user: whoever made it could replace the socket", md.uid())));
    }
    let mode = md.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(refuse(format!("mode {mode:04o} lets others write it (expected 0700)")));
    }
    if mode != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        tracing::info!(target: "ccp", dir = %dir.display(), from = format!("{mode:04o}"), to = "0700", "tightened the socket directory");
    }
    Ok(())
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
        let euid = euid();
        if let Some(dir) = path.parent() {
            secure_socket_dir(dir, euid)?;
        }
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(with_path(e)),
            _ => {}
        }
        let sock = UnixDatagram::bind(path).map_err(with_path)?;
        sock.set_read_timeout(Some(Duration::from_secs(1)))?;
        let on: libc::c_int = 1;
        // SAFETY: setsockopt with an int argument on a socket we own.
        let r = unsafe {
            libc::setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PASSCRED, (&on as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t)
        };
        if r != 0 {
            return Err(with_path(std::io::Error::last_os_error()));
        }
        Ok(BatchedUnixSocket { sock, outbox: RefCell::new(Vec::new()), failed: Cell::new(0), dropped_untrusted: Cell::new(0), euid })
    }

    /// Datagrams dropped so far because their sender was neither root nor
    /// this daemon's user (or sent no credentials).
    pub fn dropped_untrusted(&self) -> u64 {
        self.dropped_untrusted.get()
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

    /// Send what waits, then receive one datagram from root or this
    /// daemon's user (up to 1 s each try); others' are dropped and counted.
    fn recv(&self, msg: &mut [u8]) -> portus::Result<(usize, PathBuf)> {
        self.flush();
        loop {
            let (n, cred, from) = recv_with_creds(self.sock.as_raw_fd(), msg, 0).map_err(portus::Error::from)?;
            match cred {
                Some(c) if c.uid == 0 || c.uid == self.euid => {}
                _ => {
                    let dropped = self.dropped_untrusted.get() + 1;
                    self.dropped_untrusted.set(dropped);
                    if dropped % 1000 == 1 {
                        warn!(target: "ccp", uid = cred.map(|c| c.uid), pid = cred.map(|c| c.pid), dropped, "datagram from a sender that is not root dropped");
                    }
                    continue;
                }
            }
            return match from {
                Some(p) => Ok((n.min(msg.len()), p)),
                None => {
                    debug!(target: "ccp", "datagram from an unbound socket ignored");
                    Err(portus::Error(String::from("no recv addr")))
                }
            };
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
    fn an_unsafe_socket_directory_is_refused_or_tightened() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        let d = dir("perm");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        BatchedUnixSocket::bind(&d.join("portus")).unwrap();
        assert_eq!(mode(&d), 0o700, "a directory others may enter is tightened");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = BatchedUnixSocket::bind(&d.join("portus")).err().expect("a world-writable directory is refused").to_string();
        assert!(err.contains("mode 0777") && err.contains(d.to_str().unwrap()), "{err}");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = d.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let err = BatchedUnixSocket::bind(&link.join("portus")).err().expect("a symlink is refused").to_string();
        assert!(err.contains("not a directory"), "{err}");
        std::fs::remove_file(&link).unwrap();
        // another user's directory: only root can make one to test with
        if euid() == 0 {
            std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
            let err = BatchedUnixSocket::bind(&d.join("portus")).err().expect("another user's directory is refused").to_string();
            assert!(err.contains("owned by uid 65534"), "{err}");
            std::os::unix::fs::chown(&d, Some(0), None).unwrap();
        }
        let fresh = d.join("new/sub");
        BatchedUnixSocket::bind(&fresh.join("portus")).unwrap();
        assert_eq!(mode(&fresh), 0o700, "created 0700");
        assert_eq!(std::fs::metadata(&fresh).unwrap().uid(), euid());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn datagrams_from_other_users_are_dropped_and_counted() {
        use std::os::unix::fs::PermissionsExt;
        if euid() != 0 {
            // the other user is uid 65534, which only root can become
            panic!("MISSING: root (this test sends as uid 65534 through a thread that drops privileges)");
        }
        let d = dir("creds");
        let portus_path = d.join("portus");
        let portus = BatchedUnixSocket::bind(&portus_path).unwrap();
        // let uid 65534 reach the socket, as a mistaken chmod would
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o711)).unwrap();
        std::fs::set_permissions(&portus_path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let p = portus_path.clone();
        std::thread::spawn(move || {
            // setresuid on this thread only (the raw syscall; glibc's wrapper
            // would change every thread)
            // SAFETY: changes this thread's credentials only.
            let r = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
            assert_eq!(r, 0, "setresuid");
            UnixDatagram::unbound().unwrap().send_to(b"from nobody", &p).unwrap();
        })
        .join()
        .unwrap();
        let trusted_path = d.join("root-sender");
        let trusted = UnixDatagram::bind(&trusted_path).unwrap();
        trusted.send_to(b"from root", &portus_path).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = portus.recv(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&b"from root"[..], trusted_path));
        assert_eq!(portus.dropped_untrusted(), 1, "the other user's datagram was dropped and counted");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_path_too_long_for_a_unix_socket_is_refused_by_name() {
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
        let err = sockaddr_un(&long).unwrap_err().to_string();
        assert!(err.contains("longer than a unix socket path"), "{err}");
    }
}
