"""The suite on the real ccp-kernel module, checked in a QEMU guest (`make kmod-check`).

Pieces, one job each:

- `kmod.source`: checks CCP_KERNEL_SRC (a ccp-kernel checkout with libccp) and picks, per
  kernel, the branch whose `cong_control` signature matches the kernel's headers.
- `kmod.kernels`: the Debian kernels checked (image + headers by `apt-get download`, unpacked
  with `dpkg-deb -x` into a cache under target/), the uncompressed vmlinux QEMU boots.
- `kmod.build`: builds ccp-cong.ko against unpacked headers (kbuild called directly).
- `kmod.modinfo`: module dependencies read from a module's .modinfo strings.
- `kmod.initramfs`: the guest's root file system (a newc cpio archive).
- `kmod.plan`: what the guest runs (cases: kernel CCAs and ccp-algorithms daemons).
- `kmod.guest`: the QEMU command line and run (TCG or KVM).
- `kmod.results`: the guest's results read back into a table and a verdict.
- `kmod.cli`: `python -m kmod check ...`.

The guest's own program is `kmod/guest_init.sh` (busybox sh, its /init).
"""
