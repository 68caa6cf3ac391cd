//! Seeded step-change traces (the TPCCA poster's link model: a nominal rate
//! that steps at given times, plus per-millisecond Gaussian noise).
//!
//! Model, per millisecond slot m = 1..=D (timestamp m stands for the
//! millisecond (m-1, m]):
//! 1. nominal rate r_m = the schedule's rate at time m-1 ms (piecewise
//!    constant, [`Segment`]s);
//! 2. if r_m > 0: rate = max(0, r_m + n), n ~ N(0, sigma) truncated to
//!    [-3 sigma, +3 sigma] by **resampling** (draws outside are rejected and
//!    redrawn, so the noise is a true truncated normal, not a clipped one
//!    with point masses at the bounds). If r_m = 0 the rate stays 0: a
//!    0 Mbit/s segment models an outage, and symmetric noise clipped at 0
//!    would otherwise leak a positive mean rate (about 0.4 sigma) into it;
//! 3. rate -> opportunities with a fractional credit accumulator:
//!    credit += rate / 12 (12 Mbit/s = one 1500-byte packet per ms), emit
//!    floor(credit) copies of m, keep the fraction. So the long-run count
//!    matches the mean rate and no rounding bias accumulates.
//!
//! Period: mahimahi loops a trace with period = its last timestamp, so the
//! last line must be D. If slot D got no opportunity from the accumulator,
//! exactly one opportunity is added at D (at most 1500 B per period, e.g.
//! 0.0002 Mbit/s on a 60 s trace). This is the only exception to "a 0
//! segment stays empty": if the schedule ends in a 0 Mbit/s segment, that
//! segment's last millisecond carries this one opportunity, because a
//! mahimahi trace has no other way to state its period.
//!
//! Randomness: ChaCha8 seeded from a u64 (rand_chacha), so the same spec
//! and seed always give a byte-identical trace file.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use std::path::Path;

use crate::{error::GenerateError, trace::MBPS_PER_OPPORTUNITY_PER_MS, Trace};

/// One piece of a piecewise-constant rate schedule: from `start_ms`
/// (inclusive) until the next segment's start (or the end), the nominal
/// capacity is `mbps` Mbit/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    pub start_ms: u64,
    pub mbps: f64,
}

/// A step-change trace request. `schedule` must start at 0 ms with strictly
/// increasing starts all < `duration_ms`; rates and `sigma_mbps` finite >= 0.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTraceSpec {
    pub schedule: Vec<Segment>,
    /// Trace length = period in ms (timestamps run 1..=duration_ms).
    pub duration_ms: u64,
    /// Standard deviation of the per-ms noise, Mbit/s (0 = no noise).
    pub sigma_mbps: f64,
    pub seed: u64,
}

impl StepTraceSpec {
    /// The classic single step: `before_mbps` until `at_ms`, then `after_mbps`.
    pub fn single_step(
        before_mbps: f64,
        after_mbps: f64,
        at_ms: u64,
        duration_ms: u64,
        sigma_mbps: f64,
        seed: u64,
    ) -> Self {
        let mut schedule = vec![Segment {
            start_ms: 0,
            mbps: before_mbps,
        }];
        if at_ms > 0 {
            schedule.push(Segment {
                start_ms: at_ms,
                mbps: after_mbps,
            });
        } else {
            schedule[0].mbps = after_mbps;
        }
        Self {
            schedule,
            duration_ms,
            sigma_mbps,
            seed,
        }
    }

    /// Checks the spec; see [`GenerateError`] for the rules.
    pub fn validate(&self) -> Result<(), GenerateError> {
        if self.duration_ms == 0 {
            return Err(GenerateError::BadDuration(0.0));
        }
        let first = self.schedule.first().ok_or(GenerateError::EmptySchedule)?;
        if first.start_ms != 0 {
            return Err(GenerateError::ScheduleNotFromZero(first.start_ms));
        }
        for w in self.schedule.windows(2) {
            if w[1].start_ms <= w[0].start_ms {
                return Err(GenerateError::ScheduleNotIncreasing {
                    prev: w[0].start_ms,
                    next: w[1].start_ms,
                });
            }
        }
        for s in &self.schedule {
            if s.start_ms >= self.duration_ms {
                return Err(GenerateError::SegmentAfterEnd {
                    start_ms: s.start_ms,
                    duration_ms: self.duration_ms,
                });
            }
            if !s.mbps.is_finite() || s.mbps < 0.0 {
                return Err(GenerateError::BadRate(s.mbps));
            }
        }
        if !self.sigma_mbps.is_finite() || self.sigma_mbps < 0.0 {
            return Err(GenerateError::BadSigma(self.sigma_mbps));
        }
        Ok(())
    }

    /// Nominal rate (Mbit/s) at time `t_ms` (the segment containing it).
    pub fn nominal_mbps_at(&self, t_ms: u64) -> f64 {
        self.schedule
            .iter()
            .rev()
            .find(|s| s.start_ms <= t_ms)
            .map_or(0.0, |s| s.mbps)
    }

    /// Generates the trace (see the module docs for the model).
    pub fn generate(&self) -> Result<Trace, GenerateError> {
        self.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let noise = (self.sigma_mbps > 0.0)
            .then(|| Normal::new(0.0, self.sigma_mbps).expect("sigma validated"));
        let bound = 3.0 * self.sigma_mbps;
        let mut credit = 0.0f64;
        let mut timestamps = Vec::new();
        for m in 1..=self.duration_ms {
            let nominal = self.nominal_mbps_at(m - 1);
            let rate = match (&noise, nominal > 0.0) {
                (Some(normal), true) => {
                    let n = loop {
                        let x: f64 = normal.sample(&mut rng);
                        if x.abs() <= bound {
                            break x;
                        }
                    };
                    (nominal + n).max(0.0)
                }
                _ => nominal,
            };
            credit += rate / MBPS_PER_OPPORTUNITY_PER_MS;
            let whole = credit.floor();
            credit -= whole;
            for _ in 0..whole as u64 {
                timestamps.push(m);
            }
        }
        if timestamps.last() != Some(&self.duration_ms) {
            timestamps.push(self.duration_ms);
        }
        Ok(Trace::from_timestamps(Path::new("<generated>"), timestamps)
            .expect("generated timestamps are non-decreasing and end at duration > 0"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_rejects_bad_schedules() {
        let mut s = StepTraceSpec::single_step(0.0, 12.0, 1000, 2000, 1.0, 1);
        assert!(s.validate().is_ok());
        s.schedule[0].start_ms = 5;
        assert_eq!(s.validate(), Err(GenerateError::ScheduleNotFromZero(5)));
        let s = StepTraceSpec::single_step(0.0, 12.0, 3000, 2000, 1.0, 1);
        assert!(matches!(
            s.validate(),
            Err(GenerateError::SegmentAfterEnd { .. })
        ));
        let s = StepTraceSpec::single_step(-1.0, 12.0, 1000, 2000, 1.0, 1);
        assert_eq!(s.validate(), Err(GenerateError::BadRate(-1.0)));
    }

    #[test]
    fn noiseless_12mbps_is_one_per_ms() {
        let t = StepTraceSpec::single_step(12.0, 12.0, 0, 1000, 0.0, 7)
            .generate()
            .unwrap();
        assert_eq!(t.timestamps(), (1..=1000).collect::<Vec<_>>().as_slice());
    }
}
