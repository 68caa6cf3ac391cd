//! Fold programs: the per-ACK functions a Portus algorithm installs, run
//! either in the kernel (`--fold kernel`, the default) or by libccp in this
//! daemon (`--fold userspace`).
//!
//! The kernel path re-implements libccp 1.2's rules (read in its ccp.c,
//! machine.c, serialize.c; not copied) so Portus cannot tell the
//! difference:
//! - [`msg`]: Portus's messages parsed, and the datapath's built, in
//!   libccp's wire format;
//! - [`compile`](mod@compile) (with `optimise`): an install into the linear program
//!   the kernel interprets (bpf/fold_vm.h), over the instruction set of
//!   [`isa`];
//! - [`table`]: libccp's program table and staged updates. A program with
//!   uid 1 first clears the table (libccp's "a new Portus started" rule);
//!   programs take the first free of [`LIBCCP_MAX_PROGRAMS`] slots and a
//!   uid resolves to the first slot that holds it. Updates are staged and
//!   applied at the flow's next invocation; a change program drops updates
//!   staged earlier;
//! - [`kernel`]: the user-space half of `--fold kernel` ([`KernelFold`]):
//!   messages to the kernel's maps, reports to Portus;
//! - [`jit`]: a program's main section compiled to BPF instead of
//!   interpreted (its assembler in `bpf_asm`);
//! - [`userspace`]: `--fold userspace`, libccp itself ([`FoldEngine`]).
//!
//! Where libccp has undefined behaviour (indices past its arrays, more than
//! 256 instructions or expressions, instruction ranges reaching index 256,
//! which makes its u8 loop counter wrap forever) the message is refused with
//! [`FoldMsgError::Unsupported`] instead (its slot stays empty in the
//! kernel). An install refused for a bad instruction still takes its slot
//! with the half-read program, as in libccp (the bad instruction partly
//! filled in, the rest zero), and the kernel gets that same program.

mod bpf_asm;
pub mod compile;
pub mod isa;
pub mod jit;
pub mod kernel;
pub mod msg;
mod optimise;
pub mod table;
pub mod userspace;

#[cfg(test)]
mod tests;

pub use compile::compile;
pub use isa::*;
pub use kernel::{report_is_prompt, FoldMaps, FoldReport, KernelFold, KernelFoldStats, SMALL_REPORT};
pub use msg::{create_msg, measure_msg, parse_message, ready_msg, FoldMsgError, PortusMsg, Update, WireExpr, WireInstr, WireReg};
pub use table::{FoldStaged, FoldTables, STAGED_CHANGE, STAGED_CONTROL, STAGED_CWND, STAGED_RATE};
pub use userspace::{FoldEngine, GuardEvent, MsgSink};
