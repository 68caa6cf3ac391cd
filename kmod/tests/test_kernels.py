"""Kernel packages and images (no download: synthetic files)."""

import lzma
import shutil

import pytest

from kmod import kernels


def test_select_names_unknown_kernels():
    assert [k.release for k in kernels.select("6.1, 6.12")] == ["6.1.0-56-amd64", "6.12.117+deb12-amd64"]
    assert kernels.KERNELS["6.12"].version == (6, 12)
    assert "linux-headers-6.12.117+deb12-common" in kernels.KERNELS["6.12"].packages
    with pytest.raises(ValueError, match="unknown kernel '5.10'; known: 6.1, 6.12"):
        kernels.select("6.1,5.10")
    with pytest.raises(ValueError, match="empty"):
        kernels.select(" , ")


def test_headers_makefile_is_pointed_at_the_unpacked_common_headers(tmp_path):
    mk = tmp_path / "Makefile"
    mk.write_text("include /usr/src/linux-headers-6.1.0-56-common/Makefile\nexport x\n")
    common = tmp_path / "usr/src/linux-headers-6.1.0-56-common"
    kernels.fix_headers_makefile(mk, common)
    assert mk.read_text() == f"include {common}/Makefile\nexport x\n"
    moved = tmp_path / "moved/usr/src/linux-headers-6.1.0-56-common"
    kernels.fix_headers_makefile(mk, moved)  # again, from an already fixed path (the cache moved)
    assert mk.read_text().startswith(f"include {moved}/Makefile")
    mk.write_text("all:\n")
    with pytest.raises(ValueError, match="found 0"):
        kernels.fix_headers_makefile(mk, tmp_path)


def test_vmlinux_is_cut_out_of_a_bzimage_with_an_xz_payload():
    elf = b"\x7fELF" + bytes(range(256)) * 40
    image = b"MZ" + b"\0" * 500 + lzma.compress(elf, format=lzma.FORMAT_XZ) + b"\xff" * 64
    assert kernels.extract_vmlinux(image) == elf
    with pytest.raises(ValueError, match="no xz or zstd payload"):
        kernels.extract_vmlinux(b"MZ" + b"\0" * 100)


@pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd is not installed")
def test_vmlinux_is_cut_out_of_a_bzimage_with_a_zstd_payload(tmp_path):
    import subprocess
    elf = b"\x7fELF" + b"kernel" * 1000
    z = subprocess.run(["zstd", "-q", "-c"], input=elf, capture_output=True, check=True).stdout
    assert kernels.extract_vmlinux(b"\0" * 300 + z + b"trailer") == elf
