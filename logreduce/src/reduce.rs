//! A one-flow log's events reduced to per-millisecond sums as they are read.
//!
//! The figures are those of `transient.series.LogArrays` for a log whose
//! packets are all one flow's (`LogArrays.from_ms_sums`), each array in the
//! narrowest dtype that holds it exactly, as `transient.series.compact`
//! chooses it, so the cache this writes is the one the Python reader writes.
//! Every figure is a sum, maximum or minimum of whole numbers: exact in any
//! order. What this reducer does not hold exactly -- a time beyond 2**53 ms,
//! a delay of 2**24 ms or more, a per-ms sum beyond 2**32, a log spanning
//! more than 2**32 ms, a log without departures -- declines the log.

use crate::npz::Column;
use crate::parse::Event;

/// Times from 2**53 ms on are left to the event reader (float64 rounding in its figures).
const EXACT_MS: u64 = 1 << 53;
/// Delays from this many ms on are left to the event reader (float32 holds smaller whole delays exactly).
const DELAY_LIMIT: u64 = 1 << 24;
/// Longest span of event times (ms) held per ms.
const MAX_SPAN: i64 = 1 << 32;

/// One millisecond's sums, each a u32 (a per-ms sum beyond it declines the log): an array, so that a
/// window of them starts as zeroed memory the system hands out untouched.
type Ms = [u32; 8];
const ARR_N: usize = 0;
const ARR_B: usize = 1;
const DEP_N: usize = 2;
const DEP_B: usize = 3;
const OPP_B: usize = 4;
const DROP_P: usize = 5;
const DELAY_SUM: usize = 6;
/// the largest delay + 1 (0: no departure in this ms)
const PEAK1: usize = 7;

/// Values per ms from `lo` on, grown at either end as times arrive (any order). `fill` is all zero
/// bits, so new room is zeroed memory the system maps when first written.
struct Window<T: Copy> {
    lo: i64,
    v: Vec<T>,
    fill: T,
    /// the log's last time if known (room is made up to it at the first slot), and the most room made so
    hint: Option<(i64, usize)>,
}

impl<T: Copy> Window<T> {
    fn new(fill: T, hint: Option<(i64, usize)>) -> Self {
        Window { lo: 0, v: Vec::new(), fill, hint }
    }

    /// The slot of ms `t`, the window grown to hold it; None when the span would exceed `MAX_SPAN`.
    #[inline(always)]
    fn slot(&mut self, t: i64) -> Option<&mut T> {
        let k = t.wrapping_sub(self.lo) as u64;
        if k < self.v.len() as u64 {
            return Some(&mut self.v[k as usize]);
        }
        self.grow(t)?;
        let k = (t - self.lo) as usize;
        Some(&mut self.v[k])
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, t: i64) -> Option<()> {
        if self.v.is_empty() {
            self.lo = t;
            let room = match self.hint {
                Some((last, most)) if last > t => ((last - t + 1) as usize).min(most),
                _ => 0,
            };
            self.v = vec![self.fill; room.max(1 << 16)];
            return Some(());
        }
        let hi = self.lo + self.v.len() as i64;
        let (new_lo, new_hi) = (self.lo.min(t), hi.max(t + 1));
        if new_hi - new_lo > MAX_SPAN {
            return None;
        }
        let slack = (self.v.len() as i64 / 2).max(1 << 16);
        let (lo, hi) = if t < self.lo {
            ((t - slack).max(new_hi - MAX_SPAN), hi)
        } else {
            (self.lo, (t + 1 + slack).min(self.lo + MAX_SPAN))
        };
        let mut v = vec![self.fill; (hi - lo) as usize];
        let at = (self.lo - lo) as usize;
        v[at..at + self.v.len()].copy_from_slice(&self.v);
        self.v = v;
        self.lo = lo;
        Some(())
    }
}

/// The running reduction of a log's events.
pub struct Reducer {
    ms: Window<Ms>,
    /// per sending ms (departure time - delay): the smallest delay + 1 (0: none)
    sent: Window<u32>,
    delay_counts: Vec<u64>,
    data_min_bytes: u64,
    n_events: u64,
    first_event: Option<i64>,
    t_lo: i64,
    t_hi: i64,
    s_lo: i64,
    s_hi: i64,
    data: Option<(i64, i64)>,
    seen: [bool; 4],
}

/// The reduction of a whole log: the per-ms sums behind the cache's arrays, made one at a time
/// ([`Reduction::column`]: a big log's arrays need not all be in memory at once), and its header fields.
pub struct Reduction {
    ms: Vec<Ms>,
    ms_range: std::ops::Range<usize>,
    sent: Vec<u32>,
    sent_range: std::ops::Range<usize>,
    delay_counts: Vec<u64>,
    base_delay: u32,
    pub n_events: u64,
    pub first_ms: i64,
    pub first_event_ms: i64,
    pub has_packets: bool,
    pub sent_lo: i64,
    pub data_ms: Option<(i64, i64)>,
    /// numpy's name of the departures' delays' dtype (e.g. "|u1")
    pub delay_dtype: &'static str,
}

/// The cache's arrays, in the order it lists them (`transient.cache`).
pub const COLUMNS: [&str; 10] = [
    "arrival_count", "arrival_bytes", "departure_count", "departure_bytes", "opportunity_bytes", "drop_packets",
    "queueing", "peak_delay", "sent_min_delay", "delay_counts",
];

impl Reduction {
    /// Array `k` of [`COLUMNS`], in the narrowest dtype `transient.series.compact` picks.
    pub fn column(&self, k: usize) -> Column {
        let ms = &self.ms[self.ms_range.clone()];
        let n = ms.len();
        let field = |f: usize| Column::compact_ints(n, |i| ms[i][f] as i64);
        match COLUMNS[k] {
            "arrival_count" => field(ARR_N),
            "arrival_bytes" => field(ARR_B),
            "departure_count" => field(DEP_N),
            "departure_bytes" => field(DEP_B),
            "opportunity_bytes" => field(OPP_B),
            "drop_packets" => field(DROP_P),
            // per ms: the sum over its departures of (delay - the log's smallest delay)
            "queueing" => {
                let base = self.base_delay as i64;
                Column::compact_ints(n, |i| ms[i][DELAY_SUM] as i64 - ms[i][DEP_N] as i64 * base)
            }
            "peak_delay" => Column::compact_gappy(n, f32::NAN, |i| ms[i][PEAK1].checked_sub(1).map(i64::from)),
            "sent_min_delay" => {
                let sent = &self.sent[self.sent_range.clone()];
                Column::compact_gappy(sent.len(), f32::INFINITY, |i| sent[i].checked_sub(1).map(i64::from))
            }
            _ => Column::compact_ints(self.delay_counts.len(), |i| self.delay_counts[i] as i64),
        }
    }
}

impl Reducer {
    /// `data_min_bytes`: the smallest arrival that counts as the data flow's
    /// (`transient.timezero.FLOW_START_MIN_BYTES`).
    pub fn new(data_min_bytes: u64) -> Self {
        Self::with_hint(data_min_bytes, None)
    }

    /// As [`Reducer::new`], with a guess of the log's last time (ms) and the most ms to make room for at
    /// once: room up to it is made at the first event (the windows still grow past it as needed).
    pub fn with_hint(data_min_bytes: u64, hint: Option<(u64, usize)>) -> Self {
        let hint = hint.map(|(last, most)| (last.min(EXACT_MS) as i64, most.min(MAX_SPAN as usize)));
        Reducer {
            ms: Window::new([0; 8], hint),
            sent: Window::new(0, hint),
            delay_counts: Vec::new(),
            data_min_bytes,
            n_events: 0,
            first_event: None,
            t_lo: i64::MAX,
            t_hi: i64::MIN,
            s_lo: i64::MAX,
            s_hi: i64::MIN,
            data: None,
            seen: [false; 4],
        }
    }

    /// Add one event; Err names what this reducer does not hold exactly.
    #[inline]
    pub fn add(&mut self, e: Event) -> Result<(), &'static str> {
        if e.time_ms >= EXACT_MS {
            return Err("a time of 2**53 ms or more");
        }
        let t = e.time_ms as i64;
        let first: u32 = e.first.try_into().map_err(|_| "a number of 2**32 or more")?;
        let m = self.ms.slot(t).ok_or("event times spanning more than 2**32 ms")?;
        const SUM: &str = "a per-ms sum of 2**32 or more";
        match e.code {
            0 => {
                m[ARR_N] += 1;
                m[ARR_B] = m[ARR_B].checked_add(first).ok_or(SUM)?;
            }
            1 => {
                if e.second >= DELAY_LIMIT {
                    return Err("a delay of 2**24 ms or more");
                }
                let d = e.second as u32;
                m[DEP_N] += 1;
                m[DEP_B] = m[DEP_B].checked_add(first).ok_or(SUM)?;
                m[DELAY_SUM] = m[DELAY_SUM].checked_add(d).ok_or(SUM)?;
                m[PEAK1] = m[PEAK1].max(d + 1);
            }
            2 => m[OPP_B] = m[OPP_B].checked_add(first).ok_or(SUM)?,
            _ => m[DROP_P] = m[DROP_P].checked_add(first).ok_or(SUM)?,
        }
        if e.code == 1 {
            let d = e.second as u32;
            let s = t - d as i64;
            let least = self.sent.slot(s).ok_or("sending times spanning more than 2**32 ms")?;
            if *least == 0 || d + 1 < *least {
                *least = d + 1;
            }
            self.s_lo = self.s_lo.min(s);
            self.s_hi = self.s_hi.max(s);
            let k = d as usize;
            if k >= self.delay_counts.len() {
                self.delay_counts.resize((k + 1).max(self.delay_counts.len() * 2).max(256), 0);
            }
            self.delay_counts[k] += 1;
        }
        if e.code == 0 && e.first >= self.data_min_bytes {
            self.data = Some(match self.data {
                None => (t, t),
                Some((a, b)) => (a.min(t), b.max(t)),
            });
        }
        self.seen[e.code as usize] = true;
        if self.first_event.is_none() {
            self.first_event = Some(t);
        }
        self.n_events += 1;
        self.t_lo = self.t_lo.min(t);
        self.t_hi = self.t_hi.max(t);
        Ok(())
    }

    /// The log's reduction; `base`: the header's base timestamp, subtracted
    /// from every time when no event is before it (as the Python reader).
    /// Err when there is no event or no departure.
    pub fn finish(self, base: Option<i64>) -> Result<Reduction, &'static str> {
        if self.n_events == 0 {
            return Err("no events");
        }
        if self.s_lo > self.s_hi {
            return Err("no departures");
        }
        let shift = match base {
            Some(b) if self.t_lo >= b => b,
            _ => 0,
        };
        let n = (self.t_hi - self.t_lo + 1) as usize;
        let off = (self.t_lo - self.ms.lo) as usize;
        let delay_lo = self.delay_counts.iter().position(|&c| c > 0).expect("a departure");
        let delay_hi = self.delay_counts.iter().rposition(|&c| c > 0).expect("a departure");
        let mut delay_counts = self.delay_counts;
        delay_counts.truncate(delay_hi + 1);
        let delay_dtype = Column::compact_ints(2, |i| [delay_lo, delay_hi][i] as i64).descr();
        let s_off = (self.s_lo - self.sent.lo) as usize;
        Ok(Reduction {
            ms: self.ms.v,
            ms_range: off..off + n,
            sent: self.sent.v,
            sent_range: s_off..s_off + (self.s_hi - self.s_lo + 1) as usize,
            delay_counts,
            base_delay: delay_lo as u32,
            n_events: self.n_events,
            first_ms: self.t_lo - shift,
            first_event_ms: self.first_event.expect("an event") - shift,
            has_packets: self.seen[0] || self.seen[1] || self.seen[3],
            sent_lo: self.s_lo - shift,
            data_ms: self.data.map(|(a, b)| (a - shift, b - shift)),
            delay_dtype,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(time_ms: u64, code: u8, first: u64, second: u64) -> Event {
        Event { time_ms, code, first, second }
    }

    #[test]
    fn sums_per_ms_in_any_order_and_subtracts_the_base() {
        let mut r = Reducer::new(1000);
        for e in [ev(105, 2, 1504, 0), ev(105, 0, 1504, 0), ev(103, 1, 1504, 7), ev(105, 1, 100, 3),
                  ev(105, 1, 1504, 9), ev(104, 3, 2, 3008), ev(103, 0, 40, 0)] {
            r.add(e).unwrap();
        }
        let red = r.finish(Some(100)).unwrap();
        assert_eq!((red.first_ms, red.first_event_ms, red.n_events), (3, 5, 7));
        assert_eq!(red.data_ms, Some((5, 5)));
        assert_eq!(red.sent_lo, -4); // 103 - 7, less the base
        assert_eq!(red.delay_dtype, "|u1");
        let get = |name: &str| red.column(COLUMNS.iter().position(|n| *n == name).unwrap());
        assert_eq!(get("arrival_count"), Column::U8(vec![1, 0, 1]));
        assert_eq!(get("departure_bytes"), Column::U16(vec![1504, 0, 1604]));
        assert_eq!(get("drop_packets"), Column::U8(vec![0, 2, 0]));
        assert_eq!(get("queueing"), Column::U8(vec![4, 0, 6])); // base delay 3
        assert!(matches!(get("peak_delay"), Column::F32(v) if v[0] == 7.0 && v[1].is_nan() && v[2] == 9.0));
        // sending ms 96 (7), 102 (3) and 96 (9 at 105): 96..=102
        assert!(matches!(get("sent_min_delay"), Column::F32(v) if v.len() == 7 && v[0] == 7.0 && v[6] == 3.0
                         && v[1..6].iter().all(|x| x.is_infinite())));
        assert_eq!(get("delay_counts"), Column::U8(vec![0, 0, 0, 1, 0, 0, 0, 1, 0, 1]));
    }

    #[test]
    fn a_base_after_the_first_event_is_not_subtracted() {
        let mut r = Reducer::new(1000);
        r.add(ev(5, 1, 1504, 1)).unwrap();
        let red = r.finish(Some(6)).unwrap();
        assert_eq!((red.first_ms, red.sent_lo), (5, 4));
        assert!(!red.has_packets || red.data_ms.is_none());
    }

    #[test]
    fn declines_what_it_cannot_hold_exactly() {
        let mut r = Reducer::new(1000);
        assert!(r.add(ev(1 << 53, 0, 1, 0)).is_err());
        assert!(r.add(ev(0, 1, 1, 1 << 24)).is_err());
        assert!(r.add(ev(0, 0, 1 << 32, 0)).is_err());
        r.add(ev(0, 2, u32::MAX as u64, 0)).unwrap();
        assert!(r.add(ev(0, 2, 1, 0)).is_err());
        assert!(r.add(ev(1 << 40, 2, 1, 0)).is_err());
        assert_eq!(r.finish(None).err(), Some("no departures"));
        assert_eq!(Reducer::new(1000).finish(None).err(), Some("no events"));
    }
}
