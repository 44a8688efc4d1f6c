"""Tier 2 of nfs_multivip: a VM with the distribution kernel's real NFS client (QEMU, TCG), its two
NICs em1/em2 on the storage bridge of tests/lab/nfs-storage.sh, Ansible over SSH (tests/lab/nfsvm.py).

The role mounts the export once per VIP for real; a second run changes nothing; each VIP has one TCP
connection from the planned source address, and the bytes read through each mount cross the planned
NIC (tap counters on the storage side). The audit in the VM passes as an ordinary user; then the
NFS server is killed and the audit reports every mount as stale within its timeout instead of hanging.

Part of `make test`: the VM image carries dltune's dependencies in the role's venv (built natively by
tests/lab/nfs-vm.sh), so the role only adds the dltune wheel under emulation.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab.nfsvm import VIPS, apply_roles, stop_nfs_server, storage_and_vm, tap_tx, vm

pytestmark = [pytest.mark.lab]


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    if os.geteuid() != 0:
        if os.environ.get("DLTUNE_LAB_REQUIRED") == "1":
            pytest.fail("the NFS VM tier needs root")
        pytest.skip("the NFS VM tier needs root")
    workdir: Path = tmp_path_factory.mktemp("vm")
    with storage_and_vm():
        first = apply_roles(workdir)
        second = apply_roles(workdir)
        yield first, second


def test_the_role_mounts_each_vip_and_a_second_run_changes_nothing(
    applied: tuple[dict[str, Any], ...],
) -> None:
    first, second = applied
    assert first["changed"] > 0
    assert second["changed"] == 0
    mounted = vm("findmnt -t nfs -n -o SOURCE,TARGET,OPTIONS").stdout.splitlines()
    assert sorted(line.split()[:2] for line in mounted) == sorted(
        [f"{v['address']}:/nfs0", v["mount_point"]] for v in VIPS
    )
    for line in mounted:
        options = line.split()[2].split(",")
        assert {"vers=3", "rsize=524288", "wsize=524288", "hard", "proto=tcp"} <= set(options), line


def test_one_connection_per_vip_from_the_planned_source(applied: tuple[dict[str, Any], ...]) -> None:
    for vip in VIPS:
        sockets = vm(f"ss -Htn state established dst {vip['address']} dport = :2049").stdout.split("\n")
        local = [line.split()[2] for line in sockets if line.strip()]
        assert len(local) == 1, (vip, sockets)
        assert local[0].startswith(f"{vip['source']}:"), (vip, local)


def test_bytes_read_through_each_mount_cross_the_planned_nic(applied: tuple[dict[str, Any], ...]) -> None:
    blob = 16 * 1024 * 1024
    for vip in VIPS:
        vm("sync; echo 3 > /proc/sys/vm/drop_caches")
        before = tap_tx()
        done = vm(f"dd if={vip['mount_point']}/blob.bin of=/dev/null bs=1M")
        assert done.returncode == 0, done.stderr
        after = tap_tx()
        sent = {nic: after[nic] - before[nic] for nic in after}
        other = "em2" if vip["interface"] == "em1" else "em1"
        assert sent[vip["interface"]] > blob * 0.9 and sent[other] < blob * 0.1, (vip, sent)


def test_audit_in_the_vm_passes_then_reports_a_dead_server_as_stale(
    applied: tuple[dict[str, Any], ...],
) -> None:
    healthy = vm("runuser -u nobody -- dltune audit --only nfs,network --format json")
    results = {(r["id"], r["subject"]): r["status"] for r in json.loads(healthy.stdout)["results"]}
    assert healthy.returncode == 0, results
    assert {results[("nfs.vip_mounts", v["mount_point"])] for v in VIPS} == {"pass"}
    assert {results[("nfs.responsive", v["mount_point"])] for v in VIPS} == {"pass"}
    assert {results[("network.vip_routes", v["address"])] for v in VIPS} == {"pass"}

    stop_nfs_server()
    time.sleep(3)  # ganesha takes 2-3 s to exit
    dead = vm("runuser -u nobody -- dltune audit --only nfs --nfs-timeout 3 --format json", timeout=90)
    results_by_key = {(r["id"], r["subject"]): r for r in json.loads(dead.stdout)["results"]}
    assert dead.returncode == 1
    for vip in VIPS:
        stale = results_by_key[("nfs.responsive", vip["mount_point"])]
        assert stale["status"] == "fail" and stale["summary"].startswith("stale or unreachable"), stale
