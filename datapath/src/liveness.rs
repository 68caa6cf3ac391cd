//! Is the Portus algorithm there? The datapath's watch over its algorithm,
//! so no flow stays frozen at the last cwnd a dead algorithm set.
//!
//! The algorithm is *present* while its unix socket accepts a connect
//! (a datagram socket whose owner died refuses with ECONNREFUSED; Portus
//! binds a fresh socket file when it starts). The watch probes that every
//! [`PROBE_EVERY`] and also takes the datapath's failed sends as a sign.
//! Once the algorithm has sent a message from that socket, its process is
//! known (the kernel's SCM_CREDENTIALS pid) and watched through a pidfd,
//! whose exit wakes the datapath at once ([`ProcessExit`]); the socket is
//! then probed only every [`PROBE_EVERY_WATCHED`], for another process
//! taking the path over. A probe and its wakeup cost ~100 us of CPU here.
//!
//! - Absent for longer than the fallback timeout: [`Change::Away`]; the
//!   datapath stops stamping the BPF heartbeat, so every flow runs the
//!   kernel's cubic until the algorithm is back.
//! - A socket with another identity (device, inode, ctime) than the one last seen,
//!   or the first one seen: [`Change::NewAlgorithm`]; a restarted algorithm
//!   knows no flow, so the datapath announces every live flow to it again.
//! - The algorithm [`controls`](AlgorithmWatch::controls) the flows once it
//!   has spoken (sent any message) since it appeared, and until it is away.
//!
//! A stopped but living algorithm (SIGSTOP) still accepts connects and is
//! not detected; its flows keep the last cwnd it set.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the algorithm's socket is probed: a probe and the wakeup it
/// takes cost ~100 us of CPU here, 20 a second at 50 ms were half of an idle
/// daemon's CPU; a dead algorithm is still noticed within a fifth of the
/// default fallback timeout (and at once by a failed send).
pub const PROBE_EVERY: Duration = Duration::from_millis(100);

/// How often the socket is probed while the algorithm's process is watched
/// by its pidfd: its exit is seen at once, so the probe only has to notice
/// another process binding the path (a restart that did not exit first).
pub const PROBE_EVERY_WATCHED: Duration = Duration::from_secs(1);

/// A process's exit as a file descriptor (pidfd_open(2), Linux 5.3): it
/// polls readable once the process has exited.
#[derive(Debug)]
pub struct ProcessExit {
    fd: OwnedFd,
    pid: i32,
}

impl ProcessExit {
    /// Watch process `pid`. Errors: pidfd_open's (ESRCH: no such process).
    pub fn open(pid: i32) -> std::io::Result<Self> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just handed us this fd; we own it alone.
        Ok(ProcessExit { fd: unsafe { OwnedFd::from_raw_fd(fd as RawFd) }, pid })
    }

    /// The pid watched.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The pidfd, to poll for POLLIN (exit).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether the process has exited (a non-blocking poll of the pidfd; the
    /// datapath's loop polls [`ProcessExit::fd`] with its sockets instead).
    #[cfg(test)]
    pub fn exited(&self) -> bool {
        let mut p = libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents != 0 }
    }
}

/// (device, inode, change time in ns) of a socket file: tells one bound
/// socket from the next (a filesystem may hand the freed inode to the next
/// bind, so the inode alone is not enough).
pub type SocketIdentity = (u64, u64, i128);

/// What a [`AlgorithmWatch::poll`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    None,
    /// Absent for the whole fallback timeout: hand the flows to the fallback.
    Away,
    /// A (re)started algorithm: announce the live flows to it.
    NewAlgorithm,
}

/// Probes for a socket at a path. One unbound datagram socket, connected
/// again at every probe (a datagram socket may re-connect), rather than a
/// new socket per probe: socket() and close() were most of a probe's cost,
/// 20 times a second.
#[derive(Debug, Default)]
pub struct Prober {
    sock: Option<UnixDatagram>,
}

impl Prober {
    /// The socket at `path`, if it is a socket something is bound to (a
    /// connect succeeds: a socket file whose owner died refuses with
    /// ECONNREFUSED).
    pub fn probe(&mut self, path: &Path) -> Option<SocketIdentity> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.file_type().is_socket() {
            return None;
        }
        if self.sock.is_none() {
            self.sock = Some(UnixDatagram::unbound().ok()?);
        }
        self.sock.as_ref()?.connect(path).ok()?;
        Some((meta.dev(), meta.ino(), i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())))
    }
}

/// The watch; time comes from the caller so tests can drive it.
#[derive(Debug)]
pub struct AlgorithmWatch {
    socket: PathBuf,
    fallback_timeout: Duration,
    last_probe: Option<Instant>,
    prober: Prober,
    identity: Option<SocketIdentity>,
    absent_since: Option<Instant>,
    heard: bool,
    away: bool,
    /// The present algorithm's process, once known (it sent from its socket).
    process: Option<ProcessExit>,
}

impl AlgorithmWatch {
    /// Watch the algorithm bound at `socket`; flows fall back after
    /// `fallback_timeout` without it.
    pub fn new(socket: &Path, fallback_timeout: Duration) -> Self {
        AlgorithmWatch {
            socket: socket.to_path_buf(),
            fallback_timeout,
            last_probe: None,
            prober: Prober::default(),
            identity: None,
            absent_since: None,
            heard: false,
            away: false,
            process: None,
        }
    }

    /// The algorithm's socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A message came from the algorithm.
    pub fn heard(&mut self) {
        self.heard = true;
    }

    /// A message came from the algorithm, sent from its socket by process
    /// `pid` (None: not known): watch that process's exit from now on.
    pub fn heard_from(&mut self, pid: Option<i32>) {
        self.heard();
        let Some(pid) = pid else { return };
        if self.away || self.identity.is_none() || self.process.as_ref().is_some_and(|p| p.pid() == pid) {
            return;
        }
        match ProcessExit::open(pid) {
            Ok(p) => {
                tracing::info!(pid, "watching the algorithm's process");
                self.process = Some(p);
            }
            Err(e) => tracing::debug!(pid, error = %e, "cannot watch the algorithm's process; probing its socket"),
        }
    }

    /// The pidfd to poll for the algorithm process's exit, while one is watched.
    pub fn exit_fd(&self) -> Option<RawFd> {
        self.process.as_ref().map(ProcessExit::fd)
    }

    /// How long the loop may sleep before [`AlgorithmWatch::poll`] wants to
    /// probe again.
    pub fn probe_period(&self) -> Duration {
        if self.process.is_some() {
            PROBE_EVERY_WATCHED
        } else {
            PROBE_EVERY
        }
    }

    /// A send to the algorithm failed: it may be gone (the next probe decides
    /// whether it is back; the fallback timeout runs from now).
    pub fn send_failed(&mut self, now: Instant) {
        self.absent_since.get_or_insert(now);
    }

    /// True while the algorithm's commands should apply (heartbeat stamped).
    pub fn controls(&self) -> bool {
        self.heard && !self.away
    }

    /// The watched process's pidfd ([`AlgorithmWatch::exit_fd`]) polled
    /// readable: the algorithm is gone now, whatever its socket file still
    /// says. The fallback timeout runs from `now`, and the next
    /// [`AlgorithmWatch::poll`] probes at once.
    pub fn process_exited(&mut self, now: Instant) {
        if let Some(p) = self.process.take() {
            tracing::info!(pid = p.pid(), "the algorithm's process exited");
            self.absent_since.get_or_insert(now);
            self.last_probe = None;
        }
    }

    /// Probe (at most every [`AlgorithmWatch::probe_period`]) and report a
    /// change.
    pub fn poll(&mut self, now: Instant) -> Change {
        if self.last_probe.is_some_and(|t| now.duration_since(t) < self.probe_period()) {
            return self.check_timeout(now);
        }
        self.last_probe = Some(now);
        let seen = self.prober.probe(&self.socket);
        self.observe(seen, now)
    }

    /// The state machine, given what a probe saw.
    pub fn observe(&mut self, seen: Option<SocketIdentity>, now: Instant) -> Change {
        match seen {
            None => {
                self.absent_since.get_or_insert(now);
                self.process = None;
                self.check_timeout(now)
            }
            Some(id) => {
                self.absent_since = None;
                if self.identity == Some(id) && !self.away {
                    return Change::None;
                }
                self.process = None;
                // a new socket, or the one we gave up on is back: either way
                // it may not know the flows
                self.identity = Some(id);
                self.away = false;
                self.heard = false;
                Change::NewAlgorithm
            }
        }
    }

    fn check_timeout(&mut self, now: Instant) -> Change {
        match self.absent_since {
            Some(t) if !self.away && now.duration_since(t) >= self.fallback_timeout => {
                self.away = true;
                self.heard = false;
                Change::Away
            }
            _ => Change::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_millis(500);

    fn watch() -> (AlgorithmWatch, Instant) {
        (AlgorithmWatch::new(Path::new("/nonexistent/portus"), TIMEOUT), Instant::now())
    }

    #[test]
    fn controls_only_after_the_algorithm_spoke() {
        let (mut w, t0) = watch();
        assert_eq!(w.observe(Some((1, 10, 0)), t0), Change::NewAlgorithm);
        assert!(!w.controls(), "present but silent: no commands of its yet");
        w.heard();
        assert!(w.controls());
        assert_eq!(w.observe(Some((1, 10, 0)), t0 + PROBE_EVERY), Change::None);
        assert!(w.controls());
    }

    #[test]
    fn away_only_after_the_whole_fallback_timeout() {
        let (mut w, t0) = watch();
        w.observe(Some((1, 10, 0)), t0);
        w.heard();
        let gone = t0 + Duration::from_secs(1);
        assert_eq!(w.observe(None, gone), Change::None);
        assert!(w.controls(), "within the fallback timeout its last command stands");
        assert_eq!(w.observe(None, gone + TIMEOUT - Duration::from_millis(1)), Change::None);
        assert_eq!(w.observe(None, gone + TIMEOUT), Change::Away);
        assert!(!w.controls());
        assert_eq!(w.observe(None, gone + 2 * TIMEOUT), Change::None, "Away is reported once");
    }

    #[test]
    fn a_restart_is_a_new_algorithm_even_within_the_timeout() {
        let (mut w, t0) = watch();
        w.observe(Some((1, 10, 0)), t0);
        w.heard();
        w.observe(None, t0 + Duration::from_millis(100));
        assert_eq!(w.observe(Some((1, 11, 0)), t0 + Duration::from_millis(200)), Change::NewAlgorithm);
        assert!(!w.controls(), "the new process has not spoken yet");
    }

    #[test]
    fn back_after_away_is_announced_again_even_on_the_same_socket() {
        let (mut w, t0) = watch();
        w.observe(Some((1, 10, 0)), t0);
        w.heard();
        w.send_failed(t0);
        assert_eq!(w.poll(t0 + TIMEOUT), Change::Away, "a failed send starts the timeout");
        assert_eq!(w.observe(Some((1, 10, 0)), t0 + 2 * TIMEOUT), Change::NewAlgorithm);
        w.heard();
        assert!(w.controls());
    }

    #[test]
    fn a_watched_process_is_probed_seldom_and_its_exit_starts_the_timeout_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("portus");
        let sock = UnixDatagram::bind(&path).unwrap();
        let mut w = AlgorithmWatch::new(&path, TIMEOUT);
        let t0 = Instant::now();
        assert_eq!(w.poll(t0), Change::NewAlgorithm);
        assert_eq!(w.probe_period(), PROBE_EVERY, "no process known yet");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        w.heard_from(Some(child.id() as i32));
        assert!(w.controls());
        assert!(w.exit_fd().is_some());
        assert_eq!(w.probe_period(), PROBE_EVERY_WATCHED);
        drop(sock); // the socket is dead, but no probe is due yet: nothing noticed
        crate::ipc::tests::wait_released(&path); // (a test's fork may hold it until its exec)
        assert_eq!(w.poll(t0 + PROBE_EVERY * 2), Change::None);
        assert!(w.controls());
        child.kill().unwrap();
        child.wait().unwrap();
        let exit_fd = ProcessExit { fd: w.process.as_ref().unwrap().fd.try_clone().unwrap(), pid: 0 };
        assert!(exit_fd.exited(), "the pidfd the loop polls is readable");
        let died = t0 + PROBE_EVERY * 3;
        w.process_exited(died);
        assert_eq!(w.poll(died), Change::None, "the timeout starts at the exit");
        assert!(w.exit_fd().is_none(), "a dead process is not watched");
        assert_eq!(w.probe_period(), PROBE_EVERY);
        assert_eq!(w.poll(died + TIMEOUT - Duration::from_millis(1)), Change::None);
        assert_eq!(w.poll(died + TIMEOUT), Change::Away);
    }

    #[test]
    fn process_exit_is_seen_through_the_pidfd() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let p = ProcessExit::open(child.id() as i32).unwrap();
        assert!(!p.exited());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(p.exited());
        assert!(ProcessExit::open(p.pid()).is_err(), "a reaped pid cannot be watched");
    }

    #[test]
    fn probe_tells_a_live_socket_from_a_dead_one() {
        // one prober throughout: its socket re-connects from a live socket
        // to a dead one to a rebound one
        let mut prober = Prober::default();
        let mut probe = |p: &Path| prober.probe(p);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("portus");
        assert_eq!(probe(&path), None, "no file");
        let sock = UnixDatagram::bind(&path).unwrap();
        let id = probe(&path).expect("bound socket is present");
        drop(sock); // the file stays, nobody owns it
        assert!(path.exists());
        crate::ipc::tests::wait_released(&path); // (a test's fork may hold it until its exec)
        assert_eq!(probe(&path), None, "a socket file without its owner is absent");
        std::fs::remove_file(&path).unwrap();
        let _again = UnixDatagram::bind(&path).unwrap();
        let id2 = probe(&path).expect("rebound");
        assert_ne!(id, id2, "a rebound socket has another identity");
        std::fs::write(dir.path().join("plain"), b"x").unwrap();
        assert_eq!(probe(&dir.path().join("plain")), None, "not a socket");
    }
}
