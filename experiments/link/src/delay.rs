//! The fixed one-way delay of each direction.
//!
//! Same contract as rattan's `DelayCell`: a packet leaves at its logical
//! time + the delay, never before the packet ahead of it (order is kept),
//! and carries that logical departure time on to the next cell. The
//! difference is the cost: rattan's cell arms its timer for every packet
//! (a `timerfd_settime`, a wakeup and a `read` each), which at line rate
//! on the ACK path, whose packets all have distinct times, was three
//! system calls per packet. This one keeps the waiting packets in a FIFO,
//! arms its [`LazyTimer`] for the head only when the head changes, and at
//! each expiry hands out every packet that is due.

use std::{collections::VecDeque, time::Duration};

#[cfg(feature = "rattan")]
use async_trait::async_trait;
#[cfg(feature = "rattan")]
use rattan_core::{cells::Egress, error::Error};
#[cfg(feature = "rattan")]
use tokio::sync::mpsc;
use tokio::time::Instant;

#[cfg(feature = "rattan")]
use crate::{
    cell::ChannelCell,
    packet::{Packet, RattanPacket},
    timer::LazyTimer,
};

/// Packets waiting out a fixed delay, in order, with their due times.
pub struct DelayLine<P> {
    delay: Duration,
    waiting: VecDeque<(Instant, P)>,
    latest: Option<Instant>,
}

impl<P> DelayLine<P> {
    pub fn new(delay: Duration) -> Self {
        Self {
            delay,
            waiting: VecDeque::new(),
            latest: None,
        }
    }

    /// Queues a packet that arrived (logically) at `at`; it is due at
    /// `at + delay`, or when the packet ahead of it is, if later.
    pub fn admit(&mut self, at: Instant, p: P) {
        let due = self.latest.map_or(at + self.delay, |l| l.max(at + self.delay));
        self.latest = Some(due);
        self.waiting.push_back((due, p));
    }

    /// When the head is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.waiting.front().map(|(due, _)| *due)
    }

    /// The head and its due time, if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, P)> {
        if self.next_due()? <= now {
            self.waiting.pop_front()
        } else {
            None
        }
    }
}

/// The rattan egress of a [`DelayCell`]: a [`DelayLine`] fed by a channel.
#[cfg(feature = "rattan")]
pub struct DelayEgress<P: RattanPacket> {
    rx: mpsc::UnboundedReceiver<P>,
    line: DelayLine<P>,
    timer: LazyTimer,
}

#[cfg(feature = "rattan")]
#[async_trait]
impl<P: RattanPacket> Egress<P> for DelayEgress<P> {
    async fn dequeue(&mut self) -> Option<P> {
        loop {
            // take everything already sent to us before deciding to wait
            while let Ok(p) = self.rx.try_recv() {
                self.line.admit(Packet::get_timestamp(&p), p);
            }
            if let Some((due, mut p)) = self.line.pop_due(Instant::now()) {
                Packet::delay_until(&mut p, due);
                return Some(p);
            }
            let next = self.line.next_due();
            if let Some(due) = next {
                self.timer.arm(due).expect("timerfd_settime on our own timerfd");
            }
            tokio::select! {
                biased;
                p = self.rx.recv() => {
                    let p = p?;
                    self.line.admit(Packet::get_timestamp(&p), p);
                }
                r = self.timer.fired(), if next.is_some() => r.expect("read of our own timerfd"),
            }
        }
    }
}

/// A fixed one-way delay.
#[cfg(feature = "rattan")]
pub type DelayCell<P> = ChannelCell<P, DelayEgress<P>>;

#[cfg(feature = "rattan")]
impl<P: RattanPacket> ChannelCell<P, DelayEgress<P>> {
    /// Must be called inside the rattan runtime (the timer registers with
    /// its reactor).
    pub fn new(delay: Duration) -> Result<Self, Error> {
        Self::with_egress("delay cell", |rx| {
            Ok(DelayEgress {
                rx,
                line: DelayLine::new(delay),
                timer: LazyTimer::new()?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_leave_after_the_delay_in_order() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut line = DelayLine::new(ms(10));
        line.admit(t0, 1);
        line.admit(t0 + ms(1), 2);
        // logically earlier than the one ahead of it: waits for it, keeps order
        line.admit(t0, 3);
        assert_eq!(line.next_due(), Some(t0 + ms(10)));
        assert_eq!(line.pop_due(t0 + ms(9)), None, "not due yet");
        assert_eq!(line.pop_due(t0 + ms(10)), Some((t0 + ms(10), 1)));
        assert_eq!(line.pop_due(t0 + ms(10)), None);
        // both due at once: handed out together, in order
        assert_eq!(line.pop_due(t0 + ms(20)), Some((t0 + ms(11), 2)));
        assert_eq!(line.pop_due(t0 + ms(20)), Some((t0 + ms(11), 3)));
        assert_eq!(line.next_due(), None);
    }

    #[cfg(feature = "rattan")]
    #[test]
    fn the_cell_delays_through_its_channel() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            use rattan_core::cells::{Cell, Ingress, StdPacket};
            let mut cell = DelayCell::<StdPacket>::new(Duration::from_millis(15)).unwrap();
            let ingress = cell.sender();
            let start = Instant::now();
            for k in 0..3u8 {
                let p = <StdPacket as rattan_core::cells::Packet>::from_raw_buffer(&[k; 60]);
                ingress.enqueue(p).unwrap();
            }
            let egress = cell.receiver();
            for k in 0..3u8 {
                let p = egress.dequeue().await.unwrap();
                assert_eq!(p.as_slice()[0], k, "order kept");
                assert!(start.elapsed() >= Duration::from_millis(15), "{:?}", start.elapsed());
                assert!(p.get_timestamp() >= start + Duration::from_millis(15));
            }
        });
    }
}
