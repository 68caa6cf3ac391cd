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

/// The per-ms sums, each a u32 (a per-ms sum beyond it declines the log), one array each.
const ARR_N: usize = 0;
const ARR_B: usize = 1;
const DEP_N: usize = 2;
const DEP_B: usize = 3;
const OPP_B: usize = 4;
const DROP_P: usize = 5;
const DELAY_SUM: usize = 6;
/// the largest delay + 1 (0: no departure in this ms)
const PEAK1: usize = 7;

/// `K` arrays of u32 per ms from `lo` on, grown at either end as times arrive (any order). New room is
/// zero, memory the system maps when first written; one array per figure, so making the cache's arrays
/// reads each figure's memory alone.
struct Window<const K: usize> {
    lo: i64,
    v: [Vec<u32>; K],
    /// the log's last time if known (room is made up to it at the first slot), and the most room made so
    hint: Option<(i64, usize)>,
}

impl<const K: usize> Window<K> {
    fn new(hint: Option<(i64, usize)>) -> Self {
        Window {
            lo: 0,
            v: std::array::from_fn(|_| Vec::new()),
            hint,
        }
    }

    fn len(&self) -> usize {
        self.v[0].len()
    }

    /// The position of ms `t`, the window grown to hold it; None when the span would exceed `MAX_SPAN`.
    #[inline(always)]
    fn slot(&mut self, t: i64) -> Option<usize> {
        let k = t.wrapping_sub(self.lo) as u64;
        if k < self.len() as u64 {
            return Some(k as usize);
        }
        self.grow(t)?;
        Some((t - self.lo) as usize)
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, t: i64) -> Option<()> {
        if self.len() == 0 {
            let room = match self.hint {
                Some((last, most)) if last > t => ((last - t + 1) as usize).min(most),
                _ => 0,
            };
            self.lo = t;
            for v in &mut self.v {
                *v = vec![0; room.max(1 << 16)];
            }
            return Some(());
        }
        let hi = self.lo + self.len() as i64;
        let (new_lo, new_hi) = (self.lo.min(t), hi.max(t + 1));
        if new_hi - new_lo > MAX_SPAN {
            return None;
        }
        let slack = (self.len() as i64 / 2).max(1 << 16);
        let (lo, hi) = if t < self.lo {
            ((t - slack).max(new_hi - MAX_SPAN), hi)
        } else {
            (self.lo, (t + 1 + slack).min(self.lo + MAX_SPAN))
        };
        let at = (self.lo - lo) as usize;
        for v in &mut self.v {
            let mut wider = vec![0; (hi - lo) as usize];
            wider[at..at + v.len()].copy_from_slice(v);
            *v = wider;
        }
        self.lo = lo;
        Some(())
    }
}

/// The running reduction of a log's events.
pub struct Reducer {
    ms: Window<8>,
    /// per sending ms (departure time - delay): the smallest delay + 1 (0: none)
    sent: Window<1>,
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
    ms: [Vec<u32>; 8],
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
    "arrival_count",
    "arrival_bytes",
    "departure_count",
    "departure_bytes",
    "opportunity_bytes",
    "drop_packets",
    "queueing",
    "peak_delay",
    "sent_min_delay",
    "delay_counts",
];

impl Reduction {
    /// Array `k` of [`COLUMNS`], in the narrowest dtype `transient.series.compact` picks.
    pub fn column(&self, k: usize) -> Column {
        let r = self.ms_range.clone();
        let field = |f: usize| Column::compact_u32(&self.ms[f][r.clone()]);
        match COLUMNS[k] {
            "arrival_count" => field(ARR_N),
            "arrival_bytes" => field(ARR_B),
            "departure_count" => field(DEP_N),
            "departure_bytes" => field(DEP_B),
            "opportunity_bytes" => field(OPP_B),
            "drop_packets" => field(DROP_P),
            // per ms: the sum over its departures of (delay - the log's smallest delay); at most the
            // delay sum, so a u32
            "queueing" => {
                let (sum, n) = (&self.ms[DELAY_SUM][r.clone()], &self.ms[DEP_N][r]);
                let q: Vec<u32> = sum
                    .iter()
                    .zip(n)
                    .map(|(&s, &c)| s - c * self.base_delay)
                    .collect();
                Column::compact_u32(&q)
            }
            "peak_delay" => {
                let peak = &self.ms[PEAK1][r];
                Column::compact_gappy(peak.len(), f32::NAN, |i| {
                    peak[i].checked_sub(1).map(i64::from)
                })
            }
            "sent_min_delay" => {
                let sent = &self.sent[self.sent_range.clone()];
                Column::compact_gappy(sent.len(), f32::INFINITY, |i| {
                    sent[i].checked_sub(1).map(i64::from)
                })
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
        let hint =
            hint.map(|(last, most)| (last.min(EXACT_MS) as i64, most.min(MAX_SPAN as usize)));
        Reducer {
            ms: Window::new(hint),
            sent: Window::new(hint),
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
        let first: u32 = e
            .first
            .try_into()
            .map_err(|_| "a number of 2**32 or more")?;
        let k = self
            .ms
            .slot(t)
            .ok_or("event times spanning more than 2**32 ms")?;
        let v = &mut self.ms.v;
        const SUM: &str = "a per-ms sum of 2**32 or more";
        match e.code {
            0 => {
                v[ARR_N][k] += 1;
                v[ARR_B][k] = v[ARR_B][k].checked_add(first).ok_or(SUM)?;
            }
            1 => {
                if e.second >= DELAY_LIMIT {
                    return Err("a delay of 2**24 ms or more");
                }
                let d = e.second as u32;
                v[DEP_N][k] += 1;
                v[DEP_B][k] = v[DEP_B][k].checked_add(first).ok_or(SUM)?;
                v[DELAY_SUM][k] = v[DELAY_SUM][k].checked_add(d).ok_or(SUM)?;
                v[PEAK1][k] = v[PEAK1][k].max(d + 1);
                let s = t - d as i64;
                let j = self
                    .sent
                    .slot(s)
                    .ok_or("sending times spanning more than 2**32 ms")?;
                let least = &mut self.sent.v[0][j];
                if *least == 0 || d + 1 < *least {
                    *least = d + 1;
                }
                self.s_lo = self.s_lo.min(s);
                self.s_hi = self.s_hi.max(s);
                let c = d as usize;
                if c >= self.delay_counts.len() {
                    self.delay_counts
                        .resize((c + 1).max(self.delay_counts.len() * 2).max(256), 0);
                }
                self.delay_counts[c] += 1;
            }
            2 => v[OPP_B][k] = v[OPP_B][k].checked_add(first).ok_or(SUM)?,
            _ => v[DROP_P][k] = v[DROP_P][k].checked_add(first).ok_or(SUM)?,
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
        let delay_lo = self
            .delay_counts
            .iter()
            .position(|&c| c > 0)
            .expect("a departure");
        let delay_hi = self
            .delay_counts
            .iter()
            .rposition(|&c| c > 0)
            .expect("a departure");
        let mut delay_counts = self.delay_counts;
        delay_counts.truncate(delay_hi + 1);
        let delay_dtype = Column::compact_ints(2, |i| [delay_lo, delay_hi][i] as i64).descr();
        let s_off = (self.s_lo - self.sent.lo) as usize;
        Ok(Reduction {
            ms: self.ms.v,
            ms_range: off..off + n,
            sent: {
                let [v] = self.sent.v;
                v
            },
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
        Event {
            time_ms,
            code,
            first,
            second,
        }
    }

    #[test]
    fn sums_per_ms_in_any_order_and_subtracts_the_base() {
        let mut r = Reducer::new(1000);
        for e in [
            ev(105, 2, 1504, 0),
            ev(105, 0, 1504, 0),
            ev(103, 1, 1504, 7),
            ev(105, 1, 100, 3),
            ev(105, 1, 1504, 9),
            ev(104, 3, 2, 3008),
            ev(103, 0, 40, 0),
        ] {
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
        assert!(
            matches!(get("peak_delay"), Column::F32(v) if v[0] == 7.0 && v[1].is_nan() && v[2] == 9.0)
        );
        // sending ms 96 (7), 102 (3) and 96 (9 at 105): 96..=102
        assert!(
            matches!(get("sent_min_delay"), Column::F32(v) if v.len() == 7 && v[0] == 7.0 && v[6] == 3.0
                         && v[1..6].iter().all(|x| x.is_infinite()))
        );
        assert_eq!(
            get("delay_counts"),
            Column::U8(vec![0, 0, 0, 1, 0, 0, 0, 1, 0, 1])
        );
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
