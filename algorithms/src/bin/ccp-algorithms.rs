//! ccp-algorithms: every algorithm of the suite. `ccp-algorithms NAME [flags]`
//! runs one; `ccp-algorithms --list-json` describes all (see src/suite.rs).
fn main() -> std::process::ExitCode {
    ccp_algorithms::suite::multiplexer_main(std::env::args_os().collect())
}
