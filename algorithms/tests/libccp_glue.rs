//! End to end in one process: the Portus runtime hosting `ccp-cubic`'s CongAlg
//! (the real glue, flags parsed by the real CLI) drives an in-process libccp
//! datapath over Portus's channel IPC. Checks the initial cwnd, slow start, the
//! beta = 0.7 reduction on loss, and growth afterwards.
//!
//! This binary links libccp, whose exported C symbol `log` shadows libm's
//! (docs/NOTES.md, "libccp's `log` symbol"), so nothing here may compute a float logarithm (Cubic needs
//! only cbrt). The hazard itself is checked on the datapath binary, which
//! links libccp in production: datapath/tests/no_libm_log.rs.

mod common;
use common::{send, Conn};
use ccp_algorithms::cli::parse_from;
use ccp_algorithms::cubic::{Cubic, CubicParams};
use ccp_algorithms::portus_glue::PortusAlg;
use ccp_algorithms::cc::{Measurement, WindowAlgorithm, WindowParams};
use ccp_algorithms::CubicSpec;
use crossbeam::channel::{unbounded, Receiver, Sender};
use portus::ipc::{chan, BackendBuilder, Blocking};
use portus::serialize::Msg;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MSS: u32 = 1460;
/// Long enough that a scheduling stall of the test thread does not add reports.
const RTT_US: u64 = 50_000;

/// libccp -> Portus, counting measurement (report) messages.
struct ToCcp(Sender<Vec<u8>>, Arc<AtomicUsize>);

impl libccp::DatapathOps for ToCcp {
    fn send_msg(&mut self, msg: &[u8]) {
        if let Ok((Msg::Ms(_), _)) = Msg::from_buf(msg) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
        let _ = self.0.send(msg.to_vec());
    }
}


/// Feed `n` messages from Portus into libccp, waiting at most 5 s in total.
fn pump(dp: &libccp::Datapath, from_ccp: &Receiver<Vec<u8>>, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    for k in 0..n {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut m = from_ccp
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("message {k} of {n} from Portus did not arrive in 5 s"));
        dp.recv_msg(&mut m[..]).expect("libccp accepts Portus's message");
    }
}

/// The Portus runtime hosting ccp-cubic (flags `args`, the real CLI) and an
/// in-process libccp datapath joined by channels, the fold program installed.
struct Glue {
    handle: portus::CCPHandle,
    dp: Box<libccp::Datapath>,
    from_ccp: Receiver<Vec<u8>>,
    reports: Arc<AtomicUsize>,
}

impl Glue {
    fn start(args: &[&str]) -> Glue {
        let cli = parse_from::<CubicSpec, _>(args.iter().copied()).expect("flags parse");
        let bounds = cli.common.bounds().unwrap();
        let (to_dp, from_ccp) = unbounded();
        let (to_ccp, from_dp) = unbounded();
        let alg = PortusAlg::<CubicSpec>::new(cli.alg.clone(), bounds);
        let handle = portus::RunBuilder::new(BackendBuilder { sock: chan::Socket::<Blocking>::new(to_dp, from_dp) })
            .default_alg(alg)
            .spawn_thread()
            .run()
            .expect("portus runtime");
        let reports = Arc::new(AtomicUsize::new(0));
        let dp = libccp::DatapathBuilder::default().with_ops(ToCcp(to_ccp, reports.clone())).init().expect("libccp init");
        // A Connection points into the Datapath: box it so it never moves.
        let glue = Glue { handle, dp: Box::new(dp), from_ccp, reports };
        pump(&glue.dp, &glue.from_ccp, 1); // install of the fold program (answer to libccp's ready)
        glue
    }

    /// A flow of MSS bytes per packet and an initial cwnd of 4 packets, once
    /// Portus set it up (changeprog + update_field(Cwnd = init)).
    fn connect(&self) -> libccp::Connection<'_, Conn> {
        let info = libccp::FlowInfo::default().with_mss(MSS).with_init_cwnd(4 * MSS).with_cong_alg("cubic").unwrap();
        let conn = libccp::Connection::start(&self.dp, Conn { cwnd: 4 * MSS }, info).expect("conn");
        pump(&self.dp, &self.from_ccp, 2);
        conn
    }

    /// One ACK of one MSS, `lost` packets marked lost, `in_flight` packets
    /// out (None: the whole cwnd). When it produced a report and `answer` is
    /// set, Portus's answer is applied (it arrives now and takes effect at the
    /// next invoke). Returns whether it reported.
    fn ack_with(&self, conn: &mut libccp::Connection<'_, Conn>, lost: u32, in_flight: Option<u32>, answer: bool) -> bool {
        let before = self.reports.load(Ordering::SeqCst);
        let cwnd = conn.cwnd;
        let in_flight = in_flight.unwrap_or(cwnd / MSS);
        conn.load_primitives(
            libccp::Primitives::default()
                .with_bytes_acked(MSS)
                .with_packets_acked(1)
                .with_lost_pkts_sample(lost)
                .with_rtt_sample_us(RTT_US)
                .with_packets_in_flight(in_flight)
                .with_bytes_in_flight(in_flight * MSS)
                .with_snd_cwnd(cwnd),
        );
        conn.invoke().expect("invoke");
        let reported = self.reports.load(Ordering::SeqCst) > before;
        if reported && answer {
            pump(&self.dp, &self.from_ccp, 1);
        }
        std::thread::sleep(Duration::from_micros(1_000));
        reported
    }

    /// A cwnd-limited ACK whose report, if any, is answered.
    fn ack(&self, conn: &mut libccp::Connection<'_, Conn>, lost: u32) -> bool {
        self.ack_with(conn, lost, None, true)
    }

    /// One ACK as [`Glue::ack_with`], then whatever answers have come are
    /// applied (one not sent never comes); returns (reported, answers applied).
    fn ack_applying_what_came(&self, conn: &mut libccp::Connection<'_, Conn>, lost: u32, in_flight: Option<u32>) -> (bool, usize) {
        let reported = self.ack_with(conn, lost, in_flight, false);
        let answers: Vec<Vec<u8>> = self.from_ccp.try_iter().collect();
        let n = answers.len();
        answers.into_iter().for_each(|m| send(&self.dp, m));
        (reported, n)
    }

    fn stop(self) {
        self.handle.kill();
        self.handle.wait().expect("portus stops cleanly");
    }
}

#[test]
fn cubic_glue_drives_libccp_cwnd() {
    // HyStart off: the scripted ACKs (1 ms apart) form one long ACK train, which
    // would end slow start; this test is about the glue. Every report answered
    // (slow start's answers repeat), so each answer is applied before the next
    // ACK; skipping repeats is repeated_answers_of_an_app_limited_flow_are_not_sent's.
    let glue = Glue::start(&["ccp-cubic", "--hystart", "false", "--skip-repeated-answers", "false"]);
    let mut conn = glue.connect();

    // The first invoke applies the program and the initial cwnd (--init-cwnd-pkts 10).
    glue.ack(&mut conn, 0);
    assert_eq!(conn.cwnd, 10 * MSS, "initial cwnd from --init-cwnd-pkts");

    // Slow start runs in the fold (fold::SLOW_START): every ACK adds its bytes; the
    // reports' answers (Cwnd 0) leave it alone.
    let mut expected = 10 * MSS;
    let mut ss_reports = 0;
    while ss_reports < 3 {
        let reported = glue.ack(&mut conn, 0);
        expected += MSS;
        ss_reports += usize::from(reported);
    }
    assert!(!glue.ack(&mut conn, 0), "1 ms after a report: no report");
    expected += MSS;
    assert_eq!(conn.cwnd, expected, "slow start adds each ACK's bytes");

    // A loss: urgent report; ssthresh = 0.7 x cwnd (RFC 9438 §4.6), and the commanded
    // window is PRR's, between ssthresh and the window at the loss (W itself
    // before anything is delivered in recovery; the next ACK's delivery lowers it).
    let w_pkts = f64::from(conn.cwnd) / f64::from(MSS);
    assert!(glue.ack(&mut conn, 1), "loss is reported at once");
    assert!(!glue.ack(&mut conn, 0));
    let reduced = ((0.7 * w_pkts).max(2.0) * f64::from(MSS)).round() as u32;
    assert!(conn.cwnd >= reduced && conn.cwnd <= (w_pkts * f64::from(MSS)) as u32 + 1,
            "PRR window {} in [0.7 W, W] after the loss", conn.cwnd);

    // Congestion avoidance afterwards (Cubic's cbrt runs here): the window grows
    // again but stays far below 1.5 x W within these few RTTs.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        glue.ack(&mut conn, 0);
    }
    glue.ack(&mut conn, 0);
    assert!(conn.cwnd > reduced, "cwnd grows after recovery: {} <= {reduced}", conn.cwnd);
    assert!(f64::from(conn.cwnd) < 1.5 * w_pkts * f64::from(MSS));

    drop(conn);
    glue.stop();
}

/// The Cwnd (bytes) an answer of the glue sets: the first field of Portus's
/// update_field message (the glue puts Cwnd first). Wire layout
/// (portus serialize/update_field.rs, native endian): a 12-byte header
/// (type u16, length u16, sid u32, field count u32), then per field its
/// register type (u8), index (u32) and value (u64).
fn answered_cwnd(msg: &[u8]) -> u64 {
    u64::from_ne_bytes(msg[17..25].try_into().unwrap())
}

/// Answers of an application-limited flow in congestion avoidance, counted:
/// (reports, answers, cwnd held before the final loss, Cwnd answered to it).
/// The flow leaves slow start at a loss and recovers with cwnd-limited ACKs,
/// then sends `quiet` reports with in flight at 60 % of cwnd (below cubic's
/// cwnd-limited test, above the fold's app-limited back-off), then one loss.
/// Answers are applied as they come (an answer not sent never comes, so none
/// is waited for), and counted up to the one that cuts the window for that loss.
fn answers_of_an_app_limited_flow(args: &[&str], quiet: usize) -> (usize, usize, u32, u64) {
    let glue = Glue::start(args);
    let mut conn = glue.connect();
    while conn.cwnd < 30 * MSS {
        glue.ack_applying_what_came(&mut conn, 0, None); // slow start in the fold
    }
    assert!(glue.ack_applying_what_came(&mut conn, 1, None).0, "loss is reported at once");
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(400) {
        glue.ack_applying_what_came(&mut conn, 0, None); // recovery ends, growth resumes
    }
    let held = conn.cwnd;
    let app_limited = Some(held / MSS * 6 / 10);
    let (mut reports, mut answers) = (0, 0);
    while reports < quiet {
        let (reported, applied) = glue.ack_applying_what_came(&mut conn, 0, app_limited);
        reports += usize::from(reported);
        answers += applied;
    }
    assert!(glue.ack_with(&mut conn, 1, app_limited, false), "loss is reported at once");
    let cut = loop {
        let m = glue.from_ccp.recv_timeout(Duration::from_secs(5)).expect("the loss report's answer within 5 s");
        answers += 1;
        let cwnd = answered_cwnd(&m);
        send(&glue.dp, m);
        if cwnd < u64::from(held) * 9 / 10 {
            break cwnd;
        }
    };
    drop(conn);
    glue.stop();
    (reports + 1, answers, held, cut)
}

#[test]
fn repeated_answers_of_an_app_limited_flow_are_not_sent() {
    use ccp_algorithms::repeats::MAX_SKIPPED_IN_A_ROW;
    let quiet = MAX_SKIPPED_IN_A_ROW as usize + 2;
    let (reports, answers, held, cut) = answers_of_an_app_limited_flow(&["ccp-cubic", "--hystart", "false"], quiet);
    assert_eq!(reports, quiet + 1);
    // the first quiet answer if it changed the window, the (MAX + 1)-th repeat
    // and the loss's; one more if an answer was applied an ACK late
    assert!((2..=4).contains(&answers), "{answers} answers to {reports} reports, cwnd held at {held} bytes, cut to {cut}");

    let every = ["ccp-cubic", "--hystart", "false", "--skip-repeated-answers", "false"];
    let (reports, answers, held, cut) = answers_of_an_app_limited_flow(&every, quiet);
    assert!(cut < u64::from(held));
    assert_eq!((reports, answers), (quiet + 1, quiet + 1), "--skip-repeated-answers false: every report answered");
}

/// Cubic's K = cbrt((W_max - cwnd_epoch) / C) (RFC 9438 eq. 2) after a loss:
/// K^3 C equals W_max - cwnd_epoch.
#[test]
fn cubic_k_satisfies_its_defining_equation() {
    let params = WindowParams {
        mss_bytes: MSS,
        init_cwnd_pkts: 100.0,
        init_ssthresh_pkts: 100.0,
        min_cwnd_pkts: 1.0,
        max_cwnd_pkts: 1e6,
    };
    let mut cu = Cubic::new(params, CubicParams::default());
    let m = |now_us, lost_pkts, acked_pkts: u64| Measurement {
        now_us,
        lost_pkts,
        acked_bytes: acked_pkts * u64::from(MSS),
        delivered_pkts: acked_pkts,
        rtt_us: RTT_US,
        ..Default::default()
    };
    cu.on_report(&m(0, 1, 0));
    cu.on_report(&m(3 * RTT_US, 0, 70));
    let e = cu.epoch().expect("epoch");
    let residual = 0.4 * e.k_s * e.k_s * e.k_s - (e.w_max - e.cwnd_epoch);
    assert!(residual.abs() < 1e-9, "K^3 C = W_max - cwnd_epoch, residual {residual}");
    assert!(e.k_s > 0.0);
}
