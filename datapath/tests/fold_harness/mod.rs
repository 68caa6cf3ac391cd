//! The BPF test harness bpf/fold_test.bpf.c, as the fold tests load it
//! (fold_differential.rs, fold_jit.rs, fold_slots.rs): its skeleton and one
//! loader that fails naming what is missing.
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
use libbpf_rs::OpenObject;

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
