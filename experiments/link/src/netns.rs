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

/// Runs [`remove_leftovers`] when dropped (also during unwinding).
pub struct CleanupGuard(pub Namespaces);

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        let failed = remove_leftovers(&self.0);
        if !failed.is_empty() {
            tracing::error!(?failed, "could not delete namespaces; remove with `ip netns del`");
        }
    }
}
