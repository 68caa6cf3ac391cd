//! `ccplab-logreduce LOG --out NPZ`: a one-flow mm-link log's per-ms cache.

use std::io::BufWriter;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use ccplab_logreduce::log::{reduce_file, write_cache, Outcome};
use clap::Parser;

/// Reduce a mahimahi mm-link log whose packets are all one flow's to its
/// per-millisecond sums (bytes and counts of arrivals, departures, delivery
/// opportunities and drops; queueing delay sums, peak delays, the smallest
/// delay per sending ms, the delays' histogram) and write them as the
/// analysis's cache (`<log>.ms.npz`, numpy's uncompressed archive; Python's
/// `transient.cache` reads it).
///
/// Exit status: 0 written; 3 the log is not in the form this reader takes
/// (anything but `time symbol number [number]` lines with single spaces and
/// digits below a `#` header block; a time of 2**53 ms or more, a delay of
/// 2**24 ms or more, no departure): the message names the file and line, and
/// the analysis reads such a log as events, wording any error itself;
/// 1 the log cannot be read or the archive not written.
#[derive(Parser)]
#[command(name = "ccplab-logreduce", version)]
struct Cli {
    /// The mm-link log.
    log: PathBuf,
    /// Where the archive goes (written to a temporary file beside it, then renamed over it).
    #[arg(long)]
    out: PathBuf,
    /// The stamp's reader version (`transient.cache.CACHE_VERSION`).
    #[arg(long, default_value_t = 1)]
    cache_version: u32,
    /// Smallest arrival (bytes) of the data flow (`transient.timezero.FLOW_START_MIN_BYTES`).
    #[arg(long, default_value_t = 1000)]
    data_min_bytes: u64,
}

const DECLINED: u8 = 3;

fn run(cli: &Cli) -> Result<ExitCode> {
    let outcome = reduce_file(&cli.log, cli.data_min_bytes)
        .with_context(|| format!("{}", cli.log.display()))?;
    let (red, stamp) = match outcome {
        Outcome::Reduced(red, stamp) => (red, stamp),
        Outcome::Declined(d) => {
            let at = if d.line > 0 {
                format!(":{}", d.line)
            } else {
                String::new()
            };
            eprintln!(
                "ccplab-logreduce: {}{at}: not reduced here: {} (read it as events)",
                cli.log.display(),
                d.reason
            );
            return Ok(ExitCode::from(DECLINED));
        }
    };
    let tmp =
        ccplab_util::fs::temp_beside(&cli.out).with_context(|| format!("{}", cli.out.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, tmp);
    write_cache(&mut w, &red, stamp, cli.cache_version)
        .with_context(|| format!("{}", cli.out.display()))?;
    let tmp = w
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("{}", cli.out.display()))?;
    // readable as a file the analysis writes itself (0666 less the umask), not the temporary file's 0600
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o666 & !umask()))
        .with_context(|| format!("{}", cli.out.display()))?;
    // a cache, not a record: renamed whole over the old one, not synced
    tmp.persist(&cli.out)
        .map_err(|e| e.error)
        .with_context(|| format!("{}", cli.out.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// The process's file mode creation mask (read by setting it, then set back: this process has one thread).
fn umask() -> u32 {
    // SAFETY: umask(2) cannot fail; the mask is restored at once
    unsafe {
        let mask = libc::umask(0o022);
        libc::umask(mask);
        mask as u32
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ccplab-logreduce: {e:#}");
            ExitCode::FAILURE
        }
    }
}
