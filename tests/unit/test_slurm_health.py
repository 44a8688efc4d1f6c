"""Drain decisions of `dltune audit --slurm-drain` (the real scontrol path runs in molecule/slurm_tmpdir)."""

from __future__ import annotations

import pytest

from dltune.model import Result, Status
from dltune.probes.runner import RecordedRunner
from dltune.slurm_health import apply, critical_failures, parse_node

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


def _node(state: str, reason: str = "") -> str:
    tail = f" Reason={reason} [admin@2026-11-22T08:00:00]" if reason else ""
    return f"NodeName=gpu7 Arch=x86_64 CPUAlloc=0 State={state} ThreadsPerCore=1 Partitions=gpu{tail}"


def _apply(shown: str, results: list[Result]) -> tuple[str, list[tuple[str, ...]]]:
    runner = RecordedRunner(
        {
            "scontrol show node -o gpu7": {"stdout": shown},
            "scontrol update nodename=gpu7 state=drain reason=dltune: gpu.ecc": {},
            "scontrol update nodename=gpu7 state=resume": {},
        }
    )
    said = apply("gpu7", results, runner)
    return said, [call for call in runner.calls if call[1] == "update"]


ECC_FAIL = [Result("gpu.ecc", Status.FAIL, "uncorrected ECC", critical=True)]
HEALTHY = [Result("gpu.ecc", Status.PASS, "no ECC errors", critical=True)]


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("IDLE+DRAIN", "maintenance: PSU swap"),
        ("MIXED+DRAIN", "hw ticket 4711"),
        ("DOWN+DRAIN", "maintenance"),
        ("DOWN*", "Not responding"),
        ("IDLE+MAINT", "planned window"),
        ("IDLE+FAIL", "failing DIMM"),
    ],
)
def test_a_node_someone_else_took_out_is_never_touched(state: str, reason: str) -> None:
    """An admin's (or Slurm's) drain/down: a critical fail adds no dltune reason over theirs, and a
    healthy run does not resume it (that would put back into service a node the admin took out)."""
    said, updates = _apply(_node(state, reason), ECC_FAIL)
    assert updates == [] and "left as it is" in said and "gpu.ecc" in said
    said, updates = _apply(_node(state, reason), HEALTHY)
    assert updates == [] and "left as it is" in said


def test_dltune_drains_a_node_in_service_and_resumes_only_its_own_drain() -> None:
    _, updates = _apply(_node("IDLE"), ECC_FAIL)
    assert updates == [("scontrol", "update", "nodename=gpu7", "state=drain", "reason=dltune: gpu.ecc")]
    _, updates = _apply(_node("IDLE+DRAIN", "dltune: gpu.ecc"), HEALTHY)
    assert updates == [("scontrol", "update", "nodename=gpu7", "state=resume")]
    _, updates = _apply(_node("IDLE"), HEALTHY)
    assert updates == []
