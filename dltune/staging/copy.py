"""The copy engine: small files batched, large ones in direct-I/O chunks, each stamped complete last."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import mmap
import os
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dltune.files.dirfd import (
    UnsafeEntry,
    derived_name,
    expect_own,
    lstat_at,
    opened_dir,
    walk_below,
)
from dltune.records import record, replace
from dltune.staging.model import UNLIMITED, Entry, StageError, Throttle

COPY_TRIES = 3


def is_complete(path: Path, entry: Entry) -> bool:
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


def filled_up(exc: OSError, dst: str) -> StageError:
    return StageError(
        f"the destination filled up while copying {dst} ({exc.strerror}); the partial copy is kept: "
        "free space and rerun the same command to resume, or stage elsewhere (--to)"
    )


@contextlib.contextmanager
def replacement(dst: str, fresh: bool = False) -> Iterator[int]:
    """A temporary sibling of `dst` open for writing, renamed over `dst` when the block completes
    (files are replaced, never rewritten in place) and removed when it does not; a full disk becomes
    a clean StageError. `fresh`: `dst` is new in a partial tree this run created, so it is written
    under its own name (created exclusively), which saves a rename per file: until its mtime is set,
    last, it does not pass for complete.

    The temporary is made, renamed and removed relative to the directory that holds `dst`, held open:
    a resume needs no longer a path than the first run (a tree as deep as paths allow resumes), and
    a temporary's name that is a link, a FIFO or another user's is refused, never written through,
    opened or removed."""
    head, tail = os.path.split(dst)
    parent = os.open(head or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    temporary = tail if fresh else derived_name(tail, ".dltune-tmp")
    made = False
    try:
        if not fresh:
            stale = lstat_at(parent, temporary)
            if stale is not None:
                try:
                    expect_own(stale, os.path.join(head, temporary), stat.S_IFREG)
                except UnsafeEntry as exc:
                    raise StageError(f"{exc}; the partial copy is kept") from exc
                os.unlink(temporary, dir_fd=parent)
        target = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
            0o600,
            dir_fd=parent,
        )
        made = True
        try:
            yield target
        finally:
            os.close(target)
        if not fresh:
            os.replace(temporary, tail, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException as exc:
        if made:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=parent)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise filled_up(exc, dst) from exc
        raise
    finally:
        os.close(parent)


def write_all(target: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(target, view) :]


@record(frozen=True)
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
        write_all(target, chunk)
        written += len(chunk)
        if written == size:
            break
    return written


def _copy_file(src: str, dst: str, entry: Entry, copier: Copier = PLAIN, named: bool = False) -> None:
    """Copy content into a replacement of `dst`, with mode and mtime set before the rename. The
    source's size and mtime are compared before and after: a file that changed meanwhile raises
    _Changed and is never stamped complete. `entry` takes the size and mtime that were copied.
    A link in a tree is never followed (it is copied as a link); `named`: `src` is the file the user
    named on the command line, followed as cp follows it."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if named else os.O_NOFOLLOW)
    try:
        source = os.open(src, flags)
    except OSError as exc:
        raise StageError(f"{src}: cannot read it ({exc.strerror}); the partial copy is kept") from exc
    try:
        before = os.fstat(source)
        if not stat.S_ISREG(before.st_mode):  # swapped for a FIFO or a device since the scan
            raise StageError(f"{src}: not a regular file any more; stage it when nothing changes it")
        os.set_blocking(source, True)
        with replacement(dst, copier.fresh) as target:
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


def copy_steady(src: str, dst: str, entry: Entry, copier: Copier = PLAIN, named: bool = False) -> None:
    for _ in range(COPY_TRIES):
        try:
            _copy_file(src, dst, entry, copier, named)
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
                write_all(target, block)
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


def stage_tree(
    src: Path,
    partial: Path,
    entries: list[Entry],
    workers: int,
    advance: Progress,
    fresh: bool,
    copier: Copier = PLAIN,
) -> tuple[int, int]:
    """Copy `entries` of `src` into `partial`: (bytes copied, files skipped). Not `fresh` (a partial
    tree a killed run left): what the source lacks goes first, complete files are kept."""
    if not fresh:  # first, so that nothing left there stands where the source has another kind
        _remove_strays(partial, {e.relative: e for e in entries})
    for entry in entries:
        if entry.kind == "dir":
            (partial / entry.relative).mkdir(parents=True, exist_ok=True)
    todo, skipped = [], 0
    for entry in entries:
        if entry.kind == "file":
            if not fresh and is_complete(partial / entry.relative, entry):
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
            copy_steady(source, target, entry, copier)
            size += entry.size
        advance(size)
        return size

    # A throttle of this copy's own: halting it (below) must not stop every later copy of the process.
    throttle = Throttle(None) if copier.throttle is UNLIMITED else copier.throttle
    copier = replace(copier, fresh=fresh, throttle=throttle)
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
