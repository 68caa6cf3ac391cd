//! Portus unix-socket IPC (datagrams).
//!
//! Portus 0.9 (`portus::ipc::unix`) binds `/tmp/ccp/<name>` (default
//! `/tmp/ccp/portus`) and answers every message to the sender's bound path,
//! so the datapath binds its own filesystem path
//! (`<bind-dir>/ccp-datapath-<pid>`). One datagram = one libccp message; no
//! extra framing.

use std::io::ErrorKind;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The datapath's bound socket. Removes its socket file on drop.
pub struct PortusIpc {
    sock: UnixDatagram,
    path: PathBuf,
    portus: PathBuf,
}

/// Send half handed to libccp (see [`crate::fold::MsgSink`]).
pub struct PortusSender {
    sock: UnixDatagram,
    portus: PathBuf,
    failures: u64,
}

impl PortusIpc {
    /// Bind `<bind_dir>/ccp-datapath-<pid>` (creating `bind_dir`, replacing a
    /// stale socket file of the same name) and talk to the Portus socket at
    /// `portus`. The socket is non-blocking.
    ///
    /// Errors: `bind_dir` cannot be created or written, or bind fails.
    pub fn bind(bind_dir: &Path, portus: &Path) -> Result<Self> {
        std::fs::create_dir_all(bind_dir)
            .with_context(|| format!("--bind-dir {}: cannot create directory", bind_dir.display()))?;
        let path = bind_dir.join(format!("ccp-datapath-{}", std::process::id()));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("--bind-dir: cannot remove stale {}", path.display()))
            }
            _ => {}
        }
        let sock = UnixDatagram::bind(&path).with_context(|| {
            format!("--bind-dir {}: cannot bind unix socket {} (directory not writable?)", bind_dir.display(), path.display())
        })?;
        sock.set_nonblocking(true)?;
        set_buf(&sock, libc::SO_RCVBUF, 4 << 20);
        set_buf(&sock, libc::SO_SNDBUF, 4 << 20);
        Ok(PortusIpc { sock, path, portus: portus.to_path_buf() })
    }

    /// The path this datapath is bound to (Portus replies here).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// File descriptor to poll for readability.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// A sender for outgoing libccp messages (a clone of the same socket, so
    /// Portus sees our bound path as the source).
    pub fn sender(&self) -> Result<PortusSender> {
        Ok(PortusSender { sock: self.sock.try_clone()?, portus: self.portus.clone(), failures: 0 })
    }

    /// Receive one datagram into `buf` without blocking; Ok(None) when
    /// nothing is queued.
    pub fn try_recv(&self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        match self.sock.recv(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Drop for PortusIpc {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn set_buf(sock: &UnixDatagram, opt: libc::c_int, bytes: libc::c_int) {
    // SAFETY: plain setsockopt on an fd we own with an int argument.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            &bytes as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

impl PortusSender {
    /// Send one message to Portus. Returns false if it could not be sent
    /// (Portus not running: ENOENT/ECONNREFUSED; its queue full: EAGAIN).
    pub fn send(&mut self, msg: &[u8]) -> bool {
        match self.sock.send_to(msg, &self.portus) {
            Ok(_) => true,
            Err(e) => {
                self.failures += 1;
                // first failure and then every 1000th, to keep the log usable
                if self.failures % 1000 == 1 {
                    tracing::warn!(portus = %self.portus.display(), error = %e, failures = self.failures, "cannot send to Portus");
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_cleanup() {
        let dir = std::env::temp_dir().join(format!("ccp-ipc-test-{}", std::process::id()));
        let portus_path = dir.join("fake-portus");
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(&portus_path);
        let portus = UnixDatagram::bind(&portus_path).unwrap();
        let ipc = PortusIpc::bind(&dir, &portus_path).unwrap();
        let bound = ipc.path().to_path_buf();
        assert!(bound.exists());
        let mut tx = ipc.sender().unwrap();
        assert!(tx.send(b"hello"));
        let mut buf = [0u8; 16];
        let (n, from) = portus.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(from.as_pathname().unwrap(), bound.as_path());
        // Portus-style reply to the sender's path
        portus.send_to(b"reply", &bound).unwrap();
        let mut got = None;
        for _ in 0..100 {
            got = ipc.try_recv(&mut buf).unwrap();
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(&buf[..got.unwrap()], b"reply");
        assert_eq!(ipc.try_recv(&mut buf).unwrap(), None);
        drop(tx);
        drop(ipc);
        assert!(!bound.exists(), "socket file removed on drop");
        // no Portus listening: send reports failure
        drop(portus);
        std::fs::remove_file(&portus_path).unwrap();
        let ipc = PortusIpc::bind(&dir, &portus_path).unwrap();
        assert!(!ipc.sender().unwrap().send(b"x"));
        drop(ipc);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unwritable_bind_dir_is_an_error() {
        let err = PortusIpc::bind(Path::new("/proc/ccp-no-such-dir"), Path::new("/tmp/ccp/portus"))
            .err()
            .expect("binding under /proc must fail");
        assert!(format!("{err:#}").contains("--bind-dir"));
    }
}
