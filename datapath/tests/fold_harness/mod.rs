//! The BPF test harness bpf/fold_test.bpf.c, as the fold tests load it
//! (fold_differential.rs, fold_jit.rs, fold_slots.rs): its skeleton, one
//! loader that fails naming what is missing, and the runs and map accesses
//! the tests make on it.
#![allow(dead_code)]

pub mod skel {
    #![allow(
        clippy::all,
        unused_imports,
        dead_code,
        non_camel_case_types,
        non_upper_case_globals
    )]
    include!(concat!(env!("OUT_DIR"), "/fold_test.skel.rs"));
}

use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject, ProgramInput, ProgramMut};

/// Open and load bpf/fold_test.bpf.c for `test` (named in the errors).
/// Panics without root, or when the kernel refuses the object.
pub fn load(test: &str) -> skel::FoldTestSkel<'static> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "{test} needs root (CAP_BPF + CAP_SYS_ADMIN) to load BPF programs");
    // The skeleton borrows its OpenObject for its whole life: leaked, once per test.
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let open = skel::FoldTestSkelBuilder::default()
        .open(storage)
        .unwrap_or_else(|e| panic!("opening bpf/fold_test.bpf.c (libbpf): {e:#}"));
    open.load().unwrap_or_else(|e| {
        panic!(
            "loading bpf/fold_test.bpf.c failed: {e:#}; needs BPF syscall programs, bpf_loop \
             (Linux >= 5.17) and a verifier accepting the fold interpreter"
        )
    })
}

/// Runs syscall program `prog` once on `ctx` (BPF_PROG_TEST_RUN); the
/// kernel copies the context back into `ctx`. Its return value; panics
/// naming `what` if the run itself fails.
pub fn run_on(prog: &ProgramMut<'_>, ctx: &mut [u8], what: &str) -> u32 {
    let run = ProgramInput { context_in: Some(ctx), ..Default::default() };
    prog.test_run(run).unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN of {what}: {e}")).return_value
}

/// The value at `key` of array or hash map `map`; panics naming the map if
/// it cannot be read or holds nothing there.
pub fn read<M: MapCore>(map: &M, key: u32) -> Vec<u8> {
    map.lookup(&key.to_ne_bytes(), MapFlags::ANY)
        .unwrap_or_else(|e| panic!("reading key {key} of map {:?}: {e}", map.name()))
        .unwrap_or_else(|| panic!("map {:?} has no key {key}", map.name()))
}

/// Writes `val` at `key` of `map`; panics naming the map.
pub fn write<M: MapCore>(map: &M, key: u32, val: &[u8]) {
    map.update(&key.to_ne_bytes(), val, MapFlags::ANY)
        .unwrap_or_else(|e| panic!("writing key {key} of map {:?}: {e}", map.name()));
}
