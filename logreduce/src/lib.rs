//! `ccplab-logreduce`: a one-flow mahimahi mm-link log reduced to its
//! per-millisecond sums in one streaming pass, written as the analysis's
//! per-ms cache (`<log>.ms.npz`, read by `transient.cache`).
//!
//! Modules: [`parse`] (which lines are taken), [`reduce`] (the per-ms sums),
//! [`npz`] (the archive numpy reads), [`log`] (a file read in pieces, and the
//! cache's header).

pub mod log;
pub mod npz;
pub mod parse;
pub mod reduce;
