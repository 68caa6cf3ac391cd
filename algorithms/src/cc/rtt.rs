//! RTT estimation from the reports' samples ([`RttEstimator`], RFC 6298).

use super::Measurement;

/// Smoothed RTT per RFC 6298 (alpha = 1/8), from the reports' latest samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RttEstimator {
    /// Smoothed RTT in microseconds; 0 until the first sample.
    pub srtt_us: f64,
}

impl RttEstimator {
    /// Fold in a report's latest RTT sample (ignored when 0 = no sample).
    pub fn update(&mut self, m: &Measurement) {
        if m.rtt_us == 0 {
            return;
        }
        let sample = m.rtt_us as f64;
        self.srtt_us = if self.srtt_us == 0.0 {
            sample
        } else {
            0.875 * self.srtt_us + 0.125 * sample
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srtt_follows_rfc6298() {
        let mut r = RttEstimator::default();
        r.update(&Measurement { rtt_us: 0, ..Default::default() });
        assert_eq!(r.srtt_us, 0.0);
        r.update(&Measurement { rtt_us: 800, ..Default::default() });
        assert_eq!(r.srtt_us, 800.0);
        r.update(&Measurement { rtt_us: 1600, ..Default::default() });
        assert_eq!(r.srtt_us, 800.0 * 7.0 / 8.0 + 1600.0 / 8.0);
    }
}
