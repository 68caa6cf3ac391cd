//! Which CCP algorithm a flow asks Portus for: the rule table of `--rule`.
//!
//! A flow's create message carries a congestion-algorithm name; Portus gives
//! the flow the hosted algorithm of that name (`CongAlg::name()`), or its
//! default algorithm when none matches. The table maps a flow's keys to that
//! name; the first rule that matches wins, and a flow no rule matches gets
//! the datapath's `--congalg`.
//!
//! Rule syntax, one `--rule` each (`KEY=VALUE:ALGORITHM`; the algorithm name
//! is after the last `:`, so a cgroup path may contain `:`):
//! - `dport=5201:cubic`, `dport=5200-5209:cubic`: TCP destination port
//!   (the remote port of the sending socket), one port or an inclusive range.
//! - `mark=0x10:reno`, `mark=0x10/0xff:reno`: socket mark (SO_MARK,
//!   `sk_mark`), decimal or `0x` hex; with `/MASK` the rule matches when
//!   `mark & MASK == VALUE` (iptables' `--mark value/mask`); without, exactly.
//! - `cgroup=/sys/fs/cgroup/x:bbr`: the socket's cgroup v2 (the cgroup of the
//!   process that created it), given as its directory in the cgroup v2
//!   hierarchy. Resolved once, in [`RuleTable::parse`], to the cgroup id,
//!   which on cgroup v2 is the inode number of that directory (what
//!   `bpf_get_current_cgroup_id()` / `bpf_sk_cgroup_id()` return). It matches
//!   flows of exactly that cgroup, not of its descendants.
//!
//! Algorithm names: 1 to 63 bytes of `[A-Za-z0-9_.-]` (libccp's create
//! message holds 64 bytes with the terminating NUL).
//!
//! The only I/O is at parse time: `stat`/`statfs` of each cgroup path.

use std::fmt;
use std::path::{Path, PathBuf};

/// The keys of one flow the rules look at (filled from the BPF create event).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowKeys {
    /// TCP destination port, host byte order.
    pub dport: u16,
    /// Socket mark (`sk_mark`, set with SO_MARK).
    pub mark: u32,
    /// cgroup v2 id of the socket's cgroup (its directory's inode number).
    pub cgroup_id: u64,
}

/// What a rule matches on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// Destination port in `lo..=hi`.
    Dport { lo: u16, hi: u16 },
    /// `mark & mask == value`.
    Mark { value: u32, mask: u32 },
    /// The cgroup with this id (resolved from `path`).
    Cgroup { path: PathBuf, id: u64 },
}

impl Match {
    fn matches(&self, f: &FlowKeys) -> bool {
        match self {
            Match::Dport { lo, hi } => (*lo..=*hi).contains(&f.dport),
            Match::Mark { value, mask } => f.mark & mask == *value,
            Match::Cgroup { id, .. } => f.cgroup_id == *id,
        }
    }

    /// Whether every flow `other` matches is also matched by `self` (so a
    /// later rule `other` would be dead behind `self`).
    fn covers(&self, other: &Match) -> bool {
        match (self, other) {
            (Match::Dport { lo, hi }, Match::Dport { lo: l2, hi: h2 }) => lo <= l2 && h2 <= hi,
            // Every mark m with m & m2 == v2 has m & m1 == v1 iff m1 ⊆ m2 and v2 & m1 == v1.
            (Match::Mark { value: v1, mask: m1 }, Match::Mark { value: v2, mask: m2 }) => {
                m1 & !m2 == 0 && v2 & m1 == *v1
            }
            (Match::Cgroup { id: a, .. }, Match::Cgroup { id: b, .. }) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Match::Dport { lo, hi } if lo == hi => write!(f, "dport={lo}"),
            Match::Dport { lo, hi } => write!(f, "dport={lo}-{hi}"),
            Match::Mark { value, mask: u32::MAX } => write!(f, "mark={value:#x}"),
            Match::Mark { value, mask } => write!(f, "mark={value:#x}/{mask:#x}"),
            Match::Cgroup { path, id } => write!(f, "cgroup={} (id {id})", path.display()),
        }
    }
}

/// One rule: flows matching `matcher` ask for `algorithm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub matcher: Match,
    pub algorithm: String,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.matcher, self.algorithm)
    }
}

/// The rule table: ordered rules (first match wins) and the default name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleTable {
    rules: Vec<Rule>,
    default: String,
}

/// `statfs` magic of a cgroup v2 file system (linux/magic.h CGROUP2_SUPER_MAGIC).
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// libccp's limit on a congestion-algorithm name (64 bytes with the NUL).
pub const MAX_ALGORITHM_BYTES: usize = 63;

impl RuleTable {
    /// Parse `--rule` values (see the module doc) with `default` = `--congalg`.
    /// cgroup paths are resolved to cgroup ids now. Errors name the rule (and
    /// the path) and what is wrong: bad syntax, unknown key, port 0 or out of
    /// range, bad number, a missing path or one outside cgroup v2, a bad
    /// algorithm name, a rule an earlier one makes unreachable.
    pub fn parse(specs: &[String], default: &str) -> Result<RuleTable, String> {
        Self::parse_with(specs, default, cgroup_id_of)
    }

    /// [`RuleTable::parse`] with `cgroup_id` resolving a cgroup path (tests).
    pub fn parse_with(
        specs: &[String],
        default: &str,
        cgroup_id: impl Fn(&Path) -> Result<u64, String>,
    ) -> Result<RuleTable, String> {
        check_algorithm(default).map_err(|e| format!("--congalg {default:?}: {e}"))?;
        let mut rules: Vec<Rule> = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let rule = parse_rule(spec, &cgroup_id).map_err(|e| format!("--rule {spec:?}: {e}"))?;
            if let Some((j, _)) = rules.iter().enumerate().find(|(_, r)| r.matcher.covers(&rule.matcher)) {
                return Err(format!(
                    "--rule {spec:?} (rule {}) can never match: rule {} ({}) matches all its flows first",
                    i + 1,
                    j + 1,
                    specs[j]
                ));
            }
            rules.push(rule);
        }
        Ok(RuleTable { rules, default: default.to_string() })
    }

    /// The algorithm name of the first rule matching `flow`, else the default.
    pub fn algorithm_for(&self, flow: &FlowKeys) -> &str {
        self.rules.iter().find(|r| r.matcher.matches(flow)).map_or(&self.default, |r| &r.algorithm)
    }

    /// The rules in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The name of flows no rule matches (`--congalg`).
    pub fn default_algorithm(&self) -> &str {
        &self.default
    }
}

/// One `KEY=VALUE:ALGORITHM`.
fn parse_rule(spec: &str, cgroup_id: &impl Fn(&Path) -> Result<u64, String>) -> Result<Rule, String> {
    const FORM: &str = "expected dport=PORT[-PORT]:ALG, mark=VALUE[/MASK]:ALG or cgroup=PATH:ALG";
    let (cond, alg) = spec.rsplit_once(':').ok_or_else(|| format!("no algorithm after ':'; {FORM}"))?;
    let (key, value) = cond.split_once('=').ok_or_else(|| format!("no KEY=VALUE before ':'; {FORM}"))?;
    check_algorithm(alg)?;
    let matcher = match key {
        "dport" => parse_dport(value)?,
        "mark" => parse_mark(value)?,
        "cgroup" => {
            if value.is_empty() {
                return Err("empty cgroup path".into());
            }
            let path = PathBuf::from(value);
            let id = cgroup_id(&path)?;
            Match::Cgroup { path, id }
        }
        _ => return Err(format!("unknown key {key:?}; {FORM}")),
    };
    Ok(Rule { matcher, algorithm: alg.to_string() })
}

fn check_algorithm(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_ALGORITHM_BYTES {
        return Err(format!("algorithm name must be 1 to {MAX_ALGORITHM_BYTES} bytes, got {}", name.len()));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "_.-".contains(*c))) {
        return Err(format!("algorithm name {name:?} has {c:?}; allowed: letters, digits, '_', '.', '-'"));
    }
    Ok(())
}

fn parse_port(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("port {s:?} is not a number in 1..=65535")),
    }
}

fn parse_dport(v: &str) -> Result<Match, String> {
    let (lo, hi) = match v.split_once('-') {
        Some((a, b)) => (parse_port(a)?, parse_port(b)?),
        None => (parse_port(v)?, parse_port(v)?),
    };
    if lo > hi {
        return Err(format!("port range {v:?} is empty (first > last)"));
    }
    Ok(Match::Dport { lo, hi })
}

/// A u32 in decimal or `0x` hex.
fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse::<u32>(),
    };
    r.map_err(|_| format!("{s:?} is not a 32-bit number (decimal or 0x hex)"))
}

fn parse_mark(v: &str) -> Result<Match, String> {
    let (value, mask) = match v.split_once('/') {
        Some((a, m)) => (parse_u32(a)?, parse_u32(m)?),
        None => (parse_u32(v)?, u32::MAX),
    };
    if value & !mask != 0 {
        return Err(format!("mark value {value:#x} has bits outside mask {mask:#x}: it can never match"));
    }
    Ok(Match::Mark { value, mask })
}

/// The cgroup v2 id of directory `path`: its inode number. Errors name the
/// path: missing, not a directory, or not in a cgroup v2 file system.
pub fn cgroup_id_of(path: &Path) -> Result<u64, String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("cgroup {}: {e}", path.display()))?;
    if !meta.is_dir() {
        return Err(format!("cgroup {}: not a directory", path.display()));
    }
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("cgroup {}: path contains a NUL byte", path.display()))?;
    // SAFETY: statfs writes into a zeroed struct of the right type; `c` is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!("cgroup {}: statfs: {}", path.display(), std::io::Error::last_os_error()));
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between architectures
    if st.f_type as i64 != CGROUP2_SUPER_MAGIC {
        return Err(format!(
            "cgroup {}: not in a cgroup v2 hierarchy (file system magic {:#x}); give a directory under a cgroup2 mount (`findmnt -t cgroup2`; often /sys/fs/cgroup or /sys/fs/cgroup/unified)",
            path.display(),
            st.f_type
        ));
    }
    Ok(meta.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// A fake cgroup resolver: /cg/<n> has id n; anything else is missing.
    fn fake(p: &Path) -> Result<u64, String> {
        p.strip_prefix("/cg")
            .ok()
            .and_then(|r| r.to_str()?.parse().ok())
            .ok_or_else(|| format!("cgroup {}: No such file or directory", p.display()))
    }

    fn table(v: &[&str]) -> RuleTable {
        RuleTable::parse_with(&specs(v), "reno", fake).unwrap()
    }

    fn keys(dport: u16, mark: u32, cgroup_id: u64) -> FlowKeys {
        FlowKeys { dport, mark, cgroup_id }
    }

    #[test]
    fn each_key_selects_its_algorithm_and_others_get_the_default() {
        let t = table(&["dport=5201:cubic", "mark=0x10:fixed-window", "cgroup=/cg/77:bbr"]);
        assert_eq!(t.algorithm_for(&keys(5201, 0, 0)), "cubic");
        assert_eq!(t.algorithm_for(&keys(5202, 0x10, 0)), "fixed-window");
        assert_eq!(t.algorithm_for(&keys(5202, 0x11, 77)), "bbr");
        assert_eq!(t.algorithm_for(&keys(5202, 0x11, 78)), "reno");
        assert_eq!(t.default_algorithm(), "reno");
        assert_eq!(t.rules().len(), 3);
        assert_eq!(t.rules()[2].matcher, Match::Cgroup { path: "/cg/77".into(), id: 77 });
    }

    #[test]
    fn first_match_wins() {
        let t = table(&["mark=16:vegas", "dport=5201:cubic"]);
        assert_eq!(t.algorithm_for(&keys(5201, 16, 0)), "vegas");
        assert_eq!(t.algorithm_for(&keys(5201, 17, 0)), "cubic");
        let t = table(&["dport=5201:cubic", "mark=16:vegas"]);
        assert_eq!(t.algorithm_for(&keys(5201, 16, 0)), "cubic");
    }

    #[test]
    fn empty_table_gives_the_default() {
        let t = RuleTable::parse(&[], "cubic").unwrap();
        assert_eq!(t.algorithm_for(&keys(1, 2, 3)), "cubic");
    }

    #[test]
    fn port_ranges_and_mark_masks() {
        let t = table(&["dport=5200-5209:cubic", "mark=0x100/0xf00:bbr"]);
        assert_eq!(t.algorithm_for(&keys(5199, 0, 0)), "reno");
        assert_eq!(t.algorithm_for(&keys(5200, 0, 0)), "cubic");
        assert_eq!(t.algorithm_for(&keys(5209, 0, 0)), "cubic");
        assert_eq!(t.algorithm_for(&keys(5210, 0, 0)), "reno");
        assert_eq!(t.algorithm_for(&keys(1, 0x1155, 0)), "bbr");
        assert_eq!(t.algorithm_for(&keys(1, 0x1255, 0)), "reno");
        // Without a mask the mark must be equal.
        let t = table(&["mark=0x10:bbr"]);
        assert_eq!(t.algorithm_for(&keys(1, 0x110, 0)), "reno");
        assert_eq!(t.rules()[0].to_string(), "mark=0x10 -> bbr");
    }

    #[test]
    fn cgroup_path_may_contain_colons() {
        let t = RuleTable::parse_with(&specs(&["cgroup=/a:b/c:bbr"]), "reno", |p| {
            assert_eq!(p, Path::new("/a:b/c"));
            Ok(9)
        })
        .unwrap();
        assert_eq!(t.algorithm_for(&keys(0, 0, 9)), "bbr");
    }

    /// The error of `v` (with default reno) contains every one of `needles`.
    fn assert_error(v: &[&str], needles: &[&str]) {
        let e = RuleTable::parse_with(&specs(v), "reno", fake).expect_err(&format!("{v:?} must be refused"));
        for n in needles {
            assert!(e.contains(n), "error for {v:?} lacks {n:?}: {e}");
        }
    }

    #[test]
    fn bad_rules_are_refused_naming_the_rule_and_the_problem() {
        assert_error(&["dport=5201"], &["\"dport=5201\"", "no algorithm after ':'"]);
        assert_error(&["5201:cubic"], &["\"5201:cubic\"", "no KEY=VALUE"]);
        assert_error(&["sport=5201:cubic"], &["unknown key \"sport\""]);
        assert_error(&["dport=0:cubic"], &["port \"0\"", "1..=65535"]);
        assert_error(&["dport=70000:cubic"], &["port \"70000\""]);
        assert_error(&["dport=5209-5200:cubic"], &["empty"]);
        assert_error(&["mark=0xzz:cubic"], &["\"0xzz\" is not a 32-bit number"]);
        assert_error(&["mark=0x110/0xf0:cubic"], &["outside mask", "never match"]);
        assert_error(&["dport=5201:"], &["algorithm name must be 1 to 63 bytes"]);
        assert_error(&["dport=5201:cu bic"], &["' '"]);
        let long = format!("dport=5201:{}", "x".repeat(64));
        assert_error(&[&long], &["1 to 63 bytes, got 64"]);
        assert_error(&["cgroup=/nonexistent/x:bbr"], &["cgroup /nonexistent/x", "No such file"]);
        assert_error(&["cgroup=:bbr"], &["empty cgroup path"]);
        let e = RuleTable::parse_with(&[], "", fake).unwrap_err();
        assert!(e.contains("--congalg"), "{e}");
    }

    #[test]
    fn a_rule_hidden_behind_an_earlier_one_is_refused() {
        assert_error(&["dport=5201:cubic", "dport=5201:reno"], &["rule 2", "rule 1 (dport=5201:cubic)"]);
        assert_error(&["dport=5200-5209:cubic", "dport=5205:bbr"], &["can never match"]);
        assert_error(&["mark=0x10/0xf0:cubic", "mark=0x110:bbr"], &["can never match"]);
        assert_error(&["cgroup=/cg/5:cubic", "cgroup=/cg/5:bbr"], &["can never match"]);
        // Overlapping but not covered: both kept, first wins on the overlap.
        let t = table(&["dport=5205:bbr", "dport=5200-5209:cubic", "mark=0x110:vegas", "mark=0x10/0xf0:aimd"]);
        assert_eq!(t.algorithm_for(&keys(5205, 0, 0)), "bbr");
        assert_eq!(t.algorithm_for(&keys(5206, 0, 0)), "cubic");
        assert_eq!(t.algorithm_for(&keys(1, 0x210, 0)), "aimd");
    }

    /// The cgroup2 mount point of this machine (from /proc/self/mounts).
    fn cgroup2_mount() -> PathBuf {
        let mounts = std::fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
        mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() > 2 && f[2] == "cgroup2")
            .map(|f| PathBuf::from(f[1]))
            .unwrap_or_else(|| panic!("needs a cgroup2 file system mounted (none in /proc/self/mounts)"))
    }

    /// The real resolver against this machine's cgroup v2 mount (every
    /// systemd machine and CI runner has one); fails naming it if absent.
    #[test]
    fn real_cgroup_ids_are_directory_inodes_and_non_cgroup_paths_are_refused() {
        use std::os::unix::fs::MetadataExt;
        let root = cgroup2_mount();
        let id = cgroup_id_of(&root).unwrap_or_else(|e| panic!("cgroup2 mount {}: {e}", root.display()));
        assert_eq!(id, std::fs::metadata(&root).unwrap().ino());
        // This process's own cgroup v2 (the "0::/path" line of /proc/self/cgroup).
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let rel = own.lines().find_map(|l| l.strip_prefix("0::")).expect("a cgroup v2 line in /proc/self/cgroup");
        let dir = root.join(rel.trim_start_matches('/'));
        let t = RuleTable::parse(&[format!("cgroup={}:bbr", dir.display())], "reno").unwrap();
        let own_id = std::fs::metadata(&dir).unwrap().ino();
        assert_eq!(t.algorithm_for(&keys(0, 0, own_id)), "bbr");
        assert_eq!(t.algorithm_for(&keys(0, 0, own_id + 1)), "reno");
        let tmp = tempfile::tempdir().unwrap();
        let e = cgroup_id_of(tmp.path()).unwrap_err();
        assert!(e.contains("not in a cgroup v2 hierarchy") && e.contains(&tmp.path().display().to_string()), "{e}");
        let f = tmp.path().join("f");
        std::fs::write(&f, b"").unwrap();
        assert!(cgroup_id_of(&f).unwrap_err().contains("not a directory"));
        let e = RuleTable::parse(&[format!("cgroup={}/no-such-cgroup:bbr", root.display())], "reno").unwrap_err();
        assert!(e.contains("no-such-cgroup") && e.contains("No such file"), "{e}");
    }
}
