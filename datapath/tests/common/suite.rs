//! The suite's fold programs, as the fold tests compare them, and
//! Portus's install message for a program.

use std::path::PathBuf;
use std::process::Command;

use super::process::bin_dir;

/// (name, fold program) of every algorithm of the suite: `ccp-algorithms
/// --list-json` names them, `ccp-algorithms NAME --dump-program` prints each
/// program (algorithms/src/suite.rs). FOLD_ALGORITHMS_BIN names another
/// ccp-algorithms binary (e.g. one built from a fixed commit, so interpreter
/// figures compare the same programs).
pub fn suite_programs() -> Vec<(String, String)> {
    let bin = std::env::var_os("FOLD_ALGORITHMS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| bin_dir().join("ccp-algorithms"));
    let run = |args: &[&str]| -> Vec<u8> {
        let out = Command::new(&bin).args(args).output().unwrap_or_else(|e| {
            panic!(
                "running {} {args:?}: {e} (build it: cargo build --release -p ccp-algorithms)",
                bin.display()
            )
        });
        assert!(
            out.status.success(),
            "{} {args:?} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let list: serde_json::Value =
        serde_json::from_slice(&run(&["--list-json"])).expect("--list-json prints JSON");
    let names: Vec<String> = list
        .as_array()
        .expect("--list-json prints an array")
        .iter()
        .map(|a| a["name"].as_str().expect("each algorithm has a name").to_string())
        .collect();
    assert!(!names.is_empty(), "ccp-algorithms --list-json lists no algorithm");
    names
        .into_iter()
        .map(|n| {
            let text =
                String::from_utf8(run(&[&n, "--dump-program"])).expect("program text is UTF-8");
            (n, text)
        })
        .collect()
}

/// Portus's install message for DSL `src`, sent with program uid `uid`.
pub fn portus_install(src: &str, uid: u32) -> Vec<u8> {
    let (bin, _sc) = portus::lang::compile(src.as_bytes(), &[])
        .unwrap_or_else(|e| panic!("Portus compiles {src}: {e:?}"));
    let msg = portus::serialize::install::Msg {
        sid: 0,
        program_uid: uid,
        num_events: bin.events.len() as u32,
        num_instrs: bin.instrs.len() as u32,
        instrs: bin,
    };
    portus::serialize::serialize(&msg).unwrap_or_else(|e| {
        panic!("Portus cannot serialize the install message of this fold program (it could never be installed): {e:?}\n{src}")
    })
}
