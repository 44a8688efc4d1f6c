"""`dltune stage`: copy a dataset (a directory or an archive) onto node-local scratch, fast, verified,
resumable and atomic.

- Into ``DIR/.<name>.partial``, renamed to ``DIR/<name>`` only when complete (and verified when asked):
  a path without the dot is always complete.
- Resumable: a rerun after a kill keeps the files already complete (same size and mtime; each file is
  written under a temporary name and renamed, so a half-written file never looks complete).
- One stager per destination: a second invocation for the same DIR/<name> waits on a lock.
- Preflight: free bytes and inodes at DIR (and RAM on a tmpfs) against what is still to copy; refuses
  before copying anything.
- Archives (tar, tar.gz/bz2/xz, tar.zst) are extracted with tarfile's ``data`` filter: no absolute
  paths, no ``..``, no links leaving the tree, no devices.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import tarfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dltune.probes.jobenv import fstype_at
from dltune.probes.mounts import parse_mountinfo

ARCHIVE_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tar.zstd", ".tgz", ".tar")
TMPFS_TYPES = ("tmpfs", "ramfs")
# Reserve kept free on the destination: another job on the node needs room too.
RESERVE_FRACTION = 0.02


class StageError(Exception):
    """Staging refused or failed; the message says why and what to do."""


@dataclass
class Entry:
    relative: str
    kind: str  # "file", "dir", "link"
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0o644
    target: str = ""


@dataclass
class Summary:
    path: Path
    files: int = 0
    bytes: int = 0
    skipped: int = 0
    seconds: float = 0.0
    verified: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Space:
    free_bytes: int
    free_inodes: int
    fstype: str
    mem_available: int | None = None


def staged_name(src: Path) -> str:
    name = src.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def is_archive(src: Path) -> bool:
    return src.is_file() and src.name.endswith(ARCHIVE_SUFFIXES)


def fstype_of(path: Path, mountinfo: str | None = None) -> str:
    """Filesystem type of the mount holding ``path`` (longest mount-point prefix in mountinfo)."""
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    return fstype_at(os.path.realpath(path), parse_mountinfo(text))


def space_at(path: Path) -> Space:
    st = os.statvfs(path)
    fstype = fstype_of(path)
    mem = None
    if fstype in TMPFS_TYPES:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                mem = int(line.split()[1]) * 1024
    return Space(st.f_bavail * st.f_frsize, st.f_favail, fstype, mem)


def scan_tree(src: Path) -> list[Entry]:
    entries: list[Entry] = []
    stack = [""]
    while stack:
        relative = stack.pop()
        with os.scandir(src / relative) as it:
            for item in sorted(it, key=lambda e: e.name):
                rel = f"{relative}/{item.name}" if relative else item.name
                st = item.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    entries.append(Entry(rel, "link", target=os.readlink(item.path)))
                elif stat.S_ISDIR(st.st_mode):
                    entries.append(Entry(rel, "dir", mode=stat.S_IMODE(st.st_mode)))
                    stack.append(rel)
                elif stat.S_ISREG(st.st_mode):
                    entries.append(Entry(rel, "file", st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode)))
                # sockets, fifos and devices are not dataset content: left out
    return entries


def _open_archive(src: Path) -> tarfile.TarFile:
    if src.name.endswith((".tar.zst", ".tar.zstd")):
        try:
            import zstandard
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise StageError(
                f"{src.name}: .tar.zst needs the zstandard package (pip install zstandard)"
            ) from exc
        stream: IO[bytes] = zstandard.ZstdDecompressor().stream_reader(src.open("rb"))
        return tarfile.open(fileobj=stream, mode="r|")
    return tarfile.open(src, mode="r|*")


def scan_archive(src: Path) -> list[Entry]:
    entries = []
    with _open_archive(src) as tar:
        for member in tar:
            kind = "file" if member.isfile() else "dir" if member.isdir() else "link"
            entries.append(
                Entry(_member_path(member), kind, member.size, int(member.mtime * 1e9), member.mode)
            )
    return entries


def _member_path(member: tarfile.TarInfo) -> str:
    """Where the data filter writes a member: relative, without the leading slashes of an absolute name."""
    return member.name.lstrip("/")


def _resume_target(partial: Path, member: tarfile.TarInfo) -> Path | None:
    """The already-extracted file a member would resume onto, or None when it would land outside."""
    target = partial / _member_path(member)
    root = os.path.realpath(partial)
    return target if os.path.realpath(target).startswith(root + os.sep) else None


def preflight(entries: list[Entry], done_bytes: int, done_files: int, space: Space, dest: Path) -> None:
    need_bytes = sum(e.size for e in entries if e.kind == "file") - done_bytes
    need_inodes = len(entries) - done_files
    reserve = int((space.free_bytes + max(need_bytes, 0)) * RESERVE_FRACTION)
    problems = []
    if need_bytes > space.free_bytes - reserve:
        problems.append(f"needs {need_bytes / 1e9:.2f} GB, {space.free_bytes / 1e9:.2f} GB free at {dest}")
    if space.free_inodes and need_inodes > space.free_inodes:
        problems.append(f"needs {need_inodes} inodes, {space.free_inodes} free")
    if space.mem_available is not None and need_bytes > space.mem_available:
        problems.append(
            f"{dest} is a {space.fstype}: its {need_bytes / 1e9:.2f} GB would come out of RAM "
            f"({space.mem_available / 1e9:.2f} GB available)"
        )
    if problems:
        raise StageError(
            "not enough room, nothing copied: "
            + "; ".join(problems)
            + ". Free space, or stage elsewhere (--to)."
        )


@contextlib.contextmanager
def destination_lock(directory: Path, name: str) -> Iterator[None]:
    """One stager per destination on this node: a second one waits here for the first."""
    with (directory / f".{name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _complete(path: Path, entry: Entry) -> bool:
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == entry.size and st.st_mtime_ns == entry.mtime_ns


# Files below this are read and written in one call each; larger ones stream in kernel space.
SMALL_FILE = 1 << 20
# Small files go to the workers in batches: one task per file costs more than copying it.
BATCH_FILES, BATCH_BYTES = 128, 64 << 20


def _copy_file(src: str, dst: str, entry: Entry) -> None:
    """Copy content, then mode and mtime. The mtime is set last: a copy cut short keeps a fresh mtime
    and so never passes for complete (size and mtime) when a rerun resumes."""
    source = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            if entry.size < SMALL_FILE:
                while chunk := os.read(source, SMALL_FILE):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(target, view) :]
            else:
                _stream(source, target)
            os.fchmod(target, entry.mode)
            os.utime(target, ns=(entry.mtime_ns, entry.mtime_ns))
        finally:
            os.close(target)
    finally:
        os.close(source)


def _stream(source: int, target: int) -> None:
    while True:
        try:
            # sendfile: page cache to page cache, no copy through Python, any pair of filesystems
            sent = os.sendfile(target, source, None, 64 << 20)
        except OSError:
            sent = -1
        if sent == 0:
            return
        if sent < 0:  # a filesystem without sendfile: copy through userspace from where it stopped
            with os.fdopen(source, "rb", closefd=False) as r, os.fdopen(target, "wb", closefd=False) as w:
                shutil.copyfileobj(r, w, 8 << 20)
            return


def _remove_strays(partial: Path, wanted: set[str]) -> None:
    """Files a killed run (or an older dltune's temporaries) left in the partial tree that the
    source does not have: a resumed stage must end identical to a clean one."""
    for directory, dirnames, filenames in os.walk(partial):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(directory, d))]:
            path = os.path.join(directory, name)
            if os.path.relpath(path, partial) not in wanted:
                os.unlink(path)


def _batches(todo: list[Entry]) -> list[list[Entry]]:
    batches: list[list[Entry]] = []
    current: list[Entry] = []
    size = 0
    for entry in todo:
        if entry.size >= SMALL_FILE:
            batches.append([entry])
            continue
        current.append(entry)
        size += entry.size
        if len(current) >= BATCH_FILES or size >= BATCH_BYTES:
            batches.append(current)
            current, size = [], 0
    if current:
        batches.append(current)
    return batches


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_tree(entries: list[Entry], src: Path | None, staged: Path, checksum: bool) -> None:
    bad = []
    for entry in entries:
        if entry.kind != "file":
            continue
        path = staged / entry.relative
        if (
            not path.is_file()
            or path.stat().st_size != entry.size
            or (checksum and src is not None and _sha256(src / entry.relative) != _sha256(path))
        ):
            bad.append(entry.relative)
    if bad:
        raise StageError(
            f"verification failed for {len(bad)} file(s), e.g. {bad[:3]}; the partial copy is kept"
        )


Progress = Callable[[int], None]


def _stage_tree(
    src: Path, partial: Path, entries: list[Entry], workers: int, advance: Progress, resume: bool
) -> tuple[int, int]:
    for entry in entries:
        if entry.kind == "dir":
            (partial / entry.relative).mkdir(parents=True, exist_ok=True)
    todo, skipped = [], 0
    for entry in entries:
        if entry.kind == "file":
            if resume and _complete(partial / entry.relative, entry):
                skipped += 1
                advance(entry.size)
            else:
                todo.append(entry)
        elif entry.kind == "link":
            link = partial / entry.relative
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(entry.target, link)

    def copy(batch: list[Entry]) -> int:
        size = 0
        for entry in batch:
            _copy_file(os.path.join(src, entry.relative), os.path.join(partial, entry.relative), entry)
            size += entry.size
        advance(size)
        return size

    if resume:
        _remove_strays(partial, {e.relative for e in entries})
    # Large files first: they dominate the tail of a parallel copy.
    todo.sort(key=lambda e: -e.size)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        copied = sum(pool.map(copy, _batches(todo)))
    for entry in entries:
        if entry.kind == "dir":
            os.chmod(partial / entry.relative, entry.mode | stat.S_IRWXU)
    return copied, skipped


def _stage_archive(src: Path, partial: Path, advance: Progress) -> tuple[int, int]:
    copied = skipped = 0
    with _open_archive(src) as tar:
        for member in tar:
            target = _resume_target(partial, member)
            entry = Entry(_member_path(member), "file", member.size, int(member.mtime * 1e9))
            if member.isfile() and target is not None and _complete(target, entry):
                skipped += 1
            else:
                try:
                    tar.extract(member, partial, filter="data")
                except tarfile.FilterError as exc:
                    raise StageError(
                        f"{src.name}: unsafe member refused ({exc}); nothing of it was written"
                    ) from exc
                copied += member.size if member.isfile() else 0
            advance(member.size if member.isfile() else 0)
    return copied, skipped


def stage(
    src: Path,
    to: Path,
    *,
    workers: int = 8,
    verify: bool = False,
    checksum: bool = False,
    progress: Callable[[int], Any] | None = None,
    space: Callable[[Path], Space] = space_at,
    on_total: Callable[[int], Any] | None = None,
) -> Summary:
    if not src.exists():
        raise StageError(f"{src} does not exist")
    if not to.is_dir():
        raise StageError(f"{to} is not a directory (--to, or $SLURM_TMPDIR inside a job)")
    name = staged_name(src)
    dest, partial = to / name, to / f".{name}.partial"
    start = time.monotonic()
    with destination_lock(to, name):
        archive = is_archive(src)
        entries = scan_archive(src) if archive else scan_tree(src)
        if dest.exists():
            summary = Summary(dest, notes=["already staged"])
            if verify:
                verify_tree(entries, None if archive else src, dest, checksum)
                summary.verified = True
            summary.seconds = time.monotonic() - start
            return summary
        fresh = not partial.exists()
        partial.mkdir(exist_ok=True)
        # A partial tree left by a killed run: its complete files are kept (a fresh one has none).
        done = (
            [] if fresh else [e for e in entries if e.kind == "file" and _complete(partial / e.relative, e)]
        )
        try:
            preflight(entries, sum(e.size for e in done), len(done), space(to), to)
        except StageError:
            if fresh:
                partial.rmdir()  # refused before copying: leave no trace
            raise
        if on_total:
            on_total(sum(e.size for e in entries if e.kind == "file"))
        advance = progress or (lambda _n: None)
        if archive:
            copied, skipped = _stage_archive(src, partial, advance)
        else:
            copied, skipped = _stage_tree(src, partial, entries, workers, advance, resume=not fresh)
        summary = Summary(dest, files=sum(e.kind == "file" for e in entries), bytes=copied, skipped=skipped)
        if verify:
            verify_tree(entries, None if archive else src, partial, checksum)
            summary.verified = True
        os.rename(partial, dest)
    summary.seconds = time.monotonic() - start
    return summary
