//! The link's network: three namespaces and two veth pairs, laid out as
//! rattan-env 0.1.1's Isolated mode lays them out (same names, addresses
//! and MACs), built in a few netlink round trips.
//!
//! ```text
//!  ns-left-<id>                 ns-rattan-<id>                  ns-right-<id>
//!  vL1-L-<id> 10.1.1.1/32 <--> vL1-R-<id> 10.1.1.2/32
//!                              vR1-L-<id> 10.2.1.2/32 <--> vR1-R-<id> 10.2.1.1/32
//! ```
//! The sender's namespace routes to the receiver's address (and by
//! default) through its veth, with a permanent neighbour entry for the
//! receiver's MAC; the receiver's namespace likewise towards the sender.
//! Loopback is up everywhere and checksum offloads are off on every veth
//! end (the emulator forwards whole frames).
//!
//! rattan-env's own builder opens a netlink socket, and a thread with a
//! 10 ms pause, for each of about twenty steps, and moves each veth end
//! into its namespace after creating it (a move waits for the kernel's RCU
//! grace periods): the link's start-up was mostly waiting. Here each veth
//! end is created in its namespace directly (`IFLA_NET_NS_FD` on the
//! device and on its peer), and every further step goes through one
//! netlink socket per namespace, opened once.
//!
//! Teardown: dropping [`LinkEnv`] removes the namespaces' names; the kernel
//! then frees each namespace, and the veths in it, once the last process,
//! socket or descriptor using it is gone (asynchronously, without making
//! this process wait for the RCU grace periods a deletion of each veth
//! by hand would wait for).

use std::{
    fs::File,
    net::{IpAddr, Ipv4Addr},
    os::fd::AsRawFd,
    sync::Arc,
};

use anyhow::{anyhow, bail, Context, Result};
use futures::TryStreamExt;
use nix::sched::{setns, CloneFlags};
use rattan_env::{
    netns::NetNs,
    veth::{MacAddr, VethCell},
};
use rtnetlink::{
    packet_route::{
        link::{InfoData, InfoKind, InfoVeth},
        route::RouteScope,
    },
    Handle, LinkMessageBuilder, LinkUnspec, RouteMessageBuilder,
};

use crate::netns::Namespaces;

/// One end of a veth pair as it is to be made.
struct End {
    name: String,
    mac: [u8; 6],
    ip: Ipv4Addr,
}

/// The namespaces and veth ends of one link (see the module docs).
pub struct LinkEnv {
    pub names: Namespaces,
    /// The sender's end (in the sender's namespace) and, through
    /// [`VethCell::peer`], the emulator's end of the left pair.
    pub sender_end: Arc<VethCell>,
    /// The emulator's end of the left pair (in the emulator's namespace).
    pub left_inner: Arc<VethCell>,
    /// The emulator's end of the right pair.
    pub right_inner: Arc<VethCell>,
    /// The receiver's end (in the receiver's namespace).
    pub receiver_end: Arc<VethCell>,
    pub emulator_ns: Arc<NetNs>,
}

/// Six random characters of `[A-Za-z0-9]`, as rattan-env's instance ids.
fn random_id() -> Result<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 6];
    // SAFETY: getrandom writes at most bytes.len() bytes into bytes.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        bail!("getrandom: {}", std::io::Error::last_os_error());
    }
    Ok(bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect())
}

fn mac(group: u8, suffix: u8) -> [u8; 6] {
    // rattan-env's scheme: locally chosen, unicast (I/G bit 0), pair 1
    [0x38, 0x7e, 0x58, group, 1, suffix]
}

impl LinkEnv {
    /// Creates the namespaces (unique names, see [`Namespaces::for_rattan_id`])
    /// and the veths. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN). On an error
    /// whatever was created is removed again.
    pub fn create() -> Result<Self> {
        let (id, names) = loop {
            let id = random_id()?;
            let names = Namespaces::for_rattan_id(&id);
            if !names.all().iter().any(|n| crate::netns::exists(n)) {
                break (id, names);
            }
        };
        let ns = |name: &str| {
            NetNs::new(name).map_err(|e| anyhow!("cannot create network namespace {name}: {e}"))
        };
        // NetNs removes its name when dropped, so an error below leaves nothing
        let left_ns = ns(&names.sender)?;
        let emulator_ns = ns(&names.emulator)?;
        let right_ns = ns(&names.receiver)?;

        let left = (
            End { name: format!("vL1-L-{id}"), mac: mac(1, 1), ip: Ipv4Addr::new(10, 1, 1, 1) },
            End { name: format!("vL1-R-{id}"), mac: mac(1, 2), ip: Ipv4Addr::new(10, 1, 1, 2) },
        );
        let right = (
            End { name: format!("vR1-L-{id}"), mac: mac(2, 2), ip: Ipv4Addr::new(10, 2, 1, 2) },
            End { name: format!("vR1-R-{id}"), mac: mac(2, 1), ip: Ipv4Addr::new(10, 2, 1, 1) },
        );
        let namespaces = [left_ns.clone(), emulator_ns.clone(), right_ns.clone()];
        let indices = std::thread::scope(|s| {
            s.spawn(|| build_network(&namespaces, &left, &right))
                .join()
                .map_err(|_| anyhow!("the thread building the link's network panicked"))?
        })?;
        let cell = |end: &End, index: u32, ns: &Arc<NetNs>| {
            Arc::new(VethCell {
                name: end.name.clone(),
                index,
                mac_addr: MacAddr::new(end.mac),
                ip_addr: (IpAddr::V4(end.ip), 32),
                peer: Default::default(),
                namespace: ns.clone(),
            })
        };
        let sender_end = cell(&left.0, indices[0], &left_ns);
        let left_inner = cell(&left.1, indices[1], &emulator_ns);
        let right_inner = cell(&right.0, indices[2], &emulator_ns);
        let receiver_end = cell(&right.1, indices[3], &right_ns);
        for (a, b) in [(&sender_end, &left_inner), (&right_inner, &receiver_end)] {
            let _ = a.peer.set(Arc::downgrade(b));
            let _ = b.peer.set(Arc::downgrade(a));
        }
        Ok(Self {
            names,
            sender_end,
            left_inner,
            right_inner,
            receiver_end,
            emulator_ns,
        })
    }

    pub fn sender_ip(&self) -> IpAddr {
        self.sender_end.ip_addr.0
    }

    pub fn receiver_ip(&self) -> IpAddr {
        self.receiver_end.ip_addr.0
    }
}

/// Builds both veth pairs, addresses, routes and neighbours; returns the
/// interface indices of (sender end, left inner, right inner, receiver end).
/// Runs on a thread of its own: it enters each namespace once (`setns`) to
/// open that namespace's netlink socket and to switch offloads off.
fn build_network(
    ns: &[Arc<NetNs>; 3],
    left: &(End, End),
    right: &(End, End),
) -> Result<[u32; 4]> {
    let home = File::open("/proc/thread-self/ns/net").context("cannot open this thread's network namespace")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("cannot build the netlink runtime")?;
    let _g = rt.enter();
    // one netlink socket per namespace: a socket stays in the namespace it was opened in
    let mut handles = Vec::with_capacity(3);
    for n in ns {
        setns(n, CloneFlags::CLONE_NEWNET).context("cannot enter a link namespace")?;
        let opened = rtnetlink::new_connection();
        setns(&home, CloneFlags::CLONE_NEWNET).context("cannot return to the host namespace")?;
        let (conn, handle, _) = opened.context("cannot open a netlink socket")?;
        rt.spawn(conn);
        handles.push(handle);
    }
    let [hl, he, hr] = [&handles[0], &handles[1], &handles[2]];
    let indices = rt.block_on(async {
        // left pair from the emulator's namespace, its outer end in the sender's
        add_veth(he, &left.1, &left.0, ns[0].as_raw_fd()).await?;
        add_veth(he, &right.0, &right.1, ns[2].as_raw_fd()).await?;
        let idx = [
            index_of(hl, &left.0.name).await?,
            index_of(he, &left.1.name).await?,
            index_of(he, &right.0.name).await?,
            index_of(hr, &right.1.name).await?,
        ];
        for (h, end, i) in [(hl, &left.0, idx[0]), (he, &left.1, idx[1]), (he, &right.0, idx[2]), (hr, &right.1, idx[3])] {
            h.address()
                .add(i, IpAddr::V4(end.ip), 32)
                .execute()
                .await
                .with_context(|| format!("cannot add address {} to {}", end.ip, end.name))?;
        }
        for (h, outer, name) in [(hl, idx[0], &left.0.name), (hr, idx[3], &right.1.name)] {
            h.link()
                .set(LinkMessageBuilder::<LinkUnspec>::new().index(outer).up().build())
                .execute()
                .await
                .with_context(|| format!("cannot set {name} up"))?;
        }
        // sender -> receiver and receiver -> sender: the peer's /32 on the
        // link, then the default route through it, and its MAC
        for (h, out, via, peer_mac) in [
            (hl, idx[0], right.1.ip, right.1.mac),
            (hr, idx[3], left.0.ip, left.0.mac),
        ] {
            let direct = RouteMessageBuilder::<Ipv4Addr>::new()
                .scope(RouteScope::Link)
                .destination_prefix(via, 32)
                .output_interface(out)
                .build();
            h.route().add(direct).execute().await.with_context(|| format!("cannot add a route to {via}"))?;
            let default = RouteMessageBuilder::<Ipv4Addr>::new()
                .scope(RouteScope::Universe)
                .gateway(via)
                .output_interface(out)
                .build();
            h.route().add(default).execute().await.with_context(|| format!("cannot add a default route via {via}"))?;
            h.neighbours()
                .add(out, IpAddr::V4(via))
                .link_local_address(&peer_mac)
                .execute()
                .await
                .with_context(|| format!("cannot add a neighbour entry for {via}"))?;
        }
        for h in [hl, he, hr] {
            let lo = index_of(h, "lo").await?;
            h.link()
                .set(LinkMessageBuilder::<LinkUnspec>::new().index(lo).up().build())
                .execute()
                .await
                .context("cannot set loopback up")?;
        }
        anyhow::Ok(idx)
    })?;
    // checksum offloads: an ioctl on a socket of the interface's namespace
    for (n, names) in [(&ns[0], vec![&left.0.name]), (&ns[1], vec![&left.1.name, &right.0.name]), (&ns[2], vec![&right.1.name])] {
        setns(n, CloneFlags::CLONE_NEWNET).context("cannot enter a link namespace")?;
        let done = names
            .iter()
            .try_for_each(|name| rattan_env::ioctl::disable_checksum_offload(name).with_context(|| format!("cannot switch off offloads on {name}")));
        setns(&home, CloneFlags::CLONE_NEWNET).context("cannot return to the host namespace")?;
        done?;
    }
    Ok(indices)
}

/// Creates the veth `inner` (in `handle`'s namespace, up) with its peer
/// `outer` in the namespace of `outer_ns_fd` (down: a veth cannot open
/// before its pair is complete, so the peer is set up afterwards), both with
/// their MACs.
async fn add_veth(handle: &Handle, inner: &End, outer: &End, outer_ns_fd: i32) -> Result<()> {
    let peer = LinkMessageBuilder::<LinkUnspec>::new()
        .name(outer.name.clone())
        .address(outer.mac.to_vec())
        .setns_by_fd(outer_ns_fd)
        .build();
    let msg = LinkMessageBuilder::<LinkUnspec>::new_with_info_kind(InfoKind::Veth)
        .name(inner.name.clone())
        .address(inner.mac.to_vec())
        .up()
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
        .build();
    handle
        .link()
        .add(msg)
        .execute()
        .await
        .with_context(|| format!("cannot create veth pair {} <-> {}", inner.name, outer.name))
}

async fn index_of(handle: &Handle, name: &str) -> Result<u32> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await.with_context(|| format!("cannot find interface {name}"))? {
        Some(msg) => Ok(msg.header.index),
        None => bail!("interface {name} not found"),
    }
}
