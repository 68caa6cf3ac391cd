//! The `ccplab-link` emulated bottleneck at a constant rate ([`Link`]) and
//! processes inside its namespaces ([`in_netns`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ccplab_util::testkit::{wait_for_exit, wait_until};

use super::process::{workspace_bin, Proc};

/// The link's ready file: its namespaces and the receiver's address.
#[derive(serde::Deserialize)]
pub struct LinkReady {
    pub sender_netns: String,
    pub receiver_netns: String,
    pub emulator_netns: String,
    pub receiver_ip: String,
}

/// The bottleneck a [`Link`] emulates.
#[derive(Clone, Copy)]
pub struct LinkSpec {
    /// Delivery opportunities of 1500 bytes per ms (2 = 24 Mbit/s).
    pub opportunities_per_ms: usize,
    pub one_way_delay_ms: u32,
    /// Droptail queue, packets.
    pub queue_packets: u32,
}

/// `ccplab-link` with a constant-rate trace; it stops the processes inside
/// its namespaces and deletes them when it stops (SIGTERM on drop).
pub struct Link {
    proc: Proc,
    pub ready: LinkReady,
}

impl Link {
    /// Starts it with its trace, log and ready file in `dir`; fails with its
    /// log if it exits or is not up within 20 s.
    pub fn start(dir: &Path, spec: LinkSpec) -> Link {
        let trace = dir.join("constant.up");
        std::fs::write(&trace, "1\n".repeat(spec.opportunities_per_ms)).unwrap();
        let ready_file = dir.join("link-ready.json");
        let mut cmd = Command::new(workspace_bin("ccplab-link"));
        cmd.arg("--uplink-trace")
            .arg(&trace)
            .arg("--uplink-log")
            .arg(dir.join("uplink.log"))
            .arg("--ready-file")
            .arg(&ready_file)
            .args(["--one-way-delay-ms", &spec.one_way_delay_ms.to_string()])
            .args(["--queue-packets", &spec.queue_packets.to_string()])
            .args(["--duration-s", "120"]);
        let mut proc = Proc::spawn("ccplab-link", &mut cmd, dir.join("link.log"));
        // The ready file is written atomically once the link is up.
        let ready = wait_until("ccplab-link's ready file", Duration::from_secs(20), || {
            proc.assert_running();
            let text = std::fs::read_to_string(&ready_file).ok()?;
            Some(serde_json::from_str::<LinkReady>(&text).expect("ready file JSON"))
        });
        Link { proc, ready }
    }
}

impl Drop for Link {
    /// SIGTERM and wait for its own cleanup (longer than [`Proc`]'s 5 s),
    /// then delete any namespace a killed link left behind.
    fn drop(&mut self) {
        if let Some(mut c) = self.proc.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            // It stops the processes inside (SIGTERM, SIGKILL after 1 s) and deletes its namespaces.
            if wait_for_exit(&mut c, Duration::from_secs(15)).is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for ns in [&self.ready.sender_netns, &self.ready.emulator_netns, &self.ready.receiver_netns] {
            if Path::new("/var/run/netns").join(ns).exists() {
                let _ = Command::new("ip").args(["netns", "del", ns]).status();
            }
        }
    }
}

/// `ip netns exec NS ARGS...` as a background process (killed on drop;
/// `ip netns exec` execs the command, so the kill reaches it).
pub fn in_netns(name: &'static str, ns: &str, args: &[&str], log: PathBuf) -> Proc {
    Proc::spawn(name, Command::new("ip").args(["netns", "exec", ns]).args(args), log)
}
