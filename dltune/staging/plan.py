"""Room and advice before anything is copied: the preflight, --bwlimit's bounds, `--plan`."""

from __future__ import annotations

import math
from pathlib import Path

from dltune.model import counted, human_size
from dltune.staging.model import Entry, StageError
from dltune.staging.room import Space, fstype_of
from dltune.staging.scan import scan_tree

# Reserve kept free on the destination: another job on the node needs room too.
RESERVE_FRACTION = 0.02


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
        # Where the reserve alone tips it, it is named: "needs 5 MB, 5 MB free" would read as room.
        kept = f" and {human_size(reserve)} kept free" if need_bytes <= space.free_bytes else ""
        problems.append(
            f"needs {human_size(need_bytes)} in {block}-byte blocks{kept}, "
            f"{human_size(space.free_bytes)} free at {dest}"
        )
    if space.free_inodes and need_inodes > space.free_inodes:
        problems.append(f"needs {need_inodes} inodes, {space.free_inodes} free")
    if space.mem_available is not None and need_bytes > space.mem_available:
        problems.append(
            f"{dest} is a {space.fstype}: its {human_size(need_bytes)} would come out of RAM "
            f"({human_size(space.mem_available)} available)"
        )
    if problems:
        raise StageError(
            "not enough room, nothing copied: "
            + "; ".join(problems)
            + ". Free space, or stage elsewhere (--to)."
        )


def check_bwlimit(bwlimit: float | None) -> None:
    if bwlimit is None or bwlimit == 0:
        return
    if not (math.isfinite(bwlimit) and MIN_BWLIMIT <= bwlimit <= MAX_BWLIMIT):
        raise StageError(f"--bwlimit {bwlimit}: {BWLIMIT_RANGE}")


# A limit above this (1 TB/s) is no limit: a larger or non-finite value is a typo. Below the least
# (1 kB/s) a read of one chunk would wait for hours to centuries (and past the clock's range, never
# return): a rate that cannot be honoured.
MAX_BWLIMIT, MIN_BWLIMIT = 1e6, 0.001
BWLIMIT_RANGE = "give 0 (no limit) or MB/s from 0.001 to 1000000"

# --plan's thresholds: what fits in memory, what is worth staging, when many small files should be packed.
MEMORY_GB, STAGE_GB = 10, 100
PACK_FILES, PACK_MEAN_BYTES = 10_000, 1_000_000


def plan_advice(src: Path, nodes: int = 1) -> list[str]:
    """Where a dataset should live during a job of `nodes` nodes: in memory, staged to local disk,
    read from the shared filesystem, whether to pack it first, and whether to broadcast it."""
    if src.is_dir():
        sizes = [e.size for e in scan_tree(src) if e.kind == "file"]
        return advice(str(src), sum(sizes), len(sizes), fstype_of(src), nodes, directory=True)
    return advice(str(src), src.stat().st_size, 1, fstype_of(src), nodes, directory=False)


def advice(shown: str, size: int, count: int, fstype: str, nodes: int, directory: bool) -> list[str]:
    """plan_advice's judgement of what it read: `size` bytes in `count` files on a `fstype`."""
    if not count:
        return [f"{shown}: no file in it, on {fstype}: nothing to stage"]
    mean = size / count
    lines = [
        f"{shown}: {human_size(size)} in {counted(count, 'file')}, "
        + (f"mean {human_size(mean)}, " if count > 1 else "")
        + f"on {fstype}"
    ]
    if directory and count > PACK_FILES and mean < PACK_MEAN_BYTES:
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
            f"broadcast: staged per node, {nodes} nodes read {human_size(nodes * size)} from the shared "
            f"filesystem at job start; `dltune stage --broadcast SRC` in the batch script reads "
            f"{human_size(size)} once and Slurm's sbcast fans it out (each node needs room for twice "
            "the dataset while it lands)"
        )
    return lines
