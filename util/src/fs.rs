//! Atomic file writes.
//!
//! Content goes to a temporary file beside the target (same directory, so
//! the same filesystem), is flushed and fsynced, and then renamed over the
//! target with tempfile's `NamedTempFile::persist`: a reader sees the old
//! file or the whole new one, never a partial one. If anything fails, or a
//! temporary file is dropped without being persisted, it is removed.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use tempfile::NamedTempFile;

/// A new, empty temporary file in `path`'s directory, named
/// `.<file name>.<random>.tmp` (hidden, and recognisable as belonging to
/// `path`). Publish it with [`persist_synced`]; dropping it deletes it.
///
/// Errors: `path` has no file name (InvalidInput, naming the path), or the
/// directory is missing or not writable.
pub fn temp_beside(path: &Path) -> io::Result<NamedTempFile> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file path", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .suffix(".tmp")
        .tempfile_in(dir)
}

/// Flushes and fsyncs `tmp`, then renames it over `path` (atomic on one
/// filesystem). On error the temporary file is removed.
pub fn persist_synced(tmp: NamedTempFile, path: &Path) -> io::Result<()> {
    tmp.as_file().sync_all()?;
    tmp.persist(path).map(drop).map_err(|e| e.error)
}

/// Writes `path` atomically: `fill` writes into a buffered temporary file
/// beside `path` ([`temp_beside`]), which is then published with
/// [`persist_synced`]. On any error (from `fill` too) `path` is unchanged
/// and no temporary file is left.
pub fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let mut w = BufWriter::new(temp_beside(path)?);
    fill(&mut w)?;
    let tmp = w.into_inner().map_err(|e| e.into_error())?;
    persist_synced(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_the_target_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ready.json");
        std::fs::write(&p, "old").unwrap();
        write_atomically(&p, |w| w.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(entries(dir.path()), ["ready.json"]);
    }

    #[test]
    fn a_failing_fill_keeps_the_old_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "old").unwrap();
        let err = write_atomically(&p, |w| {
            w.write_all(b"partial")?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        assert_eq!(entries(dir.path()), ["log"]);
    }

    #[test]
    fn temporary_file_is_hidden_beside_the_target_until_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("up.log");
        let mut tmp = temp_beside(&p).unwrap();
        tmp.write_all(b"x").unwrap();
        let names = entries(dir.path());
        assert_eq!(names.len(), 1);
        assert!(
            names[0].starts_with(".up.log.") && names[0].ends_with(".tmp"),
            "{names:?}"
        );
        persist_synced(tmp, &p).unwrap();
        assert_eq!(entries(dir.path()), ["up.log"]);
    }

    #[test]
    fn bad_targets_are_errors_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/x");
        assert!(write_atomically(&missing, |_| Ok(())).is_err());
        let err = write_atomically(Path::new("/"), |_| Ok(())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("not a file path"), "{err}");
    }
}
