//! `ccplab-trace`: generate step-change mahimahi traces and check traces.

use std::{path::PathBuf, process::ExitCode};

use anyhow::{bail, Context, Result};
use ccplab_traces::{Segment, StepTraceSpec, Trace};
use clap::{Parser, Subcommand};

/// Mahimahi trace tool: one line per delivery opportunity of one 1500-byte
/// packet at that millisecond; the trace loops with period = last timestamp.
#[derive(Parser)]
#[command(name = "ccplab-trace", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a seeded step-change trace (TPCCA poster model): nominal
    /// rate A Mbit/s before T s, B after (or any steps with --step), plus
    /// per-ms noise N(0, sigma) truncated at +-3 sigma by resampling, rate
    /// clipped at >= 0, no noise where the nominal rate is 0. Rate becomes
    /// opportunities via a fractional credit (12 Mbit/s = 1 packet/ms).
    /// Timestamps run 1..=D*1000; the last line is always D*1000 (the period).
    /// The same arguments and seed give a byte-identical file.
    Step {
        /// Nominal rate from time 0, Mbit/s (default: FROM of the earliest --step).
        #[arg(long, value_name = "A", required_unless_present = "steps")]
        before_mbps: Option<f64>,
        /// Nominal rate from --at-s on, Mbit/s (needs --at-s).
        #[arg(long, value_name = "B", requires = "at_s")]
        after_mbps: Option<f64>,
        /// Time of the step, seconds (whole milliseconds).
        #[arg(long, value_name = "T", requires = "after_mbps")]
        at_s: Option<f64>,
        /// A step AT_S:FROM_MBPS:TO_MBPS (repeatable; the project's one step
        /// syntax), e.g. --step 0:0:12 --step 10:12:4. FROM must be the rate
        /// in effect just before AT_S.
        #[arg(long = "step", value_name = "AT_S:FROM_MBPS:TO_MBPS", value_parser = parse_step)]
        steps: Vec<(f64, f64, f64)>,
        /// Trace length = loop period, seconds (whole milliseconds).
        #[arg(long, value_name = "D")]
        duration_s: f64,
        /// Noise standard deviation, Mbit/s (0 = noiseless).
        #[arg(long, value_name = "S", default_value_t = 0.0)]
        sigma_mbps: f64,
        /// Seed of the ChaCha8 noise generator.
        #[arg(long, value_name = "N", default_value_t = 0)]
        seed: u64,
        /// Output trace file (written atomically).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Validate a trace and print opportunities, period_ms and mean Mbit/s.
    /// Exits 1 with a message naming the file and line if the trace is bad.
    Check {
        file: PathBuf,
        /// Print {"path","opportunities","period_ms","mean_mbps"} as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_step(s: &str) -> Result<(f64, f64, f64), String> {
    let fields: Vec<&str> = s.split(':').collect();
    let [at, from, to] = fields[..] else {
        return Err(format!(
            "{s:?}: expected AT_S:FROM_MBPS:TO_MBPS, e.g. 0:0:12 or 10:12:4"
        ));
    };
    let num = |text: &str, what: &str| -> Result<f64, String> {
        match text.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
            _ => Err(format!("{s:?}: {what} {text:?} is not a number >= 0")),
        }
    };
    Ok((
        num(at, "AT_S")?,
        num(from, "FROM_MBPS")?,
        num(to, "TO_MBPS")?,
    ))
}

/// The schedule's points (start ms, Mbit/s): time 0 at `before` (or the
/// earliest step's FROM), then each step; a step's FROM must be the rate in
/// effect just before it, so a mistyped step cannot silently change the trace.
fn schedule_points(
    before_mbps: Option<f64>,
    after: Option<(f64, f64)>,
    mut steps: Vec<(f64, f64, f64)>,
) -> Result<Vec<(u64, f64)>> {
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let initial = match (before_mbps, steps.first()) {
        (Some(a), _) => a,
        (None, Some(first)) => first.1,
        (None, None) => bail!("--before-mbps or at least one --step is required"),
    };
    let mut points: Vec<(u64, f64)> = vec![(0, initial)];
    if let Some((t, b)) = after {
        points.push((seconds_to_ms("--at-s", t)?, b));
    }
    for (t, from, to) in steps {
        let at_ms = seconds_to_ms("--step time", t)?;
        let current = points
            .iter()
            .filter(|p| p.0 <= at_ms)
            .max_by_key(|p| p.0) // the last one pushed among equal times
            .map_or(initial, |p| p.1);
        if (current - from).abs() > 1e-9 {
            bail!("--step {t}:{from}:{to}: the rate before {t} s is {current} Mbit/s, not {from}");
        }
        points.push((at_ms, to));
    }
    points.sort_by_key(|p| p.0);
    Ok(points)
}

/// Seconds -> whole milliseconds; errors if negative, not finite or not whole ms.
fn seconds_to_ms(what: &str, s: f64) -> Result<u64> {
    let ms = s * 1000.0;
    if !ms.is_finite() || ms < 0.0 || (ms - ms.round()).abs() > 1e-6 {
        bail!("{what} = {s} s is not a non-negative whole number of milliseconds");
    }
    Ok(ms.round() as u64)
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Step {
            before_mbps,
            after_mbps,
            at_s,
            steps,
            duration_s,
            sigma_mbps,
            seed,
            out,
        } => {
            let after = at_s.zip(after_mbps);
            let points = schedule_points(before_mbps, after, steps)?;
            // A step at 0 s replaces the initial rate.
            let mut schedule: Vec<Segment> = Vec::new();
            for (start_ms, mbps) in points {
                match schedule.last_mut() {
                    Some(last) if last.start_ms == start_ms && start_ms == 0 => last.mbps = mbps,
                    _ => schedule.push(Segment { start_ms, mbps }),
                }
            }
            let duration_ms = seconds_to_ms("--duration-s", duration_s)?;
            let spec = StepTraceSpec {
                schedule,
                duration_ms,
                sigma_mbps,
                seed,
            };
            let trace = spec.generate().context("invalid step-trace arguments")?;
            trace.write(&out)?;
            let s = trace.summary();
            eprintln!(
                "wrote {}: {} opportunities, period {} ms, mean {:.3} Mbit/s",
                out.display(),
                s.opportunities,
                s.period_ms,
                s.mean_mbps
            );
        }
        Command::Check { file, json } => {
            let trace = Trace::read(&file)?;
            let s = trace.summary();
            if json {
                let v = serde_json::json!({
                    "path": file,
                    "opportunities": s.opportunities,
                    "period_ms": s.period_ms,
                    "mean_mbps": s.mean_mbps,
                });
                println!("{v}");
            } else {
                println!(
                    "{}: {} opportunities, period {} ms, mean {:.3} Mbit/s",
                    file.display(),
                    s.opportunities,
                    s.period_ms,
                    s.mean_mbps
                );
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccplab-trace: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
