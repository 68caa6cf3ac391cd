"""The guest's initramfs: the cpio format, programs with their libraries, modules in load order."""

import lzma
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from kmod import initramfs, modinfo


def test_newc_archive_reads_back_with_parents_and_padding():
    t = initramfs.Tree()
    t.add_bytes("etc/a/b.txt", b"hello")  # 5 bytes: data padded to 8
    t.add_symlink("bin/sh", "busybox")
    t.add_dir("out")
    raw = t.archive()
    assert raw[:6] == b"070701" and len(raw) % 4 == 0
    got = initramfs.read_newc(raw)
    assert set(got) == {"etc", "etc/a", "etc/a/b.txt", "bin", "bin/sh", "out"}
    assert got["etc/a/b.txt"].data == b"hello" and stat.S_ISREG(got["etc/a/b.txt"].mode)
    assert stat.S_ISLNK(got["bin/sh"].mode) and got["bin/sh"].data == b"busybox"
    assert stat.S_ISDIR(got["etc/a"].mode)
    with pytest.raises(ValueError, match="bad cpio header"):
        initramfs.read_newc(b"070707" + raw[6:])


@pytest.mark.skipif(shutil.which("cpio") is None, reason="GNU cpio is not installed (cross-check only)")
def test_gnu_cpio_lists_the_archive(tmp_path):
    t = initramfs.Tree()
    t.add_bytes("x/y", b"data")
    out = subprocess.run(["cpio", "-t", "--quiet"], input=t.archive(), capture_output=True, check=True).stdout
    assert out.decode().split() == ["x", "x/y"]


def test_ldd_output_is_parsed_and_a_missing_library_is_named():
    text = ("\tlinux-vdso.so.1 (0x00007ffd)\n"
            "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f12)\n"
            "\t/lib64/ld-linux-x86-64.so.2 (0x00007f34)\n")
    assert initramfs.parse_ldd(text) == [Path("/lib/x86_64-linux-gnu/libc.so.6"), Path("/lib64/ld-linux-x86-64.so.2")]
    with pytest.raises(ValueError, match="libssl.so.3 => not found"):
        initramfs.parse_ldd("\tlibssl.so.3 => not found\n")


@pytest.mark.skipif(shutil.which("ldd") is None, reason="ldd is not installed")
def test_a_program_comes_with_its_loader_and_libraries():
    t = initramfs.Tree()
    t.add_program("host/bin/true", Path(shutil.which("true")))
    names = set(t.entries)
    assert "host/bin/true" in names
    assert any(n.endswith("/libc.so.6") for n in names), names
    assert any("ld-linux" in n for n in names), names
    assert t.entries["host/bin/true"].mode & 0o111


def ko(deps: str, name: str) -> bytes:
    # What matters of a module file here: its .modinfo strings.
    return b"\x7fELF...\x00license=GPL\x00depends=" + deps.encode() + b"\x00name=" + name.encode() + b"\x00vermagic=x\x00"


def test_modules_load_after_their_dependencies_compressed_or_not(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "9pnet.ko").write_bytes(ko("", "9pnet"))
    (tmp_path / "net" / "9pnet_virtio.ko.xz").write_bytes(lzma.compress(ko("9pnet,virtio_ring", "9pnet_virtio")))
    (tmp_path / "fs").mkdir()
    (tmp_path / "fs" / "9p.ko").write_bytes(ko("9pnet,netfs", "9p"))
    (tmp_path / "fs" / "netfs.ko").write_bytes(ko("", "netfs"))
    mods = modinfo.index(tmp_path)
    assert set(mods) == {"9pnet", "9pnet_virtio", "9p", "netfs"}
    order = [modinfo.module_name(p) for p in modinfo.load_order(["9pnet_virtio", "9p"], mods, {"virtio_ring"})]
    assert order == ["9pnet", "9pnet_virtio", "netfs", "9p"]
    assert modinfo.depends(modinfo.module_bytes(mods["9pnet_virtio"])) == ["9pnet", "virtio_ring"]
    with pytest.raises(ValueError, match=r"virtio_ring not found and not built in \(needed by 9pnet_virtio\)"):
        modinfo.load_order(["9pnet_virtio"], mods, set())


def test_builtin_names_come_from_modules_builtin(tmp_path):
    f = tmp_path / "modules.builtin"
    f.write_text("kernel/net/ipv4/tcp_cubic.ko\nkernel/drivers/virtio/virtio-ring.ko\n")
    assert modinfo.builtin_names(f) == {"tcp_cubic", "virtio_ring"}
    assert modinfo.builtin_names(tmp_path / "none") == set()


@pytest.mark.skipif(shutil.which("busybox") is None, reason="busybox is not installed")
def test_guest_init_script_parses():
    script = Path(__file__).parent.parent / "guest_init.sh"
    r = subprocess.run(["busybox", "sh", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_guest_initramfs_holds_init_programs_modules_in_order_and_the_module(tmp_path):
    from kmod import cli, kernels

    needed = ["busybox", *cli.HOST_PROGRAMS]
    missing = [c for c in needed if shutil.which(c) is None and not Path(f"/usr/sbin/{c}").exists()]
    if missing or shutil.which("ldd") is None:
        pytest.skip(f"host programs the guest needs are not installed: {', '.join(missing) or 'ldd'}")
    k = kernels.KERNELS["6.12"]
    u = kernels.Unpacked(k, tmp_path)
    mods = u.modules / "kernel"
    deps = {"9pnet_virtio": "9pnet,virtio_ring", "9p": "9pnet,netfs", "tcp_diag": "inet_diag"}
    for name in [*cli.GUEST_MODULES, "9pnet", "netfs"]:
        if name == "virtio_pci":
            continue  # built in below
        (mods / name).mkdir(parents=True, exist_ok=True)
        (mods / name / f"{name}.ko.xz").write_bytes(lzma.compress(ko(deps.get(name, ""), name)))
    (u.modules / "modules.builtin").write_text("kernel/drivers/virtio/virtio_pci.ko\nkernel/drivers/virtio/virtio_ring.ko\n")
    module = tmp_path / "ccp-cong.ko"
    module.write_bytes(ko("", "ccp_cong"))
    tree = cli.base_tree(u, module, Path(shutil.which("true")))
    got = initramfs.read_newc(tree.archive())
    assert got["init"].mode & 0o111 and got["init"].data.startswith(b"#!/bin/busybox sh")
    for prog in ["bin/busybox", "host/bin/ccp-algorithms", *(f"host/bin/{p}" for p in cli.HOST_PROGRAMS)]:
        assert prog in got and got[prog].mode & 0o111, prog
    order = got["modules.list"].data.decode().split()
    assert order.index("9pnet.ko") < order.index("9pnet_virtio.ko") and order.index("netfs.ko") < order.index("9p.ko")
    assert order.index("inet_diag.ko") < order.index("tcp_diag.ko") and "virtio_pci.ko" not in order
    assert all(got[f"modules/{m}"].data.startswith(b"\x7fELF") for m in order), "modules decompressed"
    assert got["ccp-cong.ko"].data == module.read_bytes()
