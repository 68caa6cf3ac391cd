//! The uplink log in mahimahi's mm-link text format
//! (mahimahi `src/frontend/link_queue.cc`), so mm-throughput-graph,
//! mm-delay-graph and ccplab's `transient` reader work on it.
//!
//! ```text
//! # mahimahi mm-link (ccplab-link) [<trace path>] > <log path>
//! # command line: <argv joined by spaces>
//! # queue: droptail [packets=N]        (or [bytes=B], or infinite)
//! # init timestamp: <unix ms of time 0>
//! # base timestamp: 0                  (or <unix ms>, see LogBase)
//! t + size            arrival at the queue (dropped packets too)
//! t - size delay      departure; delay = departure - arrival, ms
//! t # 1504            every delivery opportunity, used or not
//! t d npkts nbytes    drop(s) at t
//! ```
//! `t` is an integer ms since time 0 = start of trace replay. `size` is the
//! IP packet length + 4, mahimahi's TUN header, so a full-MTU packet and an
//! opportunity are both 1504 bytes.
//!
//! Per-flow attribution (`--flow-log`): beside the stock log, a file with
//! one line per packet event of the log (`+`, `-` and `d` lines, in the same
//! order; no header, no `#` lines): the decimal flow key of that packet
//! (`flowkey`: the receiver-side port, 0 for none). The mahimahi log itself
//! stays byte-for-byte stock, so mahimahi's tools read it unchanged, and the
//! k-th line of the flow log belongs to the k-th packet event of the log.
//!
//! The log is written to a hidden temporary file next to the target
//! ([`ccplab_util::fs::temp_beside`]) and renamed into place by
//! [`MmLog::finish`] ([`ccplab_util::fs::persist_synced`]), so the target
//! path only ever holds a complete log (one that was flushed at exit).

use std::{
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard},
};

use ccplab_util::fs::{persist_synced, temp_beside};
use tempfile::NamedTempFile;

use crate::queue::{EventSink, FlowKey};

/// Size logged for one delivery opportunity (1500 B + 4 B TUN header).
pub const OPPORTUNITY_LOG_BYTES: u32 = 1504;

/// What the `# base timestamp:` header holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogBase {
    /// `0`: event times are ms since time 0 and mahimahi tools that subtract
    /// the base (mm-throughput-graph) work unchanged; the unix time of time
    /// 0 is in `# init timestamp:`.
    Zero,
    /// Unix ms of time 0 (event times stay relative to it). mahimahi's own
    /// graph scripts reject such a log (negative times after subtraction).
    Unix,
}

/// Fixed header fields, known before the link starts.
#[derive(Debug, Clone)]
pub struct LogHeader {
    pub trace_path: PathBuf,
    pub log_path: PathBuf,
    pub command_line: String,
    pub queue: String,
    pub base: LogBase,
    /// Where to write the per-flow attribution, if anywhere.
    pub flow_log_path: Option<PathBuf>,
}

struct Inner {
    /// The temporary file (deleted if dropped without being persisted).
    writer: Option<BufWriter<NamedTempFile>>,
    /// The flow log's temporary file, with `--flow-log`.
    flows: Option<BufWriter<NamedTempFile>>,
    header: LogHeader,
    started: bool,
    error: Option<std::io::Error>,
}

/// A shared, buffered mm-link log. Cloning shares the same file.
#[derive(Clone)]
pub struct MmLog {
    inner: Arc<Mutex<Inner>>,
}

/// Locked access for writing a batch of events.
pub struct MmLogGuard<'a>(MutexGuard<'a, Inner>);

impl MmLog {
    /// Creates the temporary file next to `header.log_path` (fails early,
    /// before any namespace exists, if the directory is not writable).
    pub fn create(header: LogHeader) -> std::io::Result<Self> {
        let file = temp_beside(&header.log_path)?;
        let flows = match &header.flow_log_path {
            Some(p) => Some(BufWriter::with_capacity(1 << 18, temp_beside(p)?)),
            None => None,
        };
        Ok(Self {
            inner: Arc::new(Mutex::new(Inner {
                writer: Some(BufWriter::with_capacity(1 << 20, file)),
                flows,
                header,
                started: false,
                error: None,
            })),
        })
    }

    fn lock_inner(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere must not cost us the log: ignore poisoning.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the header with time 0 = `base_unix_ms`. Idempotent.
    pub fn start(&self, base_unix_ms: u64) {
        let mut g = self.lock_inner();
        if g.started {
            return;
        }
        g.started = true;
        let h = g.header.clone();
        let base = match h.base {
            LogBase::Zero => 0,
            LogBase::Unix => base_unix_ms,
        };
        let text = format!(
            "# mahimahi mm-link (ccplab-link) [{}] > {}\n# command line: {}\n# queue: {}\n# init timestamp: {}\n# base timestamp: {}\n",
            h.trace_path.display(),
            h.log_path.display(),
            h.command_line,
            h.queue,
            base_unix_ms,
            base
        );
        g.write(text.as_bytes());
    }

    /// Whether the header (time 0) has been written.
    pub fn started(&self) -> bool {
        self.lock_inner().started
    }

    /// Locks the log for a batch of events.
    pub fn lock(&self) -> MmLogGuard<'_> {
        MmLogGuard(self.lock_inner())
    }

    /// Flushes, fsyncs and renames the log into place. If the link never
    /// started (no packet in first-packet mode) the header is written with
    /// time 0 = now. Later events are discarded. Returns the first write
    /// error, if any.
    pub fn finish(&self, now_unix_ms: u64) -> std::io::Result<()> {
        self.start(now_unix_ms);
        let mut g = self.lock_inner();
        let Some(w) = g.writer.take() else {
            return Ok(());
        };
        if let Some(e) = g.error.take() {
            return Err(e); // dropping `w` deletes the temporary file
        }
        let file = w.into_inner().map_err(|e| e.into_error())?;
        if let (Some(flows), Some(path)) = (g.flows.take(), g.header.flow_log_path.clone()) {
            let flows = flows.into_inner().map_err(|e| e.into_error())?;
            persist_synced(flows, &path)?;
        }
        persist_synced(file, &g.header.log_path)
    }

    /// Removes the temporary file without publishing (used when the run
    /// fails before the link came up).
    pub fn abandon(&self) {
        // Dropping the NamedTempFile deletes it.
        let mut g = self.lock_inner();
        g.writer.take();
        g.flows.take();
    }

    /// The final path of the log.
    pub fn path(&self) -> PathBuf {
        self.lock_inner().header.log_path.clone()
    }
}

impl Inner {
    fn write(&mut self, bytes: &[u8]) {
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = w.write_all(bytes) {
                if self.error.is_none() {
                    tracing::error!("writing the link log failed: {e}");
                    self.error = Some(e);
                }
            }
        }
    }

    fn write_key(&mut self, key: FlowKey) {
        let Some(w) = self.flows.as_mut() else {
            return;
        };
        if let Err(e) = writeln!(w, "{key}") {
            if self.error.is_none() {
                tracing::error!("writing the flow log failed: {e}");
                self.error = Some(e);
            }
        }
    }
}

impl MmLogGuard<'_> {
    fn line(&mut self, args: std::fmt::Arguments<'_>) {
        let mut buf = Vec::with_capacity(32);
        let _ = buf.write_fmt(args);
        self.0.write(&buf);
    }
}

impl EventSink for MmLogGuard<'_> {
    fn arrival(&mut self, t_ms: u64, size: u32, key: FlowKey) {
        self.line(format_args!("{t_ms} + {size}\n"));
        self.0.write_key(key);
    }
    fn departure(&mut self, t_ms: u64, size: u32, delay_ms: u64, key: FlowKey) {
        self.line(format_args!("{t_ms} - {size} {delay_ms}\n"));
        self.0.write_key(key);
    }
    fn opportunity(&mut self, t_ms: u64) {
        self.line(format_args!("{t_ms} # {OPPORTUNITY_LOG_BYTES}\n"));
    }
    fn drop(&mut self, t_ms: u64, packets: u32, bytes: u64, key: FlowKey) {
        self.line(format_args!("{t_ms} d {packets} {bytes}\n"));
        self.0.write_key(key);
    }
}

/// Unix time now in ms.
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Shows a path for the header even if relative.
pub fn display_path(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}
