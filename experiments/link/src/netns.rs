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

/// Pids of processes whose network namespace is one of `ns`, as
/// `ip netns pids <name>` (iproute2) lists them; this process excluded.
pub fn processes_inside(ns: &Namespaces) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut pids: Vec<i32> = ns
        .all()
        .iter()
        .filter(|name| exists(name))
        .flat_map(|name| netns_pids(name))
        .filter(|&pid| pid != me)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// `ip netns pids <name>`; empty (with a warning) if it cannot run.
fn netns_pids(name: &str) -> Vec<i32> {
    match std::process::Command::new("ip")
        .args(["netns", "pids", name])
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
        Ok(out) => {
            tracing::warn!(name, stderr = %String::from_utf8_lossy(&out.stderr).trim(), "ip netns pids failed");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!(name, "cannot run `ip netns pids`: {e}");
            Vec::new()
        }
    }
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
    // Grace period: poll until they are gone, at most 1 s.
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(1) {
        if processes_inside(ns).is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for p in processes_inside(ns) {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
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
