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

from dltune.files.dirfd import (
    UnsafeEntry,
    derived_name,
    expect_own,
    fd_path,
    lstat_at,
    open_own_file,
    open_walked_dir,
    opened_dir,
    read_own_file,
    remove_at,
    write_atomically_at,
)
from dltune.probes.mounts import unescape
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


MOUNTINFO = "/proc/self/mountinfo"


def _mount_roots(mountinfo: str = MOUNTINFO) -> list[tuple[str, str, str]]:
    """(device, root within the filesystem, mount point) of each mount of this process's namespace,
    in mount order; [] when the table cannot be read (then only `..` is walked)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as table:
            text = table.read()
    except OSError:
        return []
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            mounts.append((fields[2], unescape(fields[3]), unescape(fields[4])))
    return mounts


def _aliases(path: str, mounts: list[tuple[str, str, str]]) -> list[str]:
    """Other paths of the directory mounted at `path` (a bind mount): the same place in each other
    mount of its filesystem whose root holds it. Paths only: the caller keeps those that reach the
    same device and inode."""
    here = [m for m in mounts if m[2] == path]
    if not here:
        return []
    device, root, _point = here[-1]  # of several mounts at one point, the last is on top
    found = []
    for other_device, other_root, point in mounts:
        base = other_root.rstrip("/")
        if other_device != device or point == path or not (root == other_root or root.startswith(base + "/")):
            continue
        found.append(point.rstrip("/") + root[len(base) :] or "/")
    return found


def _ancestors(fd: int) -> set[tuple[int, int]]:
    """The device and inode of the directory `fd` and of every directory that holds it, as the kernel
    sees them: up through `..`, and, where a directory is a bind mount, up from the same directory
    where its filesystem has it too (`..` of a bind mount's root leads to where it is mounted, not
    to the directory above the one it shows)."""
    seen: set[tuple[int, int]] = set()
    mounts: list[tuple[str, str, str]] | None = None
    todo = [os.dup(fd)]
    try:
        while todo:
            current = todo.pop()
            try:
                while (ident := _ident(os.fstat(current))) not in seen:
                    seen.add(ident)
                    mounts = _mount_roots() if mounts is None else mounts
                    with contextlib.suppress(OSError):
                        for alias in _aliases(os.readlink(fd_path(current)), mounts):
                            todo.extend(_parent_of_alias(alias, ident))
                    up = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=current)
                    os.close(current)
                    current = up
            finally:
                os.close(current)
    finally:
        for left in todo:
            os.close(left)
    return seen


def _parent_of_alias(alias: str, ident: tuple[int, int]) -> list[int]:
    """The directory above `alias` (open), when `alias` is the directory `ident` indeed."""
    try:
        fd = os.open(alias, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        if _ident(os.fstat(fd)) != ident:
            return []
        return [os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)]
    except OSError:
        return []
    finally:
        os.close(fd)


def refuse_overlap(src: Path, to: Path, name: str, to_fd: int) -> None:
    """Source and destination must be apart: not the same, neither inside the other, by resolved path
    and by device and inode along both real paths, bind mounts included (a bind mount or a link
    reaches the same directory under another name). A destination inside the source would be
    written into it; a source inside (or equal to) the destination would be removed by --replace."""
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
        raise StageError(
            f"{both}: the destination is inside the source (by device and inode: a bind mount or a link "
            "reaches it); stage into a directory outside it"
        )
    dest_st = lstat_at(to_fd, name)
    if dest_st is not None and stat.S_ISDIR(dest_st.st_mode):
        src_dir = str(src) if src.is_dir() else str(src.parent)
        with opened_dir(src_dir) as src_fd:
            if _ident(dest_st) in _ancestors(src_fd):
                raise StageError(
                    f"{both}: the source is inside the destination (by device and inode: a bind mount "
                    "or a link reaches it); stage into another directory"
                )
    elif dest_st is not None and _ident(dest_st) == _ident(src_st):
        raise StageError(f"{both} are the same file (by inode): stage into another directory (--to)")


AS_THAT_USER = (
    "as root, dltune stage does not write where another user can; run it as that user "
    "(e.g. runuser -u USER -- dltune stage ...)"
)


class Destination:
    """DIR/<name> and the entries dltune keeps beside it (partial copy, lock, records, the old copy
    of a --replace), all reached through DIR's open descriptor with links never followed: in a
    shared scratch directory another user may plant any of those names."""

    def __init__(self, to: Path, name: str) -> None:
        self.to, self.name = to, name
        try:
            # As root, every directory and link on the way is root's: a user who owns one could swap
            # it for a link to a directory only root may write (the walk names the one refused).
            if os.geteuid() == 0:
                self.fd = open_walked_dir(str(to))
            else:
                self.fd = os.open(to, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except UnsafeEntry as exc:
            raise StageError(f"{exc}; {AS_THAT_USER}") from exc
        except OSError as exc:
            where = f"{to}" if exc.filename in (None, str(to)) else f"{to} ({exc.filename})"
            raise StageError(f"{where}: cannot open the directory ({exc.strerror}) (--to)") from exc
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
            raise StageError(f"{self.to} belongs to {owner}: {AS_THAT_USER}")

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
            write_atomically_at(self.fd, entry, data, self.shown(entry))
        except UnsafeEntry as exc:
            raise StageError(str(exc)) from exc
        except OSError as exc:
            raise StageError(f"{self.shown(entry)}: cannot write dltune's record ({exc.strerror})") from exc

    def remove(self, entry: str) -> None:
        try:
            remove_at(self.fd, entry)
        except OSError as exc:
            raise StageError(f"{self.shown(entry)}: cannot remove it ({exc.strerror})") from exc

    def refuse_planted(self) -> None:
        """Before anything is written (under the lock): every name dltune writes beside the dataset
        is absent or an entry of this user's, never a link, and the files regular files. Another
        user's entry, a link or a FIFO planted there is refused naming it, never used, opened or
        removed."""
        for entry in (self.name, self.partial, self.aside):
            st = self.lstat(entry)
            if st is not None:
                self.expect_own(entry, st, stat.S_IFMT(st.st_mode))
        files = [self.record, self.partial_record, derived_name(self.partial, ".dltune-tmp")]
        for entry in [*files, *(derived_name(record, ".tmp", prefix="") for record in files[:2])]:
            st = self.lstat(entry)
            if st is not None:
                self.expect_own(entry, st, stat.S_IFREG)

    def remove_own(self, entry: str) -> None:
        """Remove an entry dltune made (absent: nothing to do); one that is a link or another
        user's is refused, never removed or entered."""
        st = self.lstat(entry)
        if st is not None:
            self.expect_own(entry, st, stat.S_IFMT(st.st_mode))
            self.remove(entry)

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
