//! ccp-reno: TCP Reno (RFC 5681) on Portus. See `ccp-reno --help`.
fn main() -> std::process::ExitCode {
    ccp_algorithms::cli::main::<ccp_algorithms::RenoSpec>()
}
