//! Installing the fold programs again when no flow reports after an install.
//!
//! Why: ccp-kernel's libccp (ccp.c `ccp_init`, libccp cb42dae) sends its READY
//! message before it allocates its program table. A daemon that runs before the
//! module is loaded answers READY at once with the install messages; when they
//! arrive before the table exists the kernel refuses them (`[ccp] [nl] message
//! read failed: -96`, LIBCCP_PROG_IS_NULL) and nothing tells the daemon. Every
//! later flow's change-program message then names a program the kernel does not
//! have ("Could not find datapath program"): no flow reports and every flow stays
//! at its initial cwnd. Seen in 1 of 13 daemon-first starts (docs/NOTES.md).
//!
//! The rule: when a flow created after the last install has sent no report
//! [`FIRST_DEADLINE`] after its creation, and no flow has reported since that
//! install, the daemon sends the same install messages again (the one with
//! program uid 1 first, which makes libccp clear its table: the programs keep
//! their slots), then each unreported flow's last change-program and
//! update-fields messages. The deadline doubles per attempt, at most
//! [`MAX_ATTEMPTS`] per flow. "No flow has reported since" keeps a working table
//! from being rewritten under running flows (libccp clears it on uid 1); a flow
//! that never reports on a working table (an idle connection, a receiving
//! socket) costs at most [`MAX_ATTEMPTS`] rounds of a few messages.
//!
//! [`InstallWatch`] is the bookkeeping alone (no clock, no socket): the IPC
//! wrapper of [`crate::portus_glue::TapIpc`] feeds it every message it sends and
//! receives and asks it, at every receive (at least once a second: Portus's
//! netlink socket has a 1 s receive timeout), what to send again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// libccp message types (libccp serialize.h; portus::serialize).
pub const MSG_CREATE: u16 = 0;
pub const MSG_MEASURE: u16 = 1;
pub const MSG_INSTALL: u16 = 2;
pub const MSG_UPDATE_FIELDS: u16 = 3;
pub const MSG_CHANGE_PROG: u16 = 4;
pub const MSG_READY: u16 = 5;
/// u16 type, u16 length, u32 socket id.
pub const HEADER_BYTES: usize = 8;

/// How long a new flow may go without a report before the programs are installed again.
/// A per-RTT fold reports within an RTT of the first ACK; 500 ms is several RTTs of any
/// path a ccp-kernel host is likely to run, and short against a bulk transfer.
pub const FIRST_DEADLINE: Duration = Duration::from_millis(500);

/// Install rounds one flow may cause (after 0.5, 1 and 2 s without a report).
pub const MAX_ATTEMPTS: u32 = 3;

/// One libccp message in a buffer: (type, socket id, the whole message).
pub fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, u32, &[u8])> {
    let mut off = 0;
    std::iter::from_fn(move || {
        if off + HEADER_BYTES > buf.len() {
            return None;
        }
        let typ = u16::from_le_bytes([buf[off], buf[off + 1]]);
        let len = usize::from(u16::from_le_bytes([buf[off + 2], buf[off + 3]]));
        if len < HEADER_BYTES || off + len > buf.len() {
            return None; // malformed: Portus's (or libccp's) parser reports it
        }
        let sid = u32::from_le_bytes([buf[off + 4], buf[off + 5], buf[off + 6], buf[off + 7]]);
        let msg = &buf[off..off + len];
        off += len;
        Some((typ, sid, msg))
    })
}

/// The u32 at `at` in a message (little endian), 0 when the message is shorter.
fn u32_at(msg: &[u8], at: usize) -> u32 {
    msg.get(at..at + 4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[derive(Clone, Debug)]
struct Pending {
    deadline: Instant,
    attempts: u32,
    change_prog: Option<Vec<u8>>,
    last_update: Option<Vec<u8>>,
}

/// What the watch has seen since the datapath's last READY (see the module docs).
#[derive(Debug)]
pub struct InstallWatch<A> {
    /// The install messages of the last round, in the order sent, with their destination.
    installs: Vec<(Vec<u8>, A)>,
    /// A report arrived after the last install round.
    reported: bool,
    /// Flows created since the last install round that have not reported yet.
    pending: HashMap<u32, Pending>,
    first_deadline: Duration,
}

impl<A: Clone> Default for InstallWatch<A> {
    fn default() -> Self {
        InstallWatch::new(FIRST_DEADLINE)
    }
}

impl<A: Clone> InstallWatch<A> {
    /// A watch whose first deadline is `first_deadline` ([`FIRST_DEADLINE`] in the daemon).
    pub fn new(first_deadline: Duration) -> Self {
        InstallWatch { installs: Vec::new(), reported: false, pending: HashMap::new(), first_deadline }
    }

    /// Note the messages of one datagram the daemon sends to `to`.
    pub fn sent(&mut self, buf: &[u8], to: &A) {
        for (typ, sid, msg) in messages(buf) {
            match typ {
                MSG_INSTALL => {
                    let uid = u32_at(msg, HEADER_BYTES);
                    // A uid seen before starts a new round (Portus sends its whole set each time).
                    if self.installs.iter().any(|(m, _)| u32_at(m, HEADER_BYTES) == uid) {
                        self.installs.clear();
                    }
                    self.installs.push((msg.to_vec(), to.clone()));
                    self.reported = false;
                }
                MSG_CHANGE_PROG => {
                    if let Some(p) = self.pending.get_mut(&sid) {
                        p.change_prog = Some(msg.to_vec());
                        p.last_update = None;
                    }
                }
                MSG_UPDATE_FIELDS => {
                    if let Some(p) = self.pending.get_mut(&sid) {
                        p.last_update = Some(msg.to_vec());
                    }
                }
                _ => {}
            }
        }
    }

    /// Note the messages of one datagram the daemon received at `now`.
    pub fn received(&mut self, buf: &[u8], now: Instant) {
        for (typ, sid, msg) in messages(buf) {
            match typ {
                MSG_READY => {
                    // A (re)started datapath: Portus installs everything again and forgets its flows.
                    self.installs.clear();
                    self.pending.clear();
                    self.reported = false;
                }
                MSG_CREATE => {
                    let p = Pending {
                        deadline: now + self.first_deadline,
                        attempts: 0,
                        change_prog: None,
                        last_update: None,
                    };
                    self.pending.insert(sid, p);
                }
                MSG_MEASURE => {
                    // num_fields (u32 after the program uid) 0 is libccp's close message.
                    if u32_at(msg, HEADER_BYTES + 4) > 0 {
                        self.reported = true;
                    }
                    self.pending.remove(&sid);
                }
                _ => {}
            }
        }
    }

    /// The flows created and not yet reported (for tests and logs).
    pub fn unreported(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.pending.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// What to send again at `now`: the install round, then each unreported flow's
    /// change-program and last update messages, with their destination; empty when
    /// nothing is due. The second value lists the overdue flows (for the log line).
    pub fn due(&mut self, now: Instant) -> (Vec<(Vec<u8>, A)>, Vec<u32>) {
        if self.reported || self.installs.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let mut overdue: Vec<u32> =
            self.pending.iter().filter(|(_, p)| p.attempts < MAX_ATTEMPTS && now >= p.deadline).map(|(s, _)| *s).collect();
        if overdue.is_empty() {
            return (Vec::new(), Vec::new());
        }
        overdue.sort_unstable();
        let to = self.installs[0].1.clone();
        let mut out: Vec<(Vec<u8>, A)> = self.installs.clone();
        let mut sids: Vec<u32> = self.pending.keys().copied().collect();
        sids.sort_unstable();
        for sid in sids {
            let p = self.pending.get_mut(&sid).expect("listed");
            for m in [&p.change_prog, &p.last_update].into_iter().flatten() {
                out.push((m.clone(), to.clone()));
            }
            if overdue.contains(&sid) {
                p.attempts += 1;
                p.deadline = now + self.first_deadline * (1 << p.attempts);
            }
        }
        (out, overdue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(typ: u16, sid: u32, body: &[u32]) -> Vec<u8> {
        let len = (HEADER_BYTES + 4 * body.len()) as u16;
        let mut m = Vec::new();
        m.extend_from_slice(&typ.to_le_bytes());
        m.extend_from_slice(&len.to_le_bytes());
        m.extend_from_slice(&sid.to_le_bytes());
        for b in body {
            m.extend_from_slice(&b.to_le_bytes());
        }
        m
    }

    fn install(uid: u32) -> Vec<u8> {
        msg(MSG_INSTALL, 0, &[uid, 1, 1, 0xdead])
    }

    fn report(sid: u32) -> Vec<u8> {
        msg(MSG_MEASURE, sid, &[1, 2, 7, 0, 9, 0])
    }

    #[test]
    fn messages_split_a_datagram_and_stop_at_a_malformed_one() {
        let mut buf = install(1);
        buf.extend(report(4));
        let got: Vec<(u16, u32)> = messages(&buf).map(|(t, s, _)| (t, s)).collect();
        assert_eq!(got, [(MSG_INSTALL, 0), (MSG_MEASURE, 4)]);
        let mut bad = install(1);
        bad[2] = 200; // length beyond the buffer
        assert_eq!(messages(&bad).count(), 0);
        assert_eq!(messages(&[1, 0, 3]).count(), 0);
    }

    /// The race of a daemon started before the module: installs lost, then a flow that never reports.
    #[test]
    fn a_flow_without_reports_gets_the_programs_again_with_its_own_messages() {
        let t0 = Instant::now();
        let mut w: InstallWatch<u8> = InstallWatch::new(Duration::from_millis(500));
        w.received(&msg(MSG_READY, 0, &[0]), t0);
        w.sent(&install(1), &7);
        w.sent(&install(2), &7);
        w.received(&msg(MSG_CREATE, 3, &[10, 1448]), t0);
        let cp = msg(MSG_CHANGE_PROG, 3, &[1, 0]);
        let up = msg(MSG_UPDATE_FIELDS, 3, &[1, 2, 14480]);
        w.sent(&cp, &7);
        w.sent(&up, &7);
        assert_eq!(w.unreported(), [3]);
        assert!(w.due(t0 + Duration::from_millis(499)).0.is_empty(), "not before the deadline");
        let (again, overdue) = w.due(t0 + Duration::from_millis(500));
        assert_eq!(overdue, [3]);
        let bodies: Vec<&[u8]> = again.iter().map(|(m, _)| m.as_slice()).collect();
        assert_eq!(bodies, [install(1).as_slice(), install(2).as_slice(), cp.as_slice(), up.as_slice()]);
        assert!(again.iter().all(|(_, to)| *to == 7));
        // The deadline doubles per attempt; at most MAX_ATTEMPTS rounds.
        assert!(w.due(t0 + Duration::from_millis(1400)).0.is_empty());
        assert_eq!(w.due(t0 + Duration::from_millis(1500)).1, [3]);
        assert_eq!(w.due(t0 + Duration::from_millis(3500)).1, [3]);
        assert!(w.due(t0 + Duration::from_secs(100)).0.is_empty(), "gives up after {MAX_ATTEMPTS}");
    }

    #[test]
    fn nothing_is_sent_again_once_any_flow_reports_after_the_install() {
        let t0 = Instant::now();
        let mut w: InstallWatch<()> = InstallWatch::new(Duration::from_millis(500));
        w.sent(&install(1), &());
        w.received(&msg(MSG_CREATE, 1, &[10, 1448]), t0);
        w.received(&msg(MSG_CREATE, 2, &[10, 1448]), t0);
        w.received(&report(2), t0 + Duration::from_millis(50));
        assert_eq!(w.unreported(), [1], "flow 1 (an idle connection) has not reported");
        assert!(w.due(t0 + Duration::from_secs(5)).0.is_empty(), "the table works: flow 2 reported");
        // A new install round (a restarted daemon's) clears the evidence.
        w.sent(&install(1), &());
        w.received(&msg(MSG_CREATE, 5, &[10, 1448]), t0 + Duration::from_secs(6));
        assert_eq!(w.due(t0 + Duration::from_secs(7)).1, [1, 5]);
    }

    #[test]
    fn a_close_is_not_a_report_and_ready_forgets_everything() {
        let t0 = Instant::now();
        let mut w: InstallWatch<()> = InstallWatch::new(Duration::from_millis(500));
        w.sent(&install(1), &());
        w.received(&msg(MSG_CREATE, 1, &[10, 1448]), t0);
        w.received(&msg(MSG_CREATE, 2, &[10, 1448]), t0);
        w.received(&msg(MSG_MEASURE, 1, &[1, 0]), t0); // close: zero fields
        assert_eq!(w.unreported(), [2]);
        assert_eq!(w.due(t0 + Duration::from_secs(1)).1, [2], "a close does not prove the table works");
        w.received(&msg(MSG_READY, 0, &[0]), t0);
        assert!(w.unreported().is_empty());
        assert!(w.due(t0 + Duration::from_secs(9)).0.is_empty(), "no installs recorded since READY");
    }
}
