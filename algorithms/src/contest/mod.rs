//! The ten cellular-contest algorithms (docs/algorithms.md, "The cellular-contest algorithms"),
//! one file each, and the small helpers they share, here: an EWMA, a tick clock that turns
//! reports into fixed-length delivery-rate ticks, a once-per-RTT guard, the
//! contest's congestion signal, a seeded random generator, and float
//! logarithm / exponential that never call the C library.
//!
//! Why our own `ln`/`exp`: the `libccp` crate exports an unmangled C symbol
//! `log` that shadows libm's (docs/NOTES.md, "libccp's `log` symbol"), so `f64::ln()` in a binary that
//! links libccp may jump into libccp's logger and crash. [`ln`], [`exp`] and
//! [`pow`] below are short series in plain Rust arithmetic (no C library call
//! at all; `f64::sqrt` compiles to the sqrtsd instruction). They are accurate
//! to a few ulp, which is far more than a window decision needs.
//! `algorithms/tests/contest_math_libccp.rs` runs them, and exp3cc and
//! spoderman, in a test binary that links libccp.

pub mod aimd;
pub mod delay_threshold;
pub mod exp3cc;
pub mod fixed_window;
pub mod interval_prediction;
pub mod mixture;
pub mod pid;
pub mod rocinante;
pub mod spoderman;
pub mod sprout_ewma;

use crate::cc::{Measurement, WindowParams};
use crate::Control;

const LN2: f64 = std::f64::consts::LN_2;

/// x x 2^k for an integer k in the normal range, by building 2^k's bits.
fn times_pow2(x: f64, k: i64) -> f64 {
    // Split large |k| so each factor stays a normal number.
    let mut x = x;
    let mut k = k;
    while k != 0 {
        let step = k.clamp(-1000, 1000);
        x *= f64::from_bits(((1023 + step) as u64) << 52);
        k -= step;
    }
    x
}

/// Natural logarithm without the C library.
///
/// x = m 2^e with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s), s = (m - 1) /
/// (m + 1), |s| < 0.172, summed as 2 (s + s^3/3 + s^5/5 + ...) until the terms
/// vanish; ln x = ln m + e ln 2. ln(0) = -inf, ln(negative or NaN) = NaN.
pub fn ln(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    // Subnormals: scale into the normal range first.
    let (x, extra) = if x < f64::MIN_POSITIVE { (x * 18_446_744_073_709_551_616.0, -64i64) } else { (x, 0) };
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023 + extra;
    let mut m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let (mut term, mut sum, mut k): (f64, f64, f64) = (s, 0.0, 1.0);
    while term.abs() > 1e-18 * sum.abs().max(1e-300) {
        sum += term / k;
        term *= s2;
        k += 2.0;
        if k > 99.0 {
            break;
        }
    }
    2.0 * sum + e as f64 * LN2
}

/// e^x without the C library.
///
/// x = k ln 2 + r with |r| <= ln2 / 2; e^r by its Taylor series until the
/// terms vanish (at most 30 terms); e^x = e^r 2^k. Overflows to +inf above
/// 709.78, underflows to 0 below -745.
pub fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > 709.782_712_893_384 {
        return f64::INFINITY;
    }
    if x < -745.2 {
        return 0.0;
    }
    let k = (x / LN2).round();
    // Cody-Waite: ln 2 in two parts (fdlibm's ln2_hi has 32 bits, so k x hi is exact).
    const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-01;
    const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let (mut term, mut sum) = (1.0, 1.0);
    for n in 1..30 {
        term *= r / n as f64;
        sum += term;
        if term.abs() < 1e-18 * sum {
            break;
        }
    }
    times_pow2(sum, k as i64)
}

/// x^y = e^(y ln x) for x > 0 (0^y = 0 for y > 0), without the C library.
pub fn pow(x: f64, y: f64) -> f64 {
    if x == 0.0 && y > 0.0 {
        return 0.0;
    }
    exp(y * ln(x))
}

/// Exponentially weighted moving average; `weight` is the weight of the
/// newest sample: v = (1 - weight) v + weight x sample. Starts at the first sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ewma {
    /// Weight of the newest sample, in (0, 1].
    pub weight: f64,
    /// Current value; None before the first sample.
    pub value: Option<f64>,
}

impl Ewma {
    /// An empty average with this newest-sample weight.
    pub fn new(weight: f64) -> Self {
        Ewma { weight, value: None }
    }

    /// Fold in one sample; returns the new value.
    pub fn update(&mut self, sample: f64) -> f64 {
        self.update_n(sample, 1)
    }

    /// Fold in the same sample `n` times (a report that carried `n` RTT
    /// samples of which only the latest is known): v = (1 - w)^n v +
    /// (1 - (1 - w)^n) sample. `n = 0` leaves the value.
    pub fn update_n(&mut self, sample: f64, n: u64) -> f64 {
        let v = match self.value {
            None if n > 0 => sample,
            None => return f64::NAN,
            Some(v) => {
                let keep = (1.0 - self.weight).powi(n.min(i32::MAX as u64) as i32);
                keep * v + (1.0 - keep) * sample
            }
        };
        self.value = Some(v);
        v
    }
}

/// Cuts the flow's reports into ticks of fixed length and yields one
/// delivery-rate sample per tick (packets acknowledged in the tick / tick
/// length, packets/s), as the contest's senders sampled their link once per tick.
///
/// A report's acknowledged packets are spread evenly over the time since the
/// previous report (its ACKs arrived somewhere in that span), so a report
/// that arrives after an outage of several ticks yields several lower samples
/// instead of one burst.
#[derive(Clone, Debug, PartialEq)]
pub struct TickClock {
    tick_us: u64,
    /// Start of the open tick (None until the first report).
    tick_start_us: Option<u64>,
    /// Time of the previous report.
    last_us: u64,
    /// Packets attributed to the open tick so far.
    open_pkts: f64,
}

impl TickClock {
    /// A clock with ticks of `tick_us` microseconds (> 0).
    pub fn new(tick_us: u64) -> Self {
        TickClock { tick_us: tick_us.max(1), tick_start_us: None, last_us: 0, open_pkts: 0.0 }
    }

    /// Tick length, seconds.
    pub fn tick_s(&self) -> f64 {
        self.tick_us as f64 / 1e6
    }

    /// Account a report at `now_us` that acknowledged `acked_pkts`; returns the
    /// delivery-rate samples (packets/s) of the ticks that closed, oldest first.
    /// The first report only starts the clock.
    pub fn advance(&mut self, now_us: u64, acked_pkts: f64) -> Vec<f64> {
        let Some(mut start) = self.tick_start_us else {
            self.tick_start_us = Some(now_us);
            self.last_us = now_us;
            return Vec::new();
        };
        let now_us = now_us.max(self.last_us);
        let span = (now_us - self.last_us) as f64;
        let per_us = if span > 0.0 { acked_pkts / span } else { 0.0 };
        let mut samples = Vec::new();
        let mut cursor = self.last_us;
        while start + self.tick_us <= now_us {
            let end = start + self.tick_us;
            self.open_pkts += per_us * (end - cursor) as f64;
            samples.push(self.open_pkts / self.tick_s());
            self.open_pkts = 0.0;
            cursor = end;
            start = end;
        }
        // What remains belongs to the open tick (all of it when span = 0).
        self.open_pkts += if span > 0.0 { per_us * (now_us - cursor) as f64 } else { acked_pkts };
        self.tick_start_us = Some(start);
        self.last_us = now_us;
        samples
    }
}

/// Allows an action at most once per RTT: after it acts at time t, the next
/// one may come once the report time reaches t + the RTT known then.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OncePerRtt {
    next_allowed_us: Option<u64>,
}

impl OncePerRtt {
    /// True (and arms the guard for one `rtt_us`) when the action may happen at `now_us`.
    pub fn try_act(&mut self, now_us: u64, rtt_us: u64) -> bool {
        if self.next_allowed_us.is_some_and(|t| now_us < t) {
            return false;
        }
        self.next_allowed_us = Some(now_us + rtt_us);
        true
    }
}

/// The contest's congestion signal, in TCP terms (docs/algorithms.md):
/// any ACK of the report with an RTT sample above `threshold_us` (the
/// report's largest sample, `Report.maxrtt`, or its latest when that is
/// absent), or any packet marked lost, or an RTO. Exactly the per-ACK test
/// "some ACK's RTT exceeded the threshold" for the whole report.
pub fn congestion_signal(m: &Measurement, threshold_us: u64) -> bool {
    m.timeout || m.lost_pkts > 0 || largest_rtt_us(m) > threshold_us
}

/// The largest RTT sample of a report, us (0 = none).
pub fn largest_rtt_us(m: &Measurement) -> u64 {
    m.max_rtt_us.max(m.rtt_us)
}

/// A control that sets only the window, `cwnd_pkts` clamped to the flow's
/// floor and ceiling and converted to bytes.
pub fn window_control(params: &WindowParams, cwnd_pkts: f64) -> Control {
    Control { cwnd_bytes: Some(params.to_bytes(params.clamp(cwnd_pkts))), rate_bytes_per_sec: None }
}

/// A seeded random generator: SplitMix64 (Steele, Lea and Flood, "Fast
/// splittable pseudorandom number generators", OOPSLA 2014; constants of
/// Vigna's reference splitmix64.c). The same seed gives the same sequence on
/// every machine, so a run can be repeated.
#[derive(Clone, Debug)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform number in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ewma_weights_the_newest_sample() {
        let mut e = Ewma::new(0.25);
        assert_eq!(e.update(100.0), 100.0);
        assert_eq!(e.update(200.0), 125.0);
        let mut a = Ewma::new(0.01);
        let mut b = a;
        a.update(40.0);
        b.update(40.0);
        for _ in 0..5 {
            a.update(80.0);
        }
        b.update_n(80.0, 5);
        assert!((a.value.unwrap() - b.value.unwrap()).abs() < 1e-9);
    }

    #[test]
    fn tick_clock_samples_per_tick_and_spreads_gaps() {
        let mut c = TickClock::new(30_000);
        assert!(c.advance(0, 0.0).is_empty());
        // 30 packets in the first 30 ms: 1000 packets/s.
        assert_eq!(c.advance(30_000, 30.0), vec![1000.0]);
        // 10 packets over 15 ms: the tick stays open.
        assert!(c.advance(45_000, 10.0).is_empty());
        // 50 packets over the next 45 ms (60 ms -> 90 ms): the open tick gets
        // 10 + 50 x 15/45, the next 50 x 30/45.
        let s = c.advance(90_000, 50.0);
        assert_eq!(s.len(), 2);
        assert!((s[0] - (10.0 + 50.0 / 3.0) / 0.03).abs() < 1e-6, "{s:?}");
        assert!((s[1] - (100.0 / 3.0) / 0.03).abs() < 1e-6);
    }

    #[test]
    fn once_per_rtt_guard() {
        let mut g = OncePerRtt::default();
        assert!(g.try_act(0, 50_000));
        assert!(!g.try_act(49_999, 50_000));
        assert!(g.try_act(50_000, 50_000));
    }

    /// Relative error of `got` against `want`.
    fn rel(got: f64, want: f64) -> f64 {
        ((got - want) / want).abs()
    }

    #[test]
    fn pure_math_matches_reference_values() {
        // Reference values: Python's math module (the C library's log/exp) to 17 digits.
        assert!(rel(ln(std::f64::consts::E), 1.0) < 1e-15);
        assert!(rel(ln(20.0), 2.995_732_273_553_991) < 1e-15);
        assert!(rel(ln(1e-300), -690.775_527_898_213_7) < 1e-15);
        assert!(rel(ln(0.7), -0.356_674_943_938_732_4) < 1e-15);
        assert!(rel(ln(5e-324), -744.440_071_921_381_2) < 1e-15, "subnormal");
        assert!(rel(exp(1.0), std::f64::consts::E) < 1e-15);
        assert!(rel(exp(-3.5), 0.030_197_383_422_318_501) < 1e-15);
        assert!(rel(exp(700.0), 1.014_232_054_735_004_4e304) < 1e-14);
        assert!(rel(exp(-740.0), 4.2e-322) < 0.05, "subnormal result");
        assert!(rel(pow(100.0, 2.0 / 3.0), 21.544_346_900_318_84) < 1e-14);
        assert!(rel(pow(59.914_645_471_079_815, 1.0 / 3.0), 3.913_010_361_943_081) < 1e-14);
        assert_eq!(ln(0.0), f64::NEG_INFINITY);
        assert!(ln(-1.0).is_nan());
        assert_eq!(exp(800.0), f64::INFINITY);
        assert_eq!(exp(-800.0), 0.0);
        // Round trips over a wide range.
        for k in -60..=60 {
            let x = 1.37f64 * 10f64.powi(k);
            assert!(rel(exp(ln(x)), x) < 1e-13, "{x}");
        }
    }

    #[test]
    fn seeded_rng_repeats() {
        let mut a = SeededRng::new(7);
        let mut b = SeededRng::new(7);
        let mut c = SeededRng::new(8);
        let xa: Vec<f64> = (0..5).map(|_| a.uniform()).collect();
        let xb: Vec<f64> = (0..5).map(|_| b.uniform()).collect();
        let xc: Vec<f64> = (0..5).map(|_| c.uniform()).collect();
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
        assert!(xa.iter().all(|x| (0.0..1.0).contains(x)));
    }
}
