"""Drain decisions of `dltune audit --slurm-drain` (the real scontrol path runs in molecule/slurm_tmpdir)."""

from __future__ import annotations

from dltune.model import Result, Status
from dltune.slurm_health import critical_failures, parse_node

SHOWN = (
    "NodeName=slurm-node Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 "
    "Partitions=debug BootTime=2026-11-22T07:00:00 "
    "Reason=dltune: staging.slurm_hooks [root@2026-11-22T08:00:00]"
)


def test_only_critical_fails_drain_never_errors_or_skips() -> None:
    results = [
        Result("staging.slurm_hooks", Status.FAIL, "x", critical=True),
        Result("storage.data_noatime", Status.FAIL, "x", critical=False),
        Result("driver.loaded", Status.ERROR, "a dltune bug", critical=True),
        Result("gpu.present", Status.SKIP, "no GPU", critical=True),
        Result("gpu.ecc", Status.WARN, "x", critical=True),
    ]
    assert critical_failures(results) == ["staging.slurm_hooks"]


def test_scontrol_one_line_output_is_parsed() -> None:
    node = parse_node(SHOWN)
    assert node.drained and node.state == "IDLE+DRAIN"
    assert node.reason == "dltune: staging.slurm_hooks"
    idle = parse_node("NodeName=n1 State=IDLE ThreadsPerCore=1")
    assert not idle.drained and idle.reason == ""
