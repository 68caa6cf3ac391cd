//! Stop signals for long-running binaries (the link emulator, the datapath
//! daemon, the algorithm daemons), via signal-hook.
//!
//! [`StopSignals::install`] registers, for each signal, two async-signal-
//! safe actions: record the signal number in an atomic, then write a byte
//! to a socket pair. The main thread checks [`StopSignals::received`] in its
//! loop, or sleeps in [`StopSignals::wait_timeout`] until a signal or the
//! timeout. Signals are not blocked: any thread may take one, the actions
//! only touch the atomic and the socket. Handlers stay installed for the
//! life of the process (signal-hook does not restore the default action).

use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

/// The stop signals a process has asked for, and the last one received.
pub struct StopSignals {
    /// Read end: readable once a registered signal arrived.
    wake: UnixStream,
    /// Number of the last signal received, 0 if none.
    last: Arc<AtomicUsize>,
}

impl StopSignals {
    /// Installs handlers for `signals` (e.g. `&[SIGINT, SIGTERM]`).
    ///
    /// Errors: the socket pair or a handler cannot be created. Panics (in
    /// signal-hook) on signals that must not be handled (SIGKILL, SIGSTOP,
    /// SIGSEGV, ...).
    pub fn install(signals: &[i32]) -> io::Result<Self> {
        let (wake, notify) = UnixStream::pair()?;
        notify.set_nonblocking(true)?;
        let last = Arc::new(AtomicUsize::new(0));
        for &sig in signals {
            // Registration order is execution order: the number is stored
            // before the waiter is woken.
            signal_hook::flag::register_usize(sig, last.clone(), sig as usize)?;
            signal_hook::low_level::pipe::register(sig, notify.try_clone()?)?;
        }
        Ok(StopSignals { wake, last })
    }

    /// The last stop signal received so far, if any (does not block; stays
    /// set once a signal came).
    pub fn received(&self) -> Option<i32> {
        match self.last.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s as i32),
        }
    }

    /// Waits until a stop signal arrives (returns it) or `timeout` passes
    /// (returns None unless one came meanwhile).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 64];
        while self.received().is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            // A zero read timeout would mean "block forever": left > 0 here.
            if self.wake.set_read_timeout(Some(left)).is_err() {
                break;
            }
            // Data (a signal), timeout or EINTR: the loop condition decides.
            let _ = (&self.wake).read(&mut buf);
        }
        self.received()
    }

    /// Blocks until the next delivery of a registered signal (one wakeup
    /// per delivery, so a second Ctrl-C is seen as such) and returns the
    /// last signal received. For a dedicated signal thread; do not mix with
    /// [`StopSignals::wait_timeout`], which consumes pending wakeups.
    ///
    /// Errors: the wake-up socket failed (not expected while `self` lives).
    pub fn next(&self) -> io::Result<i32> {
        self.wake.set_read_timeout(None)?;
        let mut byte = [0u8; 1];
        (&self.wake).read_exact(&mut byte)?;
        Ok(self
            .received()
            .expect("a wakeup is written after the signal number"))
    }
}

/// Readable when a stop signal has arrived, for poll(2)/epoll loops.
impl AsRawFd for StopSignals {
    fn as_raw_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: handlers are process-wide, and SIGUSR2 is used by no other test.
    #[test]
    fn records_and_wakes_on_a_registered_signal_and_times_out_otherwise() {
        let stop = StopSignals::install(&[SIGUSR2]).unwrap();
        assert_eq!(stop.received(), None);
        let t0 = Instant::now();
        assert_eq!(stop.wait_timeout(Duration::from_millis(100)), None);
        assert!(
            t0.elapsed() >= Duration::from_millis(100),
            "returned early: {:?}",
            t0.elapsed()
        );

        let raiser = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            signal_hook::low_level::raise(SIGUSR2).unwrap();
        });
        let t0 = Instant::now();
        assert_eq!(stop.wait_timeout(Duration::from_secs(10)), Some(SIGUSR2));
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "woke only after {:?}",
            t0.elapsed()
        );
        raiser.join().unwrap();
        assert_eq!(stop.received(), Some(SIGUSR2), "stays set");

        // next(): one return per delivery.
        let stop = Arc::new(stop);
        let waiter = {
            let stop = stop.clone();
            std::thread::spawn(move || (stop.next().unwrap(), stop.next().unwrap()))
        };
        signal_hook::low_level::raise(SIGUSR2).unwrap();
        signal_hook::low_level::raise(SIGUSR2).unwrap();
        assert_eq!(waiter.join().unwrap(), (SIGUSR2, SIGUSR2));
    }
}
