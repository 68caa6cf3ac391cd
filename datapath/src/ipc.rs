//! Portus unix-socket IPC (datagrams), restricted to root.
//!
//! Portus 0.9 (`portus::ipc::unix`) binds `/tmp/ccp/<name>` (default
//! `/tmp/ccp/portus`) and answers every message to the sender's bound path,
//! so the datapath binds its own filesystem path
//! (`<bind-dir>/ccp-datapath-<pid>`). Messages carry libccp's header (type,
//! length, flow); Portus takes several in one datagram
//! ([`PortusSender::send_packed`]), libccp one per datagram.
//!
//! Older Portus releases answer elsewhere: 0.6, 0.6.1 and 0.7.0 (their
//! `ipc::unix::Socket::send`) reply to `format!("/tmp/ccp/{}", address as
//! received)`, 0.8 and 0.9 to the address as received. For a datapath bound
//! at `/tmp/ccp/ccp-datapath-N` the old releases answer
//! `/tmp/ccp//tmp/ccp/ccp-datapath-N`, i.e. `/tmp/ccp/tmp/ccp/ccp-datapath-N`
//! (ENOENT before). So when the bound path lies under /tmp/ccp, the datapath
//! also makes that path a symlink to its socket ([`legacy_reply_path`];
//! `sendto` follows symlinks), in directories checked and created like the
//! bind directory: every release's reply reaches the one socket.
//!
//! Security ("only root steers flows", docs/datapath.md): whoever can send to
//! these sockets sets every `ccp` flow's cwnd and pacing rate. So
//! - the bind directory is created mode 0700 (0770 group `--allow-gid`) and
//!   an existing one must be a real directory owned by root that no one else
//!   can write ([`secure_dir`]); a root-owned one that others can merely
//!   enter (Portus creates /tmp/ccp with the umask, 0755) is tightened;
//! - every received datagram carries the sender's kernel-checked
//!   credentials (SO_PASSCRED / SCM_CREDENTIALS); one from an untrusted uid
//!   is dropped and counted ([`PortusIpc::try_recv`]);
//! - the Portus socket must be a socket owned by a trusted user before the
//!   datapath sends to it ([`PortusSender::send`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ccplab_util::unix::recv_with_creds;

/// Whose sockets and datagrams the datapath trusts: root, the daemon's own
/// effective uid (root in production; lets unit tests run unprivileged) and,
/// if configured, members of one group (by the sender's effective gid).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trust {
    /// The daemon's effective uid.
    pub uid: u32,
    /// `--allow-gid`: a group whose members may also send.
    pub allow_gid: Option<u32>,
}

impl Trust {
    /// Trust root, this process's effective uid and `allow_gid`.
    pub fn current(allow_gid: Option<u32>) -> Self {
        // SAFETY: geteuid has no preconditions.
        Trust { uid: unsafe { libc::geteuid() }, allow_gid }
    }

    /// May a peer with these (kernel-reported) credentials steer flows?
    pub fn admits(&self, uid: u32, gid: u32) -> bool {
        uid == 0 || uid == self.uid || self.allow_gid == Some(gid)
    }

    fn owner_ok(&self, uid: u32) -> bool {
        uid == 0 || uid == self.uid
    }
}

/// Create `dir` mode 0700 (0770 owned by group `allow_gid` if set), or check
/// an existing one: it must be a directory (not a symlink) owned by root (or
/// the daemon's uid), writable by nobody else (group bits only for the
/// allowed group). An existing trusted one that others can enter or read is
/// tightened to that mode.
///
/// Errors name `dir` and what is wrong: not a directory, foreign owner,
/// group/world-writable, or it cannot be created / changed.
pub fn secure_dir(dir: &Path, trust: &Trust) -> Result<()> {
    let d = dir.display();
    let want: u32 = if trust.allow_gid.is_some() { 0o770 } else { 0o700 };
    match std::fs::DirBuilder::new().mode(want).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("--bind-dir {d}: cannot create directory")),
    }
    let md = std::fs::symlink_metadata(dir).with_context(|| format!("--bind-dir {d}: cannot stat"))?;
    if !md.file_type().is_dir() {
        bail!("--bind-dir {d}: is not a directory (a symlink or file there could redirect the sockets); refusing to start");
    }
    if !trust.owner_ok(md.uid()) {
        bail!(
            "--bind-dir {d}: owned by uid {}, not root: another user created it and could steer flows; \
             remove it (as root) and start again; refusing to start",
            md.uid()
        );
    }
    let mode = md.mode() & 0o7777;
    let group_ok = trust.allow_gid.is_some_and(|g| g == md.gid());
    if mode & 0o002 != 0 || (mode & 0o020 != 0 && !group_ok) {
        bail!(
            "--bind-dir {d}: mode {mode:04o} is group/world-writable: others could plant sockets; \
             expected {want:04o}; refusing to start"
        );
    }
    if let Some(g) = trust.allow_gid {
        if md.gid() != g {
            chown(dir, None, Some(g)).with_context(|| format!("--bind-dir {d}: cannot set group {g}"))?;
        }
    }
    if mode != want {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(want))
            .with_context(|| format!("--bind-dir {d}: cannot tighten mode {mode:04o} to {want:04o}"))?;
        tracing::info!(dir = %d, from = format!("{mode:04o}"), to = format!("{want:04o}"), "tightened socket directory");
    }
    Ok(())
}

fn chown(path: &Path, uid: Option<u32>, gid: Option<u32>) -> std::io::Result<()> {
    std::os::unix::fs::chown(path, uid, gid)
}

/// Is `path` a unix socket owned by a trusted user (or by the allowed group)?
/// Err names what is wrong.
pub fn check_peer_socket(path: &Path, trust: &Trust) -> std::result::Result<(), String> {
    let md = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !md.file_type().is_socket() {
        return Err(format!("{} is not a unix socket", path.display()));
    }
    if !(trust.owner_ok(md.uid()) || trust.allow_gid == Some(md.gid())) {
        return Err(format!("{} is owned by uid {} (not root): not sending flow data to it", path.display(), md.uid()));
    }
    Ok(())
}

/// The datapath's bound socket. Removes its socket file on drop.
pub struct PortusIpc {
    sock: UnixDatagram,
    path: PathBuf,
    portus: PathBuf,
    trust: Trust,
    /// Datagrams dropped because their sender was not trusted.
    dropped_untrusted: u64,
    /// Pid of the process that last sent a trusted datagram from the Portus
    /// socket's own path (the algorithm daemon bound there).
    portus_pid: Option<i32>,
    /// The symlink Portus 0.6/0.7 replies reach the socket through
    /// ([`legacy_reply_path`]), removed with the socket.
    legacy_alias: Option<PathBuf>,
}

/// The directory Portus hard-codes (`/tmp/ccp/<name>`), which 0.6 and 0.7
/// also prefix to every reply address.
pub const PORTUS_DIR: &str = "/tmp/ccp";

/// Where Portus 0.6.x / 0.7.0 send a reply to a datapath bound at `bound`:
/// `format!("{legacy_root}/{bound}")` (their `Socket::send`), a doubled
/// slash collapsing as the kernel resolves it. `legacy_root` is
/// [`PORTUS_DIR`] outside tests.
pub fn legacy_reply_path(legacy_root: &Path, bound: &Path) -> PathBuf {
    legacy_root.join(bound.strip_prefix("/").unwrap_or(bound))
}

/// Make [`legacy_reply_path`] a symlink to the socket at `bound` when
/// `bound` lies under `legacy_root`: the directories on the way are created
/// and checked as the bind directory is ([`secure_dir`]), a stale entry is
/// replaced. Returns the symlink, or None when `bound` is elsewhere (an old
/// Portus could not be told that path anyway).
fn make_legacy_alias(legacy_root: &Path, bound: &Path, trust: &Trust) -> Result<Option<PathBuf>> {
    if !bound.is_absolute() || !bound.starts_with(legacy_root) {
        return Ok(None);
    }
    let alias = legacy_reply_path(legacy_root, bound);
    let parent = alias.parent().expect("an alias has a parent");
    let mut dir = legacy_root.to_path_buf();
    for part in parent.strip_prefix(legacy_root).expect("alias under the root").components() {
        dir.push(part);
        secure_dir(&dir, trust).with_context(|| format!("directory for Portus 0.6/0.7 replies {}", dir.display()))?;
    }
    match std::fs::remove_file(&alias) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("cannot remove stale {}", alias.display()))
        }
        _ => {}
    }
    std::os::unix::fs::symlink(bound, &alias).with_context(|| format!("cannot link {} to {}", alias.display(), bound.display()))?;
    Ok(Some(alias))
}

/// Send half handed to libccp (see [`crate::fold::MsgSink`]). Clones share
/// one socket and one [outbox](PortusSender::flush): the loop keeps a clone
/// to flush while libccp owns another.
#[derive(Clone)]
pub struct PortusSender {
    inner: Rc<RefCell<Outgoing>>,
}

struct Outgoing {
    sock: UnixDatagram,
    portus: PathBuf,
    trust: Trust,
    failures: u64,
    /// When the Portus socket's owner was last found trusted (re-checked
    /// every [`OWNER_RECHECK`] and after a failed send).
    owner_checked: Option<Instant>,
    /// Messages Portus's receive queue had no room for yet, oldest first.
    outbox: VecDeque<Vec<u8>>,
    outbox_cap: usize,
    stats: OutboxStats,
}

/// What the outbox did so far (the datapath's exit summary prints it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Messages that found Portus's queue full and waited in the outbox.
    pub deferred: u64,
    /// The most messages waiting at once.
    pub peak: usize,
    /// Messages dropped: the outbox was full, or Portus went away while
    /// they waited (a restarted algorithm is told every live flow again).
    pub dropped: u64,
}

/// The longest datagram Portus reads whole: portus 0.9 receives into a
/// 1024-byte buffer (`run.rs`, `run_inner`) and parses the messages in it
/// one after another by their headers' lengths (`ipc/mod.rs`,
/// `Backend::next`), so a datagram up to this size may carry several.
pub const PORTUS_RECV_BYTES: usize = 1024;

/// How long a verified Portus socket owner is trusted before an `lstat` again.
const OWNER_RECHECK: Duration = Duration::from_secs(1);

/// Messages the outbox holds at most (a report is 100-200 bytes): an
/// algorithm stopped for seconds under thousands of flows. Beyond it new
/// messages are dropped (and count as failed sends).
pub const OUTBOX_CAP: usize = 65536;

impl PortusIpc {
    /// Secure `bind_dir` ([`secure_dir`]), bind `<bind_dir>/ccp-datapath-<pid>`
    /// (replacing a stale socket file of the same name; socket mode 0700, or
    /// 0770 for the allowed group), enable SO_PASSCRED and talk to the Portus
    /// socket at `portus`. The socket is non-blocking.
    ///
    /// Errors: `bind_dir` is unsafe, cannot be created or written, or bind fails.
    pub fn bind(bind_dir: &Path, portus: &Path, trust: Trust) -> Result<Self> {
        Self::bind_with_legacy_root(bind_dir, portus, trust, Path::new(PORTUS_DIR))
    }

    /// [`PortusIpc::bind`], with `legacy_root` in place of [`PORTUS_DIR`]
    /// for the Portus 0.6/0.7 reply alias (tests).
    pub fn bind_with_legacy_root(bind_dir: &Path, portus: &Path, trust: Trust, legacy_root: &Path) -> Result<Self> {
        secure_dir(bind_dir, &trust)?;
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
        let sock_mode = if trust.allow_gid.is_some() { 0o770 } else { 0o700 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(sock_mode))
            .with_context(|| format!("cannot set mode of {}", path.display()))?;
        if let Some(g) = trust.allow_gid {
            chown(&path, None, Some(g)).with_context(|| format!("--allow-gid {g}: cannot chgrp {}", path.display()))?;
        }
        sock.set_nonblocking(true)?;
        setsockopt_int(&sock, libc::SO_PASSCRED, 1).context("SO_PASSCRED on the datapath socket")?;
        let _ = setsockopt_int(&sock, libc::SO_RCVBUF, 4 << 20);
        let _ = setsockopt_int(&sock, libc::SO_SNDBUF, 4 << 20);
        let mut ipc = PortusIpc { sock, path, portus: portus.to_path_buf(), trust, dropped_untrusted: 0, portus_pid: None, legacy_alias: None };
        // the socket is removed on drop from here on, the alias with it
        ipc.legacy_alias = make_legacy_alias(legacy_root, &ipc.path, &trust)?;
        Ok(ipc)
    }

    /// The path this datapath is bound to (Portus replies here).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// File descriptor to poll for readability.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Datagrams dropped so far because their sender was not trusted.
    pub fn dropped_untrusted(&self) -> u64 {
        self.dropped_untrusted
    }

    /// Pid of the process bound at the Portus socket, as the kernel reported
    /// it (SCM_CREDENTIALS) with the last trusted datagram sent from that
    /// socket's path; None until one came. [`crate::liveness`] watches it.
    pub fn portus_pid(&self) -> Option<i32> {
        self.portus_pid
    }

    /// A sender for outgoing libccp messages (a clone of the same socket, so
    /// Portus sees our bound path as the source), with an outbox of
    /// [`OUTBOX_CAP`] messages.
    pub fn sender(&self) -> Result<PortusSender> {
        self.sender_with_outbox(OUTBOX_CAP)
    }

    /// [`PortusIpc::sender`] with an outbox of `cap` messages.
    pub fn sender_with_outbox(&self, cap: usize) -> Result<PortusSender> {
        let out = Outgoing {
            sock: self.sock.try_clone()?,
            portus: self.portus.clone(),
            trust: self.trust,
            failures: 0,
            owner_checked: None,
            outbox: VecDeque::new(),
            outbox_cap: cap,
            stats: OutboxStats::default(),
        };
        Ok(PortusSender { inner: Rc::new(RefCell::new(out)) })
    }

    /// Receive one datagram from a trusted sender into `buf` without
    /// blocking; Ok(None) when nothing trusted is queued. Datagrams whose
    /// SCM_CREDENTIALS uid/gid [`Trust::admits`] refuses (or that carry no
    /// credentials) are dropped with a warning (the first and every 1000th).
    /// Returns the datagram's full length: more than `buf.len()` means it
    /// was truncated (the caller drops it as oversized).
    pub fn try_recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        loop {
            let (n, cred, from) = match recv_with_creds(self.sock.as_raw_fd(), buf, libc::MSG_DONTWAIT | libc::MSG_TRUNC) {
                Ok(v) => v,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => return Ok(None),
                Err(e) => return Err(e),
            };
            match cred {
                Some(c) if self.trust.admits(c.uid, c.gid) => {
                    if from.as_deref() == Some(self.portus.as_path()) {
                        self.portus_pid = Some(c.pid);
                    }
                    return Ok(Some(n));
                }
                _ => {
                    self.dropped_untrusted += 1;
                    if self.dropped_untrusted % 1000 == 1 {
                        tracing::warn!(
                            socket = %self.path.display(),
                            sender_pid = cred.map(|c| c.pid),
                            sender_uid = cred.map(|c| c.uid),
                            sender_gid = cred.map(|c| c.gid),
                            dropped = self.dropped_untrusted,
                            "dropped a datagram from an untrusted sender (not root / --allow-gid)"
                        );
                    }
                }
            }
        }
    }
}

impl Drop for PortusIpc {
    fn drop(&mut self) {
        if let Some(alias) = &self.legacy_alias {
            let _ = std::fs::remove_file(alias);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn setsockopt_int(sock: &UnixDatagram, opt: libc::c_int, val: libc::c_int) -> std::io::Result<()> {
    // SAFETY: plain setsockopt on an fd we own with an int argument.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            &val as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A send Portus's socket refused only because its receive queue is full
/// (`net.unix.max_dgram_qlen` datagrams, 10 by default): Portus is there and
/// will take the message once it has read the ones before.
fn queue_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS))
}

impl PortusSender {
    /// Send one message to Portus, in order after any still in the outbox.
    /// Portus's receive queue holds only `net.unix.max_dgram_qlen` datagrams
    /// (10 by default): a burst (100 flows created or released at once, the
    /// reports of 100 flows read in one wakeup) overflows it, so a message
    /// it has no room for waits in the outbox, and the loop
    /// [flushes](PortusSender::flush) it while [`backlog`](PortusSender::backlog)
    /// is not 0. Returns true when the message was sent or waits; false when
    /// it cannot be sent (Portus not running: ENOENT/ECONNREFUSED; the
    /// Portus socket not a socket owned by a trusted user; the outbox full).
    pub fn send(&mut self, msg: &[u8]) -> bool {
        let mut out = self.inner.borrow_mut();
        let fresh = out.owner_checked.is_some_and(|t| t.elapsed() < OWNER_RECHECK);
        if !fresh {
            if let Err(why) = check_peer_socket(&out.portus, &out.trust) {
                out.fail(&why);
                return false;
            }
            out.owner_checked = Some(Instant::now());
        }
        // what waits goes first (a no-op when nothing waits)
        if !out.flush() {
            return false;
        }
        if out.outbox.is_empty() {
            match out.sock.send_to(msg, &out.portus) {
                Ok(_) => return true,
                Err(e) if queue_full(&e) => {}
                Err(e) => {
                    out.owner_checked = None;
                    out.fail(&e.to_string());
                    return false;
                }
            }
        }
        out.defer(msg)
    }

    /// Send `msgs` in order, as many to a datagram as fit in
    /// [`PORTUS_RECV_BYTES`] (a longer message goes alone): a burst of
    /// reports or creates costs Portus one wakeup and one read per
    /// datagram instead of one per message. Each datagram goes as
    /// [`send`](PortusSender::send) sends it. Returns how many of `msgs`
    /// (a prefix, in order) were sent or wait in the outbox; the rest could
    /// not be sent (Portus gone, or the outbox full).
    pub fn send_packed<'a>(&mut self, msgs: impl IntoIterator<Item = &'a [u8]>) -> usize {
        let mut accepted = 0;
        let mut dgram: Vec<u8> = Vec::with_capacity(PORTUS_RECV_BYTES);
        let mut in_dgram = 0;
        for msg in msgs {
            if !dgram.is_empty() && dgram.len() + msg.len() > PORTUS_RECV_BYTES {
                if !self.send(&dgram) {
                    return accepted;
                }
                accepted += in_dgram;
                dgram.clear();
                in_dgram = 0;
            }
            dgram.extend_from_slice(msg);
            in_dgram += 1;
        }
        if in_dgram > 0 && self.send(&dgram) {
            accepted += in_dgram;
        }
        accepted
    }

    /// Send what waits in the outbox, oldest first, until Portus's queue is
    /// full again. Returns false when Portus is gone: what waited is
    /// dropped (counted in [`OutboxStats::dropped`]).
    pub fn flush(&mut self) -> bool {
        self.inner.borrow_mut().flush()
    }

    /// Messages waiting in the outbox.
    pub fn backlog(&self) -> usize {
        self.inner.borrow().outbox.len()
    }

    /// What the outbox did so far.
    pub fn outbox_stats(&self) -> OutboxStats {
        self.inner.borrow().stats
    }
}

impl Outgoing {
    fn flush(&mut self) -> bool {
        while let Some(msg) = self.outbox.front() {
            match self.sock.send_to(msg, &self.portus) {
                Ok(_) => {
                    self.outbox.pop_front();
                }
                Err(e) if queue_full(&e) => return true,
                Err(e) => {
                    self.stats.dropped += self.outbox.len() as u64;
                    self.outbox.clear();
                    self.owner_checked = None;
                    self.fail(&e.to_string());
                    return false;
                }
            }
        }
        true
    }

    /// Keep `msg` for the next flush; false (dropped) when the outbox is full.
    fn defer(&mut self, msg: &[u8]) -> bool {
        if self.outbox.len() >= self.outbox_cap {
            self.stats.dropped += 1;
            self.fail("outbox full (Portus reads too slowly)");
            return false;
        }
        self.outbox.push_back(msg.to_vec());
        self.stats.deferred += 1;
        self.stats.peak = self.stats.peak.max(self.outbox.len());
        true
    }

    fn fail(&mut self, why: &str) {
        self.failures += 1;
        // first failure and then every 1000th, to keep the log usable
        if self.failures % 1000 == 1 {
            tracing::warn!(portus = %self.portus.display(), error = %why, failures = self.failures, "cannot send to Portus");
        }
    }
}

/// `--fold userspace`: hand one Portus message to libccp only if the kernel
/// fold's parser ([`crate::fold::parse_message`], libccp's rules and
/// limits) accepts it. libccp 1.2 itself takes counts past its arrays (e.g.
/// more than 256 expressions) and then loops or reads out of bounds in its
/// state machine (found by tests/fuzz_messages.rs), so such messages must
/// never reach it. Refused messages are not applied at all (libccp would
/// apply part of some refused installs).
///
/// Errors: the message is refused (by the screen or by libccp).
pub fn deliver_to_libccp(fold: &mut crate::fold::FoldEngine, msg: &mut [u8], now_ns: u64) -> Result<()> {
    crate::fold::parse_message(msg).map_err(|e| anyhow::anyhow!("Portus message refused: {e}"))?;
    fold.recv_msg(msg, now_ns)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// How each Portus release addresses its reply to a datapath whose
    /// datagram came from `from` (portus `ipc::unix::Socket::send`, read in
    /// each tagged release): 0.6, 0.6.1 and 0.7.0 prefix the directory they
    /// hard-code, 0.8.0 and 0.9.0 send to the address as received.
    fn portus_reply_address(release: &str, hard_coded_dir: &str, from: &Path) -> PathBuf {
        match release {
            "0.6" | "0.6.1" | "0.7.0" => PathBuf::from(format!("{hard_coded_dir}/{}", from.to_str().unwrap())),
            "0.8.0" | "0.9.0" => from.to_path_buf(),
            r => panic!("unknown Portus release {r}"),
        }
    }

    #[test]
    fn every_portus_release_reaches_the_datapath() {
        // a temporary directory plays /tmp/ccp (the releases' hard-coded one)
        let root = std::env::temp_dir().join(format!("ccp-ipc-legacy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let portus_path = root.join("portus");
        let portus = UnixDatagram::bind(&portus_path).unwrap();
        let mut ipc = PortusIpc::bind_with_legacy_root(&root, &portus_path, Trust::current(None), &root).unwrap();
        let alias = legacy_reply_path(&root, ipc.path());
        assert!(std::fs::symlink_metadata(&alias).unwrap().file_type().is_symlink(), "alias made");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(alias.parent().unwrap()), 0o700, "the alias's directory is the bind dir's mode");
        let mut tx = ipc.sender().unwrap();
        for release in ["0.6", "0.6.1", "0.7.0", "0.8.0", "0.9.0"] {
            assert!(tx.send(release.as_bytes()));
            let mut buf = [0u8; 64];
            let (n, from) = portus.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], release.as_bytes());
            let to = portus_reply_address(release, root.to_str().unwrap(), from.as_pathname().unwrap());
            portus.send_to(format!("reply {release}").as_bytes(), &to).unwrap_or_else(|e| panic!("Portus {release} replies to {}: {e}", to.display()));
            let got = (0..200).find_map(|_| {
                let r = ipc.try_recv(&mut buf).unwrap();
                if r.is_none() {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                r
            });
            assert_eq!(got.map(|n| buf[..n].to_vec()), Some(format!("reply {release}").into_bytes()), "Portus {release}'s reply");
        }
        // the real releases' directory, spelled as they spell it
        assert_eq!(
            portus_reply_address("0.6.1", PORTUS_DIR, Path::new("/tmp/ccp/ccp-datapath-7")),
            PathBuf::from("/tmp/ccp//tmp/ccp/ccp-datapath-7")
        );
        assert_eq!(legacy_reply_path(Path::new(PORTUS_DIR), Path::new("/tmp/ccp/ccp-datapath-7")), PathBuf::from("/tmp/ccp/tmp/ccp/ccp-datapath-7"));
        drop(ipc);
        assert!(std::fs::symlink_metadata(&alias).is_err(), "alias removed with the socket");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn round_trip_and_cleanup() {
        let dir = std::env::temp_dir().join(format!("ccp-ipc-test-{}", std::process::id()));
        let portus_path = dir.join("fake-portus");
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(&portus_path);
        let portus = UnixDatagram::bind(&portus_path).unwrap();
        let mut ipc = PortusIpc::bind(&dir, &portus_path, Trust::current(None)).unwrap();
        let bound = ipc.path().to_path_buf();
        assert!(bound.exists());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700, "bind dir tightened to 0700");
        assert_eq!(mode(&bound), 0o700, "socket mode 0700");
        let mut tx = ipc.sender().unwrap();
        assert!(tx.send(b"hello"));
        let mut buf = [0u8; 16];
        let (n, from) = portus.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(from.as_pathname().unwrap(), bound.as_path());
        // a trusted datagram from elsewhere than the Portus socket names no algorithm
        UnixDatagram::unbound().unwrap().send_to(b"other", &bound).unwrap();
        let recv = |ipc: &mut PortusIpc, buf: &mut [u8]| {
            for _ in 0..100 {
                if let Some(n) = ipc.try_recv(buf).unwrap() {
                    return n;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            panic!("nothing received");
        };
        let n = recv(&mut ipc, &mut buf);
        assert_eq!(&buf[..n], b"other");
        assert_eq!(ipc.portus_pid(), None, "sender not bound at the Portus socket");
        // Portus-style reply to the sender's path
        portus.send_to(b"reply", &bound).unwrap();
        let n = recv(&mut ipc, &mut buf);
        assert_eq!(&buf[..n], b"reply");
        assert_eq!(ipc.portus_pid(), Some(std::process::id() as i32), "the Portus socket's owner, by SCM_CREDENTIALS");
        assert_eq!(ipc.try_recv(&mut buf).unwrap(), None);
        drop(tx);
        drop(ipc);
        assert!(!bound.exists(), "socket file removed on drop");
        // no Portus listening: send reports failure
        drop(portus);
        std::fs::remove_file(&portus_path).unwrap();
        let ipc = PortusIpc::bind(&dir, &portus_path, Trust::current(None)).unwrap();
        assert!(!ipc.sender().unwrap().send(b"x"));
        drop(ipc);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// How many datagrams a receiver's queue takes before senders get
    /// EAGAIN: one more than net.unix.max_dgram_qlen (af_unix.c's
    /// unix_recvq_full is a `>`).
    fn max_dgram_qlen() -> usize {
        let qlen: usize = std::fs::read_to_string("/proc/sys/net/unix/max_dgram_qlen").unwrap().trim().parse().unwrap();
        qlen + 1
    }

    /// A fake Portus that reads nothing until told to, and a datapath socket.
    fn burst_setup(tag: &str) -> (PathBuf, PathBuf, UnixDatagram, PortusIpc) {
        let dir = std::env::temp_dir().join(format!("ccp-ipc-test-{tag}-{}", std::process::id()));
        let portus_path = dir.join("fake-portus");
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(&portus_path);
        let portus = UnixDatagram::bind(&portus_path).unwrap();
        portus.set_nonblocking(true).unwrap();
        let ipc = PortusIpc::bind(&dir, &portus_path, Trust::current(None)).unwrap();
        (dir, portus_path, portus, ipc)
    }

    /// Wait (5 s at most) until the socket bound at `path` is released.
    /// Closing our fd is not enough: a process another test forks in the
    /// same test binary holds a copy of it until its exec, and meanwhile
    /// the socket lives on (a send to it is refused with EAGAIN, its queue
    /// being full, instead of ECONNREFUSED).
    pub(crate) fn wait_released(path: &Path) {
        let probe = UnixDatagram::unbound().unwrap();
        probe.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match probe.send_to(b"", path) {
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => return,
                other => assert!(Instant::now() < deadline, "{} still alive after 5 s: {other:?}", path.display()),
            }
            std::thread::yield_now();
        }
    }

    fn drain(portus: &UnixDatagram) -> Vec<u32> {
        let mut got = vec![];
        let mut buf = [0u8; 8];
        while let Ok(n) = portus.recv(&mut buf) {
            assert_eq!(n, 4);
            got.push(u32::from_ne_bytes(buf[..4].try_into().unwrap()));
        }
        got
    }

    #[test]
    fn a_burst_beyond_portus_queue_waits_in_the_outbox_and_arrives_in_order() {
        let (dir, _, portus, ipc) = burst_setup("burst");
        let qlen = max_dgram_qlen();
        let n = (qlen * 5) as u32;
        let mut tx = ipc.sender().unwrap();
        let mut flusher = tx.clone();
        for i in 0..n {
            assert!(tx.send(&i.to_ne_bytes()), "message {i} refused though Portus is there");
        }
        assert!(flusher.backlog() >= n as usize - qlen, "backlog {} of {n} (queue {qlen})", flusher.backlog());
        let mut got = vec![];
        for _ in 0..n {
            got.extend(drain(&portus));
            assert!(flusher.flush());
            if flusher.backlog() == 0 {
                break;
            }
        }
        got.extend(drain(&portus));
        assert_eq!(got, (0..n).collect::<Vec<_>>(), "every message, once, in the order sent");
        let st = flusher.outbox_stats();
        assert_eq!(st.dropped, 0);
        assert!(st.peak >= n as usize - qlen && st.deferred >= st.peak as u64, "{st:?}");
        // with the backlog gone, a message goes straight out again
        assert!(tx.send(&7u32.to_ne_bytes()));
        assert_eq!(flusher.backlog(), 0);
        assert_eq!(drain(&portus), vec![7]);
        drop((tx, flusher, ipc));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn packed_messages_fill_datagrams_up_to_portus_buffer_in_order() {
        let (dir, portus_path, portus, ipc) = burst_setup("packed");
        let mut tx = ipc.sender().unwrap();
        // 40 messages of 90..=490 bytes, each filled with its index
        let msgs: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 90 + 10 * usize::from(i)]).collect();
        assert_eq!(tx.send_packed(msgs.iter().map(|m| m.as_slice())), msgs.len());
        let mut dgrams = vec![];
        let mut buf = vec![0u8; 4 * PORTUS_RECV_BYTES];
        loop {
            // more datagrams than Portus's queue holds: some wait in the outbox
            while let Ok(n) = portus.recv(&mut buf) {
                dgrams.push(buf[..n].to_vec());
            }
            if tx.backlog() == 0 {
                break;
            }
            assert!(tx.flush());
        }
        let lens: Vec<usize> = dgrams.iter().map(Vec::len).collect();
        assert!(lens.iter().all(|&l| l <= PORTUS_RECV_BYTES), "datagram lengths {lens:?}");
        assert!(dgrams.concat() == msgs.concat(), "every message, whole, in order (datagram lengths {lens:?})");
        // greedy: a datagram ends only where the next message would not fit
        let mut at = 0;
        for d in &dgrams[..dgrams.len() - 1] {
            let mut len = 0;
            while len < d.len() {
                len += msgs[at].len();
                at += 1;
            }
            assert_eq!(len, d.len(), "datagrams end at message boundaries");
            assert!(len + msgs[at].len() > PORTUS_RECV_BYTES, "message {at} would have fitted");
        }
        assert!(dgrams.len() < msgs.len() / 2, "{} datagrams for {} messages", dgrams.len(), msgs.len());
        // Portus gone: nothing of a packed send is accepted
        drop(portus);
        wait_released(&portus_path);
        assert_eq!(tx.send_packed(msgs.iter().map(|m| m.as_slice())), 0);
        drop((tx, ipc));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_packed_send_beyond_the_outbox_cap_accepts_a_prefix() {
        let (dir, _, portus, ipc) = burst_setup("packcap");
        let qlen = max_dgram_qlen();
        let cap = 2;
        let mut tx = ipc.sender_with_outbox(cap).unwrap();
        // one message per datagram (each more than half of Portus's buffer)
        let msgs: Vec<Vec<u8>> = (0..(qlen + cap + 3) as u8).map(|i| vec![i; PORTUS_RECV_BYTES / 2 + 1]).collect();
        assert_eq!(tx.send_packed(msgs.iter().map(|m| m.as_slice())), qlen + cap, "the queue, then the outbox");
        assert_eq!(tx.backlog(), cap);
        drop((tx, ipc, portus));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn what_waits_for_a_portus_that_dies_is_dropped_and_the_outbox_cap_holds() {
        let (dir, portus_path, portus, ipc) = burst_setup("dies");
        let qlen = max_dgram_qlen();
        let cap = 3;
        let mut tx = ipc.sender_with_outbox(cap).unwrap();
        let sent: Vec<bool> = (0..(qlen + cap + 2) as u32).map(|i| tx.send(&i.to_ne_bytes())).collect();
        assert!(sent[..qlen + cap].iter().all(|&ok| ok), "{sent:?}");
        assert!(!sent[qlen + cap] && !sent[qlen + cap + 1], "beyond the cap a send fails: {sent:?}");
        assert_eq!(tx.backlog(), cap);
        assert_eq!(tx.outbox_stats().dropped, 2);
        // Portus dies (its socket file stays, as after SIGKILL)
        drop(portus);
        assert!(portus_path.exists());
        wait_released(&portus_path);
        assert!(!tx.flush(), "flushing to a dead Portus fails");
        assert_eq!(tx.backlog(), 0, "nothing is kept for a dead algorithm");
        assert_eq!(tx.outbox_stats().dropped, 2 + cap as u64);
        drop((tx, ipc));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn group_or_world_writable_bind_dir_is_refused() {
        let dir = std::env::temp_dir().join(format!("ccp-ipc-test-ww-{}", std::process::id()));
        for (mode, allow_gid) in [(0o777, None), (0o770, None), (0o703, None)] {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = format!("{:#}", secure_dir(&dir, &Trust::current(allow_gid)).unwrap_err());
            assert!(err.contains(&dir.display().to_string()) && err.contains("group/world-writable"), "{mode:o}: {err}");
            assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, mode, "refused dir left as it was");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        // a symlink in its place (to a perfectly safe directory) is refused too
        let target = std::env::temp_dir().join(format!("ccp-ipc-test-tg-{}", std::process::id()));
        std::fs::create_dir_all(&target).unwrap();
        std::os::unix::fs::symlink(&target, &dir).unwrap();
        let err = format!("{:#}", secure_dir(&dir, &Trust::current(None)).unwrap_err());
        assert!(err.contains("is not a directory"), "{err}");
        std::fs::remove_file(&dir).unwrap();
        std::fs::remove_dir_all(&target).unwrap();
    }

    #[test]
    fn portus_path_that_is_not_a_socket_gets_nothing() {
        let dir = std::env::temp_dir().join(format!("ccp-ipc-test-ns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("portus");
        std::fs::write(&fake, b"").unwrap();
        let err = check_peer_socket(&fake, &Trust::current(None)).unwrap_err();
        assert!(err.contains("not a unix socket"), "{err}");
        let ipc = PortusIpc::bind(&dir, &fake, Trust::current(None)).unwrap();
        assert!(!ipc.sender().unwrap().send(b"x"));
        drop(ipc);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn trust_admits_root_self_and_the_allowed_group_only() {
        let t = Trust { uid: 0, allow_gid: Some(1234) };
        assert!(t.admits(0, 0) && t.admits(0, 99) && t.admits(5000, 1234));
        assert!(!t.admits(65534, 65534) && !t.admits(1000, 1000));
        assert!(!Trust { uid: 0, allow_gid: None }.admits(65534, 0));
    }

    #[test]
    fn unwritable_bind_dir_is_an_error() {
        let err = PortusIpc::bind(Path::new("/proc/ccp-no-such-dir"), Path::new("/tmp/ccp/portus"), Trust::current(None))
            .err()
            .expect("binding under /proc must fail");
        assert!(format!("{err:#}").contains("--bind-dir"));
    }
}
