"""site.yml on a 22.04 node with Slurm and a 24.04 node without: the audit, run as an ordinary user,
passes every check except those a container cannot satisfy, and those are reported as not passing
with the reason (never as pass).

What a container cannot have: the NVIDIA kernel module (it shares the host's kernel, which has no
GPU), hence everything read through NVML; a kernel NFS mount (no NFS storage in this scenario: the
nfs_multivip role is tested on real NFS in tests/integration); and the driver role's reboot marker
(a real node reboots into the new driver). The GPUs ubuntu-drivers saw are synthetic sysfs entries
(tests/lab/make-fake-gpu-sysfs.sh), the only faked part; the driver packages are real.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.molecule_support import audit_as_user, groups_of, only_on

# check id -> (statuses allowed, what the summary must say). Nothing here may pass in a container.
CONTAINER_LIMITS: dict[str, tuple[set[str], str]] = {
    # warn while the driver role's reboot is pending ("loads after the pending reboot"), else fail.
    "driver.loaded": ({"warn", "fail"}, r"(?i)not loaded|pending reboot"),
    "driver.module_version": ({"skip", "fail"}, r"module"),
    "driver.branch": ({"skip"}, r"no driver loaded"),
    "gpu.present": ({"fail", "error", "skip"}, r"NVML|driver"),
    "gpu.ecc": ({"skip"}, r"NVML|driver"),
    "gpu.pcie": ({"skip"}, r"NVML|driver"),
    "gpu.clocks": ({"skip"}, r"NVML|driver"),
    "gpu.thermal_power": ({"skip"}, r"NVML|driver"),
    "gpu.persistence": ({"skip"}, r"NVML|driver"),
    "gpu.processes": ({"skip"}, r"NVML|driver"),
    "gpu.power_limit": ({"skip"}, r"NVML|driver"),
    "gpu.xid": ({"skip"}, r"kernel|log"),
    "gpu.sxid": ({"skip"}, r"kernel|NVSwitch"),
    "gpu.firmware": ({"skip"}, r"NVML|driver"),
    "gpu.app_clocks": ({"skip"}, r"NVML|driver"),
    # The fabric: no GPU, NVSwitch or RDMA adapter on a container's (its host's) PCI bus, nothing
    # expected by the health fragment (the dltune role's defaults).
    "fabric.pcie_aer": ({"skip"}, r"no GPU, NVSwitch or RDMA adapter"),
    "fabric.hca_pcie": ({"skip"}, r"no RDMA adapter"),
    "fabric.ib_ports": ({"skip"}, r"no InfiniBand or RoCE ports"),
    "fabric.ib_errors": ({"skip"}, r"no InfiniBand or RoCE ports"),
    "fabric.ipoib": ({"skip"}, r"no IPoIB interface expected"),
    "fabric.gpudirect": ({"skip"}, r"not required"),
    "fabric.pcie_acs": ({"skip"}, r"not required"),
    "fabric.memlock": ({"skip"}, r"not required"),
    "fabric.topology": ({"skip"}, r"no GPU"),
    "fabric.nvlink": ({"skip"}, r"NVML"),
    "fabric.fabric_manager": ({"skip"}, r"no NVSwitch"),
    "nfs.vip_mounts": ({"skip"}, r"nfs_multivip|NFS"),
    "nfs.fstab": ({"skip"}, r"nfs_multivip|NFS"),
    "nfs.responsive": ({"skip"}, r"nfs_multivip|NFS"),
    "network.vip_routes": ({"skip"}, r"nfs_multivip|VIP"),
    "network.vip_spread": ({"skip"}, r"nfs_multivip|VIP"),
    "system.reboot_required": ({"warn"}, r"nvidia_driver"),
    # The host's cpufreq, where a container sees one (this lab's hosts have none).
    "system.cpu_governor": ({"skip", "warn"}, r"cpufreq|clock down"),
    "system.time_sync": ({"skip"}, r"container"),
    # The host's memory controllers and the data disk's NVMe log: none in this lab (a loop device).
    "system.memory_errors": ({"skip"}, r"EDAC"),
    "storage.nvme_health": ({"skip"}, r"NVMe"),
}
# Judged inside a job (test_slurm_job_... runs the audit in one), never passed outside one.
OUTSIDE_A_JOB: dict[str, tuple[set[str], str]] = {
    "staging.slurm_tmpdir": ({"skip"}, r"not inside a Slurm job"),
}
# The 24.04 node is no Slurm node: slurm_tmpdir did not run there and the audit says so.
NO_SLURM: dict[str, tuple[set[str], str]] = {
    "staging.slurm_tmpdir": ({"skip"}, r"Slurm|slurm_tmpdir"),
    "staging.slurm_hooks": ({"skip"}, r"Slurm|slurm_tmpdir"),
}


def is_slurm_node(host: Any) -> bool:
    return "slurm" in groups_of(host)


def test_audit_passes_everything_a_container_can_have(host: Any) -> None:
    _, results = audit_as_user(host)
    allowed = CONTAINER_LIMITS | (OUTSIDE_A_JOB if is_slurm_node(host) else NO_SLURM)
    unexpected = []
    for (check_id, subject), result in sorted(results.items(), key=lambda kv: str(kv[0])):
        if result["status"] == "pass":
            continue
        statuses, reason = allowed.get(check_id, (set(), "(must pass)"))
        if result["status"] not in statuses or not re.search(reason, result["summary"]):
            unexpected.append(f"{check_id} [{subject}] {result['status']}: {result['summary']}")
    assert not unexpected, "\n".join(unexpected)


def test_what_a_container_cannot_have_is_never_reported_as_pass(host: Any) -> None:
    _, results = audit_as_user(host)
    ids = {check_id for check_id, _ in results}
    for check_id in ("driver.loaded", "driver.branch", "gpu.present", "system.reboot_required"):
        assert check_id in ids, f"{check_id} missing from the audit"
    passing = [
        f"{check_id} [{subject}]"
        for (check_id, subject), result in results.items()
        if check_id in CONTAINER_LIMITS and result["status"] == "pass"
    ]
    assert not passing, f"a container cannot satisfy these, yet they pass: {passing}"


def test_the_tunings_are_in_place(host: Any) -> None:
    _, results = audit_as_user(host)
    passing = {check_id for (check_id, _), r in results.items() if r["status"] == "pass"}
    expected = {
        "storage.tmp_tmpfs",
        "storage.data_noatime",
        "storage.data_fstab",
        "storage.data_space",
        "storage.fstab_parse",
        "driver.packages_held",
        "driver.nouveau",
        "env.cublas_workspace",
        "env.node_files",
    }
    if is_slurm_node(host):
        expected |= {"staging.slurm_hooks"}
    assert expected <= passing, f"not passing: {sorted(expected - passing)}"


def test_data_disk_is_mounted_by_uuid_with_noatime(host: Any) -> None:
    mount = json.loads(host.check_output("findmnt --json --output SOURCE,FSTYPE,OPTIONS /data"))
    options = mount["filesystems"][0]["options"].split(",")
    assert "noatime" in options, options
    fstab = [line.split() for line in host.file("/etc/fstab").content_string.splitlines()]
    data_lines = [f for f in fstab if len(f) > 2 and f[1] == "/data"]
    assert len(data_lines) == 1 and data_lines[0][0].startswith("UUID="), data_lines


def test_driver_reboot_is_left_to_slurm_which_drains_the_busy_node(host: Any) -> None:
    """nvidia_driver_slurm_reboot on the Slurm node: the new driver needs a reboot, so the role asked
    Slurm for one ASAP. The node is drained (no new jobs) with the role's reason, the reboot waits
    for bob's running job, which is untouched, and RebootProgram has not run. A container cannot
    reboot: the test then cancels the reboot and resumes the node for the tests after it."""
    only_on(host, group="slurm", why="nvidia_driver_slurm_reboot is set for the Slurm group only")
    node = host.check_output("hostname")
    shown = host.check_output(f"scontrol --oneliner show node {node}")
    state = re.search(r"\bState=(\S+)", shown)
    assert state and {"DRAIN", "REBOOT_REQUESTED"} <= set(state.group(1).split("+")), shown
    assert re.search(r"Reason=dltune nvidia_driver: reboot into the new driver, branch \d+", shown), shown
    running = host.check_output("squeue --noheader --name=long-training --format=%T")
    assert running.split() == ["RUNNING"], running
    assert not host.file("/var/log/slurm/lab-reboot.log").exists

    cancelled = host.run(f"scontrol cancel_reboot {node}")
    assert cancelled.rc == 0, cancelled.stderr
    if "DRAIN" in host.check_output(f"scontrol --oneliner show node {node}"):
        resumed = host.run(f"scontrol update nodename={node} state=resume")
        assert resumed.rc == 0, resumed.stderr
    shown = host.check_output(f"scontrol --oneliner show node {node}")
    assert "DRAIN" not in shown and "REBOOT" not in shown, shown


def test_slurm_job_sees_its_tmpdir_and_the_cublas_setting(host: Any) -> None:
    if not is_slurm_node(host):
        assert not host.exists("srun")
        return
    job = host.run(
        "cd /tmp && runuser -u alice -- srun --export=NONE /bin/sh -c "
        "'echo $SLURM_TMPDIR; echo $CUBLAS_WORKSPACE_CONFIG; stat -c %U:%a $SLURM_TMPDIR;"
        " /usr/local/bin/dltune audit --only staging --format json'"
    )
    assert job.rc == 0, job.stderr
    tmpdir, cublas, owner_mode, audit = job.stdout.split("\n", 3)
    assert re.fullmatch(r"/localscratch/alice\.\d+", tmpdir), tmpdir
    assert cublas == ":4096:8"
    assert owner_mode == "alice:700"
    inside = [r for r in json.loads(audit)["results"] if r["id"] == "staging.slurm_tmpdir"]
    assert [r["status"] for r in inside] == ["pass"], inside


def test_driver_packages_came_through_the_lab_apt_cache(host: Any) -> None:
    """The lab's apt-cacher-ng (tests/lab/apt-cache.sh) holds what the node installed, so the next
    run does not download it again."""
    if os.environ.get("DLTUNE_LAB_APT_CACHE", "1") == "0":
        pytest.skip("the lab's apt cache is off (DLTUNE_LAB_APT_CACHE=0)")
    installed = host.check_output("dpkg-query -W -f '${Package} ${Version}\\n' 'nvidia-utils-*'").split()
    assert len(installed) == 2, f"expected one nvidia-utils package, found {installed}"
    name, version = installed
    # Pool file names carry the version without its epoch.
    deb = f"{name}_{version.split(':', 1)[-1]}_amd64.deb"
    cache = Path(os.environ.get("DLTUNE_LAB_APT_CACHE_DIR", "/var/cache/apt-cacher-ng"))
    assert any(cache.rglob(deb)), f"{deb} is not in the lab's apt cache {cache}"
