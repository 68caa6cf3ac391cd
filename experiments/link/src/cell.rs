//! [`LinkCore`] runs [`LinkQueue`] in real time for the direct datapath and,
//! as a rattan `Cell` (feature `rattan`), for rattan's runtime: our
//! replacement for rattan 0.1.1's BwReplay cell (which panics on zero
//! capacity and cannot log opportunities or drops).
//!
//! Time 0 ("base") is shared by the uplink and downlink cells. In
//! first-packet mode the uplink sets it on its first IPv4 packet; in now
//! mode the caller sets it before the link starts. Until time 0 exists,
//! a downlink cell forwards packets unshaped (nothing to replay yet).
//! Non-IPv4 frames (IPv6 neighbour discovery etc.; mahimahi carries only
//! IPv4) bypass the queue unlogged so they cannot shift time 0.

use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, OnceLock,
    },
    time::Duration,
};

#[cfg(feature = "rattan")]
use async_trait::async_trait;
#[cfg(feature = "rattan")]
use rattan_core::{
    cells::{Cell, ControlInterface, Egress, Ingress},
    error::Error,
};
#[cfg(feature = "rattan")]
use tokio::sync::mpsc;
use tokio::time::Instant;

#[cfg(feature = "rattan")]
use crate::{packet::RattanPacket, timer::LazyTimer};
use crate::{
    flowkey::{flow_key, PortSide},
    mmlog::{unix_ms_now, MmLog},
    packet::Packet,
    queue::{Delivered, LinkQueue, NullSink, QueueLimit, OPPORTUNITY_BYTES},
};

/// Time 0 of the trace replay, shared by all cells and main.
#[derive(Clone, Default)]
pub struct Clock0 {
    base: Arc<OnceLock<Instant>>,
}

impl Clock0 {
    /// Sets time 0 (first caller wins) and returns the effective value.
    pub fn set(&self, at: Instant) -> Instant {
        *self.base.get_or_init(|| at)
    }
    pub fn get(&self) -> Option<Instant> {
        self.base.get().copied()
    }
    /// Unix ms of `at` (by offsetting the current wall clock).
    pub fn unix_ms_of(at: Instant) -> u64 {
        let ago = Instant::now().saturating_duration_since(at);
        unix_ms_now().saturating_sub(ago.as_millis() as u64)
    }
}

/// Counters readable while the link runs.
#[derive(Default)]
pub struct LinkStats {
    pub arrivals: AtomicU64,
    pub drops: AtomicU64,
    pub departures: AtomicU64,
    pub bypassed: AtomicU64,
    pub oversize: AtomicU64,
}

/// Static settings of one trace-driven direction.
pub struct LinkCellConfig {
    pub schedule: Arc<[u64]>,
    pub limit: QueueLimit,
    /// Whether this cell's first IPv4 packet sets time 0.
    pub sets_clock0: bool,
    pub log: Option<MmLog>,
    /// Which port of a packet names its flow in this direction.
    pub key_side: PortSide,
    /// Test hook: panic on the first packet (CCPLAB_LINK_FAULT=panic-on-packet).
    pub inject_panic: bool,
    /// Play the trace once (mm-link `--once`) instead of looping.
    pub once: bool,
    /// Set when a trace played once has ended (read by main to stop the link).
    pub trace_ended: Arc<AtomicBool>,
}

/// The ingress of a [`ChannelCell`]: packets go down an unbounded channel
/// to its egress.
#[cfg(feature = "rattan")]
pub struct ChannelIngress<P: RattanPacket> {
    tx: mpsc::UnboundedSender<P>,
    /// The cell's name in the error once its egress is gone.
    cell: &'static str,
}

#[cfg(feature = "rattan")]
impl<P: RattanPacket> Ingress<P> for ChannelIngress<P> {
    fn enqueue(&self, packet: P) -> Result<(), Error> {
        self.tx
            .send(packet)
            .map_err(|_| Error::ChannelError(format!("{} closed", self.cell)))
    }
}

/// One trace-driven direction without I/O: the queue, time 0, the log and
/// the counters. Packets go in with [`LinkCore::admit`] (their timestamp is
/// their arrival) and come out of [`LinkCore::poll`] with their logical
/// departure as timestamp. Both the rattan cell ([`LinkCellEgress`]) and
/// the direct datapath (`direct`) drive it.
pub struct LinkCore<P: Packet> {
    queue: LinkQueue<P>,
    out: VecDeque<Delivered<P>>,
    bypass: VecDeque<P>,
    clock0: Clock0,
    sets_clock0: bool,
    log: Option<MmLog>,
    stats: Arc<LinkStats>,
    key_side: PortSide,
    inject_panic: bool,
    trace_ended: Arc<AtomicBool>,
}

/// How long a direction that waits for time 0 (set by the other direction)
/// sleeps before it looks again.
pub const CLOCK0_RECHECK: Duration = Duration::from_millis(50);

/// IP packet length + 4 (mahimahi's TUN header), or None if not IPv4.
fn mm_size<P: Packet>(p: &P) -> Option<u32> {
    Some(u32::from(p.ipv4_total_len()?) + 4)
}

impl<P: Packet> LinkCore<P> {
    pub fn new(config: LinkCellConfig, clock0: Clock0, stats: Arc<LinkStats>) -> Self {
        Self {
            queue: LinkQueue::new(config.schedule, config.limit).once(config.once),
            out: VecDeque::new(),
            bypass: VecDeque::new(),
            clock0,
            sets_clock0: config.sets_clock0,
            log: config.log,
            stats,
            key_side: config.key_side,
            inject_panic: config.inject_panic,
            trace_ended: config.trace_ended,
        }
    }

    fn ms_since_0(base: Instant, at: Instant) -> u64 {
        at.saturating_duration_since(base).as_millis() as u64
    }

    /// Runs the queue up to now (or to an arrival) with the log locked.
    fn with_sink<R>(
        log: &Option<MmLog>,
        f: impl FnOnce(&mut dyn crate::queue::EventSink) -> R,
    ) -> R {
        match log {
            Some(l) => f(&mut l.lock()),
            None => f(&mut NullSink),
        }
    }

    fn collect(&mut self, delivered: VecDeque<Delivered<P>>) {
        self.stats
            .departures
            .fetch_add(delivered.len() as u64, Ordering::Relaxed);
        self.out.extend(delivered);
    }

    /// A packet arrives (at its timestamp): it is logged and queued or
    /// dropped; a non-IPv4 frame (or any before time 0 on a direction that
    /// does not set it) passes unshaped and unlogged.
    pub fn admit(&mut self, p: P) {
        // Fault injection for the cleanup test: a worker panic must still
        // remove every namespace and keep the log.
        if self.inject_panic {
            panic!("CCPLAB_LINK_FAULT=panic-on-packet: injected panic in the uplink cell");
        }
        let Some(size) = mm_size(&p) else {
            self.stats.bypassed.fetch_add(1, Ordering::Relaxed);
            self.bypass.push_back(p);
            return;
        };
        let arrived = p.get_timestamp();
        let base = match self.clock0.get() {
            Some(b) => b,
            None if self.sets_clock0 => {
                let b = self.clock0.set(arrived);
                if let Some(l) = &self.log {
                    l.start(Clock0::unix_ms_of(b));
                }
                b
            }
            None => {
                // Downlink before time 0: nothing to replay yet.
                self.stats.bypassed.fetch_add(1, Ordering::Relaxed);
                self.bypass.push_back(p);
                return;
            }
        };
        if let Some(l) = &self.log {
            // now-mode: header written by main when time 0 was set; this is
            // a no-op then.
            l.start(Clock0::unix_ms_of(base));
        }
        if size > OPPORTUNITY_BYTES && self.stats.oversize.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(
                size,
                "packet larger than one 1504-byte opportunity (offloads on?); it will span opportunities"
            );
        }
        self.stats.arrivals.fetch_add(1, Ordering::Relaxed);
        let now_ms = Self::ms_since_0(base, arrived);
        let key = flow_key(p.as_slice(), self.key_side);
        let mut delivered = VecDeque::new();
        let queue = &mut self.queue;
        let accepted = Self::with_sink(&self.log, |s| {
            queue.arrive(now_ms, p, size, key, s, &mut delivered)
        });
        if !accepted && !self.queue.finished() {
            self.stats.drops.fetch_add(1, Ordering::Relaxed);
        }
        self.collect(delivered);
        self.note_end();
    }

    fn note_end(&self) {
        if self.queue.finished() {
            self.trace_ended.store(true, Ordering::SeqCst);
        }
    }

    /// Uses every opportunity up to `now`.
    pub fn tick(&mut self, now: Instant) {
        let Some(base) = self.clock0.get() else {
            return;
        };
        let now_ms = Self::ms_since_0(base, now);
        let mut delivered = VecDeque::new();
        let queue = &mut self.queue;
        Self::with_sink(&self.log, |s| queue.rationalize(now_ms, s, &mut delivered));
        self.collect(delivered);
        self.note_end();
    }

    /// The next packet that has left (bypassing ones first), its timestamp
    /// set to its logical departure; None when nothing has left yet.
    pub fn pop(&mut self) -> Option<P> {
        if let Some(p) = self.bypass.pop_front() {
            return Some(p);
        }
        let d = self.out.pop_front()?;
        let mut p = d.item;
        if let Some(base) = self.clock0.get() {
            // Logical departure time: later cells (delay) count from here,
            // not from our possibly late wakeup.
            p.delay_until(base + Duration::from_millis(d.departure_ms));
        }
        Some(p)
    }

    /// The next opportunity (when [`LinkCore::tick`] has work), None before
    /// time 0 and after a trace played once has ended.
    pub fn next_opportunity(&self) -> Option<Instant> {
        self.clock0.get().and_then(|b| {
            self.queue
                .next_opportunity_ms()
                .map(|ms| b + Duration::from_millis(ms))
        })
    }

    /// Whether time 0 is still to be set by another direction (so a waiting
    /// caller should look again after [`CLOCK0_RECHECK`]).
    pub fn awaits_clock0(&self) -> bool {
        self.clock0.get().is_none()
    }
}

/// The rattan egress of a [`LinkCell`]: a [`LinkCore`] fed by a channel.
#[cfg(feature = "rattan")]
pub struct LinkCellEgress<P: RattanPacket> {
    rx: mpsc::UnboundedReceiver<P>,
    core: LinkCore<P>,
    timer: LazyTimer,
}

#[cfg(feature = "rattan")]
#[async_trait]
impl<P: RattanPacket> Egress<P> for LinkCellEgress<P> {
    async fn dequeue(&mut self) -> Option<P> {
        loop {
            if let Some(p) = self.core.pop() {
                return Some(p);
            }
            // Arrivals already queued are taken before any wait (each is
            // placed by its own timestamp), so the timer is re-armed once
            // per burst, not once per packet.
            if let Ok(p) = self.rx.try_recv() {
                self.core.admit(p);
                continue;
            }
            // None also when a trace played once has ended: nothing to wake for.
            let wake = self.core.next_opportunity();
            if let Some(at) = wake {
                self.timer.arm(at).expect("timerfd_settime on our own timerfd");
            }
            tokio::select! {
                biased;
                p = self.rx.recv() => self.core.admit(p?),
                r = self.timer.fired(), if wake.is_some() => {
                    r.expect("read of our own timerfd");
                    self.core.tick(Instant::now());
                }
                // Time 0 may be set by another cell while we idle: re-check.
                _ = tokio::time::sleep(CLOCK0_RECHECK), if wake.is_none() => {}
            }
        }
    }
}

/// No runtime configuration; `()` keeps rattan's optional serde bound happy.
#[cfg(feature = "rattan")]
pub struct LinkCellControl;

#[cfg(feature = "rattan")]
impl ControlInterface for LinkCellControl {
    type Config = ();
    fn set_config(&self, _config: ()) -> Result<(), Error> {
        Ok(())
    }
}

/// A rattan cell whose ingress is a [`ChannelIngress`] and whose egress
/// `E` reads the other end of the channel; no runtime configuration. The
/// link's cells ([`LinkCell`], `flowdelay::FlowDelayCell`) are this with
/// their own egress.
#[cfg(feature = "rattan")]
pub struct ChannelCell<P: RattanPacket, E> {
    ingress: Arc<ChannelIngress<P>>,
    egress: E,
    control: Arc<LinkCellControl>,
}

#[cfg(feature = "rattan")]
impl<P: RattanPacket, E> ChannelCell<P, E> {
    /// A cell named `cell` (in errors) whose egress `egress` builds from the
    /// channel's receiving end.
    pub fn with_egress(
        cell: &'static str,
        egress: impl FnOnce(mpsc::UnboundedReceiver<P>) -> Result<E, Error>,
    ) -> Result<Self, Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        Ok(Self {
            ingress: Arc::new(ChannelIngress { tx, cell }),
            egress: egress(rx)?,
            control: Arc::new(LinkCellControl),
        })
    }
}

#[cfg(feature = "rattan")]
impl<P: RattanPacket, E: Egress<P> + 'static> Cell<P> for ChannelCell<P, E> {
    type IngressType = ChannelIngress<P>;
    type EgressType = E;
    type ControlInterfaceType = LinkCellControl;

    fn sender(&self) -> Arc<Self::IngressType> {
        self.ingress.clone()
    }
    fn receiver(&mut self) -> &mut Self::EgressType {
        &mut self.egress
    }
    fn into_receiver(self) -> Self::EgressType {
        self.egress
    }
    fn control_interface(&self) -> Arc<Self::ControlInterfaceType> {
        self.control.clone()
    }
}

/// The trace-driven link of one direction.
#[cfg(feature = "rattan")]
pub type LinkCell<P> = ChannelCell<P, LinkCellEgress<P>>;

#[cfg(feature = "rattan")]
impl<P: RattanPacket> ChannelCell<P, LinkCellEgress<P>> {
    /// Must be called inside the rattan runtime (the timer registers with
    /// its reactor).
    pub fn new(
        config: LinkCellConfig,
        clock0: Clock0,
        stats: Arc<LinkStats>,
    ) -> Result<Self, Error> {
        Self::with_egress("link cell", |rx| {
            Ok(LinkCellEgress {
                rx,
                core: LinkCore::new(config, clock0, stats),
                timer: LazyTimer::new()?,
            })
        })
    }
}
