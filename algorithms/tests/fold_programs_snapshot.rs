//! Every fold program the suite can install, text for text, against the golden
//! file `tests/golden/fold_programs.txt`.
//!
//! For each algorithm of `suite::SUITE`, as a daemon hosts it (`Entry::host`, the
//! programs `PortusAlg::datapath_programs` installs): its default flags; the
//! report-interval floors 1 us, 5 ms and 1 s (`--min-report-interval-us`); a
//! datapath that does not pace (`--datapath-paces no`, which changes reno's and
//! cubic's flags); and each of its flags set to another value (the first
//! candidate the algorithm accepts: a flipped boolean, another listed value, or
//! twice, half or one more than a number). A variant whose programs are those of
//! the default is written as such, so a flag that starts changing the program
//! fails too. The datapath compiles the same text for `--fold kernel` and
//! `--fold userspace`, so there is one text per variant.
//!
//! Why: the fold layer composes each program from typed parts; restructuring it
//! must leave every installed program byte for byte as it was.
//!
//! To rewrite the golden file after an intended change of a program:
//! `CCPLAB_UPDATE_GOLDEN=1 cargo test -p ccp-algorithms --test fold_programs_snapshot`.

use ccp_algorithms::suite::{Entry, SUITE};
use std::fmt::Write as _;
use std::path::PathBuf;

const FLOORS_US: [u64; 3] = [1, 5_000, 1_000_000];

/// The programs of `e` hosted with `params` (after `--datapath-paces no` when
/// `no_pacing`), as "## NAME\nTEXT" in hosted order; None when the algorithm
/// refuses the params.
fn programs(e: &Entry, params: &[(String, String)], no_pacing: bool) -> Option<String> {
    let mut alg = (e.host)(params).ok()?;
    if no_pacing {
        alg.without_datapath_pacing(ccp_algorithms::cc::SocketPacing::Kernel);
    }
    let mut progs: Vec<_> = alg.programs().into_iter().collect();
    progs.sort();
    let mut out = String::new();
    for (name, text) in progs {
        write!(out, "## {name}\n{text}").unwrap();
    }
    Some(out)
}

/// Values to try for a flag with `default` (and `values`, its listed choices),
/// most telling first.
fn candidates(default: &str, values: &[String]) -> Vec<String> {
    match default {
        "true" => return vec!["false".into()],
        "false" => return vec!["true".into()],
        "inf" => return vec!["100".into()],
        _ => {}
    }
    if !values.is_empty() {
        return values.iter().filter(|v| *v != default).cloned().collect();
    }
    match default.parse::<f64>() {
        Ok(x) if x == 0.0 => vec!["1".into(), "2".into()],
        Ok(x) => vec![format!("{}", x * 2.0), format!("{}", x / 2.0), format!("{}", x + 1.0)],
        Err(_) => vec![],
    }
}

fn label(params: &[(String, String)]) -> String {
    let items: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("[{}]", items.join(" "))
}

/// The whole dump: every algorithm, every variant.
fn dump() -> String {
    let mut out = String::new();
    for e in SUITE {
        writeln!(out, "=== {} ===", e.name).unwrap();
        let default = programs(e, &[], false).unwrap_or_else(|| panic!("{}: default flags refused", e.name));
        write!(out, "--- [] ---\n{default}").unwrap();
        let mut variants: Vec<(String, String)> = vec![];
        for floor in FLOORS_US {
            let p = vec![("min-report-interval-us".to_string(), floor.to_string())];
            let text = programs(e, &p, false).unwrap_or_else(|| panic!("{}: floor {floor} refused", e.name));
            variants.push((label(&p), text));
        }
        variants.push(("[] --datapath-paces no".into(), programs(e, &[], true).expect("default flags")));
        let described = (e.describe)();
        for f in described["flags"].as_array().expect("flags") {
            let Some(flag) = f["flag"].as_str().and_then(|s| s.strip_prefix("--")) else { continue };
            if flag == "min-report-interval-us" {
                continue;
            }
            let default = f["default"].as_str().unwrap_or("");
            let values: Vec<String> = f["values"]
                .as_array()
                .map(|v| v.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                .unwrap_or_default();
            // The first value the algorithm accepts (daemon-wide flags are refused per algorithm).
            for value in candidates(default, &values) {
                let p = vec![(flag.to_string(), value)];
                if let Some(text) = programs(e, &p, false) {
                    variants.push((label(&p), text));
                    break;
                }
            }
        }
        for (name, text) in variants {
            if text == default {
                writeln!(out, "--- {name}: as [] ---").unwrap();
            } else {
                write!(out, "--- {name} ---\n{text}").unwrap();
            }
        }
    }
    out
}

#[test]
fn every_fold_program_is_byte_identical_to_the_golden_file() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/fold_programs.txt");
    let actual = dump();
    if std::env::var_os("CCPLAB_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (CCPLAB_UPDATE_GOLDEN=1 writes it)", path.display()));
    if actual != golden {
        let (n, (a, g)) = actual
            .lines()
            .zip(golden.lines())
            .enumerate()
            .find(|(_, (a, g))| a != g)
            .unwrap_or((actual.lines().count().min(golden.lines().count()), ("<end>", "<end>")));
        panic!(
            "fold programs differ from {} at line {}:\n  golden: {g}\n  actual: {a}\n({} against {} lines)",
            path.display(),
            n + 1,
            golden.lines().count(),
            actual.lines().count()
        );
    }
    // The dump covers every algorithm and some variant that changes a program.
    for e in SUITE {
        assert!(golden.contains(&format!("=== {} ===\n", e.name)), "{}", e.name);
    }
    assert!(golden.contains("--- [min-report-interval-us=5000] ---\n"), "a floor changes a program");
}
