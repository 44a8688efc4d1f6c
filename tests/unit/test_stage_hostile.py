"""`dltune stage` against what a hostile or unlucky user can make: source and destination that overlap,
names planted in a shared destination, kills during --replace, names at the length limit, deep trees,
bad tar headers. Real filesystems (tmp_path, a bind mount, processes killed with SIGKILL); nothing is
faked. Each test states the end state a user cares about: the source intact, a victim's file intact,
the final name either complete with its record or absent."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dltune import staging
from dltune.files.dirfd import NAME_MAX, derived_name, remove_at, walk_below
from dltune.staging import StageError
from tests.unit.test_stage import (
    TREES,
    as_nobody,
    build_tree,
    chown_tree,
    killed_partial,
    make_dataset,
    nobody_can_run_dltune,
    tree_state,
)

CLI = [sys.executable, "-m", "dltune.cli", "stage"]


def digest_tree(root: Path) -> str:
    return hashlib.sha256(repr(tree_state(root)).encode()).hexdigest()


# --- source and destination -----------------------------------------------------------------------


def test_the_source_s_own_parent_with_replace_is_refused_and_the_source_kept(tmp_path: Path) -> None:
    """The refusal for a held name advises --replace: with the source's parent as --to, that would
    have removed the source itself."""
    src = make_dataset(tmp_path / "shared", files=10)
    before = digest_tree(src)
    with pytest.raises(StageError, match="are the same"):
        staging.stage(src, src.parent, replace=True)
    assert digest_tree(src) == before


def test_a_destination_inside_the_source_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=10)
    before = digest_tree(src)
    inside = src / "class0"
    with pytest.raises(StageError, match="destination is inside the source"):
        staging.stage(src, inside)
    assert digest_tree(src) == before


def test_a_source_inside_the_destination_is_refused_with_replace(tmp_path: Path) -> None:
    """`dltune stage /scratch/ds/ds --to /scratch --replace`: the destination /scratch/ds holds the
    source; replacing it would remove the source."""
    outer = tmp_path / "scratch" / "ds"
    src = make_dataset(outer, files=5).rename(outer / "ds")
    before = digest_tree(src)
    with pytest.raises(StageError, match="source is inside the destination"):
        staging.stage(src, tmp_path / "scratch", replace=True)
    assert digest_tree(src) == before


def test_the_same_directory_through_a_bind_mount_is_refused_by_inode(tmp_path: Path) -> None:
    """Paths differ, the directory is one: only device and inode tell."""
    src = make_dataset(tmp_path / "shared", files=5)
    view = tmp_path / "view"
    view.mkdir()
    if subprocess.run(["mount", "--bind", str(src), str(view)], check=False).returncode:
        pytest.skip("bind mounts need root")
    try:
        before = digest_tree(src)
        with pytest.raises(StageError, match="inside the source"):
            staging.stage(src, view / "class1")
        assert digest_tree(src) == before
    finally:
        subprocess.run(["umount", str(view)], check=True)


@pytest.mark.parametrize("given_as", [".", "..", "./", "/"])
def test_names_that_resolve_to_nothing_are_refused(tmp_path: Path, given_as: str) -> None:
    """`dltune stage .` once 'succeeded' without copying anything."""
    src = make_dataset(tmp_path / "shared", files=3)
    (tmp_path / "local").mkdir()
    done = subprocess.run(
        [*CLI, given_as, "--to", str(tmp_path / "local")],
        cwd=src,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "cannot be staged" in done.stderr and "Traceback" not in done.stderr
    assert list((tmp_path / "local").iterdir()) == []


def test_a_same_name_directory_dltune_never_staged_is_refused_not_taken_as_staged(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=5)
    mine = tmp_path / "local" / src.name
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my own work")
    with pytest.raises(StageError, match=r"was not staged by dltune.*--replace"):
        staging.stage(src, tmp_path / "local")
    assert (mine / "notes.txt").read_text() == "my own work"
    summary = staging.stage(src, tmp_path / "local", replace=True)
    assert tree_state(summary.path) == tree_state(src)
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == sorted(
        [src.name, f".{src.name}.dltune-source.json", f".{src.name}.lock"]
    )


# --- names planted in the destination --------------------------------------------------------------


def plant(local: Path, name: str, target: Path) -> None:
    (local / name).symlink_to(target)


@pytest.mark.parametrize(
    "planted",
    [
        ".imagenet-mini.partial",
        ".imagenet-mini.lock",
        ".imagenet-mini.dltune-source.json",
        ".imagenet-mini.partial.dltune-source.json",
        ".imagenet-mini.partial.dltune-source.json.tmp",
        "imagenet-mini",
    ],
)
def test_a_planted_link_under_any_name_dltune_uses_is_refused_and_never_followed(
    tmp_path: Path, planted: str
) -> None:
    """In a shared scratch directory, another user plants a link under one of the names staging
    uses, pointing at a victim's directory or file: the stage is refused naming it, and the victim's
    files are exactly as before (a resume once removed 'stray' files through such a link)."""
    src = make_dataset(tmp_path / "shared", files=10)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    (victim / "secret").write_text("root only")
    os.chmod(victim / "secret", 0o600)
    local = tmp_path / "local"
    local.mkdir()
    target = victim if planted.endswith(("partial", "mini")) else victim / "secret"
    plant(local, planted, target)
    before = digest_tree(victim)
    with pytest.raises(StageError, match=r"symbolic link|not a directory dltune made|not staged by dltune"):
        staging.stage(src, local, replace=planted != "imagenet-mini")
    assert digest_tree(victim) == before
    assert (local / planted).is_symlink()


def test_as_root_a_directory_another_user_owns_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    """Decided: as root, staging refuses a destination another user owns (a job's $SLURM_TMPDIR):
    there the user could plant what root would then write through. Run it as that user."""
    if os.geteuid() != 0:
        pytest.skip("a root-only decision")
    src = make_dataset(tmp_path / "shared", files=3)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(StageError, match=r"belongs to uid 65534.*run it as that user"):
        staging.stage(src, theirs)
    assert list(theirs.iterdir()) == []


# --- kills during --replace and resume ----------------------------------------------------------------


def record_of(local: Path, name: str) -> dict[str, object] | None:
    path = staging.record_path(local, name)
    return json.loads(path.read_text()) if path.exists() else None


@pytest.mark.fuzz  # twelve kills at generated points, about ten seconds
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(delay_ms=st.integers(min_value=0, max_value=900))
def test_a_kill_at_any_point_of_replace_leaves_the_old_copy_or_nothing(
    tmp_path_factory: pytest.TempPathFactory, delay_ms: int
) -> None:
    """A --replace killed (SIGKILL) at a random moment: under the final name there is either the old
    copy, complete, with its record, or the new one, complete, with its record, or nothing; a plain
    rerun never calls an incomplete tree staged, and --replace then ends identical to the new source."""
    root = tmp_path_factory.mktemp("replace")
    old = make_dataset(root / "old", files=40)
    new = make_dataset(root / "new", files=400)
    local = root / "local"
    local.mkdir()
    staging.stage(old, local)
    old_state = tree_state(old)
    process = subprocess.Popen(
        [*CLI, str(new), "--to", str(local), "--replace"],
        stderr=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    time.sleep(delay_ms / 1000)
    process.send_signal(signal.SIGKILL)
    process.wait()
    dest = local / "imagenet-mini"
    if dest.exists():
        record = record_of(local, "imagenet-mini")
        assert record is not None and record["complete"] is True
        held = tree_state(dest)
        assert (held, record["source"]) in ((old_state, str(old)), (tree_state(new), str(new)))
    try:
        summary = staging.stage(new, local)
    except StageError as exc:
        assert "--replace" in str(exc)
    else:
        assert tree_state(summary.path) == tree_state(new)
    summary = staging.stage(new, local, replace=True)
    assert tree_state(summary.path) == tree_state(new)
    leftovers = {p.name for p in local.iterdir()} - {
        "imagenet-mini",
        ".imagenet-mini.lock",
        ".imagenet-mini.dltune-source.json",
    }
    assert leftovers == set()


# --- limits -------------------------------------------------------------------------------------------


def test_a_name_of_255_bytes_is_staged_resumed_and_replaced(tmp_path: Path) -> None:
    """Derived names (.<name>.partial, .lock, the records, per-file temporaries) would pass the
    255-byte limit: they are cut and carry a digest of the whole name instead."""
    long_name = "é" * 100 + "x" * (NAME_MAX - 200)
    assert len(long_name.encode()) == NAME_MAX
    src = tmp_path / "shared" / long_name
    src.mkdir(parents=True)
    (src / long_name).write_bytes(b"data")
    local = tmp_path / "local"
    local.mkdir()
    summary = staging.stage(src, local, verify=True, checksum=True)
    assert (summary.path / long_name).read_bytes() == b"data"
    assert all(len(os.fsencode(p.name)) <= NAME_MAX for p in local.iterdir())
    assert staging.stage(src, local).notes == ["already staged"]
    (src / long_name).write_bytes(b"changed")
    summary = staging.stage(src, local, replace=True)
    assert (summary.path / long_name).read_bytes() == b"changed"


def test_derived_names_of_distinct_long_names_stay_distinct_and_keep_their_suffix() -> None:
    a, b = "a" * 250 + "1", "a" * 250 + "2"
    for suffix in (".partial", ".lock", ".dltune-source.json"):
        da, db = derived_name(a, suffix), derived_name(b, suffix)
        assert da != db and da.endswith(suffix) and len(da.encode()) <= NAME_MAX


@pytest.fixture
def deep_tmp(tmp_path: Path) -> Iterator[Path]:
    """tmp_path, emptied on descriptors afterwards: pytest's own cleanup of old temporary
    directories (shutil.rmtree) recurses, and a tree thousands of levels deep would break it."""
    yield tmp_path
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(fd):
            remove_at(fd, name)
    finally:
        os.close(fd)


def deep_tree(top: Path, depth: int) -> Path:
    """A chain of `depth` one-letter directories, made relative to descriptors (paths that deep
    exceed PATH_MAX), with a file at the bottom."""
    top.mkdir(parents=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    os.close(os.open("bottom", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)
    return top


def deep_state(root: Path) -> list[tuple[str, int, int]]:
    """Every entry below `root` with its kind and size, walked on descriptors (pathlib recurses)."""
    found: list[tuple[str, int, int]] = []
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walk_below(
            fd,
            lambda _fd, rel, _name, st_: found.append((rel, st_.st_mode, st_.st_size)),
            lambda _fd, rel, _name: found.append((rel, 0, 0)),
        )
    finally:
        os.close(fd)
    return sorted(found)


def test_a_partial_copy_5000_levels_deep_is_cleared_by_replace_without_a_crash(deep_tmp: Path) -> None:
    """os.walk and shutil.rmtree recurse (RecursionError near 1,000 levels); the removal walks
    iteratively on descriptors."""
    src = make_dataset(deep_tmp / "shared", files=3)
    local = deep_tmp / "local"
    local.mkdir()
    staging.partial_record_path(local, src.name).write_text(json.dumps({"source": "/elsewhere"}))
    deep_tree(local / f".{src.name}.partial", 5000)
    summary = staging.stage(src, local, replace=True)
    assert tree_state(summary.path) == tree_state(src)


def test_remove_at_removes_any_depth_and_never_follows_a_link(deep_tmp: Path) -> None:
    victim = deep_tmp / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep")
    tree = deep_tree(deep_tmp / "tree", 3000)
    (tree / "d" / "link").symlink_to(victim)
    os.chmod(tree / "d", 0o500)
    fd = os.open(deep_tmp, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_at(fd, "tree")
    finally:
        os.close(fd)
    assert not tree.exists() and (victim / "keep").read_text() == "keep"


def test_bwlimit_must_be_finite(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=2)
    (tmp_path / "local").mkdir()
    for value in (float("nan"), float("inf"), -1.0, 1e12):
        with pytest.raises(StageError, match="--bwlimit"):
            staging.stage(src, tmp_path / "local", bwlimit=value)
    assert list((tmp_path / "local").iterdir()) == []


# --- tar headers ----------------------------------------------------------------------------------------


def tar_with(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return path


def test_out_of_range_header_values_and_a_link_to_a_missing_member_are_clean_errors(tmp_path: Path) -> None:
    (tmp_path / "local").mkdir()
    far = tarfile.TarInfo("far.bin")
    far.size = 1
    far.pax_headers = {"mtime": "1e30"}
    link = tarfile.TarInfo("hard")
    link.type, link.linkname = tarfile.LNKTYPE, "missing"
    for i, member in enumerate((far, link)):
        archive = tar_with(tmp_path / f"bad{i}.tar", member)
        with pytest.raises(StageError, match=f"bad{i}.tar"):
            staging.stage(archive, tmp_path / "local")
        assert not (tmp_path / "local" / f"bad{i}").exists()


# --- random trees: what a killed run or another user left in the partial copy --------------------------


@pytest.mark.fuzz
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=TREES, leftovers=TREES)
def test_a_resume_over_any_leftover_tree_with_planted_links_ends_identical_and_harms_nothing_outside(
    tmp_path_factory: pytest.TempPathFactory, source: list[Any], leftovers: list[Any]
) -> None:
    """The partial copy holds a random tree (odd names, modes, links to a victim's directory and to
    files outside, entries whose kind differs from the source's): the resume removes what the source
    lacks without following any link, and ends identical to the source."""
    work = tmp_path_factory.mktemp("resume")
    src = work / "src" / "ds"
    build_tree(src, source)
    victim = work / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    local = work / "local"
    partial = killed_partial(src, local)
    partial.rmdir()
    build_tree(partial, leftovers)
    for i, directory in enumerate(
        [partial, *[p for p in partial.rglob("*") if p.is_dir() and not p.is_symlink()]]
    ):
        with contextlib.suppress(OSError):
            (directory / f"planted{i}").symlink_to(victim)
    before = digest_tree(victim)
    summary = staging.stage(src, local, workers=2)
    assert tree_state(summary.path) == tree_state(src)
    assert digest_tree(victim) == before


@pytest.mark.skipif(not nobody_can_run_dltune(), reason="needs root, setpriv and a readable interpreter")
def test_as_an_ordinary_user_links_another_user_planted_in_shared_scratch_are_refused(open_tmp: Path) -> None:
    """A shared scratch directory (1777, as /tmp): another user (root here) plants `.ds.partial` and
    the lock as links to the ordinary user's own files. The user's stage is refused naming the link,
    and the files it pointed at are intact (the resume's stray removal once deleted them)."""
    src = make_dataset(open_tmp / "shared", files=5)
    chown_tree(open_tmp / "shared")
    scratch = open_tmp / "scratch"
    scratch.mkdir()
    scratch.chmod(0o1777)
    mine = open_tmp / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("precious")
    chown_tree(mine)
    for planted, target in ((f".{src.name}.partial", mine), (f".{src.name}.lock", mine / "results.csv")):
        link = scratch / planted
        link.unlink(missing_ok=True)  # the user's own lock, left by the previous refusal
        link.symlink_to(target)
        before = digest_tree(mine)
        done = as_nobody(str(src), "--to", str(scratch))
        assert done.returncode == 1 and "symbolic link" in done.stderr and planted in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert digest_tree(mine) == before
        link.unlink()
    done = as_nobody(str(src), "--to", str(scratch))
    assert done.returncode == 0, done.stderr
    assert tree_state(scratch / src.name) == tree_state(src)


def test_a_source_1500_levels_deep_is_staged_and_one_too_deep_for_paths_is_one_clean_line(
    deep_tmp: Path,
) -> None:
    src = deep_tree(deep_tmp / "shared" / "deep", 1500)
    (deep_tmp / "local").mkdir()
    summary = staging.stage(src, deep_tmp / "local")
    assert deep_state(summary.path) == deep_state(src)
    too_deep = deep_tree(deep_tmp / "shared" / "deeper", 5000)
    with pytest.raises(StageError, match=r"deeper.*File name too long"):
        staging.stage(too_deep, deep_tmp / "local")
    assert not (deep_tmp / "local" / "deeper").exists()


@pytest.mark.skipif(not nobody_can_run_dltune(), reason="needs root, setpriv and a readable interpreter")
def test_as_an_ordinary_user_a_source_below_an_unsearchable_directory_is_one_line(open_tmp: Path) -> None:
    src = make_dataset(open_tmp / "locked" / "shared", files=3)
    (open_tmp / "locked").chmod(0o700)
    local = open_tmp / "local"
    local.mkdir()
    chown_tree(local)
    done = as_nobody(str(src), "--to", str(local))
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    assert str(src) in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list(local.iterdir()) == []


def test_verify_checksum_of_an_already_staged_file_or_archive_reads_it_again(tmp_path: Path) -> None:
    """Corrupted at the same size after staging: `--verify --checksum` once said "verified" without
    reading anything for a single file or an archive; `--verify` alone still did for an archive."""
    (tmp_path / "local").mkdir()
    shard = tmp_path / "shared" / "shard.h5"
    shard.parent.mkdir()
    shard.write_bytes(b"a" * 1000)
    archive = tmp_path / "shared" / "packed.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("packed/data.bin")
        info.size = 1000
        tar.addfile(info, io.BytesIO(b"b" * 1000))
    for src, staged_file in ((shard, "shard.h5"), (archive, "packed/packed/data.bin")):
        staging.stage(src, tmp_path / "local")
        assert staging.stage(src, tmp_path / "local", verify=True, checksum=True).verified
        corrupted = tmp_path / "local" / staged_file
        corrupted.chmod(0o644)
        corrupted.write_bytes(b"X" * 1000)
        with pytest.raises(StageError, match="verification failed"):
            staging.stage(src, tmp_path / "local", verify=True, checksum=True)
        corrupted.write_bytes(b"X" * 999)  # a size check is enough to see this one
        with pytest.raises(StageError, match="verification failed"):
            staging.stage(src, tmp_path / "local", verify=True)
        assert not staging.stage(src, tmp_path / "local").verified  # not asked, not claimed


def test_the_cli_refuses_the_same_bwlimit_as_staging_itself() -> None:
    """The CLI declares --bwlimit's bound without importing staging (the audit never loads it): two
    homes of one number, held equal here."""
    from dltune.commands import stage as stage_command
    from dltune.staging import plan

    assert stage_command.MAX_BWLIMIT == plan.MAX_BWLIMIT
    assert stage_command.MIN_BWLIMIT == plan.MIN_BWLIMIT
