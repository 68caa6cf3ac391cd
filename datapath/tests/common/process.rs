//! Processes the integration tests start: any child with a log file
//! ([`Proc`]), the built `ccp-datapath` ([`DatapathProc`]) and
//! `ccp-algorithms` ([`AlgorithmProc`]) awaited on their readiness signals,
//! and an in-process Portus ([`PortusThread`]). Each stops what it started
//! on drop, also when an assertion fails.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ccplab_util::testkit::{require_path, try_wait_until, wait_for_exit};
use portus::ipc::unix::Socket;
use portus::ipc::{BackendBuilder, Blocking};
use portus::{CCPHandle, CongAlg, RunBuilder};

/// The `ccp-datapath` binary cargo built for these tests.
pub const DATAPATH: &str = env!("CARGO_BIN_EXE_ccp-datapath");

/// How long a stopped process has after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// `tag` made unique among the runs on this machine now (pid and a
/// counter), short enough for an interface name: `<tag><pid % 100000>x<n>`.
pub fn uniq(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{tag}{}x{}", std::process::id() % 100_000, N.fetch_add(1, Ordering::SeqCst))
}

/// Directory of the workspace's built binaries (target/<profile>).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().and_then(|d| d.parent()).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// The workspace binary `name` in [`bin_dir`]; fails naming how to build it.
pub fn workspace_bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    require_path(&p, &format!("the workspace binary {name} (`cargo build --release --workspace` or `make build`)"));
    p
}

/// Whether `CCP_DP_TEST_KEEP_LOGS` asks to keep the logs of passing tests.
fn keep_logs() -> bool {
    std::env::var_os("CCP_DP_TEST_KEEP_LOGS").is_some()
}

/// SIGTERM (or `sig`) to `child`, then SIGKILL if it has not exited after
/// [`STOP_GRACE`]; its exit status, None if it had to be killed.
fn stop_child(mut child: Child, sig: libc::c_int) -> Option<ExitStatus> {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
    let st = wait_for_exit(&mut child, STOP_GRACE);
    if st.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    st
}

/// A child process whose stderr goes to a log file; stopped on drop
/// (SIGTERM, SIGKILL after 5 s). A log in a directory the test owns
/// ([`Proc::spawn`]) stays; one in the temp directory ([`Proc::spawn_temp_log`])
/// is removed unless the test failed or `CCP_DP_TEST_KEEP_LOGS` is set.
pub struct Proc {
    pub name: &'static str,
    pub child: Option<Child>,
    pub log: PathBuf,
    temp_log: bool,
}

impl Proc {
    /// Spawns `cmd` (stdout discarded, stderr to `log`).
    pub fn spawn(name: &'static str, cmd: &mut Command, log: PathBuf) -> Proc {
        Self::spawn_logging(name, cmd, log, false)
    }

    /// Spawns `cmd` with its log in the temp directory, named after `prefix` and `name`.
    pub fn spawn_temp_log(name: &'static str, cmd: &mut Command, prefix: &str) -> Proc {
        let log = std::env::temp_dir().join(format!("{prefix}-{name}-{}.log", uniq("")));
        Self::spawn_logging(name, cmd, log, true)
    }

    fn spawn_logging(name: &'static str, cmd: &mut Command, log: PathBuf, temp_log: bool) -> Proc {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        Proc { name, child: Some(child), log, temp_log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().expect("try_wait").is_none())
    }

    /// Panics (with its log) if the process has exited.
    pub fn assert_running(&mut self) {
        if let Some(st) = self.child.as_mut().and_then(|c| c.try_wait().expect("try_wait")) {
            panic!("{} exited early ({st}):\n{}", self.name, self.log_text());
        }
    }

    /// Waits until its log contains `needle` (it must keep running meanwhile).
    pub fn wait_log(&mut self, needle: &str, timeout: Duration) {
        let found = try_wait_until(timeout, || {
            self.assert_running();
            self.log_text().contains(needle).then_some(())
        });
        assert!(found.is_some(), "{}: no {needle:?} within {timeout:?}; log:\n{}", self.name, self.log_text());
    }

    /// Sends `sig` and leaves it running (or dying).
    pub fn signal(&mut self, sig: libc::c_int) {
        if let Some(c) = &self.child {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    /// Stops it with `sig` (SIGKILL after 5 s); the exit status, None if
    /// it had to be killed or was stopped before.
    pub fn stop_with(&mut self, sig: libc::c_int) -> Option<ExitStatus> {
        stop_child(self.child.take()?, sig)
    }

    /// [`Proc::stop_with`] SIGTERM.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.stop_with(libc::SIGTERM)
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() || (self.temp_log && keep_logs()) {
            eprintln!("{} log kept at {}", self.name, self.log.display());
        } else if self.temp_log {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// The built `ccp-datapath`, ready: its ready file written (`ccp`
/// registered, its socket bound). Stopped on drop; the ready file and its
/// socket are removed then (a SIGKILLed datapath cannot remove them).
pub struct DatapathProc {
    pub proc: Proc,
    pub ready: PathBuf,
    /// The ready file's JSON (`ca`, `pid`, `socket`, ...).
    pub ready_json: serde_json::Value,
    /// Its bound socket (the ready file's `socket`).
    pub socket: PathBuf,
}

impl DatapathProc {
    /// `ccp-datapath ARGS... --ready-file <temp>`, its log in the temp
    /// directory (named after `prefix`); waits up to `timeout` for the ready
    /// file and fails with the log if it exits or is not ready by then.
    pub fn start(args: &[&str], prefix: &str, timeout: Duration) -> DatapathProc {
        let ready = std::env::temp_dir().join(format!("{prefix}-ready-{}.json", uniq("")));
        let proc = Proc::spawn_temp_log("ccp-datapath", Command::new(DATAPATH).args(args).arg("--ready-file").arg(&ready), prefix);
        Self::await_ready(proc, ready, timeout)
    }

    /// `ccp-datapath ARGS... --ready-file DIR/datapath-TAG.json`, its log
    /// DIR/datapath-TAG.log (kept with DIR); ready as in [`DatapathProc::start`].
    pub fn start_in(dir: &Path, tag: &str, args: &[&str], timeout: Duration) -> DatapathProc {
        let ready = dir.join(format!("datapath-{tag}.json"));
        let cmd = &mut Command::new(DATAPATH);
        let proc = Proc::spawn("ccp-datapath", cmd.args(args).arg("--ready-file").arg(&ready), dir.join(format!("datapath-{tag}.log")));
        Self::await_ready(proc, ready, timeout)
    }

    /// The ready file is written atomically once `ccp` is registered.
    fn await_ready(mut proc: Proc, ready: PathBuf, timeout: Duration) -> DatapathProc {
        let up = try_wait_until(timeout, || {
            proc.assert_running();
            ready.exists().then_some(())
        });
        assert!(up.is_some(), "ccp-datapath not ready after {timeout:?}: {}", proc.log_text());
        let ready_json: serde_json::Value = serde_json::from_slice(&std::fs::read(&ready).expect("read the ready file")).expect("ready file JSON");
        let socket = PathBuf::from(ready_json["socket"].as_str().expect("the ready file names the socket"));
        DatapathProc { proc, ready, ready_json, socket }
    }

    pub fn log_text(&self) -> String {
        self.proc.log_text()
    }

    pub fn alive(&mut self) -> bool {
        self.proc.alive()
    }

    pub fn signal(&mut self, sig: libc::c_int) {
        self.proc.signal(sig)
    }

    /// Stops it with `sig`; the exit status (None if it had to be killed).
    pub fn stop_with(&mut self, sig: libc::c_int) -> Option<ExitStatus> {
        self.proc.stop_with(sig)
    }

    /// Stops it with SIGTERM; the exit status (None if it had to be killed).
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.proc.stop()
    }
}

impl Drop for DatapathProc {
    fn drop(&mut self) {
        self.proc.stop();
        let _ = std::fs::remove_file(&self.ready);
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The suite's `ccp-algorithms` binary (built beside this crate's binary).
pub fn algorithms_bin() -> PathBuf {
    let p = Path::new(DATAPATH).with_file_name("ccp-algorithms");
    require_path(&p, "the ccp-algorithms binary (cargo build --release -p ccp-algorithms)");
    p
}

/// A real algorithm process, `ccp-algorithms ARGS... --ipc-name NAME` on
/// /tmp/ccp/NAME, ready once its socket accepts a connect (the datapath's
/// own probe). Stopped on drop and its socket removed.
pub struct AlgorithmProc {
    pub proc: Proc,
    /// Its Portus socket.
    pub path: PathBuf,
}

impl AlgorithmProc {
    /// Starts it, its log in the temp directory named after `prefix`; fails
    /// if it exits or has not bound its socket within 10 s.
    pub fn start(name: &str, args: &[&str], prefix: &str) -> AlgorithmProc {
        let path = PathBuf::from(format!("/tmp/ccp/{name}"));
        let mut proc = Proc::spawn_temp_log("ccp-algorithms", Command::new(algorithms_bin()).args(args).args(["--ipc-name", name]), prefix);
        let bound = try_wait_until(Duration::from_secs(10), || {
            proc.assert_running();
            let probe = std::os::unix::net::UnixDatagram::unbound().unwrap();
            probe.connect(&path).ok()
        });
        assert!(bound.is_some(), "ccp-algorithms did not bind {} within 10 s: {}", path.display(), proc.log_text());
        AlgorithmProc { proc, path }
    }

    pub fn log_text(&self) -> String {
        self.proc.log_text()
    }

    pub fn alive(&mut self) -> bool {
        self.proc.alive()
    }

    /// SIGKILL: the algorithm vanishes without a goodbye.
    pub fn kill(&mut self) {
        self.proc.kill()
    }
}

impl Drop for AlgorithmProc {
    fn drop(&mut self) {
        self.proc.stop();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A Portus algorithm `A` run in this process on /tmp/ccp/<name>; stopped
/// and its socket unlinked on drop.
pub struct PortusThread<A> {
    handle: Option<CCPHandle>,
    /// Its socket, for the datapath's `--portus-socket`.
    pub path: PathBuf,
    /// The algorithm (a clone of what Portus runs: shared state is seen by both).
    pub alg: A,
}

impl<A> PortusThread<A>
where
    A: CongAlg<Socket<Blocking>> + Clone + Send + 'static,
{
    /// Binds /tmp/ccp/<[`uniq`] of `tag`> and runs `alg` on a Portus thread.
    pub fn start(tag: &str, alg: A) -> PortusThread<A> {
        let name = uniq(tag);
        let sock = Socket::<Blocking>::new(&name).expect("bind Portus socket");
        let handle = RunBuilder::new(BackendBuilder { sock }).default_alg(alg.clone()).spawn_thread().run().expect("spawn Portus");
        PortusThread { handle: Some(handle), path: PathBuf::from(format!("/tmp/ccp/{name}")), alg }
    }
}

impl<A> Drop for PortusThread<A> {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.kill();
            let _ = h.wait(); // its socket has a 1 s read timeout
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
