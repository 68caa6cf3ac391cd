//! The libccp `log` hazard (docs/NOTES.md, "libccp's `log` symbol"): the `libccp` crate exports an
//! unmangled C symbol `log` (its logging shim). In a binary linking libccp
//! the static linker binds every call to libm's `log(double)` (which is
//! what `f64::ln`, `f64::log`, `powf`-style code and many crates lower to)
//! to that shim instead, and the binary crashes when it runs (seen here:
//! misaligned pointer dereference in libccp/src/ccp.rs, then abort).
//! ccp-datapath therefore computes no float logarithm.
//!
//! Check: disassemble the built `ccp-datapath` (under `make test` the
//! released, optimized binary, where `ln` is inlined into its callers) and
//! find every call or jump to `log`: direct (`call`/`jmp rel32`), through
//! its GOT slot (`call`/`jmp *slot(%rip)`, Rust's default no-PLT calls) or
//! through a PLT stub. Any such site means the hazard is back; the failure
//! names the function containing it. A positive control (libccp's own
//! calls to `ccp_invoke`, made the same way) proves the scanner sees calls
//! in this binary at all. If some day the binary no longer defines `log`,
//! the check instead asserts that `log`, if used, is imported (libm's).

use std::collections::HashSet;
use std::process::Command;

use object::elf::{R_X86_64_64, R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT, R_X86_64_RELATIVE};
use object::{
    Architecture, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget, SectionKind,
};

const BIN: &str = env!("CARGO_BIN_EXE_ccp-datapath");

struct Binary {
    data: Vec<u8>,
}

impl Binary {
    fn load() -> Binary {
        let data = std::fs::read(BIN).unwrap_or_else(|e| panic!("MISSING: the built binary {BIN}: {e}"));
        Binary { data }
    }

    fn file(&self) -> object::File<'_> {
        let f = object::File::parse(&*self.data).unwrap_or_else(|e| panic!("{BIN}: not an object file: {e}"));
        assert_eq!(
            f.architecture(),
            Architecture::X86_64,
            "this check decodes x86-64 call instructions only; {BIN} is {:?}: extend the scanner",
            f.architecture()
        );
        f
    }
}

/// Address of the function `name` defined in the binary, if any.
fn defined(file: &object::File<'_>, name: &str) -> Option<u64> {
    file.symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.is_definition() && s.name() == Ok(name))
        .map(|s| s.address())
}

/// Whether the binary imports `name` from a shared library.
fn imported(file: &object::File<'_>, name: &str) -> bool {
    file.dynamic_symbols().any(|s| s.is_undefined() && s.name() == Ok(name))
}

/// GOT slots that hold the address of `name` (defined at `addr`, if it is)
/// after dynamic relocation.
fn got_slots(file: &object::File<'_>, name: &str, addr: Option<u64>) -> HashSet<u64> {
    let Some(relocs) = file.dynamic_relocations() else { return HashSet::new() };
    relocs
        .filter(|(_, r)| {
            let RelocationFlags::Elf { r_type } = r.flags() else { return false };
            match (r_type, r.target()) {
                (R_X86_64_RELATIVE, _) => addr.is_some_and(|a| r.addend() as u64 == a),
                (R_X86_64_GLOB_DAT | R_X86_64_JUMP_SLOT | R_X86_64_64, RelocationTarget::Symbol(i)) => {
                    let sym = file.dynamic_symbol_table().and_then(|t| t.symbol_by_index(i).ok());
                    sym.is_some_and(|s| s.name() == Ok(name))
                }
                _ => false,
            }
        })
        .map(|(off, _)| off)
        .collect()
}

/// Addresses of every call or jump (x86-64) that transfers control to
/// `name`: direct rel32 to its address or to a PLT stub for it, or
/// indirect through one of its GOT slots. Byte-pattern scan over all
/// executable sections; a false match needs an exact 32-bit displacement.
fn call_sites(file: &object::File<'_>, name: &str) -> Vec<u64> {
    let addr = defined(file, name);
    let slots = got_slots(file, name, addr);
    let code: Vec<(u64, &[u8], bool)> = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| (s.address(), s.data().expect("section data"), s.name().unwrap_or("").starts_with(".plt")))
        .collect();
    let rel32 = |b: &[u8], at: usize| i32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as i64;
    // PLT stubs: `jmp *slot(%rip)` in a .plt* section; callers target the
    // stub's start (an `endbr64` may precede the jump).
    let mut targets: HashSet<u64> = addr.into_iter().collect();
    for &(base, bytes, _) in code.iter().filter(|c| c.2) {
        for i in 0..bytes.len().saturating_sub(6) {
            if bytes[i] == 0xff && bytes[i + 1] == 0x25 {
                let next = base + i as u64 + 6;
                if slots.contains(&next.wrapping_add(rel32(bytes, i + 2) as u64)) {
                    // also the stub start: `endbr64; bnd jmp` or `bnd jmp`
                    for prefix in [&[0xf3, 0x0f, 0x1e, 0xfa, 0xf2][..], &[0xf2][..], &[][..]] {
                        if bytes[..i].ends_with(prefix) {
                            targets.insert(base + (i - prefix.len()) as u64);
                        }
                    }
                }
            }
        }
    }
    let mut sites = Vec::new();
    for &(base, bytes, plt) in &code {
        for i in 0..bytes.len().saturating_sub(5) {
            let at = base + i as u64;
            match bytes[i] {
                // call rel32 / jmp rel32
                0xe8 | 0xe9 => {
                    let dest = (at + 5).wrapping_add(rel32(bytes, i + 1) as u64);
                    if targets.contains(&dest) {
                        sites.push(at);
                    }
                }
                // call *disp32(%rip) / jmp *disp32(%rip), outside the PLT
                0xff if !plt && i + 6 <= bytes.len() && matches!(bytes[i + 1], 0x15 | 0x25) => {
                    let slot = (at + 6).wrapping_add(rel32(bytes, i + 2) as u64);
                    if slots.contains(&slot) {
                        sites.push(at);
                    }
                }
                _ => {}
            }
        }
    }
    sites
}

/// Name of the function containing `addr` (for failure messages).
fn function_at(file: &object::File<'_>, addr: u64) -> String {
    file.symbol_map().get(addr).map_or_else(|| format!("{addr:#x}"), |s| format!("{} (+{:#x})", s.name(), addr - s.address()))
}

#[test]
fn no_code_in_the_built_binary_calls_libccps_log() {
    let bin = Binary::load();
    let file = bin.file();

    // Positive control: libccp's Rust bindings call the C function
    // ccp_invoke; the scanner must see those calls.
    let invoke_calls = call_sites(&file, "ccp_invoke");
    assert!(!invoke_calls.is_empty(), "scanner found no call to ccp_invoke in {BIN}: it cannot be trusted");

    match defined(&file, "log") {
        Some(addr) => {
            let sites = call_sites(&file, "log");
            let callers: Vec<String> = sites.iter().map(|&a| function_at(&file, a)).collect();
            assert!(
                callers.is_empty(),
                "the libccp `log` hazard is back: {BIN} defines `log` at {addr:#x} (libccp's logging shim) \
                 and {} site(s) call it as if it were libm's log(double) (f64::ln and friends) -> crash at run \
                 time. Callers: {callers:#?}",
                callers.len()
            );
            eprintln!(
                "`log` defined at {addr:#x} (libccp's shim); 0 callers; control: {} call(s) to ccp_invoke",
                invoke_calls.len()
            );
        }
        None => {
            // libccp no longer shadows libm: any `log` must come from libm.
            let sites = call_sites(&file, "log");
            assert!(
                sites.is_empty() || imported(&file, "log"),
                "{BIN} calls `log` but neither defines nor imports it"
            );
            eprintln!("`log` not defined by {BIN}: the libccp hazard is gone ({} call(s) to libm's log)", sites.len());
        }
    }
}

#[test]
fn help_and_version_run_cleanly() {
    for arg in ["--help", "--version"] {
        let out = Command::new(BIN).arg(arg).output().unwrap();
        assert!(out.status.success(), "{arg}: {:?}", out.status);
        assert!(!out.stdout.is_empty());
    }
    let help = String::from_utf8(Command::new(BIN).arg("--help").output().unwrap().stdout).unwrap();
    for flag in ["--portus-socket", "--bind-dir", "--congalg", "--ready-file", "--verbose"] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}
