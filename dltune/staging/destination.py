"""Where a dataset lands: names checked, overlap refused, one stager at a time, each act relative to
an opened directory."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dltune.dirfd import (
    UnsafeEntry,
    derived_name,
    expect_own,
    lstat_at,
    open_own_file,
    opened_dir,
    read_own_file,
    remove_at,
    write_file_atomically,
)
from dltune.staging.model import StageError
from dltune.staging.record import RECORD_SUFFIX, parse_record


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
            return parse_record(read_own_file(self.fd, entry, self.shown(entry)))
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
