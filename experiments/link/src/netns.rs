//! Namespace bookkeeping: names of what rattan created, and a last-resort
//! cleanup by name that runs even if rattan's own teardown panicked.
//!
//! rattan-env 0.1.1 names its namespaces `ns-left-<id>`, `ns-rattan-<id>`,
//! `ns-right-<id>` with a random 6-character `<id>` per instance (not
//! hard-coded), so concurrent runs do not clash. Every veth pair has one
//! end in `ns-rattan-<id>`, so deleting the namespaces also deletes the
//! veths (once no process runs inside them).

use std::path::Path;

/// The three namespaces of one rattan instance.
#[derive(Debug, Clone)]
pub struct Namespaces {
    pub sender: String,
    pub emulator: String,
    pub receiver: String,
}

impl Namespaces {
    /// Names rattan-env 0.1.1 uses for instance `id` (Isolated mode).
    pub fn for_rattan_id(id: &str) -> Self {
        Self {
            sender: format!("ns-left-{id}"),
            emulator: format!("ns-rattan-{id}"),
            receiver: format!("ns-right-{id}"),
        }
    }

    pub fn all(&self) -> [&str; 3] {
        [&self.sender, &self.emulator, &self.receiver]
    }
}

/// Whether `/var/run/netns/<name>` exists (the `ip netns` convention).
pub fn exists(name: &str) -> bool {
    Path::new("/var/run/netns").join(name).exists()
}

/// Deletes any of `ns` that still exist with `ip netns del`; returns the
/// names that could not be removed.
pub fn remove_leftovers(ns: &Namespaces) -> Vec<String> {
    let mut failed = Vec::new();
    for name in ns.all() {
        if !exists(name) {
            continue;
        }
        tracing::warn!(name, "namespace still present after teardown; deleting it");
        let ok = std::process::Command::new("ip")
            .args(["netns", "del", name])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok || exists(name) {
            failed.push(name.to_string());
        }
    }
    failed
}

/// Pids of processes whose network namespace is one of `ns` (this process
/// excluded): those whose `/proc/PID/ns/net` is the same namespace (device
/// and inode) as `/var/run/netns/<name>`, the test `ip netns pids` makes,
/// read here without starting `ip` once per namespace.
pub fn processes_inside(ns: &Namespaces) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let me = std::process::id() as i32;
    let wanted: Vec<(u64, u64)> = ns
        .all()
        .iter()
        .filter_map(|name| std::fs::metadata(Path::new("/var/run/netns").join(name)).ok())
        .map(|m| (m.dev(), m.ino()))
        .collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let Ok(proc) = std::fs::read_dir("/proc") else {
        tracing::warn!("cannot read /proc: processes inside the link's namespaces are not stopped");
        return Vec::new();
    };
    let mut pids: Vec<i32> = proc
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            // a process that has just exited, or a kernel thread, has none
            std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|m| wanted.contains(&(m.dev(), m.ino())))
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Stops processes still running in `ns` (e.g. an iperf3 server left by a
/// runner): SIGTERM, up to 1 s grace, then SIGKILL. A process inside keeps
/// a namespace (and its veths) alive after its name is deleted.
pub fn stop_processes_inside(ns: &Namespaces) {
    use nix::{
        sys::signal::{kill, Signal},
        unistd::Pid,
    };
    let pids = processes_inside(ns);
    if pids.is_empty() {
        return;
    }
    tracing::info!(?pids, "stopping processes left in the link's namespaces");
    for &p in &pids {
        let _ = kill(Pid::from_raw(p), Signal::SIGTERM);
    }
    // Grace period: woken as each one exits (a pidfd per process), at most 1 s.
    wait_all_exit(&pids, std::time::Duration::from_secs(1));
    for p in processes_inside(ns) {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
}

/// Blocks until every process of `pids` has exited or `timeout` has passed,
/// woken by the kernel at each exit (pidfd_open + poll), not by polling.
fn wait_all_exit(pids: &[i32], timeout: std::time::Duration) {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let fds: Vec<OwnedFd> = pids
        .iter()
        .filter_map(|&p| {
            // SAFETY: pidfd_open takes a pid and flags; a negative result is an error.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p as libc::pid_t, 0) };
            // SAFETY: a fresh descriptor nobody else owns (gone already: ESRCH, skipped).
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
        })
        .collect();
    let mut waiting: Vec<libc::pollfd> = fds
        .iter()
        .map(|f| libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 })
        .collect();
    let deadline = std::time::Instant::now() + timeout;
    while !waiting.is_empty() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        // SAFETY: `waiting` is a valid array of pollfd of the length given.
        let n = unsafe { libc::poll(waiting.as_mut_ptr(), waiting.len() as libc::nfds_t, left.as_millis().max(1) as i32) };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
        waiting.retain(|p| p.revents == 0);
    }
}

/// Runs [`remove_leftovers`] when dropped (also during unwinding).
pub struct CleanupGuard(pub Namespaces);

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        let failed = remove_leftovers(&self.0);
        if !failed.is_empty() {
            tracing::error!(
                ?failed,
                "could not delete namespaces; remove with `ip netns del`"
            );
        }
    }
}
