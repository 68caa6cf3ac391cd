//! What the datapath's integration tests share, in one place so every test
//! sets up, waits and cleans up the same way:
//! - here: a seeded generator, sizes and seeds from the environment, and
//!   edge-heavy register values (the randomized tests);
//! - [`process`]: child processes with a log file, the built `ccp-datapath`
//!   and `ccp-algorithms` started and awaited on their readiness signals,
//!   an in-process Portus;
//! - [`net`]: two network namespaces joined by a veth pair with a TBF
//!   bottleneck, and a bulk TCP flow through it;
//! - [`link`]: the `ccplab-link` emulated bottleneck and processes inside
//!   its namespaces;
//! - [`suite`]: the suite's fold programs and Portus's install messages;
//! - [`msg`]: Portus messages built byte by byte.
//!
//! Each test binary compiles all of it (`mod common;`) and uses a part.
#![allow(dead_code)]

pub mod link;
pub mod msg;
pub mod net;
pub mod process;
pub mod suite;

/// splitmix64: small, seeded, reproducible.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n); 0 when n is 0 (an empty range picks its start).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// The whole number in environment variable `name` (a case count, a seed),
/// or `default` when it is unset; panics naming it when it is not one.
pub fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a non-negative integer")),
        Err(_) => default,
    }
}

/// A register or primitive value: edge cases often.
pub fn edge_u64(r: &mut Rng) -> u64 {
    match r.below(10) {
        0 | 1 => 0,
        2 => r.pick(&[1, 2, 9, 10, 11, 1448]),
        3 => u64::from(u32::MAX) - r.below(3),
        4 => u64::MAX - r.below(1 << 20),
        5 => 1 << r.below(64),
        6 | 7 => r.below(100_000),
        _ => r.next() >> r.below(64),
    }
}
