"""Issue 46, what a person reads: a count that may be 0 or 1 is said as what it means ("fstab has no
entries", "the one fstab entry"), never "all 0"; a size a person reads is in the unit they read it in
("1 GiB", "64 KiB"), while the evidence and metrics keep the kernel's units and their keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltune.checks.driver import packages_held
from dltune.checks.env import node_files
from dltune.checks.fabric import memlock, nvlink
from dltune.checks.gpu import present
from dltune.checks.storage import fstab_parse, tmp_tmpfs
from dltune.checks.system import cpu_governor
from dltune.model import Status, counted, human_size
from dltune.snapshot import (
    CpuFrequency,
    Fabric,
    Fstab,
    FstabEntry,
    Gpu,
    Mount,
    NvLink,
    NvmlState,
    Package,
    Snapshot,
)
from dltune.staging.model import ALREADY_STAGED, Summary


@pytest.mark.parametrize(
    ("size", "binary", "said"),
    [
        (0, False, "0 B"),
        (999, False, "999 B"),
        (999.7, False, "1 kB"),  # three digits would read "1e+03": the next unit's 1
        (4096, False, "4.1 kB"),
        (5_000_000, False, "5 MB"),
        (12_345_678, False, "12.3 MB"),
        (1.234e9, False, "1.23 GB"),
        (65536, True, "64 KiB"),
        (8 << 20, True, "8 MiB"),
        (1000 * 1024, True, "0.977 MiB"),
        (2468408 * 1024, True, "2.35 GiB"),
        (1 << 40, True, "1 TiB"),
    ],
)
def test_a_size_reads_in_three_digits_and_the_largest_unit_under_1000(
    size: float, binary: bool, said: str
) -> None:
    assert human_size(size, binary=binary) == said


def test_a_count_takes_its_noun_in_its_number() -> None:
    assert [counted(n, "file") for n in (0, 1, 2)] == ["0 files", "1 file", "2 files"]
    assert counted(3, "entry", "entries") == "3 entries"


def _entry(n: int) -> FstabEntry:
    return FstabEntry(n, f"/dev/sd{n}", f"/d{n}", "ext4", ("defaults",), 0, 2)


@pytest.mark.parametrize(
    ("entries", "said"),
    [
        (0, "fstab has no entries: nothing to parse"),
        (1, "the one fstab entry parses"),
        (3, "all 3 fstab entries parse"),
    ],
)
def test_fstab_parse_never_says_all_0(entries: int, said: str) -> None:
    fstab = Fstab(entries=tuple(_entry(i + 1) for i in range(entries)))
    (result,) = fstab_parse(Snapshot(root="/", fstab=fstab))
    assert (result.status, result.summary) == (Status.PASS, said)
    assert result.evidence == {"entries": entries, "unparsed": 0}


def test_a_tmpfs_of_the_wrong_size_is_said_in_gib_and_the_evidence_keeps_kib() -> None:
    """Before: "size 1048576 KiB, expected 10% = 2468408 KiB"."""
    tmp = Mount("/tmp", "tmpfs", "tmpfs", ("rw", "nosuid", "nodev", "noatime"), ("size=1048576k",))
    line = FstabEntry(
        1, "tmpfs", "/tmp", "tmpfs", ("noatime", "nosuid", "nodev", "mode=1777", "size=10%"), 0, 0
    )
    snap = Snapshot(root="/", mounts=(tmp,), fstab=Fstab(entries=(line,)), mem_total_kb=24684080)
    result = tmp_tmpfs(snap)
    assert result.status is Status.WARN
    assert result.summary == "/tmp is a tmpfs but size 1 GiB, expected 10% = 2.35 GiB"
    assert (result.evidence["live_size_kb"], result.evidence["expected_size_kb"]) == (1048576, 2468408)
    assert result.metrics == {"size_bytes": 1048576 * 1024.0}


@pytest.mark.parametrize(("limit", "said"), [(65536, "64 KiB"), (8 << 20, "8 MiB"), (3 << 30, "3 GiB")])
def test_a_locked_memory_limit_is_said_in_the_unit_a_person_reads(limit: int, said: str) -> None:
    snap = Snapshot(
        root="/",
        fabric=Fabric(memlock_bytes=limit, memlock_source="slurmd"),
        expected={"health": {"gpudirect_rdma": True}},
    )
    result = memlock(snap)
    assert result.status is Status.FAIL and result.summary.startswith(f"locked memory limited to {said} for")
    assert result.evidence["memlock_bytes"] == limit


def test_one_held_driver_package_is_the_one() -> None:
    snap = Snapshot(root="/", driver_packages=(Package("nvidia-driver-550", "550.1", held=True),))
    assert packages_held(snap).summary == "the one driver package is held (nvidia-driver-550)"
    two = Snapshot(root="/", driver_packages=(Package("a-nvidia", "1", True), Package("nvidia-b", "1", True)))
    assert packages_held(two).summary == "all 2 driver packages are held"


def test_cpu_governor_says_one_cpu_and_skips_none() -> None:
    one = CpuFrequency("intel_pstate", {"performance": 1}, {("performance", ""): 1})
    result = cpu_governor(Snapshot(root="/", cpu_frequency=one))
    assert (result.status, result.summary) == (Status.PASS, "the one CPU runs for performance (performance)")
    none = cpu_governor(Snapshot(root="/", cpu_frequency=CpuFrequency(None, {}, {})))
    assert none.status is Status.SKIP and "all 0" not in none.summary


def test_one_active_nvlink_is_its_one() -> None:
    gpu = Gpu(0, nvlinks=(NvLink(0, True),))
    (result,) = nvlink(Snapshot(root="/", nvml=NvmlState(True, gpus=(gpu,))))
    assert (result.status, result.summary) == (Status.PASS, "GPU 0: its one NVLink active")


def test_a_dl_env_manifest_without_variables_is_not_0_variables_set() -> None:
    manifest = {"dl_env": {"variables": {}, "files": {"profile": "/etc/profile.d/dl.sh"}}}
    snap = Snapshot(root="/", expected=manifest, env_values={"/etc/profile.d/dl.sh": {}})
    (result,) = node_files(snap)
    assert result.summary == "/etc/profile.d/dl.sh: the dl_env manifest plans no variable: nothing to compare"
    planned = {"dl_env": {"variables": {"A": "1"}, "files": {"profile": "/etc/profile.d/dl.sh"}}}
    (one,) = node_files(Snapshot(root="/", expected=planned, env_values={"/etc/profile.d/dl.sh": {"A": "1"}}))
    assert one.summary == "/etc/profile.d/dl.sh: 1 variable set"


def test_no_gpu_is_never_a_pass_of_0_gpus() -> None:
    """Before: "0 GPUs answer", a pass, on a node whose NVML lists no GPU and on one whose every GPU
    a job's cgroup hides."""
    none = present(Snapshot(root="/", nvml=NvmlState(True)))
    assert [(r.status, r.summary) for r in none] == [
        (
            Status.SKIP,
            "NVML lists no GPU on this node, and no GPU count is expected "
            "(nvidia_driver, dltune_health_gpu_count)",
        )
    ]
    hidden = NvmlState(True, gpus=(Gpu(0, unreadable="Insufficient Permissions"), Gpu(1, unreadable="x")))
    (result,) = present(Snapshot(root="/", nvml=hidden))
    assert result.status is Status.SKIP and result.summary.startswith(
        "no GPU readable by this process: NVML says Insufficient Permissions for all 2"
    )
    zero = present(Snapshot(root="/", nvml=NvmlState(True), expected={"health": {"gpu_count": 0}}))
    assert [(r.status, r.summary) for r in zero] == [
        (Status.PASS, "no GPU, as dltune_health_gpu_count expects")
    ]
    assert [r.metrics for r in none + zero] == [{"gpus": 0.0}, {"gpus": 0.0}]


# --- what a stage did ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("summary", "said"),
    [
        (
            Summary(Path("/l/ds"), files=1200, bytes=1_234_567_890, seconds=2.5, verified=True),
            "1200 files (1.23 GB) copied in 2.5s, 494 MB/s; verified",
        ),
        (Summary(Path("/l/ds"), files=1, bytes=4096, seconds=0.0), "1 file (4.1 kB) copied in 0.0s"),
        (
            Summary(Path("/l/ds"), files=300, bytes=3_000_000, skipped=700, seconds=1.0),
            "300 files (3 MB) copied in 1.0s, 3 MB/s; 700 files already there from the interrupted stage "
            "it resumed",
        ),
        (
            Summary(Path("/l/ds"), skipped=700, seconds=0.1),
            "nothing left to copy; 700 files already there from the interrupted stage it resumed",
        ),
        (Summary(Path("/l/ds"), seconds=0.1), "nothing to copy: the source holds no file"),
        (
            Summary(Path("/l/ds"), notes=[ALREADY_STAGED], verified=True),
            "already staged from this source as it is now: nothing copied; verified",
        ),
        (
            Summary(Path("/l/ds"), files=2, bytes=10, seconds=1.0, notes=["one node in this job"]),
            "2 files (10 B) copied in 1.0s, 10 B/s (one node in this job)",
        ),
    ],
)
def test_a_stage_says_what_it_did_never_0_files_copied(summary: Summary, said: str) -> None:
    """Before: a repeated stage said "0 files, 0.0 MB copied (0 already there) in 0.0s, 0 MB/s (already
    staged)", and a resumed one "0 files, 0.0 MB copied (700 already there)"."""
    assert summary.described() == said
