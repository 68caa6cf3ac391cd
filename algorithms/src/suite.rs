//! THE list of the suite's algorithms: the one place an algorithm is declared.
//!
//! Everything else derives from [`SUITE`]: the `ccp-algorithms` binary
//! (`ccp-algorithms NAME [flags]` runs one, `ccp-algorithms --list-json`
//! describes all), the runner's registry (experiments/ccplab/registry.py reads
//! `--list-json`), `ccplab algorithms` and the names `ccp:NAME` accepts.
//!
//! Adding an algorithm: write `src/<name>.rs` (logic + flags + an
//! [`AlgorithmSpec`]) and add `entry::<name::NameSpec>()` below.

use crate::{bbr, cli, contest, copa, cubic, reno, tutorial, vegas, AlgorithmSpec};
use std::ffi::OsString;
use std::process::ExitCode;

/// One algorithm of the suite, type-erased.
#[derive(Clone, Copy)]
pub struct Entry {
    /// Registry name (the CongAlg name).
    pub name: &'static str,
    /// Run the algorithm's command line (`argv[0]` included); returns the exit status.
    pub main: fn(Vec<OsString>) -> ExitCode,
    /// Its `--describe-json` document.
    pub describe: fn() -> serde_json::Value,
    /// Its fold program text with default flags.
    pub program: fn() -> String,
    /// The algorithm with flags [(flag without --, value)] for a multi-algorithm
    /// daemon (`--also NAME:FLAG=VALUE...`); the error names the algorithm and flag.
    pub host: HostFn,
}

/// Builds a hosted algorithm from `--also` flags [(flag without --, value)].
pub type HostFn = fn(&[(String, String)]) -> Result<Box<dyn crate::portus_glue::HostedAlg>, String>;

/// The entry of algorithm `S`.
pub const fn entry<S: AlgorithmSpec>() -> Entry {
    Entry {
        name: S::NAME,
        main: cli::main_from::<S>,
        describe: cli::describe::<S>,
        program: cli::default_program::<S>,
        host: cli::hosted::<S>,
    }
}

/// The suite, in listing order.
pub const SUITE: &[Entry] = &[
    entry::<reno::RenoSpec>(),
    entry::<cubic::CubicSpec>(),
    entry::<bbr::BbrSpec>(),
    entry::<copa::CopaSpec>(),
    entry::<vegas::VegasSpec>(),
    // The cellular-contest algorithms (docs/algorithms.md).
    entry::<contest::fixed_window::FixedWindowSpec>(),
    entry::<contest::aimd::AimdSpec>(),
    entry::<contest::delay_threshold::DelayThresholdSpec>(),
    entry::<contest::rocinante::RocinanteSpec>(),
    entry::<contest::sprout_ewma::SproutEwmaSpec>(),
    entry::<contest::pid::PidSpec>(),
    entry::<contest::interval_prediction::IntervalPredictionSpec>(),
    entry::<contest::mixture::MixtureSpec>(),
    entry::<contest::spoderman::SpodermanSpec>(),
    entry::<contest::exp3cc::Exp3ccSpec>(),
    // The teaching algorithm docs/writing-an-algorithm.md builds.
    entry::<tutorial::TutorialSpec>(),
];

/// The entry called `name`.
pub fn find(name: &str) -> Option<&'static Entry> {
    SUITE.iter().find(|e| e.name == name)
}

/// The names of the suite, in listing order.
pub fn names() -> Vec<&'static str> {
    SUITE.iter().map(|e| e.name).collect()
}

/// `--list-json`: a JSON array of every algorithm's `--describe-json` document.
pub fn list_json() -> serde_json::Value {
    serde_json::Value::Array(SUITE.iter().map(|e| (e.describe)()).collect())
}

/// Main of the `ccp-algorithms` binary: `--list-json`, `NAME [flags]`, or help.
pub fn multiplexer_main(args: Vec<OsString>) -> ExitCode {
    let first = args.get(1).and_then(|a| a.to_str()).unwrap_or("");
    if first == "--list-json" {
        println!("{}", serde_json::to_string_pretty(&list_json()).expect("json"));
        return ExitCode::SUCCESS;
    }
    if let Some(e) = find(first) {
        let mut rest = vec![OsString::from(format!("{} {}", cli::MULTIPLEXER, e.name))];
        rest.extend(args.into_iter().skip(2));
        return (e.main)(rest);
    }
    let usage = format!(
        "usage: {m} NAME [flags]   run algorithm NAME ({m} NAME --help for its flags)\n       \
         {m} NAME [flags] --also NAME2[:FLAG=VALUE...]...   one daemon hosting several (NAME is the default)\n       \
         {m} --list-json    describe every algorithm as JSON\nalgorithms: {}",
        names().join(", "),
        m = cli::MULTIPLEXER
    );
    if first == "--help" || first == "-h" {
        println!("{usage}");
        ExitCode::SUCCESS
    } else {
        if !first.is_empty() {
            eprintln!("error: unknown algorithm {first:?}");
        }
        eprintln!("{usage}");
        ExitCode::from(2)
    }
}

/// Main of a per-algorithm alias binary (e.g. `ccp-reno` = `ccp-algorithms reno`).
pub fn alias_main(name: &str) -> ExitCode {
    let e = find(name).unwrap_or_else(|| panic!("{name} is not in the suite"));
    (e.main)(std::env::args_os().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_programs_compile() {
        let mut n = names();
        n.sort();
        n.dedup();
        assert_eq!(n.len(), SUITE.len());
        for e in SUITE {
            let text = (e.program)();
            let (bin, sc) =
                portus::lang::compile(text.as_bytes(), &[]).unwrap_or_else(|err| panic!("{}: {err:?}", e.name));
            // Serialize the install message as Portus does (immediates < 2^31, register limits).
            let install = portus::serialize::install::Msg {
                sid: 1,
                program_uid: sc.program_uid,
                num_events: bin.events.len() as u32,
                num_instrs: bin.instrs.len() as u32,
                instrs: bin,
            };
            portus::serialize::serialize(&install).unwrap_or_else(|err| panic!("{}: {err:?}", e.name));
            let d = (e.describe)();
            assert_eq!(d["name"], e.name);
            assert_eq!(d["command"][1], e.name);
        }
    }
}
