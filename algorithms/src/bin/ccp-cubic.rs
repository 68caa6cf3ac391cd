//! ccp-cubic: `ccp-algorithms cubic` under its own name. See `ccp-cubic --help`.
fn main() -> std::process::ExitCode {
    ccp_algorithms::suite::alias_main("cubic")
}
