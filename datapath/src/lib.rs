//! ccp-datapath: registers the eBPF struct_ops TCP congestion control `ccp`
//! and drives it from a Portus algorithm through libccp.
//!
//! Data flow, `--fold kernel` (default): the algorithm's fold programs run in
//! the kernel per ACK (bpf/fold_vm.h, bpf/fold_ccp.h); [`fold::kernel`] turns
//! Portus's install / update / change messages into BPF map entries and the
//! kernel's report records into Portus measure messages; only flow
//! create/release events and reports cross to user space.
//!
//! `--fold userspace`: kernel (bpf/ccp.bpf.c) --ring buffer--> [`bpf`]
//! --events--> [`fold::userspace`] (libccp runs the fold programs) --commands (cwnd,
//! pacing rate)--> BPF `commands` map --next ACK--> socket; libccp <-> Portus
//! over [`ipc`] (unix datagrams).
//!
//! WARNING for maintainers: the `libccp` crate exports an unmangled C symbol
//! `log` that shadows libm's `log`, so `f64::ln()` (and anything calling it)
//! crashes this binary. Keep float logarithms out; tests/no_libm_log.rs
//! disassembles the built binary and fails if any code calls `log`.

pub mod backend;
pub mod bpf;
pub mod cli;
pub mod daemon;
pub mod fold;
pub mod ipc;
pub mod liveness;
pub mod primitives;
pub mod resync;
pub mod rules;
pub mod stats;
pub mod summary;
pub mod wake;
pub mod wire;
