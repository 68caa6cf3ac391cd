//! Build the BPF struct_ops object and its libbpf-rs skeleton.
//!
//! vmlinux.h is generated into OUT_DIR from the build host's kernel BTF
//! (`bpftool btf dump file /sys/kernel/btf/vmlinux format c`), so nothing huge
//! is committed and CO-RE relocations resolve against the running kernel.
//! Set `CCP_VMLINUX_H=/path/to/vmlinux.h` to use a prepared header instead
//! (e.g. when building on a host without BTF).
use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "bpf/ccp.bpf.c";

fn vmlinux_h(out: &PathBuf) -> PathBuf {
    let dst = out.join("vmlinux.h");
    if let Ok(given) = env::var("CCP_VMLINUX_H") {
        fs::copy(&given, &dst).unwrap_or_else(|e| panic!("CCP_VMLINUX_H={given}: {e}"));
        return dst;
    }
    let btf = "/sys/kernel/btf/vmlinux";
    let output = Command::new("bpftool")
        .args(["btf", "dump", "file", btf, "format", "c"])
        .output()
        .unwrap_or_else(|e| panic!("running bpftool to dump {btf} (install bpftool or set CCP_VMLINUX_H): {e}"));
    if !output.status.success() {
        panic!(
            "bpftool btf dump file {btf} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    fs::write(&dst, &output.stdout).expect("writing vmlinux.h into OUT_DIR");
    dst
}

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let vmlinux = vmlinux_h(&out);
    let include_dir = vmlinux.parent().unwrap().to_path_buf();
    SkeletonBuilder::new()
        .source(SRC)
        .clang("clang")
        // -mcpu=v3: atomic fetch-add (flow id counter, stats) with clang 14
        .clang_args([
            OsString::from("-mcpu=v3"),
            OsString::from("-I"),
            include_dir.into_os_string(),
            OsString::from("-Wall"),
        ])
        .build_and_generate(out.join("ccp.skel.rs"))
        .expect("building bpf/ccp.bpf.c and its skeleton");
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rerun-if-env-changed=CCP_VMLINUX_H");
}
