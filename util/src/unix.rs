//! Unix datagram sockets: receiving a datagram with its sender's
//! kernel-checked identity, for the sockets through which Portus and the
//! datapath steer flows (each side drops datagrams from senders it does not
//! trust).

use std::os::fd::RawFd;
use std::path::PathBuf;

/// recvmsg(2) of one datagram into `buf` with room for one SCM_CREDENTIALS
/// message: the datagram's length (its full length when `flags` holds
/// `MSG_TRUNC`, more than `buf.len()` if it was cut), the sender's
/// credentials (None unless the socket has SO_PASSCRED on and the kernel
/// attached them) and the path the sender is bound to (None for an unbound
/// or abstract sender). `flags` goes to recvmsg as is (0 blocks up to the
/// socket's timeout; `MSG_DONTWAIT` returns `WouldBlock` when nothing waits).
///
/// Errors: recvmsg's, as `std::io::Error` (`WouldBlock`, `Interrupted`,
/// `TimedOut`...).
pub fn recv_with_creds(
    fd: RawFd,
    buf: &mut [u8],
    flags: libc::c_int,
) -> std::io::Result<(usize, Option<libc::ucred>, Option<PathBuf>)> {
    // u64 array: cmsg buffers must be aligned for cmsghdr
    let mut cbuf = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: sockaddr_un is plain data; zeroed is an empty address.
    let mut from: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut from as *mut libc::sockaddr_un).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: msg points at live buffers for the duration of the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut cred = None;
    // SAFETY: walking the control messages the kernel wrote into cbuf with
    // the libc CMSG macros; the ucred is read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS {
                cred = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(c) as *const libc::ucred
                ));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, cred, sender_path(&from, msg.msg_namelen)))
}

/// The filesystem path of a unix socket address `len` bytes long (unix(7):
/// `sun_path` may or may not end in a NUL); None for an unbound sender (no
/// path) or an abstract one (leading NUL).
fn sender_path(addr: &libc::sockaddr_un, len: libc::socklen_t) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let path_offset = std::mem::size_of::<libc::sa_family_t>();
    let n = (len as usize)
        .checked_sub(path_offset)?
        .min(addr.sun_path.len());
    // SAFETY: sun_path is a c_char array; viewing n <= its length bytes as u8.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(addr.sun_path.as_ptr().cast(), n) };
    let bytes = bytes.split(|b| *b == 0).next().unwrap_or_default();
    (!bytes.is_empty()).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixDatagram;

    fn pass_credentials(sock: &UnixDatagram) {
        let on: libc::c_int = 1;
        // SAFETY: setsockopt with an int argument on a socket we own.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "SO_PASSCRED: {}", std::io::Error::last_os_error());
    }

    #[test]
    fn a_datagram_comes_with_its_senders_credentials_and_bound_path() {
        let dir = tempfile::tempdir().unwrap();
        let (rx_path, tx_path) = (dir.path().join("rx"), dir.path().join("tx"));
        let rx = UnixDatagram::bind(&rx_path).unwrap();
        pass_credentials(&rx);
        let tx = UnixDatagram::bind(&tx_path).unwrap();
        tx.send_to(b"hello", &rx_path).unwrap();
        let mut buf = [0u8; 16];
        let (n, cred, from) = recv_with_creds(rx.as_raw_fd(), &mut buf, 0).unwrap();
        assert_eq!(&buf[..n], b"hello");
        let cred = cred.expect("SO_PASSCRED is on: the kernel attaches credentials");
        // SAFETY: getpid/geteuid have no preconditions.
        assert_eq!((cred.pid, cred.uid), (unsafe { libc::getpid() }, unsafe { libc::geteuid() }));
        assert_eq!(from.as_deref(), Some(tx_path.as_path()));
    }

    #[test]
    fn an_unbound_sender_has_no_path_and_truncation_shows_the_full_length() {
        let dir = tempfile::tempdir().unwrap();
        let rx_path = dir.path().join("rx");
        let rx = UnixDatagram::bind(&rx_path).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        tx.send_to(b"0123456789", &rx_path).unwrap();
        let mut buf = [0u8; 4];
        let (n, cred, from) =
            recv_with_creds(rx.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT | libc::MSG_TRUNC).unwrap();
        assert_eq!((n, &buf), (10, b"0123"));
        assert!(cred.is_none(), "no SO_PASSCRED on the receiver: no credentials");
        assert_eq!(from, None);
        let err = recv_with_creds(rx.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    }
}
