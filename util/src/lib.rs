//! Shared helpers for ccplab's Rust crates, so each chore is done one way:
//!
//! - [`fs`]: atomic file writes (tempfile's `NamedTempFile::persist`);
//! - [`signals`]: stop signals (SIGINT, SIGTERM, ...) via signal-hook;
//! - [`testkit`]: the test policy for missing resources (root, a tool, a
//!   file: the test fails naming what is missing) and readiness waits with
//!   a timeout (a condition, a file, a TCP listener, a process exit);
//! - [`unix`]: a unix datagram received with its sender's credentials and
//!   bound path (the Portus sockets of the algorithms and the datapath).

pub mod fs;
pub mod signals;
pub mod testkit;
pub mod unix;
