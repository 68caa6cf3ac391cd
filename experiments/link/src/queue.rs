//! mm-link's delivery-opportunity link, in pure logic (no I/O, no clock).
//!
//! Semantics follow mahimahi's `LinkQueue` (src/frontend/link_queue.cc):
//! * the trace gives opportunity times (ms after time 0), looping with
//!   period = last timestamp; each opportunity can carry 1504 bytes
//!   (1500 + 4-byte TUN header, the unit all sizes here use);
//! * bytes are packed like mahimahi: an opportunity serves the
//!   head-of-line packet; if bytes of the opportunity are left after the
//!   packet completes, they go to the next queued packet; a packet larger
//!   than what is left stays "in transit" and continues in the next
//!   opportunity; bytes unused when the queue runs empty are lost;
//! * before an arrival is enqueued, all opportunities up to and including
//!   its millisecond are used ("rationalize"), so a packet arriving at ms t
//!   leaves at the first opportunity after t at the earliest;
//! * droptail: the packet in transit is outside the queue; an arrival is
//!   dropped if the queue would exceed its packet or byte limit;
//! * played once (mm-link `--once`): after the trace's last opportunity (at
//!   its last timestamp) the link is finished: nothing is delivered any
//!   more and arrivals are neither queued nor logged (mm-link stops there).
//!
//! No opportunity pattern can make this panic: a zero-capacity stretch is
//! just a long time to the next opportunity (rattan 0.1.1's BwReplay cell
//! panics there, stack-rs/rattan#194).

use std::collections::VecDeque;
use std::sync::Arc;

/// Bytes one delivery opportunity carries (mahimahi's PACKET_SIZE).
pub const OPPORTUNITY_BYTES: u32 = 1504;

/// A packet's flow key for per-flow accounting: the TCP/UDP port that
/// names its flow (see `flowkey`), 0 when it has none.
pub type FlowKey = u16;

/// Receives every link event; times are ms since time 0. Packet events carry
/// the packet's [`FlowKey`], so a sink can attribute each to its flow.
pub trait EventSink {
    fn arrival(&mut self, t_ms: u64, size: u32, key: FlowKey);
    fn departure(&mut self, t_ms: u64, size: u32, delay_ms: u64, key: FlowKey);
    fn opportunity(&mut self, t_ms: u64);
    fn drop(&mut self, t_ms: u64, packets: u32, bytes: u64, key: FlowKey);
}

/// Discards events (links without a log).
pub struct NullSink;

impl EventSink for NullSink {
    fn arrival(&mut self, _: u64, _: u32, _: FlowKey) {}
    fn departure(&mut self, _: u64, _: u32, _: u64, _: FlowKey) {}
    fn opportunity(&mut self, _: u64) {}
    fn drop(&mut self, _: u64, _: u32, _: u64, _: FlowKey) {}
}

/// Droptail limit, counting only packets waiting (not the one in transit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    Packets(u64),
    Bytes(u64),
    Infinite,
}

impl QueueLimit {
    /// mahimahi's `# queue:` description.
    pub fn describe(&self) -> String {
        match self {
            QueueLimit::Packets(n) => format!("droptail [packets={n}]"),
            QueueLimit::Bytes(b) => format!("droptail [bytes={b}]"),
            QueueLimit::Infinite => "infinite".to_string(),
        }
    }

    fn admits(&self, queued_packets: usize, queued_bytes: u64, size: u32) -> bool {
        match *self {
            QueueLimit::Packets(n) => (queued_packets as u64) < n,
            QueueLimit::Bytes(b) => queued_bytes + size as u64 <= b,
            QueueLimit::Infinite => true,
        }
    }
}

struct Queued<T> {
    item: T,
    size: u32,
    arrival_ms: u64,
    key: FlowKey,
}

/// A delivered item and its departure time (ms since time 0).
pub struct Delivered<T> {
    pub item: T,
    pub departure_ms: u64,
}

/// The emulated link: a droptail queue drained by trace opportunities.
pub struct LinkQueue<T> {
    schedule: Arc<[u64]>,
    period_ms: u64,
    next_index: usize,
    cycle_start_ms: u64,
    queue: VecDeque<Queued<T>>,
    queued_bytes: u64,
    in_transit: Option<(Queued<T>, u32)>,
    limit: QueueLimit,
    last_ms: u64,
    once: bool,
    finished: bool,
}

impl<T> LinkQueue<T> {
    /// `schedule`: validated trace timestamps (non-empty, non-decreasing,
    /// last > 0; see ccplab_traces::Trace).
    pub fn new(schedule: Arc<[u64]>, limit: QueueLimit) -> Self {
        let period_ms = *schedule.last().expect("trace is non-empty");
        assert!(period_ms > 0, "trace period must be > 0");
        Self {
            schedule,
            period_ms,
            next_index: 0,
            cycle_start_ms: 0,
            queue: VecDeque::new(),
            queued_bytes: 0,
            in_transit: None,
            limit,
            last_ms: 0,
            once: false,
            finished: false,
        }
    }

    /// Plays the trace once instead of looping (mm-link `--once`).
    pub fn once(mut self, once: bool) -> Self {
        self.once = once;
        self
    }

    /// Whether a once-played trace has used its last opportunity.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Time of the next unused opportunity, ms since time 0; None once a
    /// trace played once is finished.
    pub fn next_opportunity_ms(&self) -> Option<u64> {
        (!self.finished).then(|| self.cycle_start_ms + self.schedule[self.next_index])
    }

    /// Packets waiting (excluding the one in transit).
    #[cfg(test)]
    pub fn queued_packets(&self) -> usize {
        self.queue.len()
    }

    fn advance_opportunity(&mut self) {
        self.next_index += 1;
        if self.next_index == self.schedule.len() {
            self.next_index = 0;
            self.cycle_start_ms += self.period_ms;
            self.finished = self.once;
        }
    }

    /// Uses every opportunity at or before `now_ms`, pushing completed
    /// packets to `out` in departure order.
    pub fn rationalize(
        &mut self,
        now_ms: u64,
        sink: &mut dyn EventSink,
        out: &mut VecDeque<Delivered<T>>,
    ) {
        self.last_ms = self.last_ms.max(now_ms);
        while let Some(t) = self.next_opportunity_ms().filter(|&t| t <= now_ms) {
            self.advance_opportunity();
            sink.opportunity(t);
            let mut left = OPPORTUNITY_BYTES;
            while left > 0 {
                if self.in_transit.is_none() {
                    let Some(p) = self.queue.pop_front() else {
                        break;
                    };
                    self.queued_bytes -= p.size as u64;
                    let size = p.size;
                    self.in_transit = Some((p, size));
                }
                let (_, remaining) = self.in_transit.as_mut().expect("set above");
                let used = left.min(*remaining);
                *remaining -= used;
                left -= used;
                if *remaining == 0 {
                    let (p, _) = self.in_transit.take().expect("set above");
                    sink.departure(t, p.size, t - p.arrival_ms, p.key);
                    out.push_back(Delivered {
                        item: p.item,
                        departure_ms: t,
                    });
                }
            }
        }
    }

    /// A packet of `size` bytes (IP length + 4) of flow `key` arrives at
    /// `now_ms`. Opportunities up to `now_ms` are used first; the arrival is
    /// logged, then the packet is queued or dropped (droptail). Times earlier
    /// than the last processed ms are raised to it, so the log never goes
    /// back. Returns false if dropped, or unlogged and discarded when a
    /// trace played once is finished.
    pub fn arrive(
        &mut self,
        now_ms: u64,
        item: T,
        size: u32,
        key: FlowKey,
        sink: &mut dyn EventSink,
        out: &mut VecDeque<Delivered<T>>,
    ) -> bool {
        let now_ms = now_ms.max(self.last_ms);
        self.rationalize(now_ms, sink, out);
        if self.finished {
            return false;
        }
        sink.arrival(now_ms, size, key);
        if self.limit.admits(self.queue.len(), self.queued_bytes, size) {
            self.queued_bytes += size as u64;
            self.queue.push_back(Queued {
                item,
                size,
                arrival_ms: now_ms,
                key,
            });
            true
        } else {
            sink.drop(now_ms, 1, size as u64, key);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Rec(Vec<String>, Vec<FlowKey>);
    impl EventSink for Rec {
        fn arrival(&mut self, t: u64, s: u32, k: FlowKey) {
            self.0.push(format!("{t} + {s}"));
            self.1.push(k);
        }
        fn departure(&mut self, t: u64, s: u32, d: u64, k: FlowKey) {
            self.0.push(format!("{t} - {s} {d}"));
            self.1.push(k);
        }
        fn opportunity(&mut self, t: u64) {
            self.0.push(format!("{t} # 1504"));
        }
        fn drop(&mut self, t: u64, n: u32, b: u64, k: FlowKey) {
            self.0.push(format!("{t} d {n} {b}"));
            self.1.push(k);
        }
    }

    fn q(trace: &[u64], limit: QueueLimit) -> LinkQueue<u32> {
        LinkQueue::new(trace.to_vec().into(), limit)
    }

    #[test]
    fn constant_link_one_packet_per_ms() {
        let mut l = q(&[1], QueueLimit::Infinite);
        let (mut s, mut out) = (Rec::default(), VecDeque::new());
        l.arrive(0, 1, 1504, 0, &mut s, &mut out);
        l.arrive(0, 2, 1504, 0, &mut s, &mut out);
        l.rationalize(3, &mut s, &mut out);
        assert_eq!(
            s.0,
            [
                "0 + 1504",
                "0 + 1504",
                "1 # 1504",
                "1 - 1504 1",
                "2 # 1504",
                "2 - 1504 2",
                "3 # 1504"
            ]
        );
        let d: Vec<_> = out.iter().map(|d| (d.item, d.departure_ms)).collect();
        assert_eq!(d, [(1, 1), (2, 2)]);
    }

    #[test]
    fn arrival_waits_for_next_opportunity_after_its_ms() {
        let mut l = q(&[1], QueueLimit::Infinite);
        let (mut s, mut out) = (Rec::default(), VecDeque::new());
        l.arrive(5, 1, 100, 0, &mut s, &mut out);
        l.rationalize(6, &mut s, &mut out);
        assert_eq!(out[0].departure_ms, 6);
        assert!(s.0.contains(&"6 - 100 1".to_string()));
    }

    #[test]
    fn small_packets_share_an_opportunity_and_big_ones_span() {
        let mut l = q(&[10], QueueLimit::Infinite);
        let (mut s, mut out) = (Rec::default(), VecDeque::new());
        for i in 0..3 {
            l.arrive(0, i, 500, 0, &mut s, &mut out); // 3 x 500 <= 1504
        }
        l.arrive(0, 9, 1504, 0, &mut s, &mut out); // needs 1500 of the next + 4 of this
        l.rationalize(10, &mut s, &mut out);
        assert_eq!(out.len(), 3);
        l.rationalize(20, &mut s, &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!(out[3].departure_ms, 20);
    }

    #[test]
    fn zero_capacity_gap_and_loop() {
        // No opportunity until 2000 ms, period 2000: nothing leaves before.
        let mut l = q(&[2000], QueueLimit::Infinite);
        let (mut s, mut out) = (Rec::default(), VecDeque::new());
        l.arrive(3, 7, 1504, 0, &mut s, &mut out);
        l.rationalize(1999, &mut s, &mut out);
        assert!(out.is_empty());
        l.rationalize(2000, &mut s, &mut out);
        assert_eq!(out[0].departure_ms, 2000);
        assert_eq!(
            l.next_opportunity_ms(),
            Some(4000),
            "loops with period 2000"
        );
    }

    #[test]
    fn droptail_packets_and_bytes() {
        let mut l = q(&[1000], QueueLimit::Packets(2));
        let (mut s, mut out) = (Rec::default(), VecDeque::new());
        assert!(l.arrive(0, 1, 1504, 0, &mut s, &mut out));
        assert!(l.arrive(0, 2, 1504, 0, &mut s, &mut out));
        assert!(
            !l.arrive(1, 3, 1504, 0, &mut s, &mut out),
            "droptail packet limit broken: a 3rd packet was admitted to a full 2-packet queue"
        );
        assert_eq!(s.0.last().unwrap(), "1 d 1 1504", "the drop is logged");
        let mut l = q(&[1000], QueueLimit::Bytes(3000));
        assert!(l.arrive(0, 1, 1504, 0, &mut s, &mut out));
        assert!(
            !l.arrive(0, 2, 1504, 0, &mut s, &mut out),
            "droptail byte limit broken: 3008 bytes admitted to a 3000-byte queue"
        );
        assert!(
            l.arrive(0, 3, 1000, 0, &mut s, &mut out),
            "a packet that fits the byte limit is admitted"
        );
    }

    #[test]
    fn in_transit_packet_is_outside_the_queue() {
        let mut l = q(&[1, 1000], QueueLimit::Packets(1));
        let (mut s, mut out) = (Rec::default(), VecDeque::new());
        l.arrive(0, 1, 1504, 0, &mut s, &mut out);
        assert!(
            !l.arrive(0, 2, 3000, 0, &mut s, &mut out),
            "droptail packet limit broken: a 2nd packet was admitted to a full 1-packet queue"
        );
        l.rationalize(1, &mut s, &mut out); // 1 leaves
        assert!(l.arrive(1, 3, 3000, 0, &mut s, &mut out));
        l.rationalize(1000, &mut s, &mut out); // 3 in transit (1504 of 3000)
        assert_eq!(l.queued_packets(), 0);
        assert!(
            l.arrive(1000, 4, 100, 0, &mut s, &mut out),
            "queue is free while 3 is in transit"
        );
    }

    #[test]
    fn every_packet_event_carries_its_flow_key() {
        let mut l = q(&[1, 1000], QueueLimit::Packets(2));
        let (mut s, mut out) = (Rec::default(), VecDeque::new());
        l.arrive(0, 1, 1504, 5201, &mut s, &mut out); // leaves at 1
        l.arrive(0, 2, 1504, 5202, &mut s, &mut out); // queued
        l.arrive(0, 3, 1504, 5203, &mut s, &mut out); // dropped: queue full
        l.rationalize(1000, &mut s, &mut out);
        let packet_events: Vec<&String> = s.0.iter().filter(|e| !e.contains('#')).collect();
        assert_eq!(
            packet_events,
            [
                "0 + 1504",
                "0 + 1504",
                "0 + 1504",
                "0 d 1 1504",
                "1 - 1504 1",
                "1000 - 1504 1000"
            ]
        );
        assert_eq!(
            s.1,
            [5201, 5202, 5203, 5203, 5201, 5202],
            "keys follow their packets"
        );
    }

    #[test]
    fn once_delivers_nothing_after_the_trace_end() {
        // Opportunities at 1, 2 and 3 ms, played once: 3 packets can leave,
        // the 3 ms one included; a 4th waits forever and later arrivals are
        // discarded unlogged, as mm-link --once ends at the trace's end.
        let mut l = q(&[1, 2, 3], QueueLimit::Infinite).once(true);
        let (mut s, mut out) = (Rec::default(), VecDeque::new());
        for i in 0..4 {
            l.arrive(0, i, 1504, 0, &mut s, &mut out);
        }
        assert!(!l.finished());
        l.rationalize(3, &mut s, &mut out);
        assert!(
            l.finished(),
            "the last opportunity (3 ms) ends a trace played once"
        );
        assert_eq!(l.next_opportunity_ms(), None);
        l.rationalize(1_000, &mut s, &mut out);
        let times: Vec<_> = out.iter().map(|d| d.departure_ms).collect();
        assert_eq!(
            times,
            [1, 2, 3],
            "no delivery after the trace's end (looping would deliver at 4)"
        );
        let before = s.0.len();
        assert!(!l.arrive(1_000, 9, 100, 0, &mut s, &mut out));
        assert_eq!(s.0.len(), before, "nothing is logged after the trace's end");
        assert!(s
            .0
            .iter()
            .all(|e| e.split(' ').next().unwrap().parse::<u64>().unwrap() <= 3));
        // The same trace looping keeps delivering.
        let mut l = q(&[1, 2, 3], QueueLimit::Infinite);
        let (mut s, mut out) = (Rec::default(), VecDeque::new());
        for i in 0..4 {
            l.arrive(0, i, 1504, 0, &mut s, &mut out);
        }
        l.rationalize(4, &mut s, &mut out);
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn log_never_goes_back_in_time() {
        let mut l = q(&[1], QueueLimit::Infinite);
        let (mut s, mut out) = (Rec::default(), VecDeque::new());
        l.rationalize(10, &mut s, &mut out);
        l.arrive(8, 1, 100, 0, &mut s, &mut out);
        assert!(s.0.contains(&"10 + 100".to_string()));
    }
}
