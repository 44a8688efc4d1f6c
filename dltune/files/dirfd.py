"""Filesystem work relative to open directory descriptors, for code that writes where another user can
write (shared scratch) or that runs as root in a user's directory.

Every entry is reached from a descriptor with O_NOFOLLOW (a link planted under a name dltune uses is
never followed), trees are walked and removed iteratively (any depth: no recursion, and one
descriptor held at a time, going back up through ".." checked against the device and inode it came
down from), and names dltune derives from a dataset's name stay within NAME_MAX.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator

from dltune.records import field, record

NAME_MAX = 255
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A digest of the full name replaces the tail of a derived name that would not fit in NAME_MAX.
DIGEST_CHARS = 16


class UnsafeEntry(Exception):
    """An entry dltune would use is not what dltune makes (a link, another owner, another kind)."""


def derived_name(name: str, suffix: str, prefix: str = ".") -> str:
    """`prefix + name + suffix`, or, where that is longer than NAME_MAX bytes, the name cut (on a
    character boundary) and followed by `~` and a digest of the whole name: distinct names keep
    distinct derived names, and the suffix is always kept."""
    whole = f"{prefix}{name}{suffix}"
    if len(os.fsencode(whole)) <= NAME_MAX:
        return whole
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:DIGEST_CHARS]
    room = NAME_MAX - len(os.fsencode(f"{prefix}~{digest}{suffix}"))
    cut = os.fsencode(name)[: max(room, 0)]
    while cut:
        try:
            head = os.fsdecode(cut)
            if os.fsencode(head) == cut:
                break
        except UnicodeDecodeError:
            pass
        cut = cut[:-1]
    return f"{prefix}{os.fsdecode(cut)}~{digest}{suffix}"


def lstat_at(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def expect_own(st: os.stat_result, shown: str, kind: int) -> None:
    """Refuse an existing entry that is a link, of another kind, or not owned by this user: dltune
    made none of those."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeEntry(f"{shown} is a symbolic link; dltune never makes one there: remove it")
    if stat.S_IFMT(st.st_mode) != kind:
        what = "a directory" if kind == stat.S_IFDIR else "a regular file"
        raise UnsafeEntry(f"{shown} is not {what} as dltune makes it: remove it")
    if st.st_uid != os.geteuid():
        raise UnsafeEntry(f"{shown} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})")


def open_own_dir(parent: int, name: str, shown: str) -> int:
    """An existing directory this user owns, opened without following a link; refused otherwise."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeEntry(
                f"{shown} is not a directory dltune made (a link or a file): remove it"
            ) from exc
        raise
    try:
        expect_own(os.fstat(fd), shown, stat.S_IFDIR)
    except UnsafeEntry:
        os.close(fd)
        raise
    return fd


def open_own_file(parent: int, name: str, shown: str, flags: int, mode: int = 0o600) -> int:
    """A regular file of this user's, created if absent (flags may hold O_CREAT/O_EXCL), never
    through a link; refused if it exists as anything else."""
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeEntry(f"{shown} is a symbolic link; dltune never makes one there: remove it") from exc
        # A FIFO without a reader (ENXIO), another user's file in a sticky directory (EACCES under
        # fs.protected_regular): say what stands there rather than the errno.
        existing = lstat_at(parent, name) if exc.errno != errno.ENOENT else None
        if existing is not None:
            expect_own(existing, shown, stat.S_IFREG)
        raise
    try:
        expect_own(os.fstat(fd), shown, stat.S_IFREG)
    except UnsafeEntry:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return fd


def read_own_file(parent: int, name: str, shown: str, limit: int = 1 << 20) -> bytes | None:
    """The content of a small file of this user's, None if absent; refused if not regular or not ours."""
    try:
        fd = open_own_file(parent, name, shown, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_then_rename(
    parent: int, temporary: str, name: str, fd: int, data: bytes, mode: int | None
) -> None:
    """The one atomic write: ``data`` into ``fd`` (the exclusive ``temporary``, already created), synced,
    then renamed over ``name`` within ``parent``; on any failure the temporary is gone."""
    try:
        try:
            _write_all(fd, data)
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=parent)
        raise


def write_atomically_at(parent: int, name: str, data: bytes, shown: str) -> None:
    """`name` in ``parent`` (a directory dltune made, as the user who made it) replaced by `data`
    through an exclusive temporary beside it (a planted temporary is refused, never written through)."""
    existing = lstat_at(parent, name)
    if existing is not None:
        expect_own(existing, shown, stat.S_IFREG)
    temporary = derived_name(name, ".tmp", prefix="")
    stale = lstat_at(parent, temporary)
    if stale is not None:
        expect_own(stale, f"{shown}.tmp", stat.S_IFREG)
        os.unlink(temporary, dir_fd=parent)
    fd = open_own_file(parent, temporary, f"{shown}.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    _write_then_rename(parent, temporary, name, fd, data, None)


@record
class _Level:
    """One directory on the walk's way down: its name in its parent, identity, and what is left."""

    name: str
    relative: str
    ident: tuple[int, int]
    pending: list[str] = field(default_factory=list)


Visit = Callable[[int, str, str, os.stat_result], None]
Leave = Callable[[int, str, str], None]


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _open_below(parent: int, name: str, want: tuple[int, int] | None = None) -> int:
    fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    st = os.fstat(fd)
    if want is not None and _ident(st) != want:
        os.close(fd)
        raise UnsafeEntry(f"{name} was replaced while it was walked")
    if st.st_uid == os.geteuid() and st.st_mode & stat.S_IRWXU != stat.S_IRWXU:
        os.fchmod(fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)  # our own 0500 directory: let us in
    return fd


def walk_below(top: int, visit: Visit, leave: Leave | None = None) -> None:
    """Every entry below the open directory `top`, iteratively: `visit(dir_fd, relative, name,
    lstat)` for each non-directory (links included, never followed), then `leave(parent_fd,
    relative, name)` for each directory below `top` once its content has been visited. One
    descriptor is open at a time whatever the depth; going up, ".." must be the directory the walk
    came down from, or the walk stops (a directory moved under it cannot lead it elsewhere).
    Directories on another filesystem are visited as entries, not entered."""
    top_st = os.fstat(top)
    device = top_st.st_dev
    current = os.dup(top)
    levels = [_Level("", "", _ident(top_st))]
    try:
        levels[0].pending = _visit_entries(current, "", device, visit)
        while True:
            level = levels[-1]
            if level.pending:
                name = level.pending.pop()
                child_st = os.stat(name, dir_fd=current, follow_symlinks=False)
                child = _open_below(current, name, _ident(child_st))
                os.close(current)
                current = child
                relative = f"{level.relative}/{name}" if level.relative else name
                levels.append(_Level(name, relative, _ident(child_st)))
                levels[-1].pending = _visit_entries(current, relative, device, visit)
                continue
            if len(levels) == 1:
                return
            levels.pop()
            up = _open_below(current, "..", levels[-1].ident)
            os.close(current)
            current = up
            if leave is not None:
                leave(current, level.relative, level.name)
    finally:
        os.close(current)


def walk_at(parent: int, name: str, visit: Visit, leave: Leave | None = None) -> None:
    """walk_below for parent/name (relative paths are relative to it), then leave(parent, name,
    name) for it; a non-directory is visited alone."""
    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        visit(parent, name, name, st)
        return
    fd = _open_below(parent, name, _ident(st))
    try:
        walk_below(fd, visit, leave)
    finally:
        os.close(fd)
    if leave is not None:
        leave(parent, name, name)


def _visit_entries(fd: int, relative: str, device: int, visit: Visit) -> list[str]:
    """Visit the non-directories in `fd`; return the subdirectories (on the same filesystem) to enter."""
    subdirs = []
    with os.scandir(fd) as entries:
        names = [entry.name for entry in entries]
    for name in names:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        path = f"{relative}/{name}" if relative else name
        if stat.S_ISDIR(st.st_mode) and st.st_dev == device:
            subdirs.append(name)
        else:
            visit(fd, path, name, st)
    return subdirs


def remove_at(parent: int, name: str) -> None:
    """Remove parent/name, a file, a link or a whole tree, never following a link and whatever the
    depth. A mount point below is not crossed: the removal stops there with OSError(EBUSY)."""
    st = lstat_at(parent, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return

    def unlink(fd: int, relative: str, entry: str, entry_st: os.stat_result) -> None:
        if stat.S_ISDIR(entry_st.st_mode):  # another filesystem mounted here
            raise OSError(errno.EBUSY, f"{relative}: another filesystem is mounted there")
        os.unlink(entry, dir_fd=fd)

    walk_at(parent, name, unlink, lambda fd, _relative, entry: os.rmdir(entry, dir_fd=fd))


@contextlib.contextmanager
def opened_dir(path: str) -> Iterator[int]:
    """A directory given by the user (links in its path are the user's choice), held open."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def fd_path(fd: int) -> str:
    """A path that reaches the open directory `fd` itself whatever its name becomes meanwhile
    (procfs's link to the descriptor), for library calls that take paths (tarfile, os.walk)."""
    return f"/proc/self/fd/{fd}"


MAX_LINK_HOPS = 40  # the kernel's own limit on links in one path


def open_walked_dir(path: str) -> int:
    """The directory `path`, reached from / one name at a time without following a link blindly:
    `..` and links mean what they mean to the kernel (a link is read and its target walked in turn).
    When dltune runs as root, a link another user owns is never followed and the directory reached
    must be root's (UnsafeEntry naming either). A directory of another user's above it may be passed
    through (Debian's /var/lib/prometheus is the prometheus user's, its node-exporter directory
    root's): each name below is opened from the previous descriptor with O_NOFOLLOW, so what that
    user can put there instead, a link or a directory of theirs, is refused when it is reached, and a
    directory root made elsewhere cannot be moved in by them. A relative path starts at the working
    directory."""
    start = path if path.startswith("/") else f"{os.getcwd()}/{path}"
    pending = [part for part in start.split("/") if part]
    fd = os.open("/", DIR_FLAGS)
    reached, hops = "", 0
    try:
        while pending:
            name = pending.pop(0)
            if name == ".":
                continue
            if name == "..":
                up = os.open("..", DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd, reached = up, os.path.dirname(reached)
                continue
            shown = f"{reached}/{name}"
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, shown) from exc
            if stat.S_ISLNK(st.st_mode):
                _refuse_owner(st, shown, "a link another user made is not followed")
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), shown)
                target = os.readlink(name, dir_fd=fd)
                pending[:0] = [part for part in target.split("/") if part]
                if target.startswith("/"):
                    os.close(fd)
                    fd, reached = os.open("/", DIR_FLAGS), ""
                continue
            if not pending:  # the directory written in: root's (or the caller's) alone
                _refuse_owner(st, shown, "not written in it")
            try:
                below = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, shown) from exc
            if _ident(os.fstat(below)) != _ident(st):  # swapped between the look and the open
                os.close(below)
                raise UnsafeEntry(f"{shown} changed while it was opened: not written below it")
            os.close(fd)
            fd, reached = below, shown
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def opened_dir_checked(path: str) -> Iterator[int]:
    """A directory dltune writes in, held open: as root reached by open_walked_dir (another user's
    link or directory on the way refused), otherwise as opened_dir (links in the path are the
    user's own choice)."""
    fd = open_walked_dir(path) if os.geteuid() == 0 else os.open(path, DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        yield fd
    finally:
        os.close(fd)


def _trusted_owners() -> set[int]:
    return {0, os.geteuid()}


def _refuse_owner(st: os.stat_result, shown: str, what: str) -> None:
    """Root follows or writes only what root (or the user it runs for) made: another user's entry on
    the way could lead root's write onto any file (a link to /etc/shadow, a directory swapped)."""
    if os.geteuid() == 0 and st.st_uid not in _trusted_owners():
        raise UnsafeEntry(f"{shown} belongs to uid {st.st_uid}, not root: {what}")


def open_parent(path: str) -> tuple[int, str, str]:
    """(descriptor of the directory holding ``path``'s last name, that name, the path as shown),
    the directory reached by open_walked_dir (as root, another user's link or directory on the way
    refused). A last name that is a link is followed the same way, when root may follow it: the file
    a link names is the one replaced, never the link."""
    hops = 0
    while True:
        directory, name = os.path.split(os.path.abspath(path))
        shown = f"{directory.rstrip('/')}/{name}"
        if not name:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        fd = open_walked_dir(directory)
        st = lstat_at(fd, name)
        if st is None or not stat.S_ISLNK(st.st_mode):
            return fd, name, shown
        try:
            _refuse_owner(st, shown, "a link another user made is not followed")
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), shown)
            target = os.readlink(name, dir_fd=fd)
        finally:
            os.close(fd)
        path = target if target.startswith("/") else f"{directory}/{target}"


def check_replaceable(parent: int, name: str, shown: str) -> None:
    """Where root replaces ``name`` (in ``parent``): a directory that anyone may write and that is not
    sticky lets any user swap the file between the check and the rename; an existing entry must be a
    regular file (a FIFO would block, a device is not an output) of root's or this user's."""
    directory = os.fstat(parent)
    if os.geteuid() == 0 and directory.st_mode & 0o002 and not directory.st_mode & stat.S_ISVTX:
        raise UnsafeEntry(f"{os.path.dirname(shown) or '/'} is writable by anyone: not written there")
    existing = lstat_at(parent, name)
    if existing is None:
        return
    if not stat.S_ISREG(existing.st_mode):
        raise UnsafeEntry(f"{shown} is not a regular file: not replaced")
    _refuse_owner(existing, shown, "not replaced")


def write_atomically(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644) -> None:
    """``path`` replaced by ``data`` (text as UTF-8) through a temporary beside it (O_EXCL, O_NOFOLLOW)
    renamed over it within one open directory: readers (node_exporter, Ansible, the next health check)
    never see half a file. Run as root (the timer, Slurm's health check), nothing another user made on
    the way is followed or replaced (open_parent, check_replaceable): that is a PermissionError whose
    text names it, an OSError like the others a write can meet."""
    shown_path = os.fspath(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        parent, name, shown = open_parent(shown_path)
        try:
            check_replaceable(parent, name, shown)
            temporary = derived_name(f"{name}.{os.getpid()}.{os.urandom(4).hex()}", ".tmp", prefix=".dltune.")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temporary, flags, 0o600, dir_fd=parent)
            _write_then_rename(parent, temporary, name, fd, payload, mode)
        finally:
            os.close(parent)
    except UnsafeEntry as exc:
        raise PermissionError(errno.EPERM, str(exc), shown_path) from exc
