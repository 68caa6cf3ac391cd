//! Is the Portus algorithm there? The datapath's watch over its algorithm,
//! so no flow stays frozen at the last cwnd a dead algorithm set.
//!
//! The algorithm is *present* while its unix socket accepts a connect
//! (a datagram socket whose owner died refuses with ECONNREFUSED; Portus
//! binds a fresh socket file when it starts). The watch probes that every
//! [`PROBE_EVERY`] and also takes the datapath's failed sends as a sign.
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

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the algorithm's socket is probed: a probe and the wakeup it
/// takes cost ~100 us of CPU here, 20 a second at 50 ms were half of an idle
/// daemon's CPU; a dead algorithm is still noticed within a fifth of the
/// default fallback timeout (and at once by a failed send).
pub const PROBE_EVERY: Duration = Duration::from_millis(100);

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

    /// A send to the algorithm failed: it may be gone (the next probe decides
    /// whether it is back; the fallback timeout runs from now).
    pub fn send_failed(&mut self, now: Instant) {
        self.absent_since.get_or_insert(now);
    }

    /// True while the algorithm's commands should apply (heartbeat stamped).
    pub fn controls(&self) -> bool {
        self.heard && !self.away
    }

    /// Probe (at most every [`PROBE_EVERY`]) and report a change.
    pub fn poll(&mut self, now: Instant) -> Change {
        if self.last_probe.is_some_and(|t| now.duration_since(t) < PROBE_EVERY) {
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
                self.check_timeout(now)
            }
            Some(id) => {
                self.absent_since = None;
                if self.identity == Some(id) && !self.away {
                    return Change::None;
                }
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
        assert_eq!(probe(&path), None, "a socket file without its owner is absent");
        std::fs::remove_file(&path).unwrap();
        let _again = UnixDatagram::bind(&path).unwrap();
        let id2 = probe(&path).expect("rebound");
        assert_ne!(id, id2, "a rebound socket has another identity");
        std::fs::write(dir.path().join("plain"), b"x").unwrap();
        assert_eq!(probe(&dir.path().join("plain")), None, "not a socket");
    }
}
