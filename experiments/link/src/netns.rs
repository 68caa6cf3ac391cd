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

/// Network-namespace inode of `/var/run/netns/<name>`, if it exists.
fn netns_inode(name: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(Path::new("/var/run/netns").join(name))
        .ok()
        .map(|m| m.ino())
}

/// Pids of processes whose network namespace is one of `ns`.
pub fn processes_inside(ns: &Namespaces) -> Vec<i32> {
    let inodes: Vec<String> = ns
        .all()
        .iter()
        .filter_map(|n| netns_inode(n))
        .map(|ino| format!("net:[{ino}]"))
        .collect();
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
        })
        .collect()
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
