"""QEMU's command line and the choice of acceleration."""

from pathlib import Path

import pytest

from kmod import guest


def test_kvm_only_with_hardware_virtualization_and_a_usable_dev_kvm(tmp_path):
    dev = tmp_path / "kvm"
    dev.write_text("")
    assert guest.host_accel("flags\t: fpu vme vmx sse\n", dev) == "kvm"
    assert guest.host_accel("flags\t: fpu svm\n", dev) == "kvm"
    # /dev/kvm without vmx/svm: a software nested hypervisor (PVM): Debian kernels do not boot there.
    assert guest.host_accel("flags\t: fpu vme sse\n", dev) == "tcg"
    assert guest.host_accel("flags\t: vmx\n", tmp_path / "missing") == "tcg"


def test_the_guest_has_no_network_device_and_one_share():
    cmd = guest.qemu_command(Path("/k/vmlinux"), Path("/k/initrd"), Path("/r/out"), "tcg")
    s = " ".join(cmd)
    assert "-nic none" in s and "-accel tcg -cpu max" in s and "-smp 2" in s
    assert "-virtfs local,path=/r/out,mount_tag=out,security_model=none" in s
    assert "-no-reboot" in cmd
    assert "-accel kvm -cpu host" in " ".join(guest.qemu_command(Path("v"), Path("i"), Path("o"), "kvm"))
    with pytest.raises(ValueError, match="--accel must be kvm or tcg"):
        guest.qemu_command(Path("v"), Path("i"), Path("o"), "hvf")


def test_console_errors_find_panics_only():
    log = "[ 1.0] ok\n[ 2.0] BUG: kernel NULL pointer dereference\nKernel panic - not syncing\n"
    assert len(guest.console_errors(log)) == 2
    assert guest.console_errors("kmod-guest: case x: ok\n") == []
