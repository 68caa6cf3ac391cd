//! Integer-only latency bookkeeping (no float logarithms anywhere in this
//! binary: libccp's exported `log` symbol shadows libm's, see lib.rs).

/// Now on CLOCK_MONOTONIC in ns: the clock of the BPF side's
/// `bpf_ktime_get_ns()` (record timestamps such as `ts_ns`), so the two can
/// be subtracted.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Keeps the last `cap` samples (ns) and their count/sum.
#[derive(Debug, Clone)]
pub struct Samples {
    ring: Vec<u64>,
    cap: usize,
    next: usize,
    pub count: u64,
    pub sum: u64,
}

impl Samples {
    pub fn new(cap: usize) -> Self {
        Samples { ring: Vec::with_capacity(cap), cap: cap.max(1), next: 0, count: 0, sum: 0 }
    }

    pub fn push(&mut self, v: u64) {
        if self.ring.len() < self.cap {
            self.ring.push(v);
        } else {
            self.ring[self.next] = v;
        }
        self.next = (self.next + 1) % self.cap;
        self.count += 1;
        self.sum = self.sum.saturating_add(v);
    }

    /// Mean over all samples ever pushed, None if empty.
    pub fn mean(&self) -> Option<u64> {
        (self.count > 0).then(|| self.sum / self.count)
    }

    /// Nearest-rank percentile (`pct` in 0..=100) over the retained samples.
    pub fn percentile(&self, pct: u32) -> Option<u64> {
        if self.ring.is_empty() {
            return None;
        }
        let mut v = self.ring.clone();
        v.sort_unstable();
        let n = v.len();
        // nearest rank: ceil(pct/100 * n), 1-based
        let rank = ((pct.min(100) as usize) * n).div_ceil(100).max(1);
        Some(v[rank - 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let mut s = Samples::new(100);
        for v in 1..=100 {
            s.push(v);
        }
        assert_eq!(s.percentile(50), Some(50));
        assert_eq!(s.percentile(99), Some(99));
        assert_eq!(s.percentile(100), Some(100));
        assert_eq!(s.percentile(0), Some(1));
        assert_eq!(s.mean(), Some(50));
    }

    #[test]
    fn ring_keeps_latest() {
        let mut s = Samples::new(3);
        for v in [100, 1, 2, 3] {
            s.push(v);
        }
        assert_eq!(s.percentile(100), Some(3));
        assert_eq!(s.count, 4);
        assert!(Samples::new(3).percentile(50).is_none());
    }

    #[test]
    fn monotonic_clock_moves_forward() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(b - a >= 2_000_000, "{a} -> {b}");
    }
}
