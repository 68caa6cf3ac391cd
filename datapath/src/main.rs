//! `ccp-datapath`: parses the command line, sets up logging and runs the
//! datapath ([`ccp_datapath::daemon::run`]); see the library for the rest.

use std::process::ExitCode;

use ccp_datapath::cli::Cli;
use ccplab_util::signals::{StopSignals, SIGINT, SIGTERM};
use clap::Parser;

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // colours only on a terminal: logs written to files stay greppable
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
}


fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let stop = match StopSignals::install(&[SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ccp-datapath: error: cannot install SIGINT/SIGTERM handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    match ccp_datapath::daemon::run(cli, &stop) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccp-datapath: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

