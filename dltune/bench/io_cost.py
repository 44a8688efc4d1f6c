"""What two file-system findings cost on this node, measured without changing a mount (dltune.costs.impact
prices storage.data_noatime and storage.tmp_tmpfs with them; `dltune check` measures where the audit
found either):

- access times: the same small files read with and without ``O_NOATIME`` on the data disk as it is
  mounted. ``O_NOATIME`` reads exactly as a ``noatime`` mount would (no access time written), so the
  difference is what the mount's atime mode costs these reads; the access times are aged two days
  before every round (a dataset written long ago: ``relatime`` then writes once, ``strictatime`` on
  every read) and the file system's writeback is inside the timed part (``syncfs``), as in
  benchmarks/noatime.py, which remounts instead (root).
- /tmp: the same small-file scratch work (create, write, read back, remove) in /tmp and in a tmpfs
  (/dev/shm): what /tmp on tmpfs would make of it.

Each measures in a private directory it creates (0700) inside the mount and removes after. The reads'
two arms alternate every 100 files (read_rounds, which the tuning ledger uses too), the scratch work's
round by round; the median of the rounds is taken (machine noise hits both alike).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from dltune.costs.impact import IoCost
from dltune.costs.ledger import NOISE_FLOOR, median_and_deviation
from dltune.files import dirfd

TWO_DAYS_S = 2 * 24 * 3600
SMALL_FILE_READS = "small-file reads"
SCRATCH = "scratch files in /tmp"


@functools.cache
def _libc_syncfs() -> Callable[[int], int] | None:
    """libc's syncfs, looked up once: find_library runs ldconfig, ~10 ms that were inside every timed
    writeback."""
    libc_name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(libc_name, use_errno=True), "syncfs", None) if libc_name else None


def _syncfs(fd: int) -> None:
    """Write back the file system holding ``fd`` (its dirty inodes: the access times). Where libc has
    no syncfs, or it fails (EIO after a lost write), nothing is written back here: never sync(2), which
    writes back every mount and waits on a hung NFS server (the node being judged may have one)."""
    syncfs = _libc_syncfs()
    if syncfs is not None:
        syncfs(fd)


def _settle(directory_fd: int) -> None:
    """Before a measure's rounds: what was written before (the install that ran just before, another
    measure's files) is written back now, not inside the rounds. The measured file system and the
    root's (where most nodes' /var, /tmp and packages live; on a container, the host's disk); never
    every mount as sync(2) would, which waits on a hung NFS server."""
    _syncfs(directory_fd)
    with contextlib.suppress(OSError):
        root = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _syncfs(root)
        finally:
            os.close(root)


@contextlib.contextmanager
def _private_directory(mount: Path) -> Iterator[int | str]:
    """A directory of this user's own (0700) made inside ``mount`` and held open (every file in it is
    made and opened relative to it, never followed through a link), emptied and removed after, only
    while it is still the one made (a renamed or replaced one is left alone); or why there is none."""
    try:
        parent = os.open(mount, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        yield f"cannot make a scratch directory in {mount} to measure in: {exc.strerror}"
        return
    try:
        name = f".dltune-io-cost-{os.getpid()}-{os.urandom(6).hex()}"
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError as exc:
            yield f"cannot make a scratch directory in {mount} to measure in: {exc.strerror}"
            return
        opened = os.fstat(fd)
        # Between mkdir and open, another user of a writable, non-sticky mount could have put a
        # directory of theirs at the name: what was opened must be ours and closed to others.
        if opened.st_uid != os.geteuid() or opened.st_mode & 0o077:
            os.close(fd)
            yield f"cannot make a scratch directory in {mount} to measure in: {name} is not the one made"
            return
        try:
            yield fd
        finally:
            _empty(fd)
            made = os.fstat(fd)
            os.close(fd)
            now = dirfd.lstat_at(parent, name)
            if now is not None and (now.st_dev, now.st_ino) == (made.st_dev, made.st_ino):
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=parent)
    finally:
        os.close(parent)


def _write(directory_fd: int, name: str, payload: bytes) -> None:
    """A new file of ours in the directory: created exclusively, never through a link."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                 dir_fd=directory_fd)  # fmt: skip
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _files(directory_fd: int, count: int, size: int) -> list[str]:
    payload = os.urandom(size)
    names = [f"f{i:05d}" for i in range(count)]
    for name in names:
        _write(directory_fd, name, payload)
    return names


def _read_files(names: list[str], epochs: int, flags: int, directory_fd: int) -> float:
    """Seconds to read each file ``epochs`` times (no writeback)."""
    start = time.perf_counter()
    for _ in range(epochs):
        for name in names:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | flags, dir_fd=directory_fd)
            try:
                while os.read(fd, 1 << 16):
                    pass
            finally:
                os.close(fd)
    return time.perf_counter() - start


def _read_all(names: list[str], epochs: int, flags: int, directory_fd: int) -> float:
    """Seconds to read each file ``epochs`` times and write back what that dirtied (access times)."""
    start = time.perf_counter()
    _read_files(names, epochs, flags, directory_fd)
    _syncfs(directory_fd)
    return time.perf_counter() - start


def _age(names: list[str], directory_fd: int) -> None:
    now = time.time()
    for name in names:
        mtime = os.stat(name, dir_fd=directory_fd, follow_symlinks=False).st_mtime
        os.utime(name, (now - TWO_DAYS_S, mtime), dir_fd=directory_fd, follow_symlinks=False)


def _interleaved(
    rounds: int, first: Callable[[], float], second: Callable[[], float]
) -> tuple[list[float], list[float]]:
    """Each arm's time in each round, the arms' order swapped every other round (neither always
    follows the other's writeback)."""
    ones: list[float] = []
    twos: list[float] = []
    for index in range(rounds):
        if index % 2:
            twos.append(second())
            ones.append(first())
        else:
            ones.append(first())
            twos.append(second())
    return ones, twos


def _median_pair(
    rounds: int, first: Callable[[], float], second: Callable[[], float]
) -> tuple[float, float, float]:
    """Both arms' medians over interleaved rounds, and the noise: twice the larger arm's median absolute
    deviation (a round a CPU quota or another process stalled moves the range, not this)."""
    ones, twos = _interleaved(rounds, first, second)
    (one, one_spread), (two, two_spread) = median_and_deviation(ones), median_and_deviation(twos)
    return one, two, 2 * max(one_spread, two_spread)


def _cost(slower: float, faster: float, noise: float, of: str, method: str) -> IoCost:
    """The share ``slower`` loses against ``faster``; 0 where the difference is within the noise (and
    below the ledger's floor: a few percent separate two runs of one unchanged node)."""
    noise = max(noise, NOISE_FLOOR * slower)
    if slower - faster <= noise or slower <= 0:
        return IoCost(
            0.0, of, f"{method}: the difference is within the measurement's noise (+-{noise * 1e3:.1f} ms)"
        )
    return IoCost(1.0 - faster / slower, of, method)


def atime_cost(
    mount: Path, mode: str, files: int = 2000, size: int = 4096, epochs: int = 4, rounds: int = 7
) -> IoCost:
    """Small-file reads on ``mount`` as mounted (atime ``mode``) against the same with O_NOATIME,
    alternating every 100 files (read_rounds): the share each round's reads as mounted lose, its median
    over the rounds, and the noise twice their median absolute deviation. Whole arms of 50 ms each had
    moved by 10-20% a round on a 2-core lab node, which put a 22% cost within the noise."""
    measured = read_rounds(mount, rounds=rounds, files=files, size=size, epochs=epochs)
    if isinstance(measured, str):
        return IoCost(None, SMALL_FILE_READS, why=measured)
    reads = files * epochs
    plain = statistics.median(reads / rate for rate in measured.rates)
    noatime = statistics.median(reads / rate for rate in measured.reference)
    losses = [
        1.0 - mounted / reference
        for mounted, reference in zip(measured.rates, measured.reference, strict=True)
    ]
    loss, deviation = median_and_deviation(losses)
    noise = max(2 * deviation, NOISE_FLOOR)
    method = (
        f"{files} files of {size} B read {epochs} times on {mount}: {plain * 1e3:.0f} ms as mounted "
        f"({mode}), {noatime * 1e3:.0f} ms with O_NOATIME (as noatime would), alternating every 100 files, "
        f"writeback included; median of {rounds} rounds, access times aged two days before each"
    )
    if loss <= noise:
        return IoCost(
            0.0,
            SMALL_FILE_READS,
            f"{method}: the difference is within the measurement's noise (+-{noise:.0%})",
        )
    return IoCost(loss, SMALL_FILE_READS, method)


def _scratch_work(directory_fd: int, files: int, size: int) -> float:
    """A job's scratch files: all written, written back (as the kernel would within its 30 s), read
    back, removed. On a tmpfs the writeback costs nothing; on a disk it is the disk's work."""
    payload = os.urandom(size)
    names = [f"s{i:05d}" for i in range(files)]
    start = time.perf_counter()
    for name in names:
        _write(directory_fd, name, payload)
    _syncfs(directory_fd)
    _read_all(names, 1, 0, directory_fd)
    for name in names:
        os.unlink(name, dir_fd=directory_fd)
    return time.perf_counter() - start


def tmp_cost(tmp: Path, tmpfs: Path, files: int = 1000, size: int = 16384, rounds: int = 7) -> IoCost:
    """Scratch work in ``tmp`` against the same in ``tmpfs`` (a tmpfs: /dev/shm)."""
    with _private_directory(tmp) as here, _private_directory(tmpfs) as there:
        if isinstance(here, str) or isinstance(there, str):
            return IoCost(None, SCRATCH, why=str(here if isinstance(here, str) else there))
        on_tmp, on_tmpfs, noise = _median_pair(
            rounds, lambda: _scratch_work(here, files, size), lambda: _scratch_work(there, files, size)
        )
    method = (
        f"{files} files of {size} B written, written back, read back and removed: {on_tmp * 1e3:.0f} ms in "
        f"{tmp}, {on_tmpfs * 1e3:.0f} ms in the tmpfs {tmpfs}; median of {rounds} interleaved rounds"
    )
    return _cost(on_tmp, on_tmpfs, noise, SCRATCH, method)


class Rounds(NamedTuple):
    """The ledger's measure of one phase: files per second in each round as the node is, and in the
    same round the same work where the role's change cannot matter (the reference): the share of the
    two is what the role changes, whatever the machine's own speed did between the phases."""

    rates: list[float]
    reference: list[float]
    reference_is: str


def _finely_paired_reads(
    paths: list[str], directory_fd: int, epochs: int, chunk: int, mounted_first: bool
) -> tuple[float, float]:
    """One round of the ledger's read measure: the access times aged and written back, then chunk by
    chunk of files the same reads as mounted and with O_NOATIME, the two alternating every few
    milliseconds (a burst of other work on the host lands on both alike, which whole arms of 50 ms
    each did not: their ratio moved by 10-20% a round on a lab node). Seconds of each."""
    _age(paths, directory_fd)
    _syncfs(directory_fd)
    mounted = reference = 0.0
    for index, start in enumerate(range(0, len(paths), chunk)):
        part = paths[start : start + chunk]
        if (index % 2 == 0) == mounted_first:
            mounted += _read_files(part, epochs, 0, directory_fd)
            reference += _read_files(part, epochs, os.O_NOATIME, directory_fd)
        else:
            reference += _read_files(part, epochs, os.O_NOATIME, directory_fd)
            mounted += _read_files(part, epochs, 0, directory_fd)
    # The writeback of what the reads dirtied is the as-mounted reads' cost; a second writeback, of
    # nothing left, the reference's: each arm pays one (a syncfs costs a journal commit even when idle).
    mounted += _timed_syncfs(directory_fd)
    return mounted, reference + _timed_syncfs(directory_fd)


def _timed_syncfs(directory_fd: int) -> float:
    start = time.perf_counter()
    _syncfs(directory_fd)
    return time.perf_counter() - start


def read_rounds(
    mount: Path, rounds: int = 15, files: int = 2000, size: int = 4096, epochs: int = 4, chunk: int = 100
) -> Rounds | str:
    """The ledger's data-disk measure: small-file reads as the disk is mounted (access times aged two
    days, writeback included) and, finely interleaved with them, the same reads with O_NOATIME (what
    noatime makes of them: the reference), files read per second each round; or why it cannot be
    measured."""
    with _private_directory(mount) as directory_fd:
        if isinstance(directory_fd, str):
            return directory_fd
        try:
            paths = _files(directory_fd, files, size)
            _settle(directory_fd)
            times = [
                _finely_paired_reads(paths, directory_fd, epochs, chunk, mounted_first=index % 2 == 0)
                for index in range(rounds)
            ]
        except OSError as exc:  # a full disk: said, and the other measures still run
            return f"cannot read and write small files in {mount}: {exc.strerror}"
    reads = files * epochs
    return Rounds(
        [reads / mounted for mounted, _ in times],
        [reads / reference for _, reference in times],
        "the same reads with O_NOATIME",
    )


def scratch_rounds(
    tmp: Path, tmpfs: Path | None, rounds: int = 15, files: int = 1000, size: int = 16384
) -> Rounds | str:
    """The ledger's /tmp measure: files written, written back, read back and removed per second in
    ``tmp``, each round; and, interleaved, the same in the tmpfs ``tmpfs`` (/dev/shm: the reference)
    where the node has one and it takes the files, else no reference (the rates alone, the machine's
    speed in them); or why there is no measure."""
    with contextlib.ExitStack() as stack:
        here = stack.enter_context(_private_directory(tmp))
        if isinstance(here, str):
            return here
        there = stack.enter_context(_private_directory(tmpfs)) if tmpfs is not None else None
        _settle(here)
        try:
            if isinstance(there, int):
                try:
                    on_tmp, on_tmpfs = _interleaved(
                        rounds,
                        lambda: _scratch_work(here, files, size),
                        lambda: _scratch_work(there, files, size),
                    )
                    return Rounds(
                        [files / t for t in on_tmp],
                        [files / t for t in on_tmpfs],
                        f"the same scratch work in the tmpfs {tmpfs}",
                    )
                except OSError:  # the tmpfs is full (a container's 64 MiB /dev/shm): no reference
                    _empty(there)
            return Rounds([files / _scratch_work(here, files, size) for _ in range(rounds)], [], "")
        except OSError as exc:
            return f"cannot do the scratch work in {tmp}: {exc.strerror}"
        finally:
            _syncfs(here)  # nothing of ours is left to be written back in the next measure


def _empty(directory_fd: int) -> None:
    """Every file of ours in the directory removed (its entries, never followed)."""
    for entry in os.listdir(directory_fd):
        with contextlib.suppress(OSError):
            os.unlink(entry, dir_fd=directory_fd)
