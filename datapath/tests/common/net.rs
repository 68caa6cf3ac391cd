//! A test network: namespaces A (sender) and B (receiver) joined by a veth
//! pair with a TBF bottleneck on A's side ([`Net`]), and a bulk TCP flow
//! A -> B whose sender socket the test reads ([`BulkFlow`]).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use ccplab_util::testkit::try_wait_until;

use super::process::uniq;

/// Runs a command; panics with its stderr if it fails.
pub fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("spawn");
    assert!(out.status.success(), "{:?} failed: {}", args, String::from_utf8_lossy(&out.stderr));
}

/// What a test's [`Net`] is: names, addresses and its bottleneck. Tests
/// that may run at once use different names and subnets.
#[derive(Clone, Copy)]
pub struct NetSpec {
    /// Namespaces `<ns_prefix>A<id>` and `<ns_prefix>B<id>`.
    pub ns_prefix: &'static str,
    /// veth ends `<veth_prefix>a<id>` and `<veth_prefix>b<id>` (at most 15 characters in all).
    pub veth_prefix: &'static str,
    /// A is 10.SUBNET.0.1, B 10.SUBNET.0.2 (/24).
    pub subnet: u8,
    /// TBF rate on A's egress, bits/s.
    pub rate_bps: u64,
    /// TBF queue limit, as `tc` takes it (e.g. "1mb", "64kb").
    pub queue_limit: &'static str,
}

/// Namespaces A and B joined by a veth pair, TBF on A's side, as its
/// [`NetSpec`] says. Deleted on drop.
pub struct Net {
    pub a: String,
    pub b: String,
    pub a_ip: Ipv4Addr,
    pub b_ip: Ipv4Addr,
}

impl Net {
    pub fn new(spec: NetSpec) -> Net {
        let id = uniq("");
        let net = Net {
            a: format!("{}A{id}", spec.ns_prefix),
            b: format!("{}B{id}", spec.ns_prefix),
            a_ip: Ipv4Addr::new(10, spec.subnet, 0, 1),
            b_ip: Ipv4Addr::new(10, spec.subnet, 0, 2),
        };
        let (va, vb) = (format!("{}a{id}", spec.veth_prefix), format!("{}b{id}", spec.veth_prefix));
        sh(&["ip", "netns", "add", &net.a]);
        sh(&["ip", "netns", "add", &net.b]);
        sh(&["ip", "link", "add", &va, "netns", &net.a, "type", "veth", "peer", "name", &vb, "netns", &net.b]);
        sh(&["ip", "-n", &net.a, "addr", "add", &format!("{}/24", net.a_ip), "dev", &va]);
        sh(&["ip", "-n", &net.b, "addr", "add", &format!("{}/24", net.b_ip), "dev", &vb]);
        for (ns, dev) in [(&net.a, &va), (&net.b, &vb)] {
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        let rate = format!("{}bit", spec.rate_bps);
        sh(&["tc", "-n", &net.a, "qdisc", "add", "dev", &va, "root", "tbf", "rate", &rate, "burst", "4kb", "limit", spec.queue_limit]);
        net
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Moves the calling thread into network namespace `name` (namespaces are per thread).
pub fn enter_netns(name: &str) {
    let f = File::open(format!("/var/run/netns/{name}")).expect("netns file");
    // SAFETY: setns on this thread only (network namespaces are per thread).
    assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns {name}");
}

/// How the sender's socket is set up around connect().
#[derive(Clone, Copy)]
pub struct SocketSetup {
    /// TCP_CONGESTION before connect.
    pub cc: &'static str,
    /// TCP_CONGESTION after connect (the CA's init runs then), if any.
    pub cc_after_connect: Option<&'static str>,
    /// SO_MAX_PACING_RATE before connect, bytes/s (the kernel turns on
    /// TCP-internal pacing for it).
    pub max_pacing_bytes_per_s: Option<u32>,
}

impl SocketSetup {
    /// Congestion control `ccp` from the start, nothing else.
    pub const CCP: SocketSetup = SocketSetup { cc: "ccp", cc_after_connect: None, max_pacing_bytes_per_s: None };
}

fn set_congestion_control(fd: i32, cc: &str) -> std::io::Result<()> {
    // SAFETY: setsockopt with a buffer of the given length.
    let r = unsafe { libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, cc.as_ptr() as *const libc::c_void, cc.len() as u32) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A TCP connection to `dst:port` from the calling thread's namespace, its socket set up as `setup` says.
pub fn connect_with(dst: Ipv4Addr, port: u16, setup: SocketSetup) -> std::io::Result<TcpStream> {
    // SAFETY: plain socket syscalls on an fd owned by the TcpStream from the start.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        set_congestion_control(fd, setup.cc)?;
        if let Some(rate) = setup.max_pacing_bytes_per_s {
            let r = libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, &rate as *const u32 as *const libc::c_void, 4);
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(dst).to_be() },
            sin_zero: [0; 8],
        };
        let r = libc::connect(fd, &addr as *const _ as *const libc::sockaddr, std::mem::size_of_val(&addr) as u32);
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(cc) = setup.cc_after_connect {
            set_congestion_control(fd, cc)?;
        }
        Ok(stream)
    }
}

/// The port [`BulkFlow`] sends to.
pub const BULK_PORT: u16 = 5201;

/// A bulk TCP flow A -> B (port [`BULK_PORT`]), congestion control `ccp`
/// unless set up otherwise; the sender socket is readable from the test
/// thread. Stopped and joined on drop.
pub struct BulkFlow {
    stream: Arc<TcpStream>,
    stop: Arc<AtomicBool>,
    /// While set the writer writes nothing (the application is idle).
    paused: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl BulkFlow {
    pub fn start(net: &Net) -> BulkFlow {
        Self::start_with(net, SocketSetup::CCP)
    }

    pub fn start_with(net: &Net, setup: SocketSetup) -> BulkFlow {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let (b, b_ip) = (net.b.clone(), net.b_ip);
        let stop_r = stop.clone();
        let receiver = std::thread::spawn(move || {
            enter_netns(&b);
            let l = TcpListener::bind((b_ip, BULK_PORT)).expect("listen in B");
            ready_tx.send(()).unwrap();
            let (mut s, _) = l.accept().expect("accept");
            s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
            let mut buf = vec![0u8; 1 << 16];
            while !stop_r.load(Ordering::SeqCst) {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
        });
        ready_rx.recv_timeout(Duration::from_secs(5)).expect("receiver ready");
        let (stream_tx, stream_rx) = mpsc::channel();
        let a = net.a.clone();
        let stop_s = stop.clone();
        let paused = Arc::new(AtomicBool::new(false));
        let paused_s = paused.clone();
        let sender = std::thread::spawn(move || {
            enter_netns(&a);
            let s = Arc::new(connect_with(b_ip, BULK_PORT, setup).expect("connect"));
            s.set_write_timeout(Some(Duration::from_millis(200))).unwrap();
            stream_tx.send(s.clone()).unwrap();
            let buf = vec![0x5au8; 1 << 16];
            while !stop_s.load(Ordering::SeqCst) {
                if paused_s.load(Ordering::SeqCst) {
                    std::thread::park(); // resume() and drop unpark
                    continue;
                }
                match (&*s).write(&buf) {
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
            let _ = s.shutdown(std::net::Shutdown::Both);
        });
        let stream = stream_rx.recv_timeout(Duration::from_secs(5)).expect("sender connected");
        BulkFlow { stream, stop, paused, threads: vec![receiver, sender] }
    }

    /// Stop writing: once the send queue drains the sender is idle.
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
        self.threads[1].thread().unpark();
    }

    /// Bytes written and not yet acked, unsent ones included (SIOCOUTQ).
    pub fn send_queue_bytes(&self) -> i32 {
        let mut n: libc::c_int = 0;
        // SAFETY: ioctl TIOCOUTQ (= SIOCOUTQ) writes one int.
        let r = unsafe { libc::ioctl(self.stream.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
        assert_eq!(r, 0, "SIOCOUTQ");
        n
    }

    /// The sender's TCP_INFO.
    pub fn info(&self) -> libc::tcp_info {
        // SAFETY: getsockopt into a correctly sized tcp_info.
        unsafe {
            let mut ti: libc::tcp_info = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::tcp_info>() as u32;
            let r = libc::getsockopt(
                self.stream.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                &mut ti as *mut _ as *mut libc::c_void,
                &mut len,
            );
            assert_eq!(r, 0, "TCP_INFO");
            ti
        }
    }

    /// The sender's TCP_CONGESTION.
    pub fn congestion_control(&self) -> String {
        let mut buf = [0u8; 16];
        let mut len = buf.len() as u32;
        // SAFETY: getsockopt into a 16-byte buffer.
        let r = unsafe {
            libc::getsockopt(
                self.stream.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                buf.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        };
        assert_eq!(r, 0, "TCP_CONGESTION");
        String::from_utf8_lossy(&buf[..len as usize]).trim_end_matches('\0').to_string()
    }

    /// Poll TCP_INFO until `pred` holds or `timeout` passes.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&libc::tcp_info) -> bool) -> Option<libc::tcp_info> {
        try_wait_until(timeout, || Some(self.info()).filter(|ti| pred(ti)))
    }
}

impl Drop for BulkFlow {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.threads[1].thread().unpark();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
