//! ccp-cubic: CUBIC (RFC 9438) on Portus. See `ccp-cubic --help`.
fn main() -> std::process::ExitCode {
    ccp_algorithms::cli::main::<ccp_algorithms::CubicSpec>()
}
