//! End to end in one process: the Portus runtime hosting `ccp-cubic`'s CongAlg
//! (the real glue, flags parsed by the real CLI) drives an in-process libccp
//! datapath over Portus's channel IPC. Checks the initial cwnd, slow start, the
//! beta = 0.7 reduction on loss, and growth afterwards.
//!
//! This binary links libccp, whose exported C symbol `log` shadows libm's
//! (FIELD-NOTES), so nothing here may compute a float logarithm (Cubic needs
//! only cbrt). The hazard itself is checked on the datapath binary, which
//! links libccp in production: datapath/tests/no_libm_log.rs.

mod common;
use common::Conn;
use ccp_algorithms::cli::parse_from;
use ccp_algorithms::cubic::{Cubic, CubicParams};
use ccp_algorithms::portus_glue::PortusAlg;
use ccp_algorithms::window::{Measurement, WindowAlgorithm, WindowParams};
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

#[test]
fn cubic_glue_drives_libccp_cwnd() {
    // HyStart off: the scripted ACKs (1 ms apart) form one long ACK train, which
    // would end slow start; this test is about the glue.
    let cli = parse_from::<CubicSpec, _>(["ccp-cubic", "--hystart", "false"]).expect("flags parse");
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
    let dp = libccp::DatapathBuilder::default()
        .with_ops(ToCcp(to_ccp, reports.clone()))
        .init()
        .expect("libccp init");
    // A Connection points into the Datapath: box it so it never moves.
    let dp = Box::new(dp);
    pump(&dp, &from_ccp, 1); // install of the fold program (answer to libccp's ready)

    let info = libccp::FlowInfo::default()
        .with_mss(MSS)
        .with_init_cwnd(4 * MSS)
        .with_cong_alg("cubic")
        .unwrap();
    let mut conn = libccp::Connection::start(&dp, Conn { cwnd: 4 * MSS }, info).expect("conn");
    pump(&dp, &from_ccp, 2); // changeprog + update_field(Cwnd = init)

    // One ACK of one MSS; when it produced a report, apply Portus's cwnd update
    // (it arrives now and takes effect at the next invoke). Returns whether it reported.
    let ack = |conn: &mut libccp::Connection<'_, Conn>, lost: u32| -> bool {
        let before = reports.load(Ordering::SeqCst);
        let cwnd = conn.cwnd;
        conn.load_primitives(
            libccp::Primitives::default()
                .with_bytes_acked(MSS)
                .with_packets_acked(1)
                .with_lost_pkts_sample(lost)
                .with_rtt_sample_us(RTT_US)
                .with_packets_in_flight(cwnd / MSS)
                .with_bytes_in_flight(cwnd)
                .with_snd_cwnd(cwnd),
        );
        conn.invoke().expect("invoke");
        let reported = reports.load(Ordering::SeqCst) > before;
        if reported {
            pump(&dp, &from_ccp, 1);
        }
        std::thread::sleep(Duration::from_micros(1_000));
        reported
    };

    // The first invoke applies the program and the initial cwnd (--init-cwnd-pkts 10).
    ack(&mut conn, 0);
    assert_eq!(conn.cwnd, 10 * MSS, "initial cwnd from --init-cwnd-pkts");

    // Slow start runs in the fold (fold::SLOW_START): every ACK adds its bytes; the
    // reports' answers (Cwnd 0) leave it alone.
    let mut expected = 10 * MSS;
    let mut ss_reports = 0;
    while ss_reports < 3 {
        let reported = ack(&mut conn, 0);
        expected += MSS;
        ss_reports += usize::from(reported);
    }
    assert!(!ack(&mut conn, 0), "1 ms after a report: no report");
    expected += MSS;
    assert_eq!(conn.cwnd, expected, "slow start adds each ACK's bytes");

    // A loss: urgent report; ssthresh = 0.7 x cwnd (RFC 9438 §4.6), and the commanded
    // window is PRR's, between ssthresh and the window at the loss (W itself
    // before anything is delivered in recovery; the next ACK's delivery lowers it).
    let w_pkts = f64::from(conn.cwnd) / f64::from(MSS);
    assert!(ack(&mut conn, 1), "loss is reported at once");
    assert!(!ack(&mut conn, 0));
    let reduced = ((0.7 * w_pkts).max(2.0) * f64::from(MSS)).round() as u32;
    assert!(conn.cwnd >= reduced && conn.cwnd <= (w_pkts * f64::from(MSS)) as u32 + 1,
            "PRR window {} in [0.7 W, W] after the loss", conn.cwnd);

    // Congestion avoidance afterwards (Cubic's cbrt runs here): the window grows
    // again but stays far below 1.5 x W within these few RTTs.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        ack(&mut conn, 0);
    }
    ack(&mut conn, 0);
    assert!(conn.cwnd > reduced, "cwnd grows after recovery: {} <= {reduced}", conn.cwnd);
    assert!(f64::from(conn.cwnd) < 1.5 * w_pkts * f64::from(MSS));

    handle.kill();
    handle.wait().expect("portus stops cleanly");
    drop(conn);
    drop(dp);
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
