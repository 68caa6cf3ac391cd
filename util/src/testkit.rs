//! Test preconditions and readiness waits, shared by every crate's tests.
//!
//! Policy (one for the whole project): a test that needs root, BPF, network
//! namespaces, a tool or a data file FAILS with a message naming what is
//! missing; it never returns early and passes. CI runs as root with every
//! tool installed, so nothing is missing there.
//!
//! Readiness is awaited on a signal (a condition, a file, a TCP listener,
//! a process exit) with a timeout and an error naming what did not happen,
//! never with a bare sleep.

use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How often the waits below re-check their condition.
const POLL: Duration = Duration::from_millis(10);

/// Fails the test unless it runs as root (effective uid 0). `needs` says
/// what root is needed for, e.g. "network namespaces and BPF".
pub fn require_root(needs: &str) {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "MISSING: root. This test needs root for {needs}, but runs as uid {euid}; \
         run the tests as root (CI does), e.g. `sudo -E cargo test --release`"
    );
}

/// Fails the test unless every command in `tools` is on PATH. `needs`
/// says what for.
pub fn require_tools(tools: &[&str], needs: &str) {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| find_on_path(t).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "MISSING: command(s) {missing:?} not on PATH, needed for {needs}; install them (`make deps` lists the Debian packages)"
    );
}

/// Fails the test unless `path` exists. `what` names the data, e.g.
/// "the mahimahi cellular traces (traces/cellular)".
pub fn require_path(path: &Path, what: &str) {
    assert!(
        path.exists(),
        "MISSING: {what}: {} does not exist",
        path.display()
    );
}

fn find_on_path(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Polls `check` until it returns Some (returned) or `timeout` passes
/// (panics: "timed out after .. waiting for `<what>`").
pub fn wait_until<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    match try_wait_until(timeout, &mut check) {
        Some(v) => v,
        None => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// Polls `check` until it returns Some or `timeout` passes (None).
pub fn try_wait_until<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// Waits up to `timeout` for `child` to exit; None if it is still running.
pub fn wait_for_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    try_wait_until(timeout, || {
        child.try_wait().expect("waiting for a child process")
    })
}

/// Whether a TCP socket listens on `port` (any address) in network
/// namespace `netns` (None: the current one), as `ss -Hltn` shows it.
/// Panics if `ss` (or `ip netns exec`) cannot run.
pub fn tcp_listening(netns: Option<&str>, port: u16) -> bool {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "ss"]);
            c
        }
        None => Command::new("ss"),
    };
    let out = cmd
        .args(["-Hltn", &format!("sport = :{port}")])
        .output()
        .expect("running ss (iproute2)");
    assert!(
        out.status.success(),
        "ss failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    !out.stdout.iter().all(u8::is_ascii_whitespace)
}

/// Waits until [`tcp_listening`]; panics after `timeout`, naming the port
/// and namespace.
pub fn wait_for_tcp_listener(netns: Option<&str>, port: u16, timeout: Duration) {
    let where_ = netns.map_or("this namespace".to_string(), |n| format!("namespace {n}"));
    wait_until(
        &format!("a TCP listener on port {port} in {where_}"),
        timeout,
        || tcp_listening(netns, port).then_some(()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
        let e = std::panic::catch_unwind(f).expect_err("should fail");
        e.downcast_ref::<String>()
            .cloned()
            .or(e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap()
    }

    #[test]
    fn missing_tools_and_paths_fail_naming_them() {
        let msg = panic_message(|| require_tools(&["sh", "ccplab-no-such-tool"], "a demo"));
        assert!(
            msg.contains("MISSING")
                && msg.contains("ccplab-no-such-tool")
                && msg.contains("a demo"),
            "{msg}"
        );
        assert!(!msg.contains("\"sh\""), "sh exists: {msg}");
        require_tools(&["sh"], "a shell");
        let msg = panic_message(|| require_path(Path::new("/nonexistent/ccplab"), "test data"));
        assert!(
            msg.contains("MISSING: test data") && msg.contains("/nonexistent/ccplab"),
            "{msg}"
        );
    }

    #[test]
    fn require_root_fails_unless_root() {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            require_root("this check");
        } else {
            let msg = panic_message(|| require_root("this check"));
            assert!(
                msg.contains("MISSING: root") && msg.contains("this check"),
                "{msg}"
            );
        }
    }

    #[test]
    fn waits_return_the_value_or_fail_naming_what() {
        let mut n = 0;
        assert_eq!(
            wait_until("n to reach 3", Duration::from_secs(5), || {
                n += 1;
                (n >= 3).then_some(n)
            }),
            3
        );
        let t0 = Instant::now();
        assert_eq!(
            try_wait_until::<()>(Duration::from_millis(50), || None),
            None
        );
        assert!(t0.elapsed() >= Duration::from_millis(50));
        let msg =
            panic_message(|| wait_until::<()>("the moon", Duration::from_millis(20), || None));
        assert!(
            msg.contains("timed out after") && msg.contains("the moon"),
            "{msg}"
        );
    }

    #[test]
    fn sees_a_listener_appear() {
        require_tools(&["ss"], "listing TCP listeners");
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        wait_for_tcp_listener(None, l.local_addr().unwrap().port(), Duration::from_secs(5));
        let port = l.local_addr().unwrap().port();
        drop(l);
        let msg = panic_message(|| wait_for_tcp_listener(None, port, Duration::from_millis(50)));
        assert!(msg.contains(&format!("port {port}")), "{msg}");
    }

    #[test]
    fn waits_for_a_process_to_exit() {
        let mut c = Command::new("sh")
            .args(["-c", "cat >/dev/null"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            wait_for_exit(&mut c, Duration::from_millis(50)).is_none(),
            "still reading stdin"
        );
        drop(c.stdin.take());
        let st = wait_for_exit(&mut c, Duration::from_secs(5)).expect("exits at EOF");
        assert!(st.success());
    }
}

/// Held while a test may register the congestion control `ccp` (see [`lock_ccp_registration`]).
pub struct CcpRegistrationLock {
    _local: std::sync::MutexGuard<'static, ()>,
    _file: std::fs::File,
}

/// Serialize every test that registers `ccp` (threads of this test binary and
/// other processes, through the lock file `/tmp/ccp-datapath-tests.lock`),
/// then wait (up to 60 s) until no other `ccp` is registered: the kernel
/// takes one congestion control of a name. Fails naming the kernel BTF when
/// struct_ops cannot load; callers add their own `require_*` checks.
pub fn lock_ccp_registration() -> CcpRegistrationLock {
    static LOCAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    require_path(Path::new("/sys/kernel/btf/vmlinux"), "kernel BTF (BPF struct_ops support)");
    let local = LOCAL.lock().unwrap_or_else(|p| p.into_inner());
    let file = std::fs::File::create("/tmp/ccp-datapath-tests.lock").expect("create /tmp/ccp-datapath-tests.lock");
    file.lock().expect("lock /tmp/ccp-datapath-tests.lock");
    wait_until("another process to unregister congestion control `ccp`", Duration::from_secs(60), || {
        (!ccp_registered()).then_some(())
    });
    CcpRegistrationLock { _local: local, _file: file }
}

/// Whether a congestion control named `ccp` is registered (a datapath is running).
pub fn ccp_registered() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .expect("read /proc/sys/net/ipv4/tcp_available_congestion_control")
        .split_whitespace()
        .any(|name| name == "ccp")
}
