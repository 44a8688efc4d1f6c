"""Tier 2 of nfs_multivip: a VM with the distribution kernel's real NFS client (QEMU, TCG), its two
NICs em1/em2 on the storage bridge of tests/lab/nfs-storage.sh. It is the NFS node of `make demo`:
`ansible-playbook -i inventory` reaches it over SSH through the lab inventory's lab_vm.py (listed
while it runs, ProxyCommand into the storage namespace), as the demo does.

dltune and nfs_multivip (tests/integration/playbooks/nfs_multivip_vm.yml) mount the export once per
VIP for real; a second run of the NFS play changes nothing; each
VIP has one TCP connection from the planned source address, and the bytes read through each mount
cross the planned NIC (tap counters on the storage side). playbooks/audit.yml puts the VM in the
cluster report beside the lab containers, its NFS mounts and routes passing. The audit in the VM
passes as an ordinary user; then the NFS server is killed and the audit reports every mount as stale
within its timeout instead of hanging.

In `make test-slow` (root): about 15 minutes of QEMU under TCG on two cores, which slowed every tier
run beside it and took CI past its limit; tests/integration/test_nfs_multivip_netns.py (a real NFS
server and the host kernel's client in namespaces) covers the role's routes, mounts, idempotence and
audit in `make test`. The VM image carries dltune's dependencies in the role's venv (built natively
by tests/lab/nfs-vm.sh), so the role only adds the dltune wheel under emulation.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.lab.nfsvm import HOST, VIPS, apply_roles, stop_nfs_server, storage_and_vm, tap_tx, vm

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def applied() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    if os.geteuid() != 0:
        if os.environ.get("DLTUNE_LAB_REQUIRED") == "1":
            pytest.fail("the NFS VM tier needs root")
        pytest.skip("the NFS VM tier needs root")
    with storage_and_vm():
        # What only this tier has is a real kernel's NFS client (mount options as the kernel reports
        # them, live routes): dltune (for the audit in the VM) and nfs_multivip, not the whole site,
        # whose other roles run in the lab and molecule (test_site_lab, each role's scenario). Under TCG
        # every module costs 3-4 s: site.yml here cost more than five minutes of CI.
        first = apply_roles()
        second = apply_roles("playbooks/nfs_multivip.yml")
        yield first, second


def test_the_inventory_lists_the_vm_while_it_runs(applied: tuple[dict[str, Any], ...]) -> None:
    listed = subprocess.run(
        ["ansible-inventory", "-i", "inventory", "--list"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    groups = json.loads(listed.stdout)
    assert groups["lab_vm"]["hosts"] == [HOST]
    assert "lab_vm" in groups["gpu_nodes"]["children"]
    assert HOST in groups["nvidia_driver_excluded"]["hosts"]
    assert HOST not in groups.get("slurm", {}).get("hosts", [])


def test_the_roles_mount_each_vip_and_a_second_nfs_run_changes_nothing(
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


def test_the_cluster_report_shows_the_vms_real_nfs_mounts(
    applied: tuple[dict[str, Any], ...], tmp_path: Path
) -> None:
    """playbooks/audit.yml over the whole lab inventory, as `make demo` runs it: the VM is a row of
    the report, its mounts and routes checked for real; a lab container (if the lab's nodes are up)
    can have no kernel NFS, so its NFS checks are not reported as passing. Lab containers the site has
    not reached yet have no dltune: each is in the report as not installed and fails the play (exit 2),
    the VM never."""
    done = subprocess.run(
        ["ansible-playbook", "playbooks/audit.yml", "-i", "inventory", "-e", f"dltune_report_dir={tmp_path}"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    by_host = {n["host"]: n for n in json.loads((tmp_path / "cluster.json").read_text())["nodes"]}
    assert HOST in by_host, sorted(by_host)
    not_installed = {h for h, n in by_host.items() if (n["problem"] or "").startswith("not installed: ")}
    assert HOST not in not_installed
    assert done.returncode == (2 if not_installed else 0), done.stdout[-4000:]
    results = {(r["id"], r["subject"]): r["status"] for r in by_host[HOST]["results"]}
    for vip in VIPS:
        assert results[("nfs.vip_mounts", vip["mount_point"])] == "pass", results
        assert results[("nfs.responsive", vip["mount_point"])] == "pass", results
        assert results[("network.vip_routes", vip["address"])] == "pass", results
    # No GPU in the VM: its GPU checks are skipped with the reason, never passed or failed.
    assert {s for (check, _), s in results.items() if check.startswith("gpu.")} == {"skip"}
    assert by_host[HOST]["healthy"], by_host[HOST]
    for host, node in by_host.items():
        if host != HOST and node["problem"] is None:
            nfs = {r["status"] for r in node["results"] if r["area"] == "nfs"}
            assert "pass" not in nfs, (host, node["results"])
    assert HOST in (tmp_path / "report.html").read_text()


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
