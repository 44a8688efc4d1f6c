"""Tier 3 of nfs_multivip: the systemd variant of the NFS lab VM (real boot: udev, ifupdown, fstab)
is rebooted inside the same QEMU session. The mounts (fstab, `_netdev`) and the host routes (the
role's ifupdown hook) must come back by themselves, each VIP's connection from its planned source,
and the next run of the role must change nothing. With the storage down, the node still boots
(`nofail`): a dead filer must never keep a GPU node from coming up.

Slow (~10 min under TCG): `make test-slow`, root.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.lab.nfsvm import VIPS, apply_roles, reboot_vm, stop_nfs_server, storage_and_vm, vm

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def systemd_vm() -> Iterator[None]:
    if os.geteuid() != 0:
        if os.environ.get("DLTUNE_LAB_REQUIRED") == "1":
            pytest.fail("the NFS VM tier needs root")
        pytest.skip("the NFS VM tier needs root")
    with storage_and_vm("systemd"):
        yield


def wait_for_mounts(count: int, timeout: float = 120) -> list[str]:
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = [
            line for line in vm("findmnt -t nfs -n -o SOURCE,TARGET").stdout.splitlines() if line.strip()
        ]
        if len(lines) >= count:
            return lines
        time.sleep(2)
    return lines


def test_mounts_and_routes_come_back_after_a_reboot(systemd_vm: None) -> None:
    first: dict[str, Any] = apply_roles()
    assert first["changed"] > 0
    seconds = reboot_vm()
    print(f"rebooted, SSH back after {seconds:.0f} s")
    mounted = wait_for_mounts(len(VIPS))
    assert sorted(line.split()[:2] for line in mounted) == sorted(
        [f"{v['address']}:/nfs0", v["mount_point"]] for v in VIPS
    ), mounted
    for vip in VIPS:
        route = vm(f"ip route get {vip['address']}").stdout
        assert f"dev {vip['interface']} " in route and f"src {vip['source']} " in route, (vip, route)
        vm(f"ls {vip['mount_point']} >/dev/null")
        sockets = vm(f"ss -Htn state established dst {vip['address']} dport = :2049").stdout.split("\n")
        local = [line.split()[2] for line in sockets if line.strip()]
        assert len(local) == 1 and local[0].startswith(f"{vip['source']}:"), (vip, local)
    again = apply_roles()
    assert again["changed"] == 0


def test_the_node_boots_with_the_storage_down(systemd_vm: None) -> None:
    stop_nfs_server()
    time.sleep(3)  # ganesha takes 2-3 s to exit
    seconds = reboot_vm()
    print(f"rebooted with the storage down, SSH back after {seconds:.0f} s")
    assert vm("findmnt -t nfs -n").stdout.strip() == ""  # nofail: not mounted, not blocking
    for vip in VIPS:
        route = vm(f"ip route get {vip['address']}").stdout
        assert f"dev {vip['interface']} " in route, (vip, route)
    state = vm("systemctl is-system-running").stdout.strip()
    assert state in ("running", "degraded"), state
