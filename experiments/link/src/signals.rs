//! Stop signals and worker panics, funnelled to the main thread.
//!
//! SIGINT, SIGTERM, SIGHUP and SIGUSR1 are handled through
//! [`ccplab_util::signals::StopSignals`] (signal-hook), installed first in
//! `main` before any thread exists. A panic in any thread (e.g. a rattan
//! worker) raises SIGUSR1 so the main thread stops and cleans up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use ccplab_util::signals::{StopSignals, SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use nix::sys::signal::Signal;

static PANICKED: AtomicBool = AtomicBool::new(false);
static STOP: OnceLock<StopSignals> = OnceLock::new();

/// How often the main loop re-checks the --duration-s deadline.
const DEADLINE_CHECK: Duration = Duration::from_millis(100);

/// Why the main loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Signal(i32),
    Duration,
    /// A trace played once (`--once`) has ended.
    TraceEnd,
    WorkerPanicked,
}

/// Installs the stop-signal handlers (call first in main).
pub fn install_stop_signals() -> std::io::Result<()> {
    let stop = StopSignals::install(&[SIGINT, SIGTERM, SIGHUP, SIGUSR1])?;
    let _ = STOP.set(stop);
    Ok(())
}

/// Chains a hook that records the panic and wakes the main thread.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        PANICKED.store(true, Ordering::SeqCst);
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), Signal::SIGUSR1);
    }));
}

/// Waits until a stop signal, a worker panic, or `deadline_reached()`
/// returns true (checked every 100 ms).
///
/// Panics if [`install_stop_signals`] was not called.
pub fn wait_for_stop(deadline_reached: impl Fn() -> bool) -> Stop {
    let stop = STOP
        .get()
        .expect("install_stop_signals() runs first in main");
    loop {
        if PANICKED.load(Ordering::SeqCst) {
            return Stop::WorkerPanicked;
        }
        if deadline_reached() {
            return Stop::Duration;
        }
        match stop.wait_timeout(DEADLINE_CHECK) {
            Some(SIGUSR1) => return Stop::WorkerPanicked,
            Some(s) => return Stop::Signal(s),
            None => {}
        }
    }
}
