//! Stop signals and worker panics, funnelled to the main thread.
//!
//! SIGINT, SIGTERM, SIGHUP and SIGUSR1 are blocked in every thread (the mask
//! is set before any thread is spawned and inherited); the main thread
//! collects them with sigtimedwait. A panic in any thread (e.g. a rattan
//! worker) raises SIGUSR1 so the main thread stops and cleans up. Child
//! processes get an empty mask (Rust's Command resets it).

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{SigSet, SigmaskHow, Signal};

static PANICKED: AtomicBool = AtomicBool::new(false);

/// Why the main loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Signal(i32),
    Duration,
    WorkerPanicked,
}

fn stop_set() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGUSR1,
    ] {
        set.add(s);
    }
    set
}

/// Blocks the stop signals in the calling thread (call first in main).
pub fn block_stop_signals() -> nix::Result<()> {
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stop_set()), None)
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

/// Waits (polling every 100 ms) until a stop signal, a worker panic, or
/// `deadline_reached()` returns true.
pub fn wait_for_stop(deadline_reached: impl Fn() -> bool) -> Stop {
    let set = stop_set();
    let timeout = libc::timespec {
        tv_sec: 0,
        tv_nsec: 100_000_000,
    };
    loop {
        if PANICKED.load(Ordering::SeqCst) {
            return Stop::WorkerPanicked;
        }
        if deadline_reached() {
            return Stop::Duration;
        }
        // SAFETY: valid sigset and timespec pointers; siginfo may be null.
        let sig = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &timeout) };
        match sig {
            s if s == libc::SIGUSR1 => return Stop::WorkerPanicked,
            s if s > 0 => return Stop::Signal(s),
            _ => {} // timeout or EINTR
        }
    }
}
