"""`dltune stage SRC`: one dataset onto node-local disk, into a partial copy renamed when complete."""

from __future__ import annotations

import contextlib
import os
import stat
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dltune.files.dirfd import (
    UnsafeEntry,
    fd_path,
    open_own_dir,
    opened_dir,
)
from dltune.records import record, replace
from dltune.staging.archive import require_data_filter, stage_archive, verify_against_archive
from dltune.staging.copy import (
    CHUNK_THREADS,
    Copier,
    Progress,
    copy_steady,
    is_complete,
    sha256_file,
    stage_tree,
    verify_tree,
)
from dltune.staging.destination import Destination, check_name, refuse_overlap
from dltune.staging.model import (
    ALREADY_STAGED,
    Entry,
    StageError,
    Summary,
    Throttle,
    is_archive,
    staged_name,
)
from dltune.staging.plan import allocated, check_bwlimit, preflight
from dltune.staging.record import completed, describe_source, same_source, says_complete
from dltune.staging.room import Space, space_at
from dltune.staging.scan import default_workers, is_local, scan_tree


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
            place.refuse_planted()
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
    if says_complete(record):
        mismatch = same_source(record or {}, identity)
    if mismatch is None:
        return Summary(Path(place.shown(place.name)), notes=[ALREADY_STAGED])
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


@record(frozen=True)
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
        record = place.read(place.partial_record) or (old if old and not says_complete(old) else None)
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
    place.write(place.record, completed(identity))
    place.rename(place.partial, place.name)
    place.remove_own(place.partial_record)
    place.remove_own(place.aside)
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
        job = replace(job, partial=Path(fd_path(partial_fd)), dest=Path(place.shown(place.name)))
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


@record(frozen=True)
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
        [] if fresh else [e for e in entries if e.kind == "file" and is_complete(job.partial / e.relative, e)]
    )
    _checked_room(job, entries, done, fresh)
    if job.options.on_total:
        job.options.on_total(sum(e.size for e in entries if e.kind == "file"))
    copied, skipped = stage_tree(
        job.src, job.partial, entries, job.options.workers, job.options.advance, fresh, job.copier
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
    read = stage_archive(job.src, job.partial, job.options.advance, checksum, job.copier.throttle)
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
    copy_steady(str(job.src), str(job.partial), entry, job.copier, named=True)
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
