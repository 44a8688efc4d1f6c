"""`dltune stage`: copy a dataset (a directory, a tar archive, or a single file such as an HDF5 file,
an LMDB or a WebDataset shard) onto node-local scratch, fast, verified, resumable and atomic.

- Into ``DIR/.<name>.partial``, renamed to ``DIR/<name>`` only when complete (and verified when asked):
  a path without the dot is always complete.
- A file is complete only when its size and mtime equal the source's, and its mtime is set last. In
  a partial tree this run created, files are written under their own names; on a resume, each is
  written under a temporary name (``.<file>.dltune-tmp``) and renamed over its final name, so a
  staged file's permissions (0444) never block it.
- Resumable: a rerun after a kill keeps the files already complete (same size and mtime).
- Fast: parallel streams (LOCAL_WORKERS from a local disk, NETWORK_WORKERS from anything else, where
  each open and stat is a round trip), small files in the source's inode order, large files in
  direct-I/O chunks several at a time; ``bwlimit`` (MB/s) caps what the process reads.
- A source file that changes while it is copied (size or mtime before and after) is copied again, and
  after three tries refused; it is never stamped complete.
- A record beside the dataset, ``DIR/.<name>.dltune-source.json`` (never inside it, where a data
  loader would see it), says what was staged: source path, kind, files, bytes, newest mtime. A
  same-name stage from another source, or from a source that changed since, is refused unless
  ``replace=True`` (``--replace``).
- One stager per destination: a second invocation for the same DIR/<name> waits on a lock.
- Preflight: the blocks the files will allocate (sizes rounded up to the destination's block size,
  one block per directory), inodes, and RAM on a tmpfs, against what is still to copy; refuses before
  copying anything. An ENOSPC during the copy is a clean error that keeps the partial tree.
- Archives (tar, tar.gz/bz2/xz, tar.zst) are read once, extracted with tarfile's ``data`` filter (no
  absolute paths, no ``..``, no links leaving the tree, no devices) and verified during that read: the
  stream is read to its end, so the compressor's own check (gzip/bzip2 CRC, xz check, zstd checksum)
  runs, and a truncated or corrupt archive is an error. ``checksum`` digests each member as it is
  extracted and then re-reads the staged files (local) against those digests.
- Zip archives are refused with a message: extract them into a directory, or repack as tar.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import decimal
import errno
import fcntl
import gzip
import hashlib
import json
import lzma
import math
import mmap
import os
import stat
import tarfile
import threading
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dltune.compat import UnsupportedPython, require_tar_data_filter
from dltune.dirfd import (
    UnsafeEntry,
    derived_name,
    expect_own,
    fd_path,
    lstat_at,
    open_own_dir,
    open_own_file,
    opened_dir,
    read_own_file,
    remove_at,
    walk_below,
    write_file_atomically,
)
from dltune.probes.storage import Space, fstype_of, space_at

ARCHIVE_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tar.zstd", ".tgz", ".tar")
# Reserve kept free on the destination: another job on the node needs room too.
RESERVE_FRACTION = 0.02
COPY_TRIES = 3
# What a corrupt or truncated compressed stream raises, by decompressor.
CORRUPT = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile, OSError, ValueError)


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
    inode: int = field(default=0, compare=False)  # the source's: small files are read in this order


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


class Halted(Exception):
    """The stage was told to stop (Ctrl-C, SIGTERM): a copy thread leaves at its next read."""


class Throttle:
    """--bwlimit: at most `mb_per_s` MB/s read by this process, over every copy thread together, so a
    stage leaves the shared storage room for the rest of the cluster. A thread that read ahead of
    the rate sleeps until the rate catches up; a rate of 0 (or None) never sleeps.

    Every read of a copy passes here, so this is also where the copy threads stop: after `halt()`,
    a sleeping thread wakes and each raises Halted at its next read. Without that, an interrupt
    waited for every running batch (up to BATCH_BYTES each, at the --bwlimit rate: minutes, past
    Slurm's KillWait, so the job's stage was killed without a word)."""

    def __init__(
        self,
        mb_per_s: float | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.rate = (mb_per_s or 0) * 1e6
        self._halted = threading.Event()
        self.clock, self.sleep = clock, sleep or self._sleep_unless_halted
        self._lock = threading.Lock()
        self._free_at = 0.0

    def halt(self) -> None:
        self._halted.set()

    def _sleep_unless_halted(self, seconds: float) -> None:
        if self._halted.wait(seconds):
            raise Halted

    @property
    def chunk(self) -> int:
        """The most bytes one read should ask for: a tenth of a second's worth when limited."""
        return max(1 << 20, int(self.rate / 10)) if self.rate else 64 << 20

    def __call__(self, nbytes: int) -> None:
        if self._halted.is_set():
            raise Halted
        if not self.rate or nbytes <= 0:
            return
        with self._lock:
            now = self.clock()
            self._free_at = max(self._free_at, now) + nbytes / self.rate
            wait = self._free_at - now
        if wait > 0:
            self.sleep(wait)


UNLIMITED = Throttle(None)


def staged_name(src: Path) -> str:
    name = src.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def is_archive(src: Path) -> bool:
    return src.is_file() and src.name.endswith(ARCHIVE_SUFFIXES)


# Local block filesystems answer a stat or an open in microseconds: more threads than LOCAL_WORKERS
# only contend for Python's interpreter lock (and a scan is fastest alone). Anything else (NFS,
# Lustre, GPFS, BeeGFS, CephFS, FUSE...) answers in about a network round trip, which
# NETWORK_WORKERS requests in flight hide (benchmarks/stage.py measures both).
LOCAL_FSTYPES = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "bcachefs", "jfs", "tmpfs", "ramfs", "overlay"}
)
LOCAL_WORKERS, NETWORK_WORKERS = 4, 16


def is_local(path: Path) -> bool:
    try:
        return fstype_of(path) in LOCAL_FSTYPES
    except (OSError, ValueError):
        return False


def default_workers(src: Path, local: bool | None = None) -> int:
    """Parallel streams for a source where --workers is not given (`local`: is_local(src), when
    the caller knows it already)."""
    return LOCAL_WORKERS if (is_local(src) if local is None else local) else NETWORK_WORKERS


# Stats go to the workers in chunks: on a network filesystem each one is a round trip (~1 ms).
STAT_CHUNK = 64


def _list(src: Path, relative: str) -> list[str]:
    try:
        with os.scandir(src / relative) as it:
            return sorted(item.name for item in it)
    except OSError as exc:
        raise StageError(
            f"{src / relative}: cannot read the directory ({exc.strerror}); nothing was copied"
        ) from exc


def _entries_of(src: Path, relatives: list[str]) -> list[Entry | None]:
    entries: list[Entry | None] = []
    for rel in relatives:
        path = os.path.join(src, rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError as exc:
            raise StageError(
                f"{path} disappeared while the source was read: stage it when nothing writes to it"
            ) from exc
        if stat.S_ISLNK(st.st_mode):
            entries.append(Entry(rel, "link", target=os.readlink(path)))
        elif stat.S_ISDIR(st.st_mode):
            entries.append(Entry(rel, "dir", mode=stat.S_IMODE(st.st_mode)))
        elif stat.S_ISREG(st.st_mode):
            entries.append(
                Entry(rel, "file", st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), inode=st.st_ino)
            )
        else:
            entries.append(None)  # sockets, fifos and devices are not dataset content: left out
    return entries


def scan_tree(src: Path, workers: int = 16) -> list[Entry]:
    """Every directory, file and link under `src`, sorted by path. Directories are listed and their
    entries stat'ed by `workers` threads at once: on NFS each stat is a round trip, and a dataset of
    30,000 files read one stat at a time spends half a minute here before copying anything."""
    entries: list[Entry] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        level = [""]
        while level:
            names = pool.map(lambda rel: (rel, _list(src, rel)), level)
            relatives = [f"{rel}/{n}" if rel else n for rel, listing in names for n in listing]
            chunks = [relatives[i : i + STAT_CHUNK] for i in range(0, len(relatives), STAT_CHUNK)]
            found = [e for chunk in pool.map(lambda c: _entries_of(src, c), chunks) for e in chunk if e]
            entries.extend(found)
            level = [e.relative for e in found if e.kind == "dir"]
    entries.sort(key=lambda e: e.relative)
    return entries


class _ThrottledReader:
    """The archive's file as read from its filesystem, its bytes counted by --bwlimit's throttle."""

    def __init__(self, path: Path, throttle: Throttle) -> None:
        self._file = path.open("rb")
        self._throttle = throttle

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size)
        self._throttle(len(data))
        return data

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> _ThrottledReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decompressed(src: Path, raw: Any) -> Any:
    """The archive's tar stream read from `raw`, decompressed by a reader whose own check (CRC, xz
    check, zstd checksum) runs when it is read to its end. Closing it leaves `raw` open."""
    name = src.name
    if name.endswith((".tar.zst", ".tar.zstd")):
        try:
            import zstandard
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise StageError(
                f"{src.name}: .tar.zst needs the zstandard package (pip install zstandard)"
            ) from exc
        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)
    if name.endswith((".tar.gz", ".tgz")):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if name.endswith(".tar.bz2"):
        return bz2.BZ2File(raw, "rb")
    if name.endswith(".tar.xz"):
        return lzma.LZMAFile(raw, "rb")
    return raw


def _mtime_ns(member: tarfile.TarInfo) -> int:
    """A member's mtime to the nanosecond: a pax archive (GNU tar --format=posix, dltune's broadcast
    pack) records it exactly as text, which tarfile's float `mtime` rounds. A value a timestamp
    cannot hold (64-bit nanoseconds) is a corrupt header: ValueError."""
    text = member.pax_headers.get("mtime", "")
    try:
        value = int(decimal.Decimal(text).scaleb(9)) if text else int(member.mtime * 10**9)
    except (decimal.InvalidOperation, ValueError, OverflowError):
        value = MTIME_LIMIT_NS
    if not -MTIME_LIMIT_NS < value < MTIME_LIMIT_NS:
        raise ValueError(f"member {member.name!r}: mtime {text or member.mtime!r} is out of range")
    return value


MTIME_LIMIT_NS = 1 << 63


def _member_path(member: tarfile.TarInfo) -> str:
    """Where the data filter writes a member: relative, without the leading slashes of an absolute name."""
    return member.name.lstrip("/")


def _resume_target(partial: Path, member: tarfile.TarInfo) -> Path | None:
    """The already-extracted file a member would resume onto, or None when it would land outside."""
    target = partial / _member_path(member)
    root = os.path.realpath(partial)
    return target if os.path.realpath(target).startswith(root + os.sep) else None


def allocated(size: int, block: int) -> int:
    """The bytes a file of `size` takes on a filesystem of `block`-byte blocks."""
    return -(-size // block) * block


def preflight(entries: list[Entry], done_bytes: int, done_files: int, space: Space, dest: Path) -> None:
    block = max(space.block_size, 1)
    need_bytes = (
        sum(allocated(e.size, block) for e in entries if e.kind == "file")
        + block * sum(e.kind == "dir" for e in entries)
        - done_bytes
    )
    need_inodes = len(entries) - done_files
    reserve = int((space.free_bytes + max(need_bytes, 0)) * RESERVE_FRACTION)
    problems = []
    if need_bytes > space.free_bytes - reserve:
        problems.append(
            f"needs {need_bytes / 1e9:.2f} GB in {block}-byte blocks, "
            f"{space.free_bytes / 1e9:.2f} GB free at {dest}"
        )
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


class _Changed(Exception):
    """The source file changed while it was copied."""


def _temporary(dst: str) -> str:
    head, tail = os.path.split(dst)
    return os.path.join(head, derived_name(tail, ".dltune-tmp"))


def _filled_up(exc: OSError, dst: str) -> StageError:
    return StageError(
        f"the destination filled up while copying {dst} ({exc.strerror}); the partial copy is kept: "
        "free space and rerun the same command to resume, or stage elsewhere (--to)"
    )


@contextlib.contextmanager
def _replacement(dst: str, fresh: bool = False) -> Iterator[int]:
    """A temporary sibling of `dst` open for writing, renamed over `dst` when the block completes
    (files are replaced, never rewritten in place) and removed when it does not; a full disk becomes
    a clean StageError. `fresh`: `dst` is new in a partial tree this run created, so it is written
    under its own name (created exclusively), which saves a rename per file: until its mtime is set,
    last, it does not pass for complete."""
    temporary = dst if fresh else _temporary(dst)
    try:
        if not fresh:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        target = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
        )
        try:
            yield target
        finally:
            os.close(target)
        if not fresh:
            os.replace(temporary, dst)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _filled_up(exc, dst) from exc
        raise


def _write_all(target: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(target, view) :]


@dataclass(frozen=True)
class Copier:
    """How file content moves: --bwlimit's throttle, and the threads that copy a large file's
    chunks at once (None: one stream per file)."""

    throttle: Throttle = UNLIMITED
    chunks: ThreadPoolExecutor | None = None
    fresh: bool = False  # the partial tree is new this run: files are written under their own names


PLAIN = Copier()
# Files from this size are copied in CHUNK pieces with direct I/O, CHUNK_THREADS of them in flight:
# one buffered stream reaches about half of what the disks can do (page-cache writeback), and
# several direct requests at once keep both devices' queues full (benchmarks/stage.py measures it).
LARGE_FILE, CHUNK, CHUNK_THREADS = 32 << 20, 8 << 20, 8
DIRECT_ALIGN = 4096


class _NoDirectIO(Exception):
    """A filesystem refused direct I/O (or gave a short direct read): copy the file buffered."""


def _set_direct(fd: int, on: bool) -> None:
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, (flags | os.O_DIRECT) if on else (flags & ~os.O_DIRECT))


def _copy_chunks(source: int, target: int, size: int, pool: ThreadPoolExecutor, throttle: Throttle) -> None:
    """A large file in CHUNK pieces, read and written with O_DIRECT by the pool's threads at once;
    the last piece is written padded to the block and the file cut to its size. A filesystem without
    direct I/O (tmpfs before Linux 6.6, some FUSE) gets the buffered stream instead."""

    def piece(offset: int) -> None:
        want = min(CHUNK, size - offset)
        buffer = mmap.mmap(-1, CHUNK)  # page-aligned, as O_DIRECT needs
        try:
            got = os.preadv(source, [buffer], offset)
            if got != want:
                raise _NoDirectIO  # a short direct read mid-file: not worth aligning by hand
            throttle(got)
            with memoryview(buffer) as view:
                padded = -(-got // DIRECT_ALIGN) * DIRECT_ALIGN
                if os.pwritev(target, [view[:padded]], offset) != padded:
                    raise _NoDirectIO
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise _NoDirectIO from exc
            raise
        finally:
            buffer.close()

    direct = True
    try:
        try:
            _set_direct(source, True)
            _set_direct(target, True)
        except OSError as exc:
            raise _NoDirectIO from exc
        list(pool.map(piece, range(0, size, CHUNK)))
    except _NoDirectIO:
        direct = False
    finally:
        _set_direct(source, False)
        _set_direct(target, False)
    if direct:
        os.ftruncate(target, size)
    else:
        os.ftruncate(target, 0)
        _stream(source, target, throttle)  # pread/pwrite left both offsets at 0


def _copy_small(source: int, target: int, size: int, throttle: Throttle) -> int:
    """A small file in as few calls as it takes: one read asks for a byte more than its size, so an
    unchanged file is read whole and its end seen at once; a file that grew reads on to its end
    (and the size check after the copy catches it). Returns the bytes written."""
    written = 0
    while chunk := os.read(source, size + 1 - written if written < size else SMALL_FILE):
        throttle(len(chunk))
        _write_all(target, chunk)
        written += len(chunk)
        if written == size:
            break
    return written


def _copy_file(src: str, dst: str, entry: Entry, copier: Copier = PLAIN) -> None:
    """Copy content into a replacement of `dst`, with mode and mtime set before the rename. The
    source's size and mtime are compared before and after: a file that changed meanwhile raises
    _Changed and is never stamped complete. `entry` takes the size and mtime that were copied."""
    try:
        source = os.open(src, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise StageError(f"{src}: cannot read it ({exc.strerror}); the partial copy is kept") from exc
    try:
        before = os.fstat(source)
        with _replacement(dst, copier.fresh) as target:
            if before.st_size < SMALL_FILE:
                written = _copy_small(source, target, before.st_size, copier.throttle)
            else:
                if copier.chunks is not None and before.st_size >= LARGE_FILE:
                    _copy_chunks(source, target, before.st_size, copier.chunks, copier.throttle)
                else:
                    _stream(source, target, copier.throttle)
                written = os.fstat(target).st_size
            after = os.fstat(source)
            if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or (
                written != after.st_size
            ):
                raise _Changed(src)
            os.fchmod(target, entry.mode)
            os.utime(target, ns=(after.st_mtime_ns, after.st_mtime_ns))
        entry.size, entry.mtime_ns = after.st_size, after.st_mtime_ns
    finally:
        os.close(source)


def _copy_steady(src: str, dst: str, entry: Entry, copier: Copier = PLAIN) -> None:
    for _ in range(COPY_TRIES):
        try:
            _copy_file(src, dst, entry, copier)
            return
        except _Changed:
            continue
    raise StageError(
        f"{src} changed while it was copied ({COPY_TRIES} tries): stage it when nothing writes to it; "
        "the partial copy is kept"
    )


def _stream(source: int, target: int, throttle: Throttle = UNLIMITED) -> None:
    while True:
        try:
            # sendfile: page cache to page cache, no copy through Python, any pair of filesystems
            sent = os.sendfile(target, source, None, throttle.chunk)
            throttle(sent)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            sent = -1
        if sent == 0:
            return
        if sent < 0:  # a filesystem without sendfile: copy through userspace from where it stopped
            while block := os.read(source, min(throttle.chunk, 8 << 20)):
                throttle(len(block))
                _write_all(target, block)
            return


def _remove_strays(partial: Path, wanted: dict[str, Entry]) -> None:
    """Entries a killed run (or an older dltune's temporaries) left in the partial tree that the
    source does not have, or has as another kind (or a link to another target): a resumed stage must
    end identical to a clean one. `wanted` maps each relative path to the source's entry. The walk
    works on descriptors inside the partial tree (any depth; a link is removed, never followed)."""

    def keep(entry: Entry | None, fd: int, name: str, st: os.stat_result) -> bool:
        if entry is None:
            return False
        if entry.kind == "file":
            return stat.S_ISREG(st.st_mode)
        is_link = entry.kind == "link" and stat.S_ISLNK(st.st_mode)
        return is_link and os.readlink(name, dir_fd=fd) == entry.target

    def stray_file(fd: int, relative: str, name: str, st: os.stat_result) -> None:
        if not keep(wanted.get(relative), fd, name, st):
            os.unlink(name, dir_fd=fd)

    def stray_dir(fd: int, relative: str, name: str) -> None:
        entry = wanted.get(relative)
        if entry is None or entry.kind != "dir":
            os.rmdir(name, dir_fd=fd)

    with opened_dir(str(partial)) as top:
        walk_below(top, stray_file, stray_dir)


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


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_tree(
    entries: list[Entry],
    src: Path | None,
    staged: Path,
    checksum: bool,
    digests: dict[str, str] | None = None,
) -> None:
    """Every file is there at its size; with `checksum`, its SHA-256 equals the source's (a directory)
    or the digest taken while it was extracted (an archive: the shared source is not read again)."""
    bad = []
    for entry in entries:
        if entry.kind != "file":
            continue
        path = staged / entry.relative
        if not path.is_file() or path.stat().st_size != entry.size:
            bad.append(entry.relative)
        elif checksum and digests is not None:
            if digests.get(entry.relative) != sha256_file(path):
                bad.append(entry.relative)
        elif checksum and src is not None and sha256_file(src / entry.relative) != sha256_file(path):
            bad.append(entry.relative)
    if bad:
        raise StageError(
            f"verification failed for {len(bad)} file(s), e.g. {bad[:3]}; the partial copy is kept"
        )


Progress = Callable[[int], None]


def _stage_tree(
    src: Path,
    partial: Path,
    entries: list[Entry],
    workers: int,
    advance: Progress,
    resume: bool,
    copier: Copier = PLAIN,
) -> tuple[int, int]:
    if resume:  # first, so that nothing left there stands where the source has another kind
        _remove_strays(partial, {e.relative: e for e in entries})
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
            source, target = os.path.join(src, entry.relative), os.path.join(partial, entry.relative)
            _copy_steady(source, target, entry, copier)
            size += entry.size
        advance(size)
        return size

    # A throttle of this copy's own: halting it (below) must not stop every later copy of the process.
    throttle = Throttle(None) if copier.throttle is UNLIMITED else copier.throttle
    copier = dataclasses.replace(copier, fresh=not resume, throttle=throttle)
    # Large files first: they dominate the tail of a parallel copy. Small ones in inode order: on a
    # cold local disk that is close to the order of their blocks, so reads stream instead of seek.
    todo.sort(key=lambda e: (-e.size, 0) if e.size >= SMALL_FILE else (0, e.inode))
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        copied = sum(pool.map(copy, _batches(todo)))
    except BaseException:
        # An interrupt or an error: stop at once, not after every queued or running batch.
        copier.throttle.halt()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    for entry in entries:
        if entry.kind == "dir":
            os.chmod(partial / entry.relative, entry.mode | stat.S_IRWXU)
    return copied, skipped


@dataclass
class ArchiveRead:
    entries: list[Entry] = field(default_factory=list)
    copied: int = 0
    skipped: int = 0
    digests: dict[str, str] = field(default_factory=dict)


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, digest: Any) -> None:
    """A regular member's data into a replacement of `target`, renamed over it once complete."""
    reader = tar.extractfile(member)
    if reader is None:
        raise StageError(f"{member.name}: no data in the archive")
    target.parent.mkdir(parents=True, exist_ok=True)
    with _replacement(str(target)) as fd:
        written = 0
        for block in iter(lambda: reader.read(8 << 20), b""):
            if digest is not None:
                digest.update(block)
            _write_all(fd, block)
            written += len(block)
        if written != member.size:
            raise StageError(f"{member.name}: the archive ends inside this member (truncated)")
        # The data filter's mode: no setuid/setgid/sticky, no group/other write, owner read/write.
        os.fchmod(fd, member.mode & 0o7777)
        mtime_ns = _mtime_ns(member)
        os.utime(fd, ns=(mtime_ns, mtime_ns))


def _drain(reader: IO[bytes] | None, digest: Any) -> None:
    """Read a member the resume skips (the stream must pass it anyway), digesting it when asked."""
    while reader is not None and (block := reader.read(8 << 20)):
        if digest is not None:
            digest.update(block)


def _stage_archive(
    src: Path, partial: Path, advance: Progress, checksum: bool, throttle: Throttle = UNLIMITED
) -> ArchiveRead:
    """One read of the archive: extract each member (data filter), resume over complete files, then read
    the stream to its end so the compressor's check runs."""
    read = ArchiveRead()
    raw: Any = _ThrottledReader(src, throttle) if throttle.rate else src.open("rb")
    stream = _decompressed(src, raw)
    try:
        with raw, stream, tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                try:
                    safe = tarfile.data_filter(member, str(partial))
                except tarfile.FilterError as exc:
                    raise StageError(
                        f"{src.name}: unsafe member refused ({exc}); nothing of it was written"
                    ) from exc
                relative = _member_path(safe)
                kind = "file" if safe.isfile() else "dir" if safe.isdir() else "link"
                entry = Entry(relative, kind, safe.size, _mtime_ns(safe), safe.mode)
                read.entries.append(entry)
                if not member.isfile():
                    tar.extract(member, partial, filter="data")
                    continue
                target = _resume_target(partial, member)
                digest = hashlib.sha256() if checksum else None
                if target is not None and _complete(target, entry):
                    read.skipped += 1
                    _drain(tar.extractfile(member), digest)
                else:
                    _write_member(tar, safe, partial / _member_path(safe), digest)
                    read.copied += member.size
                if digest is not None:
                    read.digests[relative] = digest.hexdigest()
                advance(member.size)
            # The end-of-archive blocks are not the end of the compressed stream: read on, so the
            # decompressor reaches its trailer and checks it.
            while stream.read(1 << 20):
                pass
    except StageError:
        raise
    except (*CORRUPT, KeyError, OverflowError) as exc:  # KeyError: a hard link to a missing member
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _filled_up(exc, str(partial)) from exc
        raise StageError(
            f"{src.name}: not a complete, readable archive ({exc.__class__.__name__}: {exc}); the partial "
            f"tree {partial} is kept and is not taken as staged: fix or fetch the archive again"
        ) from exc
    return read


def verify_against_archive(src: Path, staged: Path, checksum: bool) -> None:
    """An already-staged archive checked again, as asked: the archive is read once more and every
    regular member must be in the staged tree at its size (with `checksum`, at its SHA-256)."""
    bad: list[str] = []
    with (
        src.open("rb") as raw,
        _decompressed(src, raw) as stream,
        tarfile.open(fileobj=stream, mode="r|") as tar,
    ):
        for member in tar:
            if not member.isfile():
                continue
            path = staged / _member_path(member)
            try:
                st = path.lstat()
            except OSError:
                bad.append(member.name)
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_size != member.size:
                bad.append(member.name)
            elif checksum:
                digest = hashlib.sha256()
                _drain(tar.extractfile(member), digest)
                if digest.hexdigest() != sha256_file(path):
                    bad.append(member.name)
    if bad:
        raise StageError(
            f"verification failed for {len(bad)} file(s) of {staged}, e.g. {bad[:3]}: stage it again "
            "with --replace"
        )


# --- the record of what was staged ------------------------------------------------------------


RECORD_SUFFIX = ".dltune-source.json"


def record_path(to: Path, name: str) -> Path:
    """The record beside DIR/<name>: written only once the dataset under that name is complete."""
    return to / derived_name(name, RECORD_SUFFIX)


def describe_source(src: Path, kind: str, entries: list[Entry] | None) -> dict[str, Any]:
    """What identifies a staged source without reading its data: path, kind, and sizes and mtimes
    (of the tree, or of the archive or file itself)."""
    st = src.stat()
    if entries is not None and kind == "dir":
        files = [e for e in entries if e.kind == "file"]
        return {
            "source": os.path.realpath(src),
            "kind": kind,
            "files": len(files),
            "bytes": sum(e.size for e in files),
            "newest_mtime_ns": max((e.mtime_ns for e in files), default=st.st_mtime_ns),
        }
    return {
        "source": os.path.realpath(src),
        "kind": kind,
        "files": 1,
        "bytes": st.st_size,
        "newest_mtime_ns": st.st_mtime_ns,
    }


def _parse_record(data: bytes | None) -> dict[str, Any] | None:
    try:
        parsed = json.loads(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, RecursionError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) else None


def read_record(path: Path) -> dict[str, Any] | None:
    """A record of this user's, None when absent or unreadable; a link or another user's file is
    refused (StageError), never read through."""
    try:
        with opened_dir(str(path.parent)) as parent:
            return _parse_record(read_own_file(parent, path.name, str(path)))
    except UnsafeEntry as exc:
        raise StageError(str(exc)) from exc
    except OSError:
        return None


def write_record(path: Path, record: dict[str, Any]) -> None:
    data = (json.dumps(record, sort_keys=True) + "\n").encode()
    try:
        with opened_dir(str(path.parent)) as parent:
            write_file_atomically(parent, path.name, data, str(path))
    except UnsafeEntry as exc:
        raise StageError(str(exc)) from exc
    except OSError as exc:
        raise StageError(f"{path}: cannot write dltune's record ({exc.strerror})") from exc


def same_source(record: dict[str, Any], now: dict[str, Any]) -> str | None:
    """Why a recorded stage is not of this source as it is now (None when it is)."""
    if record.get("source") != now["source"]:
        return f"holds {record.get('source')}, not {now['source']}"
    changed = [key for key in ("kind", "files", "bytes", "newest_mtime_ns") if record.get(key) != now[key]]
    if changed:
        return f"holds {now['source']} as it was when staged; it has changed since ({', '.join(changed)})"
    return None


def remove_staged(path: Path) -> None:
    """Remove a staged dataset (a tree of any depth, a file), never following a link in it."""
    try:
        with opened_dir(str(path.parent)) as parent:
            remove_at(parent, path.name)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StageError(f"{path}: cannot remove it ({exc.strerror}); nothing else was changed") from exc


def check_name(name: str, src: object) -> None:
    """A dataset's name is one path component: not empty, `.` or `..`, no slash, within NAME_MAX."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise StageError(
            f"{src} resolves to the name {name!r}, which cannot be staged: give the dataset's directory "
            "by its own name (e.g. ../ds, not .)"
        )
    if len(os.fsencode(name)) > NAME_MAX_BYTES:
        raise StageError(f"{name[:40]}...: a name of over {NAME_MAX_BYTES} bytes cannot be staged")


NAME_MAX_BYTES = 255


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _ancestors(fd: int) -> set[tuple[int, int]]:
    """The device and inode of the directory `fd` and of each directory above it, up to /."""
    seen: set[tuple[int, int]] = set()
    current = os.dup(fd)
    try:
        while (ident := _ident(os.fstat(current))) not in seen:
            seen.add(ident)
            up = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=current)
            os.close(current)
            current = up
    finally:
        os.close(current)
    return seen


def refuse_overlap(src: Path, to: Path, name: str, to_fd: int) -> None:
    """Source and destination must be apart: not the same, neither inside the other, by resolved path
    and by device and inode (a bind mount or a link reaches the same directory under another name).
    A destination inside the source would be written into it; a source inside (or equal to) the
    destination would be removed by --replace."""
    dest = Path(os.path.realpath(to)) / name
    real_src = Path(os.path.realpath(src))
    both = f"source {src} and destination {to / name}"
    if real_src == dest:
        raise StageError(f"{both} are the same: stage into another directory (--to)")
    if real_src in dest.parents:
        raise StageError(f"{both}: the destination is inside the source; stage into a directory outside it")
    if dest in real_src.parents:
        raise StageError(f"{both}: the source is inside the destination; stage into another directory")
    src_st = src.stat()
    if _ident(src_st) in _ancestors(to_fd):
        raise StageError(f"{both}: the destination is inside the source (the same directory by inode)")
    dest_st = lstat_at(to_fd, name)
    if dest_st is not None and stat.S_ISDIR(dest_st.st_mode):
        src_dir = str(src) if src.is_dir() else str(src.parent)
        with opened_dir(src_dir) as src_fd:
            if _ident(dest_st) in _ancestors(src_fd):
                raise StageError(f"{both}: the source is inside the destination (by inode)")
    elif dest_st is not None and _ident(dest_st) == _ident(src_st):
        raise StageError(f"{both} are the same file (by inode): stage into another directory (--to)")


class Destination:
    """DIR/<name> and the entries dltune keeps beside it (partial copy, lock, records, the old copy
    of a --replace), all reached through DIR's open descriptor with links never followed: in a
    shared scratch directory another user may plant any of those names."""

    def __init__(self, to: Path, name: str) -> None:
        self.to, self.name = to, name
        try:
            self.fd = os.open(to, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise StageError(f"{to}: cannot open the directory ({exc.strerror}) (--to)") from exc
        self.partial = derived_name(name, ".partial")
        self.partial_record = derived_name(name, ".partial" + RECORD_SUFFIX)
        self.record = derived_name(name, RECORD_SUFFIX)
        self.lock_name = derived_name(name, ".lock")
        self.aside = derived_name(name, ".dltune-old")
        try:
            self._refuse_foreign_as_root()
        except StageError:
            os.close(self.fd)
            raise

    def _refuse_foreign_as_root(self) -> None:
        """As root, staging refuses a directory that another user owns, or where others can rename
        root's entries (group/other-writable without the sticky bit): there, an entry planted or
        swapped could make root overwrite or create files where that user chose. Run it as that user."""
        if os.geteuid() != 0:
            return
        st = os.fstat(self.fd)
        # A sticky directory (/tmp) keeps others from renaming or removing root's entries; names
        # they plant first are refused like anywhere else.
        shared = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX
        if st.st_uid != 0 or shared:
            owner = f"uid {st.st_uid}" if st.st_uid else "root, and others can rename entries in it"
            raise StageError(
                f"{self.to} belongs to {owner}: as root, dltune stage does not write where another user "
                "can; run it as that user (e.g. runuser -u USER -- dltune stage ...)"
            )

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Destination:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def shown(self, entry: str) -> str:
        return str(self.to / entry)

    def lstat(self, entry: str) -> os.stat_result | None:
        return lstat_at(self.fd, entry)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """One stager per destination on this node: a second one waits here for the first."""
        flags = os.O_WRONLY | os.O_CREAT
        try:
            fd = open_own_file(self.fd, self.lock_name, self.shown(self.lock_name), flags)
        except UnsafeEntry as exc:
            raise StageError(str(exc)) from exc
        except OSError as exc:
            raise StageError(
                f"{self.shown(self.lock_name)}: cannot create the lock ({exc.strerror})"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def read(self, entry: str) -> dict[str, Any] | None:
        try:
            return _parse_record(read_own_file(self.fd, entry, self.shown(entry)))
        except UnsafeEntry as exc:
            raise StageError(str(exc)) from exc
        except OSError:
            return None

    def write(self, entry: str, record: dict[str, Any]) -> None:
        data = (json.dumps(record, sort_keys=True) + "\n").encode()
        try:
            write_file_atomically(self.fd, entry, data, self.shown(entry))
        except UnsafeEntry as exc:
            raise StageError(str(exc)) from exc
        except OSError as exc:
            raise StageError(f"{self.shown(entry)}: cannot write dltune's record ({exc.strerror})") from exc

    def remove(self, entry: str) -> None:
        try:
            remove_at(self.fd, entry)
        except OSError as exc:
            raise StageError(f"{self.shown(entry)}: cannot remove it ({exc.strerror})") from exc

    def expect_own(self, entry: str, st: os.stat_result, kind: int) -> None:
        try:
            expect_own(st, self.shown(entry), kind)
        except UnsafeEntry as exc:
            raise StageError(str(exc)) from exc

    def rename(self, old: str, new: str) -> None:
        os.rename(old, new, src_dir_fd=self.fd, dst_dir_fd=self.fd)


@contextlib.contextmanager
def destination_lock(directory: Path, name: str) -> Iterator[None]:
    """The lock one stager of DIR/<name> holds on this node (a second one waits for it)."""
    with Destination(directory, name) as place, place.lock():
        yield


def partial_record_path(to: Path, name: str) -> Path:
    """What a partial copy is of: written before the partial copy is made, removed after the rename."""
    return to / derived_name(name, ".partial" + RECORD_SUFFIX)


def stage(
    src: Path,
    to: Path,
    *,
    workers: int | None = None,
    verify: bool = False,
    checksum: bool = False,
    progress: Callable[[int], Any] | None = None,
    space: Callable[[Path], Space] = space_at,
    on_total: Callable[[int], Any] | None = None,
    replace: bool = False,
    bwlimit: float | None = None,
    name: str | None = None,
    identity: dict[str, Any] | None = None,
) -> Summary:
    """Stage `src` as `to`/`name` (default: the source's name less an archive suffix). `identity`
    stands for the source in the record beside the dataset (default: `src` as it is now): a node of
    a broadcast extracts the job's archive but records the dataset it came from. Every failure is a
    StageError naming the path (an OSError from anywhere below too)."""
    try:
        return _stage(
            src,
            to,
            workers=workers,
            verify=verify,
            checksum=checksum,
            progress=progress,
            space=space,
            on_total=on_total,
            replace=replace,
            bwlimit=bwlimit,
            name=name,
            identity=identity,
        )
    except OSError as exc:
        raise StageError(os_error_line(exc, str(to))) from exc


SHOWN_PATH_CHARS = 240


def os_error_line(exc: OSError, fallback: str, shown: dict[str, str] | None = None) -> str:
    """One line for an OSError: the path(s) it names, as the user knows them (a descriptor's path
    shown as the path it was opened by), and what a rerun does."""
    where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None) or fallback
    for descriptor, path in sorted((shown or {}).items(), key=lambda item: -len(item[0])):
        where = where.replace(descriptor, path)
    if len(where) > SHOWN_PATH_CHARS:  # a path thousands of levels deep: its ends say enough
        where = f"{where[: SHOWN_PATH_CHARS // 2]}...{where[-SHOWN_PATH_CHARS // 2 :]}"
    return (
        f"{where}: {exc.strerror or exc}; nothing incomplete is taken as staged: fix it and rerun the "
        "same command (it resumes)"
    )


# long: argument checks, lock, and the three source kinds, each refusing before anything changes
def _stage(
    src: Path,
    to: Path,
    *,
    workers: int | None,
    verify: bool,
    checksum: bool,
    progress: Callable[[int], Any] | None,
    space: Callable[[Path], Space],
    on_total: Callable[[int], Any] | None,
    replace: bool,
    bwlimit: float | None,
    name: str | None,
    identity: dict[str, Any] | None,
) -> Summary:
    if not src.exists():
        raise StageError(f"{src} does not exist")
    if not to.is_dir():
        raise StageError(f"{to} is not a directory (--to, or $SLURM_TMPDIR inside a job)")
    if not os.access(to, os.W_OK | os.X_OK):
        raise StageError(f"{to} is not writable by this user: give a --to you can write")
    if src.is_file() and not is_archive(src) and (src.suffix.lower() == ".zip" or zipfile.is_zipfile(src)):
        raise StageError(
            f"{src}: zip archives are not staged (their index sits at the end, so they cannot be read "
            "once while extracted): extract it into a directory and stage that, or repack it as tar"
        )
    if not (src.is_dir() or src.is_file()):
        raise StageError(f"{src} is neither a directory nor a regular file")
    check_bwlimit(bwlimit)
    kind = "archive" if is_archive(src) else "dir" if src.is_dir() else "file"
    if kind == "archive":
        require_data_filter()
    name = name or staged_name(src)
    check_name(name, src)
    with Destination(to, name) as place:
        refuse_overlap(src, to, name, place.fd)
        local_source = is_local(src)
        workers = workers or default_workers(src, local_source)
        start = time.monotonic()
        with place.lock():
            entries = scan_tree(src, 1 if local_source else workers) if kind == "dir" else None
            identity = identity or describe_source(src, kind, entries)
            staged = already_staged(place, identity, replace)
            if staged is not None:
                if verify:
                    _verify_staged(place, kind, src, entries, checksum)
                    staged.verified = True
                staged.seconds = time.monotonic() - start
                return staged
            summary = _stage_into_partial(
                place,
                src,
                kind,
                entries,
                identity,
                replace,
                _Options(workers, verify, checksum, space, on_total, progress or (lambda _n: None), bwlimit),
            )
        summary.seconds = time.monotonic() - start
        return summary


def check_bwlimit(bwlimit: float | None) -> None:
    if bwlimit is not None and not (math.isfinite(bwlimit) and 0 <= bwlimit <= MAX_BWLIMIT):
        raise StageError(f"--bwlimit {bwlimit}: give MB/s from 0 (no limit) to {MAX_BWLIMIT:.0f}")


# A limit above this (1 TB/s) is no limit: a larger or non-finite value is a typo.
MAX_BWLIMIT = 1e6


def require_data_filter() -> None:
    """tarfile's `data` filter (Python 3.10.12, 3.11.4, 3.12+) is what makes extraction safe."""
    try:
        require_tar_data_filter()
    except UnsupportedPython as exc:
        raise StageError(str(exc)) from exc


def already_staged(place: Destination, identity: dict[str, Any], replace: bool) -> Summary | None:
    """The dataset as staged, when DIR/<name> holds this source complete; None when it must be
    staged. What stands under the name and is not this source is refused, or with `replace` moved
    aside (one rename: a kill leaves the old copy whole under another name, or nothing)."""
    leftover = place.lstat(place.aside)
    if leftover is not None:  # a --replace killed after moving the old copy aside
        place.expect_own(place.aside, leftover, stat.S_IFMT(leftover.st_mode))
        place.remove(place.aside)
    dest_st = place.lstat(place.name)
    if dest_st is None:
        return None
    place.expect_own(place.name, dest_st, stat.S_IFMT(dest_st.st_mode))
    record = place.read(place.record)
    mismatch: str | None = "was not staged by dltune (no record of its source beside it)"
    if record is not None and record.get("complete"):
        mismatch = same_source(record, identity)
    if mismatch is None:
        return Summary(Path(place.shown(place.name)), notes=["already staged"])
    if not replace:
        raise StageError(
            f"{place.shown(place.name)} {mismatch}: give --replace to stage in its place, or another --to"
        )
    place.rename(place.name, place.aside)
    return None


def _verify_staged(
    place: Destination, kind: str, src: Path, entries: list[Entry] | None, checksum: bool
) -> None:
    dest = Path(place.shown(place.name))
    if kind == "dir":
        verify_tree(entries or [], src, dest, checksum)
    elif kind == "file":
        size = src.stat().st_size
        verify_tree(
            [Entry(place.name, "file", size)],
            None,
            place.to,
            checksum,
            {place.name: sha256_file(src)} if checksum else None,
        )
    else:  # the member list is in the archive only: --verify reads it again, as asked
        verify_against_archive(src, dest, checksum)


@dataclass(frozen=True)
class _Options:
    workers: int
    verify: bool
    checksum: bool
    space: Callable[[Path], Space]
    on_total: Callable[[int], Any] | None
    advance: Progress
    bwlimit: float | None


# long: the partial copy's life in order: its record, its tree, the record, the rename, the cleanup
def _stage_into_partial(
    place: Destination,
    src: Path,
    kind: str,
    entries: list[Entry] | None,
    identity: dict[str, Any],
    replace: bool,
    options: _Options,
) -> Summary:
    """Stage into the partial copy (resumed when it is this source's), then: the record, written
    only now that the dataset is complete, the rename to the final name, and the removal of what a
    --replace moved aside."""
    partial_st = place.lstat(place.partial)
    if partial_st is not None:
        place.expect_own(place.partial, partial_st, stat.S_IFDIR if kind != "file" else stat.S_IFREG)
        # An older dltune kept the partial copy's source in the record itself, marked incomplete.
        old = place.read(place.record)
        record = place.read(place.partial_record) or (old if old and not old.get("complete") else None)
        mismatch = same_source(record, identity) if record else "is not a partial copy dltune recorded"
        if mismatch and not replace:
            raise StageError(
                f"{place.shown(place.partial)} {mismatch}: give --replace to stage {src} in its place"
            )
        if mismatch:
            place.remove(place.partial)
    fresh = place.lstat(place.partial) is None
    place.write(place.partial_record, identity)
    chunk_pool = ThreadPoolExecutor(max_workers=min(CHUNK_THREADS, max(1, options.workers)))
    copier = Copier(Throttle(options.bwlimit), chunk_pool)
    try:
        summary = _stage_kind(place, src, kind, entries, options, copier)
    except (StageError, OSError) as exc:
        if fresh and _empty_or_absent(place):
            place.remove(place.partial)  # refused before copying: leave no trace
            place.remove(place.partial_record)
        if isinstance(exc, OSError):
            shown = {fd_path(place.fd): str(place.to)}
            raise StageError(os_error_line(exc, place.shown(place.partial), shown)) from exc
        raise StageError(str(exc).replace(fd_path(place.fd), str(place.to))) from exc
    finally:
        chunk_pool.shutdown(wait=True, cancel_futures=True)
    place.write(place.record, {**identity, "complete": True})
    place.rename(place.partial, place.name)
    place.remove(place.partial_record)
    place.remove(place.aside)
    summary.path = Path(place.shown(place.name))
    return summary


def _empty_or_absent(place: Destination) -> bool:
    st = place.lstat(place.partial)
    if st is None:
        return True
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size == 0
    with contextlib.suppress(OSError), opened_dir(fd_path(place.fd) + "/" + place.partial) as fd:
        return not os.listdir(fd)
    return False


def _stage_kind(
    place: Destination, src: Path, kind: str, entries: list[Entry] | None, options: _Options, copier: Copier
) -> Summary:
    here = Path(fd_path(place.fd))
    job = _Job(src, here / place.name, here / place.partial, options, copier)
    if kind == "file":
        return _stage_file(job)
    fresh = place.lstat(place.partial) is None
    if fresh:
        os.mkdir(place.partial, 0o700, dir_fd=place.fd)
    try:
        partial_fd = open_own_dir(place.fd, place.partial, place.shown(place.partial))
    except UnsafeEntry as exc:
        raise StageError(str(exc)) from exc
    try:
        # Inside the partial copy, paths go through its descriptor: another user who can write to
        # DIR cannot swap the partial copy's name for a link while the workers write below it.
        job = dataclasses.replace(job, partial=Path(fd_path(partial_fd)), dest=Path(place.shown(place.name)))
        try:
            summary = (
                _stage_archive_into(job, fresh)
                if kind == "archive"
                else _stage_dir(job, entries or [], fresh)
            )
        except OSError as exc:
            shown = {fd_path(partial_fd): place.shown(place.partial), fd_path(place.fd): str(place.to)}
            raise StageError(os_error_line(exc, place.shown(place.partial), shown)) from exc
        # Made 0700 while incomplete (nobody else writes below it); now as a directory of this user's.
        mask = os.umask(0o022)
        os.umask(mask)
        os.fchmod(partial_fd, 0o777 & ~mask)
    finally:
        os.close(partial_fd)
    return summary


@dataclass(frozen=True)
class _Job:
    """One stage's source, final and partial paths, with the command's options and its copier."""

    src: Path
    dest: Path
    partial: Path
    options: _Options
    copier: Copier


def _checked_room(job: _Job, entries: list[Entry], done: list[Entry], fresh: bool) -> None:
    """The preflight (a refusal before anything was copied leaves the empty partial copy, which the
    caller removes with its record)."""
    here = job.options.space(job.dest.parent)
    block = max(here.block_size, 1)
    preflight(entries, sum(allocated(e.size, block) for e in done), len(done), here, job.dest.parent)


def _stage_dir(job: _Job, entries: list[Entry], fresh: bool) -> Summary:
    # A partial tree left by a killed run: its complete files are kept (a fresh one has none).
    done = (
        [] if fresh else [e for e in entries if e.kind == "file" and _complete(job.partial / e.relative, e)]
    )
    _checked_room(job, entries, done, fresh)
    if job.options.on_total:
        job.options.on_total(sum(e.size for e in entries if e.kind == "file"))
    copied, skipped = _stage_tree(
        job.src, job.partial, entries, job.options.workers, job.options.advance, not fresh, job.copier
    )
    summary = Summary(job.dest, files=sum(e.kind == "file" for e in entries), bytes=copied, skipped=skipped)
    if job.options.verify:
        verify_tree(entries, job.src, job.partial, job.options.checksum)
        summary.verified = True
    return summary


def _stage_archive_into(job: _Job, fresh: bool) -> Summary:
    # Read once: the archive's own size is the least the extracted tree needs; ENOSPC during the
    # extraction is a clean error that keeps the partial tree.
    _checked_room(job, [Entry(job.src.name, "file", job.src.stat().st_size)], [], fresh)
    if job.options.on_total:
        job.options.on_total(0)
    checksum = job.options.checksum and job.options.verify
    read = _stage_archive(job.src, job.partial, job.options.advance, checksum, job.copier.throttle)
    files = sum(e.kind == "file" for e in read.entries)
    summary = Summary(job.dest, files=files, bytes=read.copied, skipped=read.skipped)
    # Structure: every regular member is there at its size (and, asked, at its digest).
    verify_tree(read.entries, None, job.partial, checksum, read.digests if checksum else None)
    summary.verified = job.options.verify
    return summary


def _stage_file(job: _Job) -> Summary:
    """One file (an HDF5 file, an LMDB data file, a WebDataset shard): copied as `.<name>.partial`,
    checked, renamed to `<name>` by the caller."""
    st = job.src.stat()
    entry = Entry(job.dest.name, "file", st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode))
    _checked_room(job, [entry], [], fresh=False)
    if job.options.on_total:
        job.options.on_total(entry.size)
    _copy_steady(str(job.src), str(job.partial), entry, job.copier)
    job.options.advance(entry.size)
    summary = Summary(job.dest, files=1, bytes=entry.size)
    if job.options.verify:
        if job.partial.lstat().st_size != entry.size or (
            job.options.checksum and sha256_file(job.src) != sha256_file(job.partial)
        ):
            raise StageError(
                f"verification failed for {job.dest.name}; the partial copy {job.partial} is kept"
            )
        summary.verified = True
    return summary


# --plan's thresholds: what fits in memory, what is worth staging, when many small files should be packed.
MEMORY_GB, STAGE_GB = 10, 100
PACK_FILES, PACK_MEAN_BYTES = 10_000, 1_000_000


def plan_advice(src: Path, nodes: int = 1) -> list[str]:
    """Where a dataset should live during a job of `nodes` nodes: in memory, staged to local disk,
    read from the shared filesystem, whether to pack it first, and whether to broadcast it."""
    entries = [e for e in scan_tree(src) if e.kind == "file"] if src.is_dir() else []
    size = sum(e.size for e in entries) if src.is_dir() else src.stat().st_size
    count = len(entries) if src.is_dir() else 1
    mean = size / count if count else 0
    lines = [f"{src}: {size / 1e9:.2f} GB in {count} file(s), mean {mean / 1e3:.1f} kB, on {fstype_of(src)}"]
    if src.is_dir() and count > PACK_FILES and mean < PACK_MEAN_BYTES:
        lines.append(
            "pack: many small files; keep them as one archive (tar or tar.zst) on the shared filesystem"
            " and stage the archive: each node then extracts it once instead of opening every file over NFS"
        )
    if size <= MEMORY_GB * 1e9:
        lines.append(
            f"memory: up to ~{MEMORY_GB} GB fits in RAM; stage it (or load it into memory) at job start"
        )
    elif size <= STAGE_GB * 1e9:
        lines.append("stage: copy it to $SLURM_TMPDIR at job start (`dltune stage SRC`)")
    else:
        lines.append(
            f"shared: over ~{STAGE_GB} GB, read it from the shared filesystem (spread over the VIP mounts)"
        )
    if nodes > 1 and size <= STAGE_GB * 1e9:
        lines.append(
            f"broadcast: staged per node, {nodes} nodes read {nodes * size / 1e9:.2f} GB from the shared "
            f"filesystem at job start; `dltune stage --broadcast SRC` in the batch script reads "
            f"{size / 1e9:.2f} GB once and Slurm's sbcast fans it out (each node needs room for twice "
            "the dataset while it lands)"
        )
    return lines
