//! The mahimahi cellular traces shipped in the repository
//! (`traces/cellular/`, see its SOURCE.md for origin and licence).

use std::path::PathBuf;

/// Directory of the cellular traces in this source tree
/// (`<repo>/traces/cellular`), located from this crate's manifest
/// directory at build time.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cellular")
}

/// Path of one cellular trace by file name, e.g.
/// `trace("Verizon-LTE-short.down")`. Does not check that it exists.
pub fn trace(file_name: &str) -> PathBuf {
    dir().join(file_name)
}
