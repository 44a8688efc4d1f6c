"""Listing a source tree: parallel lstat in the source's order, and how many readers suit its filesystem."""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dltune.staging.model import Entry, StageError
from dltune.staging.room import fstype_of

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
