"""The node side of `dltune stage --broadcast`, `--bwlimit`'s throttle and the parallel scan, on real
local filesystems (tmp_path). Slurm itself (srun, sbcast) runs in the lab test
(tests/integration/test_site_lab.py::test_broadcast_*); here the orchestration's decisions meet a
scripted `run` that answers for srun, sbcast and scontrol (ScriptedSlurm, below)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dltune import staging
from dltune.cli import app
from dltune.model import human_size
from dltune.staging import Space, StageError
from dltune.staging import broadcast as stage_broadcast
from tests.unit.test_stage import make_dataset, tree_state

runner = CliRunner()


def staged_on_first_node(tmp_path: Path) -> tuple[Path, Path, dict[str, object]]:
    """A dataset on the "shared filesystem" staged on the first node, and its recorded identity."""
    src = make_dataset(tmp_path / "shared")
    first = tmp_path / "node1"
    first.mkdir()
    staging.stage(src, first, workers=4)
    record = json.loads(staging.record_path(first, src.name).read_text())
    identity = {k: v for k, v in record.items() if k != "complete"}
    return src, first, identity


def test_a_node_extracts_the_first_nodes_pack_into_the_same_tree_and_records_the_source(
    tmp_path: Path,
) -> None:
    src, first, identity = staged_on_first_node(tmp_path)
    entries = staging.scan_tree(first / src.name)
    pack = stage_broadcast.pack_path(first, src.name)
    size = stage_broadcast.pack_tree(first / src.name, entries, pack)
    assert size <= stage_broadcast.packed_size(entries)
    other = tmp_path / "node2"
    other.mkdir()
    delivered = stage_broadcast.delivered_path(other, src.name, ".tar")
    delivered.write_bytes(pack.read_bytes())

    outcome = stage_broadcast.node_finish(
        delivered, other, src.name, identity, stage_broadcast.Options(workers=4, verify=True)
    )
    assert outcome.ok, outcome.message
    assert tree_state(other / src.name) == tree_state(first / src.name) == tree_state(src)
    assert not delivered.exists(), "the payload is removed once the dataset is in place"
    # A later per-node `dltune stage SRC` on that node finds it staged from that source.
    again = staging.stage(src, other)
    assert again.notes == ["already staged"]


def test_a_killed_extraction_resumes_over_the_files_it_completed(tmp_path: Path) -> None:
    """The first try sees the payload end half-way (as when its task is killed mid-stream): it fails,
    keeping the files it completed; the rerun skips exactly those."""
    src, first, identity = staged_on_first_node(tmp_path)
    entries = staging.scan_tree(first / src.name)
    pack = stage_broadcast.pack_path(first, src.name)
    size = stage_broadcast.pack_tree(first / src.name, entries, pack)
    other = tmp_path / "node2"
    other.mkdir()
    delivered = stage_broadcast.delivered_path(other, src.name, ".tar")
    delivered.write_bytes(pack.read_bytes()[: size * 9 // 10])
    cut = stage_broadcast.node_finish(delivered, other, src.name, identity, stage_broadcast.Options())
    assert not cut.ok and "not a complete, readable archive" in cut.message
    partial = other / f".{src.name}.partial"
    completed = [p for p in partial.rglob("*") if p.is_file() and not p.name.endswith(".dltune-tmp")]
    assert completed

    delivered.write_bytes(pack.read_bytes())
    outcome = stage_broadcast.node_finish(delivered, other, src.name, identity, stage_broadcast.Options())
    assert outcome.ok and outcome.skipped == len(completed), outcome
    assert tree_state(other / src.name) == tree_state(src)


def test_a_corrupt_delivery_is_refused_before_it_is_extracted(tmp_path: Path) -> None:
    src, first, identity = staged_on_first_node(tmp_path)
    pack = stage_broadcast.pack_path(first, src.name)
    stage_broadcast.pack_tree(first / src.name, staging.scan_tree(first / src.name), pack)
    other = tmp_path / "node2"
    other.mkdir()
    delivered = stage_broadcast.delivered_path(other, src.name, ".tar")
    data = bytearray(pack.read_bytes())
    data[5000] ^= 0xFF
    delivered.write_bytes(bytes(data))
    outcome = stage_broadcast.node_finish(
        delivered,
        other,
        src.name,
        identity,
        stage_broadcast.Options(checksum=True),
        staging.sha256_file(pack),
    )
    assert not outcome.ok and "differs from the first node's pack" in outcome.message
    assert not (other / src.name).exists() and not (other / f".{src.name}.partial").exists()


def test_a_single_file_arrives_whole_and_is_renamed_into_place(tmp_path: Path) -> None:
    src = tmp_path / "shared/train.h5"
    src.parent.mkdir()
    src.write_bytes(os.urandom(100_000))
    identity = staging.describe_source(src, "file", None)
    node = tmp_path / "node2"
    node.mkdir()
    delivered = stage_broadcast.delivered_path(node, "train.h5", "")
    delivered.write_bytes(src.read_bytes()[:-1])  # a short delivery: refused, kept out of place
    short = stage_broadcast.node_finish(delivered, node, "train.h5", identity, stage_broadcast.Options())
    assert not short.ok and "99999 bytes arrived" in short.message and not (node / "train.h5").exists()
    delivered.write_bytes(src.read_bytes())
    whole = stage_broadcast.node_finish(delivered, node, "train.h5", identity, stage_broadcast.Options())
    assert whole.ok and (node / "train.h5").read_bytes() == src.read_bytes()
    assert staging.stage(src, node).notes == ["already staged"]


def test_the_check_step_says_staged_ready_or_names_what_is_missing(tmp_path: Path) -> None:
    src, first, identity = staged_on_first_node(tmp_path)
    assert stage_broadcast.node_check(first, src.name, identity, 10_000).message == "staged"
    empty = tmp_path / "node2"
    empty.mkdir()
    assert stage_broadcast.node_check(empty, src.name, identity, 10_000).message == "ready"

    def full(path: Path) -> Space:
        return Space(free_bytes=1_000_000, free_inodes=1000, block_size=4096, fstype="ext4")

    refused = stage_broadcast.node_check(empty, src.name, identity, 10_000_000, space=full)
    assert not refused.ok and "no room for the payload" in refused.message
    missing = stage_broadcast.node_check(tmp_path / "absent", src.name, identity, 1)
    assert not missing.ok and "not a writable directory" in missing.message


def test_node_lines_round_trip_and_garbage_is_ignored() -> None:
    ok = stage_broadcast.NodeOutcome("node2", True, "staged", files=3)
    stdout = f"noise\n{ok.line()}\nDLTUNE-NODE {{not json\n"
    assert stage_broadcast.parse_node_lines(stdout) == [ok]


def test_broadcast_outside_a_slurm_job_is_refused_naming_the_option(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=3)
    (tmp_path / "local").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    result = runner.invoke(app, ["stage", str(src), "--to", str(tmp_path / "local"), "--broadcast"], env=env)
    assert result.exit_code == 1
    assert "--broadcast runs inside a Slurm job" in result.output
    assert list((tmp_path / "local").iterdir()) == []


def test_a_one_node_job_stages_locally_and_says_there_was_nothing_to_broadcast(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=5)
    (tmp_path / "local").mkdir()
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURMD_NODENAME": "n1"}
    result = stage_broadcast.broadcast(src, tmp_path / "local", stage_broadcast.Options(), env=env)
    assert not result.failed and result.notes == ["one node in this job: staged here, nothing to broadcast"]
    assert tree_state(tmp_path / "local" / src.name) == tree_state(src)


def test_bwlimit_sleeps_the_readers_down_to_the_rate_over_every_thread() -> None:
    """A fake clock: the throttle's arithmetic, not this machine's timing."""
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)

    throttle = staging.Throttle(10, clock=lambda: now[0], sleep=sleep)  # 10 MB/s
    throttle(5_000_000)
    throttle(5_000_000)  # two threads, 10 MB at once: the second waits a second's worth
    assert slept == pytest.approx([0.5, 1.0])
    now[0] += 5.0  # idle: no debt is carried into the future
    throttle(1_000_000)
    assert slept[-1] == pytest.approx(0.1)
    assert staging.Throttle(10).chunk == 1 << 20 and staging.Throttle(None).chunk == 64 << 20
    unlimited = staging.Throttle(0, sleep=sleep)
    unlimited(10**12)
    assert len(slept) == 3


def test_a_negative_bwlimit_is_refused_before_anything_is_copied(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=3)
    (tmp_path / "local").mkdir()
    with pytest.raises(StageError, match="--bwlimit"):
        staging.stage(src, tmp_path / "local", bwlimit=-1)
    assert list((tmp_path / "local").iterdir()) == []
    result = runner.invoke(app, ["stage", str(src), "--to", str(tmp_path / "local"), "--bwlimit", "-5"])
    assert result.exit_code == 2 and "--bwlimit" in result.output


def test_a_limited_stage_still_copies_everything_verified(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=20)
    (tmp_path / "local").mkdir()
    summary = staging.stage(src, tmp_path / "local", bwlimit=1000, verify=True, checksum=True)
    assert summary.verified and tree_state(summary.path) == tree_state(src)


def test_the_parallel_scan_lists_every_entry_once_sorted(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared")
    os.mkfifo(src / "a-fifo")
    entries = staging.scan_tree(src, workers=8)
    relatives = [e.relative for e in entries]
    walked = sorted(
        os.path.relpath(os.path.join(d, n), src) for d, dirs, files in os.walk(src) for n in dirs + files
    )
    assert relatives == sorted(relatives) == [r for r in walked if r != "a-fifo"]
    assert staging.scan_tree(src, workers=1) == entries


def test_plan_advises_a_broadcast_for_a_job_of_several_nodes_with_the_read_volumes(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=30)
    size = sum(e.size for e in staging.scan_tree(src) if e.kind == "file")
    alone = runner.invoke(app, ["stage", str(src), "--plan"], env={"SLURM_JOB_NUM_NODES": "1"})
    assert alone.exit_code == 0 and "broadcast:" not in alone.output
    job = runner.invoke(app, ["stage", str(src), "--plan"], env={"SLURM_JOB_NUM_NODES": "32"})
    assert job.exit_code == 0, job.output
    line = next(x for x in job.output.splitlines() if x.startswith("broadcast:"))
    assert f"32 nodes read {human_size(32 * size)} from" in line and f"reads {human_size(size)} once" in line
    assert "--broadcast" in line
    explicit = runner.invoke(app, ["stage", str(src), "--plan", "--nodes", "4"])
    assert "4 nodes read" in explicit.output


def test_workers_default_to_few_from_a_local_disk_and_many_from_anything_else(tmp_path: Path) -> None:
    """tmp_path is on the machine's disk (ext4 here); /proc stands for a filesystem dltune does not
    know as local, which it treats as network-like: per-file latency wants requests in flight."""
    assert staging.default_workers(tmp_path) == staging.LOCAL_WORKERS
    assert staging.default_workers(Path("/proc/self")) == staging.NETWORK_WORKERS


def test_a_job_without_srun_or_sbcast_on_path_is_one_line_naming_srun(tmp_path: Path) -> None:
    """No sbcast: every node would read the source itself, through srun; no srun either: one line
    naming it, exit 1, no traceback."""
    src = make_dataset(tmp_path / "shared", files=3)
    (tmp_path / "local").mkdir()
    (tmp_path / "empty-bin").mkdir()
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "3", "PATH": str(tmp_path / "empty-bin")}
    result = runner.invoke(app, ["stage", str(src), "--to", str(tmp_path / "local"), "--broadcast"], env=env)
    assert result.exit_code == 1, result.output
    assert "srun: cannot run it" in result.output and "Traceback" not in result.output


# --- the orchestration's decisions, with srun, sbcast and scontrol scripted ---------------------------
# The real Slurm runs these steps in the lab test; here a scripted `run` answers for them so that each
# decision (a silent node, a failing node, everything staged, a pack to reuse or not) is tested at its
# boundary. Only the three commands' answers are scripted: the first node's stage and pack are real.


class ScriptedSlurm:
    """Answers scontrol, srun and sbcast as a job of `nodes` would; `answers[step][node]` is that
    node's outcome of a step (None: the node printed nothing, as a killed task)."""

    def __init__(self, nodes: list[str], answers: Mapping[str, Mapping[str, object]], sbcast_rc: int = 0):
        self.nodes = nodes
        self.answers = answers
        self.sbcast_rc = sbcast_rc
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_kwargs: object) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if argv[0] == "scontrol":
            return subprocess.CompletedProcess(argv, 0, "\n".join(self.nodes) + "\n", "")
        if argv[0] == "sbcast":
            return subprocess.CompletedProcess(argv, self.sbcast_rc, "sbcast: error: disk full\n", "")
        step = argv[argv.index("stage-node") + 1]
        lines = []
        for node in self.nodes:
            answer = self.answers.get(step, {}).get(node, "default")
            if answer == "default":
                answer = stage_broadcast.NodeOutcome(node, True, "ready" if step == "check" else "done")
            if isinstance(answer, stage_broadcast.NodeOutcome):
                lines.append(answer.line())
        return subprocess.CompletedProcess(
            argv, 1 if len(lines) < len(self.nodes) else 0, "\n".join(lines), ""
        )

    def steps(self) -> list[str]:
        return [c[c.index("stage-node") + 1] if "stage-node" in c else c[0] for c in self.calls]


@pytest.fixture
def slurm_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """sbcast and srun exist (shutil.which finds them; they are never run: `run` answers instead)."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    for command in ("srun", "sbcast", "scontrol"):
        (bin_dir / command).write_text("#!/bin/sh\nexit 99\n")
        (bin_dir / command).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURMD_NODENAME": "n1",
    }


def broadcast_to(
    tmp_path: Path, src: Path, slurm: ScriptedSlurm, env: dict[str, str], **options: bool
) -> tuple[stage_broadcast.Broadcast, list[str]]:
    to = tmp_path / "local"
    to.mkdir(exist_ok=True)
    said: list[str] = []
    result = stage_broadcast.broadcast(
        src,
        to,
        stage_broadcast.Options(workers=2, **options),
        env=env,
        run=slurm,
        say=said.append,
    )
    return result, said


def test_a_node_that_never_answers_is_failed_by_name_and_nothing_is_sent(
    tmp_path: Path, slurm_on_path: dict[str, str]
) -> None:
    src = make_dataset(tmp_path / "shared", files=5)
    slurm = ScriptedSlurm(["n1", "n2", "n3"], {"check": {"n3": None}})
    result, _ = broadcast_to(tmp_path, src, slurm, slurm_on_path)
    assert [(o.node, o.ok) for o in result.nodes] == [("n3", False)]
    assert "no answer (srun exit 1)" in result.nodes[0].message
    assert slurm.steps() == ["scontrol", "check"], "no sbcast and no finish after a silent node"


def test_without_the_node_names_a_short_count_of_answers_is_a_failure(
    tmp_path: Path, slurm_on_path: dict[str, str]
) -> None:
    """scontrol cannot list the nodes: two answers from a three-node job still fail the step."""
    src = make_dataset(tmp_path / "shared", files=5)
    slurm = ScriptedSlurm(["n1", "n2", "n3"], {"check": {"n2": None}})
    env = {k: v for k, v in slurm_on_path.items() if k != "SLURM_JOB_NODELIST"}
    result, _ = broadcast_to(tmp_path, src, slurm, env)
    assert [(o.node, o.ok) for o in result.nodes] == [("1 node(s)", False)]
    assert slurm.steps() == ["check"]


def test_one_node_that_fails_its_check_stops_the_broadcast_and_is_the_only_one_reported(
    tmp_path: Path, slurm_on_path: dict[str, str]
) -> None:
    src = make_dataset(tmp_path / "shared", files=5)
    full = stage_broadcast.NodeOutcome("n2", False, "no room for the payload beside the dataset: ...")
    slurm = ScriptedSlurm(["n1", "n2", "n3"], {"check": {"n2": full}})
    result, _ = broadcast_to(tmp_path, src, slurm, slurm_on_path)
    assert result.nodes == [full] and result.failed == [full]
    assert "sbcast" not in slurm.steps() and "finish" not in slurm.steps()


def test_every_node_already_staged_sends_nothing(tmp_path: Path, slurm_on_path: dict[str, str]) -> None:
    src = make_dataset(tmp_path / "shared", files=5)
    staged = {n: stage_broadcast.NodeOutcome(n, True, "staged") for n in ("n1", "n2", "n3")}
    slurm = ScriptedSlurm(["n1", "n2", "n3"], {"check": staged})
    result, _ = broadcast_to(tmp_path, src, slurm, slurm_on_path)
    assert result.notes == ["every node already holds it"] and not result.failed
    assert slurm.steps() == ["scontrol", "check", "finish"]
    # One node not yet staged: the pack is sent.
    staged["n2"] = stage_broadcast.NodeOutcome("n2", True, "ready")
    slurm = ScriptedSlurm(["n1", "n2", "n3"], {"check": staged})
    broadcast_to(tmp_path, src, slurm, slurm_on_path)
    assert slurm.steps() == ["scontrol", "check", "sbcast", "finish"]


def test_a_failed_finish_keeps_the_pack_for_the_rerun_which_reuses_it_only_while_whole(
    tmp_path: Path, slurm_on_path: dict[str, str]
) -> None:
    src = make_dataset(tmp_path / "shared", files=20)
    to = tmp_path / "local"
    broken = stage_broadcast.NodeOutcome("n3", False, "did not arrive (sbcast)")
    slurm = ScriptedSlurm(["n1", "n2", "n3"], {"finish": {"n3": broken}})
    result, said = broadcast_to(tmp_path, src, slurm, slurm_on_path)
    assert result.failed == [broken]
    pack = stage_broadcast.pack_path(to, src.name)
    size = pack.stat().st_size
    payload_bytes = slurm.calls[1][slurm.calls[1].index("--payload-bytes") + 1]
    assert payload_bytes == str(size) and not any("reusing" in line for line in said)

    # The rerun: the pack is whole and the source unchanged, so it is reused (nothing packed again).
    slurm = ScriptedSlurm(["n1", "n2", "n3"], {})
    result, said = broadcast_to(tmp_path, src, slurm, slurm_on_path)
    assert not result.failed and any("reusing the pack" in line for line in said)
    assert not pack.exists(), "every node finished: the pack is removed"

    # A pack cut short (a killed pack, a full disk) is never reused: it is made again, whole.
    broadcast_to(tmp_path, src, ScriptedSlurm(["n1", "n2", "n3"], {"finish": {"n3": broken}}), slurm_on_path)
    whole = pack.read_bytes()
    with pack.open("r+b") as cut:
        cut.truncate(len(whole) - stage_broadcast.TAR_BLOCK)
    result, said = broadcast_to(
        tmp_path, src, ScriptedSlurm(["n1", "n2", "n3"], {"finish": {"n3": broken}}), slurm_on_path
    )
    assert not any("reusing" in line for line in said)
    assert pack.read_bytes() == whole

    # A source changed since the pack was made: not reused either.
    (src / "labels.txt").write_text("cat\ndog\nbird\n")
    again = ScriptedSlurm(["n1", "n2", "n3"], {"finish": {"n3": broken}})
    result, said = broadcast_to(tmp_path, src, again, slurm_on_path, replace=True)
    assert not any("reusing" in line for line in said)
    with tarfile.open(pack) as packed:
        assert packed.extractfile("labels.txt").read() == b"cat\ndog\nbird\n"  # type: ignore[union-attr]


def test_with_checksum_every_node_is_given_the_packs_digest(
    tmp_path: Path, slurm_on_path: dict[str, str]
) -> None:
    src = make_dataset(tmp_path / "shared", files=5)
    slurm = ScriptedSlurm(
        ["n1", "n2", "n3"], {"finish": {"n3": stage_broadcast.NodeOutcome("n3", False, "x")}}
    )
    broadcast_to(tmp_path, src, slurm, slurm_on_path, checksum=True)
    pack = stage_broadcast.pack_path(tmp_path / "local", src.name)
    digest = hashlib.sha256(pack.read_bytes()).hexdigest()
    for call in slurm.calls:
        if "stage-node" in call:
            assert call[call.index("--payload-sha256") + 1] == digest


def test_a_failed_sbcast_falls_back_to_every_node_reading_the_source_itself(
    tmp_path: Path, slurm_on_path: dict[str, str]
) -> None:
    src = make_dataset(tmp_path / "shared", files=5)
    slurm = ScriptedSlurm(["n1", "n2", "n3"], {}, sbcast_rc=1)
    result, said = broadcast_to(tmp_path, src, slurm, slurm_on_path)
    assert slurm.steps() == ["scontrol", "check", "sbcast", "direct"]
    assert result.notes == [
        f"sbcast failed: sbcast: error: disk full: every node reads {src} from the shared filesystem itself"
    ]
    assert said[-1] == result.notes[-1] and not result.failed


def test_the_first_node_refuses_to_pack_without_room_for_two_archives(
    tmp_path: Path, slurm_on_path: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """statfs is the boundary faked: the disk holds the staged tree, but not its pack and the copy
    sbcast writes beside it."""
    src = make_dataset(tmp_path / "shared", files=5)
    packed = stage_broadcast.packed_size(staging.scan_tree(src))
    tight = Space(free_bytes=packed * 2 - 1, free_inodes=1000, block_size=512, fstype="ext4")
    monkeypatch.setattr(stage_broadcast, "space_at", lambda _path: tight)
    with pytest.raises(StageError, match=r"^n1: no room to pack the dataset for sbcast"):
        broadcast_to(tmp_path, src, ScriptedSlurm(["n1", "n2", "n3"], {}), slurm_on_path)
    roomy = Space(free_bytes=packed * 3, free_inodes=1000, block_size=512, fstype="ext4")
    monkeypatch.setattr(stage_broadcast, "space_at", lambda _path: roomy)
    result, _ = broadcast_to(tmp_path, src, ScriptedSlurm(["n1", "n2", "n3"], {}), slurm_on_path)
    assert not result.failed
