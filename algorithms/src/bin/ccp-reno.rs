//! ccp-reno: `ccp-algorithms reno` under its own name. See `ccp-reno --help`.
fn main() -> std::process::ExitCode {
    ccp_algorithms::suite::alias_main("reno")
}
