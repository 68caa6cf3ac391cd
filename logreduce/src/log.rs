//! A log file read in pieces of whole lines and reduced; the cache archive written.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::npz::{Column, NpzWriter};
use crate::parse::{event_at, Declined, Header};
use crate::reduce::{Reducer, Reduction, COLUMNS};

/// Bytes read at a time (whole lines are reduced; a longer line is read whole).
pub const CHUNK_BYTES: usize = 1 << 20;

/// The log's size and modification time (ns) when it was opened: the stamp
/// that tells the analysis whether a cache is of the log on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub size: u64,
    pub mtime_ns: i128,
}

/// What became of a log: reduced, or left to the event reader (and why).
pub enum Outcome {
    Reduced(Box<Reduction>, Stamp),
    Declined(Declined),
}

/// Reduce the log at `path` (see [`crate::parse`] for what is taken);
/// `data_min_bytes` as [`Reducer::new`]. Errors: the file cannot be read.
pub fn reduce_file(path: &Path, data_min_bytes: u64) -> io::Result<Outcome> {
    let mut f = File::open(path)?;
    let meta = f.metadata()?;
    let stamp = Stamp {
        size: meta.size(),
        mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
    };
    let mut header = Header::default();
    // room for every ms up to the last line's time at once (no copy as the windows grow), at most as
    // many ms as the log has bytes
    let last = last_time(&f, stamp.size).map(|t| (t, stamp.size as usize));
    let mut red = Reducer::with_hint(data_min_bytes, last);
    let mut in_head = true;
    let mut lineno: u64 = 0;
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut have = 0; // bytes in buf, from its start
    loop {
        if have == buf.len() {
            buf.resize(buf.len() * 2, 0); // a line longer than the buffer
        }
        let got = f.read(&mut buf[have..])?;
        if got == 0 {
            break;
        }
        have += got;
        let Some(last_nl) = buf[..have].iter().rposition(|&b| b == b'\n') else {
            continue;
        };
        let body = &buf[..=last_nl];
        let mut pos = 0;
        while pos < body.len() {
            lineno += 1;
            if in_head {
                if body[pos] == b'#' {
                    let end = pos
                        + body[pos..]
                            .iter()
                            .position(|&b| b == b'\n')
                            .expect("ends with a newline");
                    if let Err(d) = header.line(&body[pos..end], lineno) {
                        return Ok(Outcome::Declined(d));
                    }
                    pos = end + 1;
                    continue;
                }
                in_head = false;
            }
            if body[pos] == b'\n' {
                pos += 1; // a blank line
                continue;
            }
            let (e, next) = match event_at(body, pos) {
                Ok(x) => x,
                Err(why) => return Ok(Outcome::Declined(Declined::at(lineno, why))),
            };
            if let Err(why) = red.add(e) {
                return Ok(Outcome::Declined(Declined::at(lineno, why)));
            }
            pos = next;
        }
        debug_assert_eq!(pos, last_nl + 1);
        buf.copy_within(pos..have, 0);
        have -= pos;
    }
    if have > 0 {
        return Ok(Outcome::Declined(Declined::at(
            lineno + 1,
            "the last line has no newline (cut mid-line)",
        )));
    }
    match red.finish(header.base) {
        Ok(r) => Ok(Outcome::Reduced(Box::new(r), stamp)),
        Err(why) => Ok(Outcome::Declined(Declined::at(0, why))),
    }
}

/// The time of the file's last line when it is an event line (a guess for the log's span), read from
/// its last few KB.
fn last_time(f: &File, size: u64) -> Option<u64> {
    use std::os::unix::fs::FileExt;

    let tail = size.min(4096);
    let mut buf = vec![0u8; tail as usize];
    f.read_exact_at(&mut buf, size - tail).ok()?;
    let end = buf.iter().rposition(|&b| b == b'\n')?;
    let start = buf[..end]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    event_at(&buf[..=end], start).ok().map(|(e, _)| e.time_ms)
}

/// The cache's JSON header, as `transient.cache` writes it (`json.dumps` of
/// the same dict: the same keys in the same order, the same separators).
pub fn meta_json(r: &Reduction, stamp: Stamp, cache_version: u32) -> String {
    let data = match r.data_ms {
        Some((a, b)) => format!("[{a}, {b}]"),
        None => "null".into(),
    };
    format!(
        "{{\"stamp\": {{\"version\": {cache_version}, \"size\": {}, \"mtime_ns\": {}}}, \"n_events\": {}, \
         \"first_ms\": {}, \"first_event_ms\": {}, \"has_packets\": {}, \"sent_lo\": {}, \"data_ms\": {data}, \
         \"delay_dtype\": \"{}\"}}",
        stamp.size, stamp.mtime_ns, r.n_events, r.first_ms, r.first_event_ms, r.has_packets, r.sent_lo,
        r.delay_dtype
    )
}

/// Writes the cache archive of `r` (its arrays, then `meta`) to `w`, one array in memory at a time.
/// `w` is sought back within what was written (each entry's sizes go into its header).
pub fn write_cache(
    w: impl Write + Seek,
    r: &Reduction,
    stamp: Stamp,
    cache_version: u32,
) -> io::Result<()> {
    let mut npz = NpzWriter::new(w);
    for (k, name) in COLUMNS.iter().enumerate() {
        npz.array(name, &r.column(k))?;
    }
    let meta = Column::U8(meta_json(r, stamp, cache_version).into_bytes());
    npz.array("meta", &meta)?;
    npz.finish().map(drop)
}
