//! "Only root steers flows" (docs/datapath.md, "Security"): a user other than root can
//! neither reach the datapath's or Portus's sockets nor get a datagram
//! accepted, and a socket directory another user prepared stops the datapath
//! from starting.
//!
//! Needs root (to act as uid 65534 and to chown); without it each test fails
//! naming what is missing (ccplab_util::testkit, the project's one policy).
//! The non-root user is a thread that dropped to uid/gid 65534 with raw
//! setresuid/setresgid/setgroups syscalls, which change only the calling
//! thread's credentials (the kernel checks those on connect/send), so the
//! test process stays root. Tests starting `ccp-datapath` take
//! /tmp/ccp-datapath-tests.lock like tests/end_to_end.rs.

use ccp_datapath::ipc;

use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ccplab_util::testkit::{
    ccp_registered, lock_ccp_registration, require_root, try_wait_until, wait_until,
};
use ipc::{secure_dir, PortusIpc, Trust};

mod common;
use common::process::{uniq, DatapathProc, DATAPATH as BIN};

const NOBODY: u32 = 65534;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);
impl TempDir {
    fn new() -> TempDir {
        let p = std::env::temp_dir().join(uniq("ccp-ipc-sec-"));
        std::fs::create_dir(&p).unwrap();
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `f` on a thread whose credentials are uid/gid 65534 with no
/// supplementary groups; returns its result.
fn as_nobody<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let nobody = libc::c_long::from(NOBODY as i32);
        // SAFETY: raw syscalls changing only this thread's credentials
        // (glibc's wrappers would change every thread's).
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()), 0, "setgroups");
            assert_eq!(libc::syscall(libc::SYS_setresgid, nobody, nobody, nobody), 0, "setresgid");
            assert_eq!(libc::syscall(libc::SYS_setresuid, nobody, nobody, nobody), 0, "setresuid");
            assert_eq!(libc::syscall(libc::SYS_geteuid), nobody, "thread runs as 65534");
        }
        f()
    })
    .join()
    .expect("nobody thread")
}

/// Send `msg` to `to` as uid 65534 from a fresh unbound socket.
fn send_as_nobody(to: &Path) -> std::io::Result<usize> {
    let to = to.to_path_buf();
    as_nobody(move || UnixDatagram::unbound().unwrap().send_to(b"\x02\x00\x0c\x00\x00\x00\x00\x00", &to))
}

/// Receive from `ipc` until a datagram arrives or `timeout` passes.
fn recv_within(ipc: &mut PortusIpc, timeout: Duration) -> Option<Vec<u8>> {
    let mut buf = [0u8; 256];
    try_wait_until(timeout, || ipc.try_recv(&mut buf).unwrap().map(|n| buf[..n].to_vec()))
}

#[test]
fn datagrams_from_non_root_senders_are_dropped() {
    require_root("sending as uid 65534 (setresuid) to test SO_PASSCRED filtering");
    let dir = TempDir::new();
    let portus_path = dir.0.join("portus");
    let _portus = UnixDatagram::bind(&portus_path).unwrap();
    let mut ipc = PortusIpc::bind(&dir.0, &portus_path, Trust::current(None)).expect("bind");
    let target = ipc.path().to_path_buf();

    // a real non-root sender: root connects (the 0700 directory would stop
    // uid 65534 from connecting), then the thread drops to 65534 and sends
    let sock = UnixDatagram::unbound().unwrap();
    sock.connect(&target).unwrap();
    let n = as_nobody(move || sock.send(b"from nobody").expect("send on the connected socket"));
    assert_eq!(n, 11);
    // root's own datagram after it: only that one comes through
    UnixDatagram::unbound().unwrap().send_to(b"from root", &target).unwrap();
    assert_eq!(recv_within(&mut ipc, Duration::from_secs(2)).as_deref(), Some(&b"from root"[..]));
    assert_eq!(ipc.dropped_untrusted(), 1, "the 65534 datagram was dropped");

    // with --allow-gid 65534 the same sender is let in
    drop(ipc);
    let mut ipc = PortusIpc::bind(&dir.0, &portus_path, Trust::current(Some(NOBODY))).expect("bind");
    let md = std::fs::metadata(ipc.path()).unwrap();
    assert_eq!((md.mode() & 0o777, md.gid()), (0o770, NOBODY), "socket group-writable for the allowed group");
    let sock = UnixDatagram::unbound().unwrap();
    sock.connect(ipc.path()).unwrap();
    as_nobody(move || sock.send(b"group member").unwrap());
    assert_eq!(recv_within(&mut ipc, Duration::from_secs(2)).as_deref(), Some(&b"group member"[..]));
    assert_eq!(ipc.dropped_untrusted(), 0);
}

#[test]
fn nothing_is_sent_to_a_portus_socket_another_user_owns() {
    require_root("chown of the fake Portus socket to uid 65534");
    let dir = TempDir::new();
    let portus_path = dir.0.join("portus");
    let portus = UnixDatagram::bind(&portus_path).unwrap();
    portus.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let ipc = PortusIpc::bind(&dir.0, &portus_path, Trust::current(None)).expect("bind");
    let mut tx = ipc.sender().unwrap();
    std::os::unix::fs::chown(&portus_path, Some(NOBODY), Some(NOBODY)).unwrap();
    assert!(!tx.send(b"flow data"), "send to a socket owned by 65534 refused");
    let mut buf = [0u8; 64];
    assert!(portus.recv(&mut buf).is_err(), "nothing arrived at the foreign socket");
    std::os::unix::fs::chown(&portus_path, Some(0), Some(0)).unwrap();
    assert!(tx.send(b"flow data"), "root-owned again: sent");
    let n = portus.recv(&mut buf).expect("the datagram arrived");
    assert_eq!(&buf[..n], b"flow data");
}

#[test]
fn socket_directory_prepared_by_another_user_is_refused() {
    require_root("chown of the socket directory to uid 65534");
    let dir = TempDir::new();
    let sockdir = dir.0.join("ccp");
    std::fs::create_dir(&sockdir).unwrap();
    std::fs::set_permissions(&sockdir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&sockdir, Some(NOBODY), Some(NOBODY)).unwrap();
    let err = format!("{:#}", secure_dir(&sockdir, &Trust::current(None)).unwrap_err());
    assert!(err.contains(&sockdir.display().to_string()) && err.contains("owned by uid 65534"), "{err}");
    // root-owned but others may enter (as Portus leaves /tmp/ccp): tightened
    std::os::unix::fs::chown(&sockdir, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&sockdir, std::fs::Permissions::from_mode(0o755)).unwrap();
    secure_dir(&sockdir, &Trust::current(None)).expect("root-owned 0755 is fixed, not refused");
    assert_eq!(std::fs::metadata(&sockdir).unwrap().mode() & 0o777, 0o700);
    // and the daemon refuses to start on a foreign directory, naming it
    std::os::unix::fs::chown(&sockdir, Some(NOBODY), Some(NOBODY)).unwrap();
    let _l = lock_ccp_registration();
    let out = Command::new(BIN).args(["--bind-dir", sockdir.to_str().unwrap()]).output().expect("spawn ccp-datapath");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--bind-dir") && stderr.contains(sockdir.to_str().unwrap()) && stderr.contains("owned by uid 65534"), "{stderr}");
    assert!(!ccp_registered(), "nothing registered after the refusal");
}

#[test]
fn non_root_user_cannot_reach_the_sockets() {
    require_root("acting as uid 65534 and starting ccp-datapath");
    let _l = lock_ccp_registration();
    // a Portus as the lab runs it: portus::ipc::unix binds /tmp/ccp/<name>
    let name = uniq("ccp-sec-portus-");
    let portus = portus::ipc::unix::Socket::<portus::ipc::Blocking>::new(&name).expect("bind Portus socket");
    let portus_path = PathBuf::from(format!("/tmp/ccp/{name}"));
    let _unlink = Unlink(portus_path.clone());
    // the default --bind-dir (/tmp/ccp)
    let mut dp = DatapathProc::start(&["--portus-socket", portus_path.to_str().unwrap()], "ccp-sec", Duration::from_secs(15));
    let md = std::fs::symlink_metadata("/tmp/ccp").unwrap();
    assert_eq!((md.uid(), md.mode() & 0o777), (0, 0o700), "/tmp/ccp owned by root, mode 0700");

    for target in [&dp.socket, &portus_path] {
        let err = send_as_nobody(target).expect_err("uid 65534 reached a socket");
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{}: {err}", target.display());
        let t = target.clone();
        let stat = as_nobody(move || std::fs::metadata(&t).map(|_| ()).map_err(|e| e.kind()));
        assert_eq!(stat, Err(ErrorKind::PermissionDenied), "uid 65534 cannot even look up {}", target.display());
    }
    // a datagram from a non-root sender that got hold of a connected socket
    let sock = UnixDatagram::unbound().unwrap();
    sock.connect(&dp.socket).unwrap();
    as_nobody(move || sock.send(b"\x03\x00\x0c\x00\x01\x00\x00\x00\x00\x00\x00\x00").unwrap());
    wait_until("the datapath to log the dropped 65534 datagram", Duration::from_secs(5), || {
        let log = dp.log_text();
        log.lines().any(|l| l.contains("untrusted sender") && l.contains("65534")).then_some(())
    });
    assert!(dp.stop().expect("exits on SIGTERM").success(), "{}", dp.log_text());
    drop(portus);
}

// ---------------------------------------------------------------- helpers

struct Unlink(PathBuf);
impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
