"""The tuning ledger: the one comparison rule at its boundaries, `dltune ledger` before and after on a
real directory, the audit's reading of the files (and of files it must not trust), the fleet's sum."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dltune.checks.system import tuning_ledger
from dltune.cli import app
from dltune.costs.ledger import GAIN, LOSS, NOT_BEFORE, WITHIN_NOISE, compare, said, summarise
from dltune.fleet.cluster import NodeReport
from dltune.fleet.cluster import tuning_ledger as fleet_ledger
from dltune.model import Status
from dltune.probes.hostfs import HostFS
from dltune.probes.manifest import read_ledger
from dltune.snapshot import MANIFEST_DIR, Snapshot


def phase(median: float, mad: float, rounds: int = 1) -> dict:
    return {"median": median, "mad": mad, "rates": [median] * rounds}


def four_standard_errors(*mads_and_rounds: tuple[float, int]) -> float:
    """The rule, written out: four standard errors of the difference of two medians, each median's
    from its rounds' MAD (x 1.4826: a normal's sd) and their number (x 1.2533 / sqrt(n))."""
    return 4 * math.hypot(*(1.4826 * 1.2533 * mad / math.sqrt(n) for mad, n in mads_and_rounds))


NOISE_15 = four_standard_errors((20, 15), (40, 15))  # 85.8 of 1000


@pytest.mark.parametrize(
    ("after", "verdict"),
    [
        (1000 + NOISE_15 + 0.01, GAIN),
        (1000 + NOISE_15 - 0.01, WITHIN_NOISE),  # within: not a gain
        (1000 + 2 * 40, WITHIN_NOISE),  # twice the larger deviation: unchanged disks passed it here
        (1000 - NOISE_15 + 0.01, WITHIN_NOISE),
        (1000 - NOISE_15 - 0.01, LOSS),
    ],
)
def test_a_change_is_a_gain_or_a_loss_only_beyond_four_standard_errors_of_the_difference(
    after: float, verdict: str
) -> None:
    change = compare(
        "small-file reads /data", "small-file reads", "files/s", phase(1000, 20, 15), phase(after, 40, 15)
    )
    assert change["verdict"] == verdict
    assert change["change"] == pytest.approx(after / 1000 - 1, abs=1e-4)
    assert change["noise"] == pytest.approx(NOISE_15 / 1000, abs=1e-4)


def test_fewer_rounds_make_a_wider_noise() -> None:
    """The same deviations over 7 rounds instead of 15: what passed the noise no longer does."""
    after = phase(1000 + NOISE_15 + 1, 40, 7)
    change = compare("small-file reads /data", "small-file reads", "files/s", phase(1000, 20, 7), after)
    assert change["verdict"] == WITHIN_NOISE
    assert change["noise"] == pytest.approx(four_standard_errors((20, 7), (40, 7)) / 1000, abs=1e-4)


@pytest.mark.parametrize(
    ("after", "verdict"), [(1030.0, WITHIN_NOISE), (1031.0, GAIN), (970.0, WITHIN_NOISE), (969.0, LOSS)]
)
def test_a_change_under_three_percent_is_noise_however_steady_the_rounds(after: float, verdict: str) -> None:
    change = compare("small-file reads /data", "small-file reads", "files/s", phase(1000, 1), phase(after, 1))
    assert change["verdict"] == verdict and change["noise"] == pytest.approx(0.03)


def test_nothing_to_measure_before_is_said_and_never_a_change() -> None:
    change = compare("small-file reads /data", "small-file reads", "files/s", None, phase(900, 5))
    assert change["verdict"] == NOT_BEFORE and change["change"] is None
    assert said(change) == "small-file reads /data: 900 files/s after (nothing to measure before)"


@pytest.mark.parametrize(
    "before",
    [
        {"median": float("nan"), "mad": 5.0, "rates": [1.0]},
        {"median": 1000.0, "mad": float("inf"), "rates": [1.0]},
        {"median": -1.0, "mad": 5.0},
        {"mad": 5.0},
        {"median": "fast", "mad": 5.0},
    ],
)
def test_a_before_phase_without_a_finite_rate_is_not_measured_before_never_a_nan_loss(before: dict) -> None:
    """A before-file from a damaged or older writer (JSON admits NaN): nothing to compare with, said so;
    never a loss or gain whose change is NaN."""
    change = compare("small-file reads /data", "small-file reads", "files/s", before, phase(900, 5))
    assert change["verdict"] == NOT_BEFORE and change["change"] is None


def test_a_share_that_is_not_finite_falls_back_to_the_rates() -> None:
    """A NaN share in the before phase: the rates are compared, never a NaN share."""
    before = phase(1000, 10, 15) | {"reference": {"is": "x", "median": 1000.0}, "share": float("nan"),
                                    "share_mad": 0.01, "shares": [1.0] * 15}  # fmt: skip
    after = phase(1350, 10, 15) | {"reference": {"is": "x", "median": 1000.0}, "share": 1.35,
                                   "share_mad": 0.01, "shares": [1.35] * 15}  # fmt: skip
    change = compare("small-file reads /data", "small-file reads", "files/s", before, after)
    assert change["verdict"] == GAIN and change["change"] == pytest.approx(0.35)
    assert "before_share" not in change


def test_the_words_say_the_change_or_that_it_was_within_noise() -> None:
    gain = compare(
        "small-file reads /data", "small-file reads", "files/s", phase(1000, 10, 15), phase(1350, 10, 15)
    )
    assert said(gain) == "small-file reads /data +35% (1000 -> 1350 files/s, noise +-3%)"
    flat = compare(
        "scratch files in /tmp", "scratch files in /tmp", "files/s", phase(1000, 50, 15), phase(1010, 50, 15)
    )
    assert said(flat) == "scratch files in /tmp: within noise (1000 -> 1010 files/s, noise +-14%)"


def shared(median: float, shares: list[float], reference: float) -> dict:
    """A phase with a reference measured in the same rounds: each round's share of it."""
    return summarise(
        [median * v for v in shares], [median] * len(shares), "the same reads with O_NOATIME"
    ) | {
        "median": median * sorted(shares)[len(shares) // 2],
        "reference": {"is": "the same reads with O_NOATIME", "rates": [reference], "median": reference},
    }


def test_a_phase_with_a_reference_keeps_each_rounds_share_of_it() -> None:
    phase_ = summarise([50.0, 60.0, 90.0], [100.0, 100.0, 100.0], "the same reads with O_NOATIME")
    assert phase_["shares"] == [0.5, 0.6, 0.9] and phase_["share"] == 0.6 and phase_["share_mad"] == 0.1
    assert phase_["reference"] == {
        "is": "the same reads with O_NOATIME",
        "rates": [100.0] * 3,
        "median": 100.0,
    }
    for unusable in ([], [100.0, 100.0], [100.0, 0.0, 100.0]):  # none, not one per round, a zero
        assert "share" not in summarise([50.0, 60.0, 90.0], unusable, "x")


def test_the_nodes_own_speed_between_the_phases_is_no_part_of_the_roles_change() -> None:
    """The CI's case: a node the role left as it was read 122k files/s before and 200k after (the host
    was busier during the first phase); its share of the O_NOATIME reads stayed at 99-100%."""
    before = shared(122_000, [0.99] * 7, reference=123_000)
    after = shared(200_000, [1.0] * 7, reference=200_000)
    change = compare("small-file reads /data", "small-file reads", "files/s", before, after)
    assert change["verdict"] == WITHIN_NOISE and change["change"] == pytest.approx(0.0101, abs=1e-4)
    assert change["before_rate"] == pytest.approx(122_000 * 0.99) and change["after_rate"] == 200_000
    assert said(change) == (
        "small-file reads /data: within noise (99% -> 100% of the same reads with O_NOATIME, noise +-3%; "
        "120780 -> 200000 files/s, the node itself +63%)"
    )


SHARE_NOISE = four_standard_errors((0.02, 3), (0.04, 3))  # 0.192 of a share of 0.6


@pytest.mark.parametrize(
    ("after_share", "verdict"),
    [
        (0.6 + SHARE_NOISE - 1e-4, WITHIN_NOISE),
        (0.6 + SHARE_NOISE + 1e-4, GAIN),
        (0.6 - SHARE_NOISE + 1e-4, WITHIN_NOISE),
        (0.6 - SHARE_NOISE - 1e-4, LOSS),
    ],
)
def test_with_a_reference_a_gain_is_one_of_the_share_beyond_four_standard_errors(
    after_share: float, verdict: str
) -> None:
    """Shares of 3 rounds deviating by 0.02 and 0.04, whatever the rates did (here they halve: the
    node slowed)."""
    before = summarise([60.0, 58.0, 62.0], [100.0] * 3, "r")  # shares 0.58..0.62: deviation 0.02
    spread = [after_share - 0.04, after_share, after_share + 0.04]
    after = summarise([50.0 * v for v in spread], [50.0] * 3, "r")  # deviation 0.04
    change = compare("small-file reads /data", "small-file reads", "files/s", before, after)
    assert change["verdict"] == verdict
    assert change["noise"] == pytest.approx(SHARE_NOISE / 0.6, abs=2e-3)
    assert change["reference_change"] == pytest.approx(-0.5)


def test_the_node_itself_is_named_only_beyond_the_noise() -> None:
    def said_with(reference_after: float) -> str:
        before = summarise([90.0] * 3, [100.0] * 3, "r")
        after = summarise([0.9 * reference_after] * 3, [reference_after] * 3, "r")
        return said(compare("scratch files in /tmp", "scratch files in /tmp", "files/s", before, after))

    assert said_with(103.0).endswith("90 -> 93 files/s)")  # +3%: the floor, not beyond it
    assert said_with(103.1).endswith("90 -> 93 files/s, the node itself +3%)")


def test_an_old_entry_without_a_reference_is_compared_by_its_rates() -> None:
    """A before phase kept by a dltune without references, the after phase with one: the rates."""
    after = summarise([1350.0] * 3, [1400.0] * 3, "the same reads with O_NOATIME")
    change = compare("small-file reads /data", "small-file reads", "files/s", phase(1000, 10, 15), after)
    assert change["verdict"] == GAIN and change["change"] == pytest.approx(0.35)
    assert "before_share" not in change
    assert said(change) == "small-file reads /data +35% (1000 -> 1350 files/s, noise +-3%)"


def test_dltune_ledger_measures_before_and_after_and_keeps_one_entry_per_role(tmp_path: Path) -> None:
    """Real measurements on a directory of this machine, before and after nothing changed: the entry
    exists, the pending file is gone, and no gain is claimed where nothing changed... unless the
    machine's noise was larger than four standard errors, in which case it says gain or loss with
    figures (the rule is tested above); here: the shape and the cleanup."""
    data, ledger = tmp_path / "data", tmp_path / "ledger"
    data.mkdir()
    argv = ["ledger", "--role", "data_disks", "--data", str(data), "--dir", str(ledger)]
    runner = CliRunner()
    before = runner.invoke(app, [*argv, "--phase", "before"])
    assert before.exit_code == 0, before.output
    assert sorted(p.name for p in ledger.iterdir()) == ["data_disks.before.json"]
    after = runner.invoke(app, [*argv, "--phase", "after"])
    assert after.exit_code == 0, after.output
    assert sorted(p.name for p in ledger.iterdir()) == ["data_disks.json"]
    entry = json.loads((ledger / "data_disks.json").read_text())
    (change,) = entry["changes"]
    assert change["what"] == f"small-file reads {data}" and change["verdict"] in (GAIN, LOSS, WITHIN_NOISE)
    assert len(change["before"]["rates"]) == len(change["after"]["rates"]) == 15
    assert len(change["before"]["reference"]["rates"]) == len(change["after"]["shares"]) == 15
    assert change["reference_is"] == "the same reads with O_NOATIME" and change["after_share"] > 0
    assert list(data.iterdir()) == []  # the measurement's files are gone


def test_dltune_ledger_refuses_bad_input_before_measuring(tmp_path: Path) -> None:
    runner = CliRunner()
    bad_phase = runner.invoke(
        app, ["ledger", "--phase", "during", "--role", "tmpfs_tmp", "--dir", str(tmp_path)]
    )
    assert (
        bad_phase.exit_code == 2 and "--phase" in bad_phase.output and "before or after" in bad_phase.output
    )
    no_data = runner.invoke(
        app, ["ledger", "--phase", "before", "--role", "data_disks", "--dir", str(tmp_path)]
    )
    assert no_data.exit_code == 2 and "--data" in no_data.output
    role = runner.invoke(
        app, ["ledger", "--phase", "before", "--role", "nfs_multivip", "--dir", str(tmp_path)]
    )
    assert role.exit_code == 2 and "nfs_multivip" in role.output
    assert list(tmp_path.iterdir()) == []


def entry(role: str, verdict: str, change: float | None) -> dict:
    return {
        "schema": 1,
        "role": role,
        "before_time": "2026-11-29T10:00:00+00:00",
        "after_time": "2026-11-29T10:05:00+00:00",
        "changes": [
            {
                "what": "small-file reads /data",
                "kind": "small-file reads",
                "unit": "files/s",
                "verdict": verdict,
                "after_rate": 1350.0,
                "before_rate": None if change is None else 1000.0,
                "change": change,
                "noise": None if change is None else 0.02,
            }
        ],
    }


def test_the_audit_reads_the_ledger_and_names_a_file_it_cannot_use(tmp_path: Path) -> None:
    ledger = tmp_path / MANIFEST_DIR.lstrip("/") / "ledger"
    ledger.mkdir(parents=True)
    (ledger / "data_disks.json").write_text(json.dumps(entry("data_disks", GAIN, 0.35)))
    (ledger / "tmpfs_tmp.before.json").write_text("{}")  # a site run between its phases: not yet
    (ledger / "tmpfs_tmp.json").write_text('{"schema": 1, "role": "tmpfs_tmp", "changes": "lots"}')
    entries, problems = read_ledger(HostFS(tmp_path))
    assert [e["role"] for e in entries] == ["data_disks"]
    assert list(problems) == [f"{MANIFEST_DIR}/ledger/tmpfs_tmp.json"]
    results = tuning_ledger(Snapshot(root=str(tmp_path), ledger=entries, ledger_problems=problems))
    assert [(r.status, r.subject) for r in results] == [
        (Status.PASS, "data_disks"),
        (Status.WARN, f"{MANIFEST_DIR}/ledger/tmpfs_tmp.json"),
    ]
    assert results[0].summary == "data_disks: small-file reads /data +35% (1000 -> 1350 files/s, noise +-2%)"
    assert tuning_ledger(Snapshot(root=str(tmp_path)))[0].status is Status.SKIP


def fleet_node(host: str, verdict: str, change: float | None) -> NodeReport:
    (result,) = tuning_ledger(Snapshot(root="/x", ledger=(entry("data_disks", verdict, change),)))
    return NodeReport(host, [result.to_dict()])


def test_the_report_gives_each_roles_median_and_spread_and_never_a_gain_within_noise() -> None:
    nodes = [fleet_node("n1", GAIN, 0.30), fleet_node("n2", GAIN, 0.40), fleet_node("n3", WITHIN_NOISE, 0.01)]
    (line,) = fleet_ledger(nodes)
    assert line.said() == (
        "data_disks: small-file reads +30% (median of 3 node(s), spread +1%..+40%; within noise on 1 of them)"
    )
    quiet = [
        fleet_node("n1", WITHIN_NOISE, 0.01),
        fleet_node("n2", WITHIN_NOISE, -0.01),
        fleet_node("n3", GAIN, 0.2),
    ]
    (flat,) = fleet_ledger(quiet)
    assert (
        "within the measurement's noise on 2 of 3 node(s)" in flat.said() and "no gain shown" in flat.said()
    )
    (new,) = fleet_ledger([fleet_node("n1", NOT_BEFORE, None)])
    assert new.said() == "data_disks: small-file reads: nothing measured before the role on 1 node(s)"


def test_the_gpu_smoke_without_a_gpu_says_so_and_claims_nothing(tmp_path: Path) -> None:
    """nvidia_driver's GPU smoke on a machine whose PyTorch sees no CUDA GPU (this one, like a node
    before its driver): no change recorded, the reason kept, and the audit says it."""
    argv = ["ledger", "--role", "nvidia_driver", "--dir", str(tmp_path)]
    runner = CliRunner()
    assert runner.invoke(app, [*argv, "--phase", "before"]).exit_code == 0
    after = runner.invoke(app, [*argv, "--phase", "after"])
    assert after.exit_code == 0, after.output
    entry = json.loads((tmp_path / "nvidia_driver.json").read_text())
    assert entry["changes"] == [] and list(entry["not_measured"]) == ["GPU matmul cuda:0"]
    assert "no GPU answers CUDA" in entry["not_measured"]["GPU matmul cuda:0"]
    (result,) = tuning_ledger(Snapshot(root="/x", ledger=(entry,)))
    assert result.summary.startswith("nvidia_driver: GPU matmul cuda:0: not measured: no GPU answers CUDA")


def test_scratch_rounds_measure_beside_the_tmpfs_reference_or_alone_without_one(tmp_path: Path) -> None:
    """Real scratch work in two directories of this machine (the second standing for /dev/shm): one
    rate per round in each; without a tmpfs the rates alone, never a made-up reference."""
    from dltune.bench.io_cost import scratch_rounds

    here, there = tmp_path / "tmp", tmp_path / "shm"
    here.mkdir()
    there.mkdir()
    paired = scratch_rounds(here, there, rounds=3, files=20, size=512)
    assert not isinstance(paired, str)
    assert len(paired.rates) == len(paired.reference) == 3 and min(paired.rates + paired.reference) > 0
    assert paired.reference_is == f"the same scratch work in the tmpfs {there}"
    alone = scratch_rounds(here, None, rounds=3, files=20, size=512)
    assert not isinstance(alone, str) and len(alone.rates) == 3 and alone.reference == []
    assert "share" not in summarise(alone.rates, alone.reference, alone.reference_is)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shm", "tmp"] and not list(here.iterdir())
    no_tmpfs = scratch_rounds(here, tmp_path / "absent", rounds=1, files=5, size=64)
    assert not isinstance(no_tmpfs, str) and len(no_tmpfs.rates) == 1 and no_tmpfs.reference == []
    assert "cannot make a scratch directory" in str(scratch_rounds(tmp_path / "absent", there, rounds=1))


def test_the_read_measure_alternates_the_two_reads_chunk_by_chunk_and_round_by_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order of the reads (recorded at _read_files: the flags of each chunk): as mounted and with
    O_NOATIME alternate first place every chunk, and the round after starts with the other; each
    arm pays one writeback. Then a real measure of this machine's directory: one rate a round."""
    import os

    from dltune.bench import io_cost

    calls: list[tuple[int, int]] = []
    real = io_cost._read_files

    def recorded(names: list[str], epochs: int, flags: int, directory_fd: int) -> float:
        calls.append((len(names), flags))
        return real(names, epochs, flags, directory_fd)

    monkeypatch.setattr(io_cost, "_read_files", recorded)
    measured = io_cost.read_rounds(tmp_path, rounds=2, files=25, epochs=1, chunk=10)
    plain, noatime = 0, os.O_NOATIME
    first_round = [(10, plain), (10, noatime), (10, noatime), (10, plain), (5, plain), (5, noatime)]
    second_round = [(10, noatime), (10, plain), (10, plain), (10, noatime), (5, noatime), (5, plain)]
    assert calls == first_round + second_round
    assert not isinstance(measured, str) and len(measured.rates) == len(measured.reference) == 2
    assert measured.reference_is == "the same reads with O_NOATIME" and list(tmp_path.iterdir()) == []


def test_each_read_arm_is_timed_as_its_own_and_each_pays_one_writeback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads as mounted take 1 s a chunk, with O_NOATIME 0.5 s; the first writeback 0.2 s (what the
    reads dirtied), the second 0.1 s (nothing left): each arm's rate is its own time's, two writebacks
    a round. Timings faked at _read_files and _timed_syncfs; the files and directories are real."""
    import os

    from dltune.bench import io_cost

    writebacks: list[float] = []

    def timed_syncfs(directory_fd: int) -> float:
        writebacks.append(0.2 if len(writebacks) % 2 == 0 else 0.1)
        return writebacks[-1]

    monkeypatch.setattr(
        io_cost, "_read_files", lambda names, epochs, flags, fd: 0.5 if flags & os.O_NOATIME else 1.0
    )
    monkeypatch.setattr(io_cost, "_timed_syncfs", timed_syncfs)
    measured = io_cost.read_rounds(tmp_path, rounds=2, files=25, epochs=1, chunk=10)
    assert not isinstance(measured, str)
    assert measured.rates == pytest.approx([25 / 3.2] * 2)  # three chunks of 1 s, and 0.2 s
    assert measured.reference == pytest.approx([25 / 1.6] * 2)  # three chunks of 0.5 s, and 0.1 s
    assert writebacks == [0.2, 0.1, 0.2, 0.1]


def test_each_scratch_arm_is_timed_in_its_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scratch work takes 1 s in /tmp's stand-in and 0.25 s in the tmpfs's (faked at _scratch_work,
    which directory it ran in read from the descriptor): the rates are /tmp's, the reference the
    tmpfs's. A full tmpfs (ENOSPC there) leaves /tmp's rates without a reference."""
    import errno
    import os

    from dltune.bench import io_cost

    here, there = tmp_path / "tmp", tmp_path / "shm"
    here.mkdir()
    there.mkdir()

    def in_tmpfs(directory_fd: int) -> bool:
        return os.readlink(f"/proc/self/fd/{directory_fd}").startswith(str(there))

    monkeypatch.setattr(io_cost, "_scratch_work", lambda fd, files, size: 0.25 if in_tmpfs(fd) else 1.0)
    measured = io_cost.scratch_rounds(here, there, rounds=3, files=100)
    assert not isinstance(measured, str)
    assert measured.rates == [100.0] * 3 and measured.reference == [400.0] * 3

    def full_tmpfs(fd: int, files: int, size: int) -> float:
        if in_tmpfs(fd):
            raise OSError(errno.ENOSPC, "No space left on device")
        return 1.0

    monkeypatch.setattr(io_cost, "_scratch_work", full_tmpfs)
    alone = io_cost.scratch_rounds(here, there, rounds=3, files=100)
    assert not isinstance(alone, str) and alone.rates == [100.0] * 3 and alone.reference == []
    assert not list(here.iterdir()) and not list(there.iterdir())


def test_a_full_disk_is_said_and_never_escapes_the_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from dltune.bench import io_cost

    def full(directory_fd: int, count: int, size: int) -> list[str]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io_cost, "_files", full)
    said_ = io_cost.read_rounds(tmp_path)
    assert said_ == f"cannot read and write small files in {tmp_path}: No space left on device"
    assert list(tmp_path.iterdir()) == []


def test_a_scratch_directory_that_is_not_the_one_made_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user of a writable, non-sticky mount could do between mkdir and open, simulated by a
    mkdir that leaves the directory open to all: refused before any file is made in it."""
    import os

    from dltune.bench import io_cost

    real_mkdir = os.mkdir

    def open_to_all(name: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(name, mode, dir_fd=dir_fd)
        os.chmod(name, 0o777, dir_fd=dir_fd)  # noqa: S103 (the hostile directory the code must refuse)

    monkeypatch.setattr(io_cost.os, "mkdir", open_to_all)
    refused = io_cost.read_rounds(tmp_path, rounds=1, files=3)
    assert isinstance(refused, str) and "is not the one made" in refused
    (made,) = tmp_path.iterdir()
    assert list(made.iterdir()) == []


@pytest.mark.parametrize(("fstype", "expected"), [("tmpfs", Path("/dev/shm")), ("ext4", None), (None, None)])
def test_dev_shm_is_the_reference_only_where_it_is_a_tmpfs(fstype: str | None, expected: Path | None) -> None:
    from dltune.commands.ledger import _tmpfs_reference

    mountinfo = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n" + (
        f"25 22 0:22 / /dev/shm rw,nosuid,nodev shared:4 - {fstype} {fstype} rw,inode64\n" if fstype else ""
    )
    assert _tmpfs_reference(mountinfo) == expected


def test_the_node_itself_is_named_beyond_a_noise_wider_than_the_floor() -> None:
    """Shares of 5 rounds deviating by 0.02 around 0.9: a noise of ~10%; the node moved 8% (not
    named) or 12% (named)."""

    def said_with(reference_after: float) -> str:
        shares = [0.88, 0.9, 0.92, 0.88, 0.92]
        before = summarise([100 * v for v in shares], [100.0] * 5, "r")
        after = summarise([reference_after * v for v in shares], [reference_after] * 5, "r")
        change = compare("scratch files in /tmp", "scratch files in /tmp", "files/s", before, after)
        assert 0.09 < change["noise"] < 0.11
        return said(change)

    assert not said_with(108.0).endswith("the node itself +8%)")
    assert said_with(112.0).endswith("the node itself +12%)")


def test_a_share_of_zero_is_no_reference_and_divides_nothing_by_it() -> None:
    before = summarise([0.0, 0.0, 0.0], [10.0] * 3, "r")
    after = summarise([5.0, 5.0, 5.0], [10.0] * 3, "r")
    change = compare("small-file reads /data", "small-file reads", "files/s", before, after)
    assert "before_share" not in change and change["verdict"] == WITHIN_NOISE and change["change"] is None


def test_the_audit_takes_an_entry_with_shares_and_refuses_one_whose_share_is_no_number(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / MANIFEST_DIR.lstrip("/") / "ledger"
    ledger.mkdir(parents=True)
    good = entry("data_disks", GAIN, 0.2)
    good["changes"][0] |= {"before_share": 0.8, "after_share": 0.96, "reference_is": "the same reads with "
                           "O_NOATIME", "reference_change": 0.64}  # fmt: skip
    bad = entry("tmpfs_tmp", GAIN, 0.2)
    bad["role"] = "tmpfs_tmp"
    bad["changes"][0] |= {"kind": "scratch files in /tmp", "before_share": "x"}
    (ledger / "data_disks.json").write_text(json.dumps(good))
    (ledger / "tmpfs_tmp.json").write_text(json.dumps(bad))
    entries, problems = read_ledger(HostFS(tmp_path))
    assert [e["role"] for e in entries] == ["data_disks"]
    assert list(problems) == [f"{MANIFEST_DIR}/ledger/tmpfs_tmp.json"]
    (result,) = tuning_ledger(Snapshot(root=str(tmp_path), ledger=entries))
    assert "80% -> 96% of the same reads with O_NOATIME" in result.summary


def test_a_measure_settles_its_own_file_system_and_the_roots_never_every_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is written back before the rounds (recorded at _syncfs, os.sync forbidden): the measured
    directory's file system, then the root's; no host-wide sync, which waits on a hung NFS server."""
    import os

    from dltune.bench import io_cost

    synced: list[str] = []
    monkeypatch.setattr(io_cost, "_syncfs", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")))
    monkeypatch.setattr(io_cost.os, "sync", lambda: pytest.fail("a host-wide sync"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    with io_cost._private_directory(scratch) as directory_fd:
        assert isinstance(directory_fd, int)
        io_cost._settle(directory_fd)
        made = os.readlink(f"/proc/self/fd/{directory_fd}")
    assert synced == [made, "/"] and made.startswith(str(scratch))


def test_libc_syncfs_is_looked_up_once() -> None:
    """find_library runs ldconfig (~10 ms): never inside a timed writeback."""
    from dltune.bench import io_cost

    assert io_cost._libc_syncfs() is io_cost._libc_syncfs() is not None


@pytest.mark.parametrize("libc_syncfs", [None, lambda fd: -1], ids=["no syncfs in libc", "syncfs fails"])
def test_a_missing_or_failing_syncfs_never_falls_back_to_a_host_wide_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, libc_syncfs: object
) -> None:
    """sync(2) writes back every mount and waits on a hung NFS server, which a node being judged may
    have: where syncfs is missing or fails (EIO), nothing is written back instead. The lookup is faked
    (libc here has syncfs); os.sync is forbidden."""
    import os

    from dltune.bench import io_cost

    monkeypatch.setattr(io_cost, "_libc_syncfs", lambda: libc_syncfs)
    monkeypatch.setattr(io_cost.os, "sync", lambda: pytest.fail("a host-wide sync"))
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        io_cost._syncfs(fd)
        io_cost._settle(fd)
    finally:
        os.close(fd)
