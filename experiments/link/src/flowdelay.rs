//! Extra one-way delay per flow on the ACK path (`--ack-delay PORT=MS`), for
//! RTT-fairness experiments: flows that share the bottleneck but not the
//! base RTT (RFC 5166 s. 2.3.2; flent's rtt_fair tests).
//!
//! The delay is added on the downlink, after the link's common one-way
//! delay, to the packets coming back from receiver port PORT (the flow's
//! ACKs; `flowkey`), so the uplink log keeps the times at which the senders
//! offered their packets. Packets of one delay class leave in order; classes
//! overtake each other as their delays dictate. Packets of ports without an
//! extra delay pass at once.

use std::{collections::VecDeque, time::Duration};

#[cfg(feature = "rattan")]
use async_trait::async_trait;
#[cfg(feature = "rattan")]
use rattan_core::{cells::Egress, error::Error};
#[cfg(feature = "rattan")]
use tokio::sync::mpsc;
use tokio::time::Instant;

#[cfg(feature = "rattan")]
use crate::{cell::ChannelCell, packet::RattanPacket, timer::LazyTimer};
use crate::{
    flowkey::{flow_key, PortSide},
    packet::Packet,
    queue::FlowKey,
};

/// One FIFO of packets that share an extra delay: (due time, packet).
struct DelayClass<P> {
    extra: Duration,
    waiting: VecDeque<(Instant, P)>,
}

/// The per-flow delays without I/O: packets go in with
/// [`FlowDelays::admit`] and leave, when due, from [`FlowDelays::pop_due`].
pub struct FlowDelays<P> {
    /// Class 0 has no extra delay.
    classes: Vec<DelayClass<P>>,
    /// (port, class index) of every port with an extra delay.
    class_of: Vec<(FlowKey, usize)>,
}

impl<P: Packet> FlowDelays<P> {
    /// `extra`: (receiver port, extra one-way delay) pairs, ports distinct.
    pub fn new(extra: &[(FlowKey, Duration)]) -> Self {
        let mut classes = vec![DelayClass {
            extra: Duration::ZERO,
            waiting: VecDeque::new(),
        }];
        let mut class_of = Vec::new();
        for &(port, delay) in extra {
            let class = match classes.iter().position(|c| c.extra == delay) {
                Some(k) => k,
                None => {
                    classes.push(DelayClass {
                        extra: delay,
                        waiting: VecDeque::new(),
                    });
                    classes.len() - 1
                }
            };
            class_of.push((port, class));
        }
        Self { classes, class_of }
    }

    fn classify(&self, p: &P) -> usize {
        let key = flow_key(p.as_slice(), PortSide::Source);
        self.class_of
            .iter()
            .find(|(port, _)| *port == key)
            .map_or(0, |(_, class)| *class)
    }

    /// Queues a packet behind the others of its class; it is due at its
    /// timestamp + its port's extra delay.
    pub fn admit(&mut self, p: P) {
        let class = self.classify(&p);
        let due = p.get_timestamp() + self.classes[class].extra;
        self.classes[class].waiting.push_back((due, p));
    }

    /// The class whose head is due first, and when.
    fn earliest(&self) -> Option<(usize, Instant)> {
        self.classes
            .iter()
            .enumerate()
            .filter_map(|(k, c)| c.waiting.front().map(|(due, _)| (k, *due)))
            .min_by_key(|(_, due)| *due)
    }

    /// When the next packet is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.earliest().map(|(_, due)| due)
    }

    /// The packet due first if it is due at `now`, its timestamp set to its
    /// due time.
    pub fn pop_due(&mut self, now: Instant) -> Option<P> {
        let (class, due) = self.earliest().filter(|(_, due)| *due <= now)?;
        let (_, mut p) = self.classes[class].waiting.pop_front()?;
        p.delay_until(due);
        Some(p)
    }
}

/// The rattan egress of a [`FlowDelayCell`].
#[cfg(feature = "rattan")]
pub struct FlowDelayEgress<P: RattanPacket> {
    rx: mpsc::UnboundedReceiver<P>,
    delays: FlowDelays<P>,
    timer: LazyTimer,
}

#[cfg(feature = "rattan")]
#[async_trait]
impl<P: RattanPacket> Egress<P> for FlowDelayEgress<P> {
    async fn dequeue(&mut self) -> Option<P> {
        loop {
            while let Ok(p) = self.rx.try_recv() {
                self.delays.admit(p);
            }
            if let Some(p) = self.delays.pop_due(Instant::now()) {
                return Some(p);
            }
            let next = self.delays.next_due();
            if let Some(due) = next {
                self.timer.arm(due).expect("timerfd_settime on our own timerfd");
            }
            tokio::select! {
                biased;
                p = self.rx.recv() => self.delays.admit(p?),
                r = self.timer.fired(), if next.is_some() => r.expect("read of our own timerfd"),
            }
        }
    }
}

/// The per-flow ACK delay.
#[cfg(feature = "rattan")]
pub type FlowDelayCell<P> = ChannelCell<P, FlowDelayEgress<P>>;

#[cfg(feature = "rattan")]
impl<P: RattanPacket> ChannelCell<P, FlowDelayEgress<P>> {
    /// `extra`: (receiver port, extra one-way delay) pairs, ports distinct.
    /// Must be called inside the rattan runtime (the timer registers with
    /// its reactor).
    pub fn new(extra: &[(FlowKey, Duration)]) -> Result<Self, Error> {
        let delays = FlowDelays::new(extra);
        Self::with_egress("flow delay cell", |rx| {
            Ok(FlowDelayEgress {
                rx,
                delays,
                timer: LazyTimer::new()?,
            })
        })
    }
}

/// Parses one `--ack-delay PORT=MS` value.
pub fn parse_ack_delay(text: &str) -> Result<(FlowKey, Duration), String> {
    let (port, ms) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected PORT=MS, e.g. 5202=40"))?;
    let port: FlowKey = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{text:?}: port {port:?} is not a number in 1..=65535"))?;
    let ms: u64 = ms
        .parse()
        .ok()
        .filter(|m| *m <= 10_000)
        .ok_or_else(|| format!("{text:?}: delay {ms:?} is not a whole number of ms in 0..=10000"))?;
    Ok((port, Duration::from_millis(ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_delay_values() {
        assert_eq!(parse_ack_delay("5202=40"), Ok((5202, Duration::from_millis(40))));
        assert!(parse_ack_delay("5202").unwrap_err().contains("PORT=MS"));
        assert!(parse_ack_delay("0=4").unwrap_err().contains("port"));
        assert!(parse_ack_delay("70000=4").unwrap_err().contains("port"));
        assert!(parse_ack_delay("5202=-1").unwrap_err().contains("delay"));
        assert!(parse_ack_delay("5202=20000").unwrap_err().contains("delay"));
    }
}
