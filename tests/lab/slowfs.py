"""slowfs.py BACKING MOUNTPOINT [--delay-ms 1]: the lab's slow, countable "shared filesystem".

A read-only FUSE passthrough over BACKING that waits a fixed delay on every metadata round trip an
NFS client makes (lookup/getattr, open, readdir: about 1 ms each, as a storage VIP one switch away)
and counts what it serves. Why FUSE: the host has no netem, and the lab containers share one page
cache, so block-device counters cannot tell one read of a dataset from three. Files are opened with
direct I/O, so every read() a client makes reaches this process and is counted and the kernel keeps
no copy of the data; sbcast, which maps the file it sends, gets it through the page cache instead,
dropped at each open (attributes are cached for 1 s, as NFS's actimeo would).

Counters: the virtual file MOUNTPOINT/.slowfs-stats (JSON, not itself counted) holds bytes read,
operations by kind, and the most operations in flight at once. `bytes_read` counts what readers
asked for: every byte of a direct-I/O open, and each byte of a page-cache open (sbcast's) once per
open. Through the page cache it is the kernel, not the reader, that decides which pages to fetch
and when (readahead, faults, reclaim), and it may fetch a page of one open twice: CI saw exactly
one page (4,096 bytes) too many, once, in the broadcast test. Those bytes are counted apart
(`page_cache_refetched_bytes`); a reader that opens a file again is counted again in full.
libfuse's multi-threaded loop serves requests (a thread per concurrent request, up to libfuse's
limit of 10 idle threads kept), and each delay is a sleep that releases Python's GIL, so N
concurrent requests wait about one delay, not N: `max_in_flight` shows how many it served at once.

Runs in the foreground as root (`allow_other`: the lab's job users read it); unmount with
`umount MOUNTPOINT` (or SIGTERM/SIGINT to this process).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import threading
import time
from collections import Counter
from typing import Any

import mfusepy as fuse

STATS = "/.slowfs-stats"


MAPPING_READERS = {"sbcast"}


def _caller() -> str:
    """The command name of the process making the request."""
    _uid, _gid, pid = fuse.fuse_get_context()
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as comm:
            return comm.read().strip()
    except OSError:
        return "?"


PAGE = 4096


def _refetched(served: set[int], offset: int, length: int) -> int:
    """The bytes of [offset, offset + length) on pages this open was served before; marks the rest."""
    again = 0
    for page in range(offset // PAGE, (offset + length + PAGE - 1) // PAGE):
        start, end = max(offset, page * PAGE), min(offset + length, (page + 1) * PAGE)
        if page in served:
            again += end - start
        served.add(page)
    return again


class SlowPassthrough(fuse.Operations):
    use_ns = True

    def __init__(self, backing: str, delay_s: float) -> None:
        self.backing = os.path.realpath(backing)
        self.delay_s = delay_s
        self._mutex = threading.Lock()
        self.ops: Counter[str] = Counter()
        self.bytes_read = 0
        self.page_cache_refetched_bytes = 0
        self.opens_by_reader: Counter[str] = Counter()
        # Per page-cache open (by file handle): the pages it has been served.
        self._cached_pages: dict[int, set[int]] = {}
        self.in_flight = 0
        self.max_in_flight = 0

    def _real(self, path: str) -> str:
        return self.backing + path

    def _round_trip(self, kind: str) -> None:
        with self._mutex:
            self.ops[kind] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay_s)
        finally:
            with self._mutex:
                self.in_flight -= 1

    def _stats(self) -> bytes:
        with self._mutex:
            data = {
                "bytes_read": self.bytes_read,
                "page_cache_refetched_bytes": self.page_cache_refetched_bytes,
                "opens_by_reader": dict(self.opens_by_reader),
                "ops": dict(self.ops),
                "max_in_flight": self.max_in_flight,
                "delay_ms": self.delay_s * 1000,
            }
        return (json.dumps(data, sort_keys=True) + "\n").encode()

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        if path == STATS:
            now = time.time_ns()
            return {"st_mode": 0o100444, "st_nlink": 1, "st_size": 4096, "st_mtime": now, "st_ctime": now}
        self._round_trip("getattr")
        try:
            st = os.lstat(self._real(path))
        except OSError as exc:
            raise fuse.FuseOSError(exc.errno or errno.EIO) from exc
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")
        attrs: dict[str, Any] = {key: getattr(st, key) for key in keys}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def readdir(self, path: str, fh: Any) -> list[str]:
        self._round_trip("readdir")
        names = [".", "..", *os.listdir(self._real(path))]
        return [*names, STATS[1:]] if path == "/" else names

    def readlink(self, path: str) -> str:
        self._round_trip("readlink")
        return os.readlink(self._real(path))

    def open(self, path: str, fi: Any) -> int:
        # Direct I/O, except for a reader that maps the file (sbcast: mmap of a direct-I/O FUSE file
        # fails with ENODEV before libfuse 3.16). Its file goes through the page cache, which the
        # kernel drops at every open (no keep_cache): each open's reads still reach this process.
        caller = _caller()
        fi.direct_io = 0 if caller in MAPPING_READERS else 1
        if path == STATS:
            fi.fh = 0
            return 0
        if fi.flags & (os.O_WRONLY | os.O_RDWR):
            raise fuse.FuseOSError(errno.EROFS)
        self._round_trip("open")
        try:
            fi.fh = os.open(self._real(path), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise fuse.FuseOSError(exc.errno or errno.EIO) from exc
        with self._mutex:
            self.opens_by_reader[caller] += 1
            if not fi.direct_io:
                self._cached_pages[fi.fh] = set()
        return 0

    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        if path == STATS:
            return self._stats()[offset : offset + size]
        data = os.pread(fi.fh, size, offset)
        with self._mutex:
            self.ops["read"] += 1
            served = self._cached_pages.get(fi.fh)
            refetched = 0 if served is None else _refetched(served, offset, len(data))
            self.bytes_read += len(data) - refetched
            self.page_cache_refetched_bytes += refetched
        return data

    def release(self, path: str, fi: Any) -> int:
        if path != STATS:
            with self._mutex:
                self._cached_pages.pop(fi.fh, None)
            os.close(fi.fh)
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.statvfs(self.backing)
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_namemax")
        return {key: getattr(st, key) for key in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backing")
    parser.add_argument("mountpoint")
    parser.add_argument("--delay-ms", type=float, default=1.0)
    args = parser.parse_args()
    operations = SlowPassthrough(args.backing, args.delay_ms / 1000)
    fuse.FUSE(
        operations,
        args.mountpoint,
        raw_fi=True,
        foreground=True,
        allow_other=True,
        ro=True,
        attr_timeout=1.0,
        entry_timeout=1.0,
        fsname="slowfs",
    )


if __name__ == "__main__":
    main()
