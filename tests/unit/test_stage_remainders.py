"""`dltune stage` and the bench's Slurm step on what the previous round left: a --bwlimit that cannot
be honoured, a single-file source given as a link, resumes at the limits of names and paths, a tar with
appended duplicate members, malformed Slurm variables. Each bad input is one line naming what is
wrong, before anything changes; each odd but valid input stages (and resumes) as it should."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dltune import staging
from dltune.bench.measure import BenchError
from dltune.bench.run import slurm_step
from dltune.files.dirfd import NAME_MAX, derived_name, remove_at
from dltune.staging import StageError
from dltune.staging import broadcast as stage_broadcast
from tests.unit.test_stage import make_dataset, tree_state

CLI = [sys.executable, "-m", "dltune.cli"]


def cli(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *argv], capture_output=True, text=True, check=False, timeout=120, env=env, cwd=cwd
    )


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    return lines[0]


# --- --bwlimit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", ["1e-300", "4.9e-324", "0.0009"])
def test_a_rate_that_cannot_be_honoured_is_a_usage_error_before_anything_is_made(
    tmp_path: Path, rate: str
) -> None:
    """1e-300 MB/s once made the partial copy, then overflowed the clock: an internal error."""
    src = make_dataset(tmp_path / "shared", files=3)
    local = tmp_path / "local"
    local.mkdir()
    done = cli("stage", str(src), "--to", str(local), "--bwlimit", rate)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "--bwlimit" in line and "cannot be honoured" in line, line
    assert os.listdir(local) == []
    node = cli(
        "stage-node", "direct", "--to", str(local), "--name", "x", "--source", str(src), "--bwlimit", rate
    )
    assert node.returncode == 2 and "--bwlimit" in one_line(node.stderr)
    with pytest.raises(StageError, match="--bwlimit"):
        staging.stage(src, local, bwlimit=float(rate))
    assert os.listdir(local) == []


def test_the_least_rate_is_taken(tmp_path: Path) -> None:
    src = tmp_path / "tiny.bin"
    src.write_bytes(b"")  # nothing to read: the least rate stages it at once
    (tmp_path / "local").mkdir()
    assert staging.stage(src, tmp_path / "local", bwlimit=0.001).files == 1


# --- a source given as a link -------------------------------------------------------------------------


def test_a_single_file_named_through_a_link_is_staged_as_cp_would(tmp_path: Path) -> None:
    """A link the user names on the command line is followed (cp does); it was refused with ELOOP
    and 'the partial copy is kept'. Links inside a tree stay links (the dataset's own)."""
    real = tmp_path / "shared" / "train-000.h5"
    real.parent.mkdir()
    real.write_bytes(os.urandom(200_000))
    link = tmp_path / "shared" / "train.h5"
    link.symlink_to(real.name)
    local = tmp_path / "local"
    local.mkdir()
    done = cli("stage", str(link), "--to", str(local), "--verify", "--checksum")
    assert done.returncode == 0, done.stderr
    staged = local / "train.h5"
    assert not staged.is_symlink() and staged.read_bytes() == real.read_bytes()
    assert staged.stat().st_mtime_ns == real.stat().st_mtime_ns
    record = json.loads(staging.record_path(local, "train.h5").read_text())
    assert record["source"] == str(real)
    tree = make_dataset(tmp_path / "tree", files=3)  # with labels-link.txt -> labels.txt
    (tmp_path / "tree-link").symlink_to(tree)
    summary = staging.stage(tmp_path / "tree-link", local)
    assert (summary.path / "labels-link.txt").is_symlink() and tree_state(summary.path) == tree_state(tree)


# --- resumes at the limits of names and paths ---------------------------------------------------------


@pytest.fixture
def deep_tmp(tmp_path: Path) -> Iterator[Path]:
    """tmp_path, emptied on descriptors afterwards (pytest's own cleanup recurses)."""
    yield tmp_path
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(fd):
            remove_at(fd, name)
    finally:
        os.close(fd)


def as_killed(local: Path, name: str) -> Path:
    """Turn a complete stage back into what a kill during its copy leaves: the partial copy and the
    record of what it is of (not marked complete); the caller makes a file in it incomplete."""
    record = json.loads(staging.record_path(local, name).read_text())
    del record["complete"]
    staging.record_path(local, name).unlink()
    staging.partial_record_path(local, name).write_text(json.dumps(record))
    partial = local / derived_name(name, ".partial")
    os.rename(local / name, partial)
    return partial


def chain(top: Path, depth: int, last: str) -> None:
    """`depth` directories named d below top, made on descriptors, with the file `last` at the bottom."""
    top.mkdir(parents=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    out = os.open(last, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(out, b"the deepest file")
    os.close(out)
    os.close(fd)


def touch_bottom(top: Path, depth: int, last: str) -> None:
    """Make the bottom file incomplete (another mtime), as a kill while it was written leaves it."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    os.utime(last, ns=(1, 1), dir_fd=fd, follow_symlinks=False)
    os.close(fd)


PATH_MAX = os.pathconf("/", "PC_PATH_MAX")
# The partial copy is reached as /proc/self/fd/N/: up to 18 bytes with N of three digits.
PREFIX_MAX = len("/proc/self/fd/999/")


def test_a_tree_as_deep_as_the_first_copy_allows_resumes(
    deep_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree whose deepest path just fits copies; its resume wrote each file under a temporary
    name beside it, by a path 12 bytes longer, and failed with 'File name too long' forever."""
    monkeypatch.chdir(deep_tmp)  # the source by a short relative path: its depth is what is tested
    last = "bottom"
    depth = (PATH_MAX - 1 - PREFIX_MAX - len(last)) // 2  # /proc/self/fd/N/d/d/.../bottom fits
    chain(deep_tmp / "deep", depth, last)
    local = deep_tmp / "local"
    local.mkdir()
    staging.stage(Path("deep"), local)
    partial = as_killed(local, "deep")
    touch_bottom(partial, depth, last)
    summary = staging.stage(Path("deep"), local)
    assert summary.bytes == len(b"the deepest file") and summary.files == 1
    assert not os.path.lexists(partial)


@pytest.mark.parametrize("kind", ["dir", "file", "archive"])
def test_names_of_255_bytes_resume(tmp_path: Path, kind: str) -> None:
    """The dataset's name, a file's name and an archive member's name at the filesystem's limit,
    through a kill and a resume."""
    long_name = "é" * 100 + "x" * (NAME_MAX - 200)
    assert len(long_name.encode()) == NAME_MAX
    shared = tmp_path / "shared"
    shared.mkdir()
    if kind == "dir":
        src = shared / long_name
        src.mkdir()
        (src / long_name).write_bytes(os.urandom(3000))
        (src / "other").write_bytes(os.urandom(3000))
    elif kind == "file":
        src = shared / long_name
        src.write_bytes(os.urandom(3000))
    else:
        src = shared / (long_name[:-4] + ".tar")
        with tarfile.open(src, "w", format=tarfile.PAX_FORMAT) as tar:
            for member in (long_name, "other"):
                data = os.urandom(3000)
                info = tarfile.TarInfo(member)
                info.size, info.mtime = len(data), 1_600_000_000
                tar.addfile(info, io.BytesIO(data))
    local = tmp_path / "local"
    local.mkdir()
    name = staging.stage(src, local).path.name
    partial = as_killed(local, name)
    if kind == "file":
        os.utime(partial, ns=(1, 1))
    else:
        os.utime(partial / long_name, ns=(1, 1))
    summary = staging.stage(src, local, verify=True, checksum=True)
    assert summary.verified and summary.bytes == 3000
    if kind == "dir":
        assert tree_state(summary.path) == tree_state(src)
    assert all(len(os.fsencode(p)) <= NAME_MAX for p in os.listdir(local))


# --- a tar with appended duplicate members ------------------------------------------------------------


def appended_tar(tmp_path: Path, same_size_and_mtime: bool) -> tuple[Path, bytes]:
    """ds.tar holding data/a, then data/a appended again (`tar -r`), as GNU tar does it; the bytes
    tar extracts for data/a (the last member's)."""
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    first = b"first version\n"
    last = b"LAST! version\n" if same_size_and_mtime else b"the last version, longer\n"
    archive = tmp_path / "ds.tar"
    (work / "data" / "a").write_bytes(first)
    (work / "data" / "b").write_bytes(b"another file\n")
    os.utime(work / "data" / "a", (1_600_000_000, 1_600_000_000))
    tar = shutil.which("tar")
    if tar:
        subprocess.run([tar, "-cf", str(archive), "-C", str(work), "data"], check=True)
    else:
        with tarfile.open(archive, "w") as handle:
            handle.add(work / "data", arcname="data")
    (work / "data" / "a").write_bytes(last)
    os.utime(work / "data" / "a", (1_600_000_000 + (0 if same_size_and_mtime else 60),) * 2)
    if tar:
        subprocess.run([tar, "-rf", str(archive), "-C", str(work), "data/a"], check=True)
    else:
        with tarfile.open(archive, "a") as handle:
            handle.add(work / "data" / "a", arcname="data/a")
    with tarfile.open(archive) as handle:
        assert [m.name for m in handle.getmembers()].count("data/a") == 2
    return archive, last


@pytest.mark.parametrize("same_size_and_mtime", [False, True])
def test_a_tar_with_an_appended_member_is_staged_as_tar_extracts_it(
    tmp_path: Path, same_size_and_mtime: bool
) -> None:
    """The last member of a name wins, as tar extracts it; verification (sizes, SHA-256, and again
    for an already-staged archive) holds the tree to that member, not to the one it replaced
    (which failed verification forever)."""
    archive, last = appended_tar(tmp_path, same_size_and_mtime)
    local = tmp_path / "local"
    local.mkdir()
    summary = staging.stage(archive, local, verify=True, checksum=True)
    assert summary.verified and summary.files == 2
    assert (summary.path / "data" / "a").read_bytes() == last
    again = staging.stage(archive, local, verify=True, checksum=True)
    assert again.notes == ["already staged"] and again.verified
    as_killed(local, "ds")  # a resume over the complete tree ends as tar extracts it, too
    resumed = staging.stage(archive, local, verify=True, checksum=True)
    assert (resumed.path / "data" / "a").read_bytes() == last
    extracted = tmp_path / "by-tar"
    extracted.mkdir()
    with tarfile.open(archive) as handle:
        handle.extractall(extracted, filter="data")
    assert tree_state(resumed.path) == tree_state(extracted)


# --- Slurm's variables --------------------------------------------------------------------------------

STEP = {
    "SLURM_JOB_ID": "4242",
    "SLURMD_NODENAME": "node1",
    "SLURM_STEP_NODELIST": "node[1-2]",
    "SLURM_STEP_NUM_TASKS": "2",
}
MALFORMED = ["two", "-2", "0", "2.0", " 2", "1_0", "٢", "9" * 200]


def expand(nodelist: str) -> list[str]:
    return {"node[1-2]": ["node1", "node2"]}[nodelist]


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SLURM_STEP_NUM_TASKS", value) for value in MALFORMED]
    + [("SLURM_JOB_ID", value) for value in MALFORMED if value.isascii() and not value.isdigit()],
)
def test_a_malformed_step_variable_is_one_error_naming_it(variable: str, value: str) -> None:
    with pytest.raises(BenchError, match=rf"^{variable}=.*not a .*srun") as refused:
        step = slurm_step({**STEP, variable: value}, expand)
        assert step.port  # SLURM_JOB_ID used to fail here, at the port, an internal error
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("value", ["-h", "node[1-2] node3", "node1\nnode2"])
def test_a_nodelist_that_is_no_slurm_node_list_is_refused_before_scontrol(value: str) -> None:
    def never(_nodelist: str) -> list[str]:
        raise AssertionError("scontrol must not run")

    with pytest.raises(BenchError, match=r"^SLURM_STEP_NODELIST="):
        slurm_step({**STEP, "SLURM_STEP_NODELIST": value}, never)


def test_the_bench_cli_names_a_malformed_variable_in_one_line() -> None:
    env = {**os.environ, **STEP, "SLURM_STEP_NUM_TASKS": "two"}
    done = cli("bench", "--multi-node", env=env)
    assert done.returncode == 2
    assert "SLURM_STEP_NUM_TASKS='two' is not a task count" in one_line(done.stderr)


@pytest.mark.parametrize("variable", ["SLURM_JOB_NUM_NODES", "SLURM_NNODES"])
@pytest.mark.parametrize("value", ["three", "0", "-3", "3 "])
def test_a_malformed_node_count_stops_a_broadcast_before_anything_is_staged(
    tmp_path: Path, variable: str, value: str
) -> None:
    """Read as no count, it staged on this node only and called the broadcast done."""
    src = make_dataset(tmp_path / "shared", files=3)
    local = tmp_path / "local"
    local.mkdir()
    env = {"SLURM_JOB_ID": "7", variable: value}
    with pytest.raises(StageError, match=rf"^{variable}=.*is not a node count"):
        stage_broadcast.broadcast(src, local, stage_broadcast.Options(), env=env)
    assert os.listdir(local) == []
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")} | env
    done = cli("stage", str(src), "--to", str(local), "--broadcast", env=cli_env)
    assert done.returncode in (1, 2) and variable in one_line(done.stderr)
    assert os.listdir(local) == []


@pytest.mark.parametrize("value", ["-h", "node[1-3] node4", "node1\nnode2"])
def test_a_job_nodelist_that_is_no_slurm_node_list_is_refused_before_anything_is_staged(
    tmp_path: Path, value: str
) -> None:
    src = make_dataset(tmp_path / "shared", files=3)
    local = tmp_path / "local"
    local.mkdir()
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_NODELIST": value}
    with pytest.raises(StageError, match=r"^SLURM_JOB_NODELIST=.*is not a Slurm node list"):
        stage_broadcast.broadcast(src, local, stage_broadcast.Options(), env=env)
    assert os.listdir(local) == []
