"""`dltune stage` on real local filesystems (tmp_path): copies, resumes, refuses, extracts safely.
The only seam is the free-space probe, replaced where a test needs a full disk."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from dltune import stage
from dltune.stage import Space, StageError


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


def test_directory_is_copied_whole_with_modes_mtimes_and_links(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared")
    (tmp_path / "local").mkdir()
    summary = stage.stage(src, tmp_path / "local", workers=4, verify=True, checksum=True)
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
    partial = local / ".imagenet-mini.partial"
    partial.mkdir()
    (partial / "class0").mkdir()
    done = src / "class0/img0000.bin"
    (partial / "class0/img0000.bin").write_bytes(done.read_bytes())
    os.utime(partial / "class0/img0000.bin", ns=(done.stat().st_mtime_ns, done.stat().st_mtime_ns))
    (partial / "class0/.img0007.bin.dltune-tmp").write_bytes(b"half")
    (partial / "class0/img0014.bin").write_bytes(b"truncated")
    assert not (local / "imagenet-mini").exists(), "a partial stage must not look complete"
    summary = stage.stage(src, local, workers=3)
    assert summary.skipped == 1
    assert tree_state(summary.path) == tree_state(src)
    assert not list(summary.path.rglob(".*.dltune-tmp"))


def test_already_staged_is_not_copied_again(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=20)
    (tmp_path / "local").mkdir()
    stage.stage(src, tmp_path / "local")
    again = stage.stage(src, tmp_path / "local", verify=True)
    assert again.bytes == 0 and again.notes == ["already staged"] and again.verified


def test_not_enough_space_refuses_before_copying_anything(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=20)
    (tmp_path / "local").mkdir()
    with pytest.raises(StageError, match="not enough room, nothing copied"):
        stage.stage(src, tmp_path / "local", space=lambda _p: Space(1_000_000, 10_000, "ext4"))
    with pytest.raises(StageError, match="would come out of RAM"):
        stage.stage(src, tmp_path / "local", space=lambda _p: Space(10**12, 10**9, "tmpfs", 1_000_000))
    assert not (tmp_path / "local/imagenet-mini").exists()
    assert not (tmp_path / "local/.imagenet-mini.partial").exists()


def test_second_stager_waits_for_the_first(tmp_path: Path) -> None:
    src = make_dataset(tmp_path / "shared", files=10)
    local = tmp_path / "local"
    local.mkdir()
    finished: list[float] = []
    with stage.destination_lock(local, "imagenet-mini"):
        worker = threading.Thread(target=lambda: finished.append(stage.stage(src, local).seconds))
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
    summary = stage.stage(archive, tmp_path / "local", verify=True)
    assert summary.path == tmp_path / "local/shards"
    assert len(list((summary.path / "shards").iterdir())) == 50
    assert stage.stage(archive, tmp_path / "local").notes == ["already staged"]


def test_zstd_archive_is_extracted_like_any_tar(tmp_path: Path) -> None:
    zstandard = pytest.importorskip("zstandard")
    plain = make_tar(tmp_path / "plain.tar.gz", {f"shards/s{i}.bin": os.urandom(500 + i) for i in range(20)})
    with tarfile.open(plain) as source, tarfile.open(tmp_path / "raw.tar", "w") as raw:
        for member in source:
            raw.addfile(member, source.extractfile(member))
    archive = tmp_path / "shards.tar.zst"
    archive.write_bytes(zstandard.ZstdCompressor().compress((tmp_path / "raw.tar").read_bytes()))
    (tmp_path / "local").mkdir()
    summary = stage.stage(archive, tmp_path / "local", verify=True)
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
        stage.stage(archive, tmp_path / "local")
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
    assert "files" in done.stderr and "MB/s" in done.stderr and "verified" in done.stderr
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
    summary = stage.stage(archive, tmp_path / "local")
    assert (summary.path / str(outside).lstrip("/")).read_bytes() == b"new"
    assert outside.read_bytes() == b"old"
    assert summary.skipped == 0
