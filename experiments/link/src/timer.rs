//! A timerfd timer that is re-armed only when its deadline changes.
//!
//! rattan's `Timer::sleep_until` sets the timerfd on every call. A cell that
//! waits in a `select!` between "a packet arrived" and "the next deadline"
//! builds a new sleep each time round, so at line rate that was one
//! `timerfd_settime` per packet. Here the kernel timer keeps its deadline
//! across calls; [`LazyTimer::arm`] touches it only for a new deadline, and
//! [`LazyTimer::fired`] is cancel-safe (dropping it loses nothing: the
//! expiry stays readable on the descriptor).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use nix::sys::{
    time::TimeSpec,
    timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags},
};
use rattan_core::error::Error;
use tokio::{io::unix::AsyncFd, time::Instant};

struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// A one-shot CLOCK_MONOTONIC timer registered with the current tokio
/// runtime's reactor.
pub struct LazyTimer {
    fd: AsyncFd<Fd>,
    armed: Option<Instant>,
}

impl LazyTimer {
    /// Must be called inside a tokio runtime with I/O enabled.
    pub fn new() -> Result<Self, Error> {
        let fd = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC)
            .map_err(std::io::Error::from)?;
        // SAFETY: the timerfd is owned by the AsyncFd and closed only when
        // it is dropped (deregistered first), so the reactor never sees a
        // reused descriptor.
        let fd = unsafe { AsyncFd::register(Fd(fd)) }.map_err(std::io::Error::from)?;
        Ok(Self {
            fd,
            armed: None,
        })
    }

    /// The deadline the timer is armed for, if any.
    #[cfg(test)]
    pub fn armed(&self) -> Option<Instant> {
        self.armed
    }

    /// Makes the timer fire at `at` (at once if `at` has passed); no system
    /// call when it is already armed for `at`.
    pub fn arm(&mut self, at: Instant) -> std::io::Result<()> {
        if self.armed == Some(at) {
            return Ok(());
        }
        // a zero expiration would disarm the timerfd: 1 ns means "now"
        let left = at
            .saturating_duration_since(Instant::now())
            .max(std::time::Duration::from_nanos(1));
        self.fd
            .get_ref()
            .0
            .set(Expiration::OneShot(TimeSpec::from_duration(left)), TimerSetTimeFlags::empty())
            .map_err(std::io::Error::from)?;
        self.armed = Some(at);
        Ok(())
    }

    /// Waits until the armed deadline has passed, then leaves the timer
    /// disarmed. Never completes while nothing is armed.
    pub async fn fired(&mut self) -> std::io::Result<()> {
        if self.armed.is_none() {
            std::future::pending::<()>().await;
        }
        let mut buf = [0u8; 8];
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| nix::unistd::read(fd.get_ref().0.as_fd(), &mut buf).map_err(std::io::Error::from)) {
                Ok(Ok(_)) => {
                    self.armed = None;
                    return Ok(());
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn fires_at_the_deadline_and_then_disarms() {
        runtime().block_on(async {
            let mut t = LazyTimer::new().unwrap();
            let start = Instant::now();
            t.arm(start + Duration::from_millis(20)).unwrap();
            t.fired().await.unwrap();
            assert!(start.elapsed() >= Duration::from_millis(20), "{:?}", start.elapsed());
            assert_eq!(t.armed(), None);
        });
    }

    #[test]
    fn a_past_deadline_fires_at_once_and_rearming_moves_it() {
        runtime().block_on(async {
            let mut t = LazyTimer::new().unwrap();
            let start = Instant::now();
            t.arm(start - Duration::from_millis(5)).unwrap();
            t.fired().await.unwrap();
            assert!(start.elapsed() < Duration::from_millis(50));
            // armed far away, then moved close: the close one counts
            t.arm(start + Duration::from_secs(60)).unwrap();
            t.arm(start + Duration::from_millis(10)).unwrap();
            tokio::time::timeout(Duration::from_secs(5), t.fired()).await.expect("moved deadline").unwrap();
        });
    }

    #[test]
    fn a_dropped_wait_loses_no_expiry_and_an_unarmed_timer_never_fires() {
        runtime().block_on(async {
            let mut t = LazyTimer::new().unwrap();
            assert!(tokio::time::timeout(Duration::from_millis(30), t.fired()).await.is_err(), "unarmed");
            t.arm(Instant::now() + Duration::from_millis(10)).unwrap();
            // give up waiting before the deadline (as a select! whose other branch won)
            assert!(tokio::time::timeout(Duration::from_millis(1), t.fired()).await.is_err());
            tokio::time::sleep(Duration::from_millis(20)).await;
            tokio::time::timeout(Duration::from_millis(5), t.fired()).await.expect("expiry kept").unwrap();
        });
    }
}
