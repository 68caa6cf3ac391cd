//! bbr's per-ACK ACK-aggregation excess in the fold
//! (`bbr::ack_aggregation_block`) run by a real libccp 1.2 datapath
//! (in-process), against tcp_bbr.c's rule (`bbr_update_ack_aggregation`) on a
//! scripted ACK train: on each ACK that delivers packets (newly acked or
//! SACKed, `rs->acked_sacked`), expected = BtlBw x the time since the epoch
//! started; if the packets delivered since then (before this ACK) are at
//! most that, the epoch restarts at this ACK; the excess is delivered since
//! the epoch start - expected. The report carries the largest excess of its
//! ACKs, in thousandths of a packet (user space caps it at cwnd).
//!
//! The fold's clock (`Ack.now`) is libccp's real clock, so the ACK train is
//! real time: bursts of back-to-back ACKs and gaps slept between them, each
//! expectation bounded by the times measured around the invocations.
//!
//! This binary links libccp, whose exported `log` symbol shadows libm's: no
//! f64::ln here (docs/NOTES.md, "libccp's `log` symbol").

mod common;
use ccp_algorithms::bbr::{EXTRA_ACKED_FIELD, PROGRAM};
use common::{send, Conn, Outbox};
use portus::lang::{Reg, Scope};
use portus::serialize::{self, Msg};
use std::time::{Duration, Instant};

const MSS: u32 = 1000;
/// BtlBw given to the fold, thousandths of a packet per second: 1000
/// packets/s, one thousandth of a packet per us.
const BW: u64 = 1_000_000;
/// One packet in the fold's unit.
const PKT: u64 = 1000;

/// A libccp flow running bbr's program with BtlBw set in `xbw`.
struct Flow<'a> {
    conn: libccp::Connection<'a, Conn>,
    outbox: Outbox,
    sc: Scope,
}

impl Flow<'_> {
    /// One ACK newly delivering `acked` packets cumulatively and `sacked`
    /// SACKed ones, its cumulative ACK covering `acked + resacked` packets
    /// (`resacked` SACKed earlier), with a loss if `lost`; returns the
    /// instants just before and after the invocation.
    fn ack(&mut self, acked: u32, resacked: u32, sacked: u32, lost: u32) -> (Instant, Instant) {
        self.conn.load_primitives(
            libccp::Primitives::default()
                .with_bytes_acked((acked + resacked) * MSS)
                .with_packets_acked(acked)
                .with_bytes_misordered(sacked * MSS)
                .with_packets_misordered(sacked)
                .with_lost_pkts_sample(lost)
                .with_packets_in_flight(50)
                .with_bytes_in_flight(50 * MSS)
                .with_snd_cwnd(100 * MSS),
        );
        let before = Instant::now();
        self.conn.invoke().expect("invoke");
        (before, Instant::now())
    }

    /// An ACK that delivers nothing but marks a loss: the block skips it
    /// (tcp_bbr.c returns on `acked_sacked` 0) and the program reports at
    /// once. Returns (largest excess, acked bytes) over the reports since
    /// the last call (a gap longer than the report interval also sends a
    /// regular report at the ACK after it).
    fn report(&mut self) -> (u64, u64) {
        self.ack(0, 0, 0, 1);
        let msgs = std::mem::take(&mut *self.outbox.0.lock().unwrap());
        let reports: Vec<Vec<u64>> = msgs
            .iter()
            .filter_map(|b| match Msg::from_buf(b) {
                Ok((Msg::Ms(m), _)) => Some(m.fields),
                _ => None,
            })
            .collect();
        assert!(!reports.is_empty(), "the loss ACK sent a report");
        let index = |name: &str| match self.sc.get(name) {
            Some(Reg::Report(i, _, _)) => usize::from(*i),
            other => panic!("{name} is not a report register of bbr's program: {other:?}"),
        };
        let (x, a) = (index(EXTRA_ACKED_FIELD), index("Report.acked"));
        (reports.iter().map(|r| r[x]).max().unwrap_or(0), reports.iter().map(|r| r[a]).sum())
    }
}

/// Microseconds between two instants (0 if `b` precedes `a`).
fn us(a: Instant, b: Instant) -> u64 {
    b.saturating_duration_since(a).as_micros() as u64
}

#[test]
fn the_fold_measures_the_per_ack_excess_as_tcp_bbr_c() {
    let (dp, outbox, sc) = common::datapath_with_program(&PROGRAM.text());
    let (conn, sid) = common::start_flow(&dp, &outbox, &sc, Conn { cwnd: 100 * MSS }, MSS, "bbr");
    let xbw = sc.get("xbw").expect("bbr's program has the BtlBw register xbw").clone();
    let set_bw = serialize::update_field::Msg { sid, num_fields: 1, fields: vec![(xbw, BW)] };
    send(&dp, serialize::serialize(&set_bw).unwrap());
    outbox.0.lock().unwrap().clear();
    let mut f = Flow { conn, outbox: outbox.clone(), sc: sc.clone() };

    // 1. A burst: 1 + 9 ACKs back to back (2 packets each, the last SACKed).
    // The first starts an epoch (nothing delivered since the start); then
    // each ACK's excess is all delivered so far minus BtlBw x the burst's age.
    let (epoch_before, epoch_after) = f.ack(1, 0, 0, 0);
    let mut last_before = epoch_before;
    for i in 0..9 {
        let (b, _) = if i < 8 { f.ack(2, 0, 0, 0) } else { f.ack(0, 0, 2, 0) };
        last_before = b;
    }
    let (extra, acked) = f.report();
    let delivered = 19 * PKT;
    let age_max = us(epoch_before, Instant::now()) + 2;
    assert!(extra <= delivered && extra + BW * age_max / 1_000_000 >= delivered, "burst excess {extra}, delivered {delivered}, age <= {age_max} us");
    assert!(extra + 2 * PKT > delivered, "the burst took {} us: too slow a machine for this test", us(epoch_after, last_before));
    assert_eq!(acked, u64::from(17 * MSS), "the rest of the program ran on every ACK (no aborted invocation)");

    // 2. A 30 ms gap: BtlBw would have delivered 30 packets, more than the
    // epoch's 19, so the next ACK restarts the epoch: its excess is its own
    // 3 packets exactly (expected 0).
    std::thread::sleep(Duration::from_millis(30));
    let (e2_before, e2_after) = f.ack(3, 0, 0, 0);
    assert_eq!(f.report().0, 3 * PKT, "a new epoch: excess = this ACK's packets");

    // 3. 1 ms later (expected ~1 packet < 3 delivered): no restart; an ACK
    // newly delivering 12 packets (2 acked, 10 SACKed) gives 15 packets -
    // BtlBw x its time since the epoch start.
    std::thread::sleep(Duration::from_millis(1));
    let (b3, a3) = f.ack(2, 0, 10, 0);
    // +-2 us: Ack.now and these differences are truncated to whole us.
    let (lo, hi) = (us(e2_after, b3).saturating_sub(2), us(e2_before, a3) + 2);
    assert!(hi < 3_000, "the 1 ms gap took {hi} us: too slow a machine for this test");
    let (extra, _) = f.report();
    let total = 15 * PKT;
    assert!(
        (total - BW * hi / 1_000_000..=total - BW * lo / 1_000_000).contains(&extra),
        "excess {extra}: expected 15 packets - (between {lo} and {hi} us) x 1000 packets/s"
    );

    // 4. After another 30 ms gap, a new epoch starts with an ACK of 1 new
    // packet whose cumulative ACK also covers the 10 SACKed in step 3: those
    // were delivered then and count once (tcp_bbr.c's acked_sacked), not
    // again with the cumulative ACK's bytes.
    std::thread::sleep(Duration::from_millis(30));
    f.ack(1, 10, 0, 0);
    assert_eq!(f.report().0, PKT, "previously SACKed packets do not count again");
    drop(f);
}

#[test]
fn bbr_program_fits_portus_and_libccp_limits() {
    let text = PROGRAM.text();
    let (bin, sc) = portus::lang::compile(text.as_bytes(), &[]).expect("bbr's program compiles");
    // libccp's expression loop counts instructions in a u8 (the kernel fold
    // refuses a program reaching index 256); Portus allows 16 report registers.
    assert!(bin.instrs.len() < 255, "{} instructions", bin.instrs.len());
    assert!(matches!(sc.get(EXTRA_ACKED_FIELD), Some(Reg::Report(..))));
    assert!(sc.get("Report.train").is_none() && sc.get("Report.trainon").is_none(), "no HyStart ACK train in bbr's program");
    let cubic = ccp_algorithms::cubic::PROGRAM.text();
    assert!(cubic.contains("Report.trainon") && !cubic.contains(EXTRA_ACKED_FIELD), "cubic's field set is unchanged");
}
