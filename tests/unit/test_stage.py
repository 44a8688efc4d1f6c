"""`dltune stage` on real local filesystems (tmp_path): copies, resumes, refuses, extracts safely.
The only seam is the free-space probe, replaced where a test needs a full disk."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dltune import staging
from dltune.staging import Space, StageError


def make_dataset(root: Path, files: int = 300) -> Path:
    src = root / "imagenet-mini"
    for i in range(files):
        path = src / f"class{i % 7}" / f"img{i:04d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(512 + i))
        os.utime(path, ns=(1_600_000_000_000_000_000 + i, 1_600_000_000_000_000_000 + i))
    (src / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    (src / "labels.txt").write_text("cat\ndog\n")
    os.chmod(src / "labels.txt", 0o640)
    os.symlink("labels.txt", src / "labels-link.txt")
    return src


def tree_state(root: Path) -> dict[str, tuple[object, ...]]:
    state: dict[str, tuple[object, ...]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(root))
        if path.is_symlink():
            state[rel] = ("link", os.readlink(path))
        elif path.is_file():
            state[rel] = ("file", path.read_bytes(), st.st_mode & 0o7777, st.st_mtime_ns)
        else:
            state[rel] = ("dir",)
    return state


def killed_partial(src: Path, local: Path) -> Path:
    """What a run killed while copying leaves: the record of what its partial copy is of, and the
    partial directory (the caller fills it as the kill left it)."""
    local.mkdir(parents=True, exist_ok=True)
    identity = staging.describe_source(src, "dir", staging.scan_tree(src))
    staging.partial_record_path(local, src.name).write_text(json.dumps(identity))
    partial = local / f".{src.name}.partial"
    partial.mkdir()
    return partial


def test_directory_is_copied_whole_with_modes_mtimes_and_links(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared")
    (tmp_path / "local").mkdir()
    summary = staging.stage(src, tmp_path / "local", workers=4, verify=True, checksum=True)
    assert summary.path == tmp_path / "local/imagenet-mini" and summary.verified
    assert tree_state(summary.path) == tree_state(src)
    assert summary.files == 302 and summary.skipped == 0
    assert not (tmp_path / "local/.imagenet-mini.partial").exists()


def test_rerun_after_a_kill_resumes_and_ends_identical(tmp_path: Path) -> None:
    """A kill leaves a partial tree: complete files, a truncated file (fresh mtime), and a stray file
    the source does not have (an older version's temporary)."""
    src = make_dataset(tmp_path / "shared")
    local = tmp_path / "local"
    local.mkdir()
    partial = killed_partial(src, local)
    (partial / "class0").mkdir()
    done = src / "class0/img0000.bin"
    (partial / "class0/img0000.bin").write_bytes(done.read_bytes())
    os.utime(partial / "class0/img0000.bin", ns=(done.stat().st_mtime_ns, done.stat().st_mtime_ns))
    (partial / "class0/.img0007.bin.dltune-tmp").write_bytes(b"half")
    (partial / "class0/img0014.bin").write_bytes(b"truncated")
    assert not (local / "imagenet-mini").exists(), "a partial stage must not look complete"
    summary = staging.stage(src, local, workers=3)
    assert summary.skipped == 1
    assert tree_state(summary.path) == tree_state(src)
    assert not list(summary.path.rglob(".*.dltune-tmp"))


def test_already_staged_is_not_copied_again(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=20)
    (tmp_path / "local").mkdir()
    staging.stage(src, tmp_path / "local")
    again = staging.stage(src, tmp_path / "local", verify=True)
    assert again.bytes == 0 and again.notes == ["already staged"] and again.verified


def test_not_enough_space_refuses_before_copying_anything(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=20)
    (tmp_path / "local").mkdir()
    with pytest.raises(StageError, match="not enough room, nothing copied"):
        staging.stage(src, tmp_path / "local", space=lambda _p: Space(1_000_000, 10_000, "ext4"))
    with pytest.raises(StageError, match="would come out of RAM"):
        staging.stage(src, tmp_path / "local", space=lambda _p: Space(10**12, 10**9, "tmpfs", 1_000_000))
    assert not (tmp_path / "local/imagenet-mini").exists()
    assert not (tmp_path / "local/.imagenet-mini.partial").exists()
    # Refused before copying: nothing but the lock file is left (no source record either).
    assert [p.name for p in (tmp_path / "local").iterdir()] == [".imagenet-mini.lock"]


def test_second_stager_waits_for_the_first(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=10)
    local = tmp_path / "local"
    local.mkdir()
    finished: list[float] = []
    with staging.destination_lock(local, "imagenet-mini"):
        worker = threading.Thread(target=lambda: finished.append(staging.stage(src, local).seconds))
        worker.start()
        time.sleep(0.5)
        assert not finished and not (local / "imagenet-mini").exists()
    worker.join(timeout=30)
    assert finished and (local / "imagenet-mini").is_dir()


def make_tar(path: Path, members: dict[str, bytes], *, links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_600_000_000, 0o644
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


def test_archive_is_extracted_once_under_its_name(tmp_path: Path) -> None:
    archive = make_tar(
        tmp_path / "shards.tar.gz", {f"shards/s{i}.bin": os.urandom(1000 + i) for i in range(50)}
    )
    (tmp_path / "local").mkdir()
    summary = staging.stage(archive, tmp_path / "local", verify=True)
    assert summary.path == tmp_path / "local/shards"
    assert len(list((summary.path / "shards").iterdir())) == 50
    assert staging.stage(archive, tmp_path / "local").notes == ["already staged"]


def test_zstd_archive_is_extracted_like_any_tar(tmp_path: Path) -> None:
    zstandard = pytest.importorskip("zstandard")
    plain = make_tar(tmp_path / "plain.tar.gz", {f"shards/s{i}.bin": os.urandom(500 + i) for i in range(20)})
    with tarfile.open(plain) as source, tarfile.open(tmp_path / "raw.tar", "w") as raw:
        for member in source:
            raw.addfile(member, source.extractfile(member))
    archive = tmp_path / "shards.tar.zst"
    archive.write_bytes(zstandard.ZstdCompressor().compress((tmp_path / "raw.tar").read_bytes()))
    (tmp_path / "local").mkdir()
    summary = staging.stage(archive, tmp_path / "local", verify=True)
    assert summary.path == tmp_path / "local/shards" and summary.verified
    assert sorted(p.name for p in (summary.path / "shards").iterdir()) == sorted(
        f"s{i}.bin" for i in range(20)
    )


@pytest.mark.parametrize(
    ("members", "links"),
    [
        ({"../escape.txt": b"x"}, None),
        ({}, {"data/link": "/etc/passwd"}),
        ({}, {"data/up": "../../outside"}),
    ],
)
def test_unsafe_archive_members_are_refused(
    tmp_path: Path, members: dict[str, bytes], links: dict[str, str]
) -> None:
    archive = make_tar(tmp_path / "bad.tar.gz", {"data/ok.txt": b"fine", **members}, links=links)
    (tmp_path / "local").mkdir()
    with pytest.raises(StageError, match="unsafe member refused"):
        staging.stage(archive, tmp_path / "local")
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path / "local/bad").exists(), "a refused archive must not look staged"


def test_cli_prints_the_path_alone_on_stdout_and_plans(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=20)
    (tmp_path / "local").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "stage", str(src), "--to", str(tmp_path / "local"), "--verify"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path / 'local/imagenet-mini'}\n"
    assert re.search(
        r"staged .*: \d+ files \([\d.]+ [kMG]?B\) copied in [\d.]+s, [\d.]+ [kMG]?B/s; verified", done.stderr
    )
    again = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "stage", str(src), "--to", str(tmp_path / "local")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 0 and again.stdout == done.stdout
    assert "already staged from this source as it is now: nothing copied" in again.stderr
    assert "0 files" not in again.stderr and "0.0 MB" not in again.stderr
    plan = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "stage", str(src), "--plan"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert plan.returncode == 0 and "memory:" in plan.stdout
    refused = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "stage", str(src)],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "SLURM_TMPDIR"},
    )
    assert refused.returncode == 2 and "--to" in refused.stderr


def test_absolute_member_paths_land_inside_the_staged_tree(tmp_path: Path) -> None:
    """The data filter strips the leading / of a member: it is written under DIR/<name>, never at its
    absolute path, and a file already at that absolute path (same size and mtime) is not taken for a
    resumed copy."""
    outside = tmp_path / "outside" / "evil.txt"
    archive = make_tar(tmp_path / "abs.tar.gz", {str(outside): b"new"})
    outside.parent.mkdir()
    outside.write_bytes(b"old")
    os.utime(outside, (1_600_000_000, 1_600_000_000))
    (tmp_path / "local").mkdir()
    summary = staging.stage(archive, tmp_path / "local")
    assert (summary.path / str(outside).lstrip("/")).read_bytes() == b"new"
    assert outside.read_bytes() == b"old"
    assert summary.skipped == 0


# --- bad input: a clear error, the contract's exit code, nothing taken as complete ---------------


def corrupt_middle(archive: Path) -> None:
    data = bytearray(archive.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    archive.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["corrupt-middle", "truncated", "garbage"])
def test_a_damaged_archive_is_never_staged_or_verified(tmp_path: Path, damage: str) -> None:
    """A tar.gz with a corrupted middle was staged and reported "verified" (rc 0) although gzip -t
    saw a CRC error; truncated and garbage archives ended in tracebacks."""
    archive = make_tar(
        tmp_path / "shards.tar.gz", {f"shards/s{i}.bin": os.urandom(20_000) for i in range(40)}
    )
    if damage == "corrupt-middle":
        corrupt_middle(archive)
    elif damage == "truncated":
        archive.write_bytes(archive.read_bytes()[: archive.stat().st_size * 2 // 3])
    else:
        archive.write_bytes(os.urandom(50_000))
    local = tmp_path / "local"
    local.mkdir()
    with pytest.raises(StageError, match=r"not a complete, readable archive|truncated|unsafe"):
        staging.stage(archive, local, verify=True, checksum=True)
    assert not (local / "shards").exists()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dltune.cli",
            "stage",
            str(archive),
            "--to",
            str(local),
            "--verify",
            "--checksum",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""


def test_checksum_of_an_archive_digests_members_once_and_rereads_only_the_staged_copy(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "shards.tar.gz", {f"shards/s{i}.bin": os.urandom(3000) for i in range(10)})
    local = tmp_path / "local"
    local.mkdir()
    summary = staging.stage(archive, local, verify=True, checksum=True)
    assert summary.verified and len(list((summary.path / "shards").iterdir())) == 10


def test_a_file_that_changes_while_copied_is_never_stamped_complete(tmp_path: Path) -> None:
    """A file written to during its copy was staged at an intermediate size with its old mtime, rc 0."""
    src = tmp_path / "shared" / "growing"
    src.mkdir(parents=True)
    log = src / "train.log"
    log.write_bytes(os.urandom(64 << 20))
    stop = threading.Event()

    def append() -> None:
        with log.open("ab") as handle:
            while not stop.is_set():
                handle.write(b"x")
                handle.flush()
                time.sleep(0.0005)

    writer = threading.Thread(target=append)
    writer.start()
    try:
        local = tmp_path / "local"
        local.mkdir()
        with pytest.raises(StageError, match="changed while it was copied"):
            staging.stage(src, local)
    finally:
        stop.set()
        writer.join()
    assert not (local / "growing").exists()
    partial = local / ".growing.partial"
    assert not (partial / "train.log").exists() and not list(partial.rglob("*.dltune-tmp"))


def test_a_same_name_stage_from_another_source_is_refused_unless_replaced(tmp_path: Path) -> None:
    """Staging other/ds into a DIR holding ds from elsewhere returned rc 0 and the other dataset's path."""
    first = make_dataset(tmp_path / "a", files=5)
    second = make_dataset(tmp_path / "b", files=9)
    local = tmp_path / "local"
    local.mkdir()
    staging.stage(first, local)
    with pytest.raises(StageError, match=r"holds .*/a/imagenet-mini, not .*/b/imagenet-mini.*--replace"):
        staging.stage(second, local)
    assert tree_state(local / "imagenet-mini") == tree_state(first)
    replaced = staging.stage(second, local, replace=True)
    assert tree_state(replaced.path) == tree_state(second)
    record = json.loads((local / ".imagenet-mini.dltune-source.json").read_text())
    assert record["source"] == str(second.resolve()) and record["complete"] is True
    assert not (replaced.path / ".imagenet-mini.dltune-source.json").exists()  # never inside the data
    # The same source, changed since it was staged: refused too, until --replace.
    (second / "class0" / "new.bin").write_bytes(b"new sample")
    with pytest.raises(StageError, match="changed since"):
        staging.stage(second, local)
    assert (staging.stage(second, local, replace=True).path / "class0" / "new.bin").exists()


def test_preflight_counts_allocated_blocks_not_apparent_sizes(tmp_path: Path) -> None:
    """8,000 files of 200 bytes are 1.6 MB apparent but 32.8 MB in 4 KiB blocks: a 20 MB tmpfs passed
    the old preflight and then filled up."""
    src = tmp_path / "shared" / "tiny"
    src.mkdir(parents=True)
    for i in range(8000):
        (src / f"{i:05d}.txt").write_bytes(b"x" * 200)
    local = tmp_path / "local"
    local.mkdir()
    with pytest.raises(StageError, match=r"not enough room, nothing copied.*4096-byte blocks"):
        staging.stage(src, local, space=lambda _p: Space(20_000_000, 10**6, "tmpfs", 10**10, block_size=4096))
    assert not (local / ".tiny.partial").exists() and not (local / "tiny").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")
def test_a_destination_that_fills_up_is_a_clean_error_and_resumes(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=10)
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        with pytest.raises(StageError, match=r"filled up while copying.*rerun the same command to resume"):
            # The preflight is told there is room: the real tmpfs then runs out mid-copy.
            staging.stage(src, small, space=lambda _p: Space(10**10, 10**6, "ext4"))
        assert not (small / "imagenet-mini").exists()
        assert not list(small.rglob("*.dltune-tmp"))
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_a_single_file_is_staged_with_the_same_guarantees_and_a_zip_is_refused(tmp_path: Path) -> None:
    shard = tmp_path / "shared" / "train.h5"
    shard.parent.mkdir()
    shard.write_bytes(os.urandom(2 << 20))
    local = tmp_path / "local"
    local.mkdir()
    summary = staging.stage(shard, local, verify=True, checksum=True)
    assert summary.path == local / "train.h5" and summary.verified
    assert (local / "train.h5").read_bytes() == shard.read_bytes()
    assert (local / "train.h5").stat().st_mtime_ns == shard.stat().st_mtime_ns
    assert staging.stage(shard, local).notes == ["already staged"]
    import zipfile

    zipped = tmp_path / "shared" / "images.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("a/b.jpg", b"jpeg")
    done = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "stage", str(zipped), "--to", str(local)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (
        done.returncode == 1
        and "zip archives are not staged" in done.stderr
        and "Traceback" not in done.stderr
    )


def test_a_resume_replaces_files_instead_of_rewriting_them(tmp_path: Path) -> None:
    """A staged copy that is read-only (0444, as many datasets are) could not be reopened for writing by
    a non-root resume: files are written under a temporary name and renamed over the old one."""
    src = make_dataset(tmp_path / "shared", files=4)
    os.chmod(src / "labels.txt", 0o444)
    local = tmp_path / "local"
    partial = killed_partial(src, local)
    stale = partial / "labels.txt"
    stale.write_text("half")
    os.chmod(stale, 0o444)
    inode_before = stale.stat().st_ino
    summary = staging.stage(src, local)
    staged = summary.path / "labels.txt"
    assert staged.read_text() == "cat\ndog\n" and staged.stat().st_mode & 0o777 == 0o444
    assert staged.stat().st_ino != inode_before


def _has_staged_file(partial: Path) -> bool:
    """Stops at the first complete file: listing a directory of thousands on every poll is slow enough
    to miss the whole copy."""
    try:
        with os.scandir(partial) as entries:
            return any(entry.name.endswith(".bin") for entry in entries)
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_stage_says_so_exits_130_and_resumes(tmp_path: Path, signum: int) -> None:
    """Ctrl-C printed an empty line; SIGTERM (scancel, a job's time limit) was not handled at all;
    then an interrupt waited for the running batch to finish (at --bwlimit's rate: past Slurm's
    KillWait). --bwlimit makes the copy slow for certain (10 MB at 1 MB/s, one batch of 100 files)
    without writing thousands of files; the interrupt must stop it well before the batch is done."""
    src = tmp_path / "shared" / "many"
    src.mkdir(parents=True)
    for i in range(100):
        (src / f"{i:05d}.bin").write_bytes(os.urandom(100_000))
    local = tmp_path / "local"
    local.mkdir()
    argv = [sys.executable, "-m", "dltune.cli", "stage", str(src), "--to", str(local), "--workers", "1"]
    # A shell starts background jobs with SIGINT ignored, and Python keeps an inherited SIG_IGN: the
    # child gets the default disposition, as a foreground command would.
    child = subprocess.Popen(
        [*argv, "--bwlimit", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not _has_staged_file(local / ".many.partial") and time.monotonic() < deadline:
        assert child.poll() is None, "the stage ended before a file was seen in the partial tree"
        time.sleep(0.005)
    child.send_signal(signum)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130, (child.returncode, err)
    assert "interrupted" in err and "run the same command again to resume" in err and "Traceback" not in err
    assert out == "" and not (local / "many").exists()
    copied = sum(1 for entry in os.scandir(local / ".many.partial") if entry.name.endswith(".bin"))
    assert copied < 50, f"the interrupt waited for the batch: {copied} of 100 files were copied"
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert tree_state(local / "many") == tree_state(src)


NOBODY = 65534


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    """dltune stage as an ordinary user (tests run as root, for whom permission bits do not apply)."""
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            sys.executable,
            "-m",
            "dltune.cli",
            "stage",
            *argv,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def nobody_can_run_dltune() -> bool:
    """Whether an ordinary user can start this interpreter and import dltune (a checkout under a 0700
    directory, as a CI's fresh clone in mkdtemp may be, cannot)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return False
    probe = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            sys.executable,
            "-c",
            "import dltune.cli",
        ],
        capture_output=True,
        check=False,
        timeout=60,
    )
    return probe.returncode == 0


AS_NOBODY = pytest.mark.skipif(
    not nobody_can_run_dltune(),
    reason="needs root, setpriv, and this checkout's interpreter readable by an ordinary user",
)


def chown_tree(path: Path) -> None:
    for item in [path, *path.rglob("*")]:
        os.lchown(item, NOBODY, NOBODY)


@AS_NOBODY
def test_as_an_ordinary_user_unreadable_sources_and_unwritable_destinations_are_named(open_tmp: Path) -> None:
    src = make_dataset(open_tmp / "shared", files=6)
    chown_tree(open_tmp / "shared")
    local = open_tmp / "local"
    local.mkdir()
    chown_tree(local)
    (src / "class1").chmod(0o000)
    done = as_nobody(str(src), "--to", str(local))
    assert done.returncode == 1 and "class1: cannot read the directory" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (local / "imagenet-mini").exists()
    (src / "class1").chmod(0o755)
    (src / "big.bin").chmod(0o000)
    done = as_nobody(str(src), "--to", str(local))
    assert done.returncode == 1 and "big.bin: cannot read it" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (local / "imagenet-mini").exists()
    (src / "big.bin").chmod(0o644)
    root_owned = open_tmp / "root-owned"
    root_owned.mkdir(mode=0o755)
    done = as_nobody(str(src), "--to", str(root_owned))
    assert done.returncode == 1 and "is not writable by this user" in done.stderr, done.stderr


@AS_NOBODY
def test_as_an_ordinary_user_a_read_only_partial_file_does_not_block_the_resume(open_tmp: Path) -> None:
    """A non-root resume that had to redo a 0444 file failed forever (opened for writing in place)."""
    src = make_dataset(open_tmp / "shared", files=4)
    os.chmod(src / "labels.txt", 0o444)
    local = open_tmp / "local"
    partial = killed_partial(src, local)
    (partial / "labels.txt").write_text("half")
    os.chmod(partial / "labels.txt", 0o444)
    chown_tree(open_tmp)
    done = as_nobody(str(src), "--to", str(local))
    assert done.returncode == 0, done.stderr
    assert tree_state(local / "imagenet-mini") == tree_state(src)


# Names as users make them: spaces, newlines, backslashes, markup, leading dashes and dots, Unicode,
# and bytes that are not UTF-8 (as os.fsdecode gives them).
ODD_NAMES = (
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
        min_size=1,
        max_size=10,
    )
    | st.binary(min_size=1, max_size=8).map(os.fsdecode)
).filter(lambda n: "/" not in n and "\x00" not in n and n not in (".", "..") and len(os.fsencode(n)) < 200)
TREES = st.lists(
    st.tuples(
        st.lists(ODD_NAMES, min_size=1, max_size=3),
        st.sampled_from(["file", "file", "link"]),
        st.sampled_from([0o000, 0o400, 0o444, 0o600, 0o644, 0o755]),
        st.binary(max_size=300),
        st.sampled_from(["sibling", "../up", "/etc/hostname", "dangling"]),
    ),
    min_size=1,
    max_size=12,
)


def build_tree(root: Path, spec: list[tuple[list[str], str, int, bytes, str]]) -> None:
    root.mkdir(parents=True)
    for parts, kind, mode, data, target in spec:
        path = root.joinpath(*parts)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists() or path.is_symlink():
                continue
            if kind == "file":
                path.write_bytes(data)
                path.chmod(mode)
            else:
                os.symlink(parts[-1] + "x" if target == "sibling" else target, path)
        except (FileExistsError, NotADirectoryError):
            continue  # a name already used as a file, or a link, by an earlier entry


@pytest.mark.fuzz
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(spec=TREES)
def test_any_tree_of_odd_names_modes_and_links_stages_identical(tmp_path: Path, spec: list[Any]) -> None:
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    src = work / "src" / "ds"
    build_tree(src, spec)
    local = work / "local"
    local.mkdir()
    summary = staging.stage(src, local, workers=3, verify=True, checksum=True)
    assert summary.verified and tree_state(summary.path) == tree_state(src)
    assert not list(local.rglob("*.dltune-tmp"))


def test_archive_members_keep_the_data_filters_mode_and_their_mtime(tmp_path: Path) -> None:
    archive = tmp_path / "modes.tar"
    with tarfile.open(archive, "w") as tar:
        for name, mode in (("ds/setuid", 0o4755), ("ds/readonly", 0o444), ("ds/shared", 0o666)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = 3, 1_600_000_000, mode
            tar.addfile(info, io.BytesIO(b"abc"))
    local = tmp_path / "local"
    local.mkdir()
    staged = staging.stage(archive, local, verify=True).path / "ds"
    modes = {p.name: p.stat().st_mode & 0o7777 for p in staged.iterdir()}
    assert modes == {"setuid": 0o755, "readonly": 0o644, "shared": 0o644}
    assert all(p.stat().st_mtime_ns == 1_600_000_000 * 10**9 for p in staged.iterdir())


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Any]:
    """Mount a kernel filesystem (tmpfs, ramfs) under tmp_path for one test (root: CI runs as root)."""
    mounts: list[Path] = []

    def mount(fstype: str, options: str = "") -> Path:
        where = tmp_path / f"{fstype}-{len(mounts)}"
        where.mkdir()
        subprocess.run(
            ["mount", "-t", fstype, *(["-o", options] if options else []), fstype, str(where)], check=True
        )
        mounts.append(where)
        return where

    yield mount
    for where in mounts:
        subprocess.run(["umount", str(where)], check=False)


def test_large_files_are_copied_in_direct_chunks_identical_onto_any_destination(
    tmp_path: Path, mounted: Any
) -> None:
    """Files from LARGE_FILE up go in parallel O_DIRECT chunks, the last one padded and cut back;
    ramfs has no direct I/O at all (the buffered fallback), tmpfs has it on recent kernels."""
    src = tmp_path / "shared" / "shards"
    src.mkdir(parents=True)
    for name, size in (
        ("exact", staging.LARGE_FILE),
        ("tail", staging.LARGE_FILE + 123),
        ("odd", 5 * staging.CHUNK - 1),
    ):
        (src / name).write_bytes(os.urandom(size))
    os.chmod(src / "odd", 0o600)
    ext4 = tmp_path / "local"
    ext4.mkdir()
    ramfs = mounted("ramfs")

    def room(path: Path) -> Space:  # ramfs reports no size at all
        return Space(10**10, 10**6, "ramfs") if path == ramfs else staging.space_at(path)

    for destination in (ext4, mounted("tmpfs", "size=200m"), ramfs):
        summary = staging.stage(src, destination, verify=True, checksum=True, space=room)
        assert tree_state(summary.path) == tree_state(src), destination
        assert not list(destination.rglob("*.dltune-tmp"))


def test_a_large_file_that_fills_the_destination_is_a_clean_error(tmp_path: Path, mounted: Any) -> None:
    src = tmp_path / "shared" / "shards"
    src.mkdir(parents=True)
    (src / "big").write_bytes(os.urandom(staging.LARGE_FILE + staging.CHUNK))
    small = mounted("tmpfs", "size=16m")
    with pytest.raises(StageError, match=r"filled up while copying.*rerun the same command to resume"):
        staging.stage(src, small, space=lambda _p: Space(10**10, 10**6, "ext4"))
    assert not (small / "shards").exists() and not list(small.rglob("*.dltune-tmp"))


def test_only_the_exact_mark_makes_a_record_say_its_dataset_is_whole(tmp_path: Path) -> None:
    """The record's `complete` is true only as JSON true: a record that says "yes", 1 or nothing
    names a partial copy's source (as an older dltune wrote it), never a staged dataset."""
    from dltune.staging.record import completed, identity_of, says_complete

    identity = {"source": "/shared/ds", "kind": "dir", "files": 3, "bytes": 10, "newest_mtime_ns": 1}
    assert says_complete(completed(identity)) and identity_of(completed(identity)) == identity
    for mark in ("yes", 1, None, False):
        assert not says_complete({**identity, "complete": mark})
    assert not says_complete(identity) and not says_complete(None)
    # Staged with a record whose mark is not JSON true: not taken as staged, refused as unknown.
    src = make_dataset(tmp_path / "shared", files=3)
    local = tmp_path / "local"
    local.mkdir()
    staging.stage(src, local)
    record = staging.record_path(local, src.name)
    record.write_text(json.dumps({**json.loads(record.read_text()), "complete": 1}))
    with pytest.raises(StageError, match="was not staged by dltune"):
        staging.stage(src, local)
