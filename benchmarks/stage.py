"""How fast `dltune stage` puts a dataset on node-local disk, against the usual tools.

Two loop-device ext4 disks (source and destination, like a shared filesystem's view and a node's
local SSD; both on this machine's disk). The source holds a tree of --files small files (a few KiB,
image crops) and --large files of --large-mb MiB. Each round runs every method on each part,
interleaved in a rotating order so machine noise hits all alike, each from a cold cache (sync +
drop_caches), into an empty destination:
    dltune stage (parallel workers), cp -r, tar -c | tar -x, rsync -a (when installed).
Two limits are measured in the same round, cold: the source's read limit (`dd` of one large file to
/dev/null) and the copy ceiling (`dd` of it onto the destination disk with direct I/O on both
sides: what a copy between these two filesystems on one disk can reach).

Then the slow source: the same small files behind tests/lab/slowfs.py (FUSE, about 1 ms per lookup,
open and readdir, as NFS one switch away; direct I/O), each method once per --slow-rounds. Local
disks answer a metadata operation in microseconds; this is where parallel opens pay.

Prints medians, each method's speed-up over cp -r, and the fractions of the read limit and of the
copy ceiling reached on the large files. Goals: >= 2x cp -r on the slow source's small files, >= 0.8
of the copy ceiling on the large. Needs root (loop devices, drop_caches, FUSE).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from dltune import staging


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def make_disk(work: Path, name: str, size_mb: int, inodes: int) -> tuple[str, Path]:
    image, mnt = work / f"{name}.img", work / name
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    loop = run("losetup", "--find", "--show", str(image))
    run("mkfs.ext4", "-q", "-N", str(inodes), loop)
    run("mount", "-o", "noatime", loop, str(mnt))
    return loop, mnt


def populate(src: Path, files: int, large: int, large_mb: int) -> None:
    small = src / "small"
    for i in range(files):
        directory = small / f"class{i % 300:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"img{i:06d}.jpg").write_bytes(os.urandom(2048 + (i * 37) % 6144))
    big = src / "large"
    big.mkdir()
    for i in range(large):
        with open(big / f"shard{i}.bin", "wb") as f:
            for _ in range(large_mb):
                f.write(os.urandom(1 << 20))


def by_dltune(src: Path, dst: Path) -> None:
    staging.stage(src, dst)


def by_cp(src: Path, dst: Path) -> None:
    run("cp", "-r", str(src), str(dst))


def by_tar(src: Path, dst: Path) -> None:
    packer = subprocess.Popen(["tar", "-C", str(src.parent), "-cf", "-", src.name], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-C", str(dst), "-xf", "-"], stdin=packer.stdout, check=True)
    if packer.stdout:
        packer.stdout.close()
    if packer.wait() != 0:
        raise RuntimeError("tar -c failed")


def by_rsync(src: Path, dst: Path) -> None:
    run("rsync", "-a", str(src), str(dst))


def timed(copy: Callable[[Path, Path], None], src: Path, dst: Path) -> float:
    for entry in dst.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    drop_caches()
    start = time.perf_counter()
    copy(src, dst)
    os.sync()  # the copy is done when it is on the destination disk
    return time.perf_counter() - start


def read_limit_mb_s(path: Path) -> float:
    drop_caches()
    start = time.perf_counter()
    run("dd", f"if={path}", "of=/dev/null", "bs=4M")
    return path.stat().st_size / 1e6 / (time.perf_counter() - start)


def copy_ceiling_mb_s(path: Path, dst: Path) -> float:
    """dd from the source disk onto the destination disk, direct I/O both sides, until on disk."""
    target = dst / "ceiling.bin"
    drop_caches()
    start = time.perf_counter()
    run("dd", f"if={path}", f"of={target}", "bs=4M", "iflag=direct", "oflag=direct")
    os.sync()
    seconds = time.perf_counter() - start
    target.unlink()
    return path.stat().st_size / 1e6 / seconds


class SlowSource:
    """tests/lab/slowfs.py over `backing`, mounted at `mountpoint` for the block's duration."""

    def __init__(self, backing: Path, mountpoint: Path) -> None:
        self.backing, self.mountpoint = backing, mountpoint
        self.server: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SlowSource:
        self.mountpoint.mkdir(exist_ok=True)
        slowfs = Path(__file__).resolve().parent.parent / "tests/lab/slowfs.py"
        self.server = subprocess.Popen([sys.executable, str(slowfs), str(self.backing), str(self.mountpoint)])
        for _ in range(100):
            if (self.mountpoint / ".slowfs-stats").exists():
                return self
            time.sleep(0.1)
        raise RuntimeError("slowfs did not mount (libfuse installed? root?)")

    def stats(self) -> dict[str, object]:
        return dict(json.loads((self.mountpoint / ".slowfs-stats").read_text()))

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", str(self.mountpoint)], check=False)
        if self.server:
            self.server.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=30000)
    parser.add_argument("--large", type=int, default=3)
    parser.add_argument("--large-mb", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slow-rounds", type=int, default=1, help="0: leave the slow source out")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root: loop devices and /proc/sys/vm/drop_caches", file=sys.stderr)
        return 2
    methods: dict[str, Callable[[Path, Path], None]] = {
        "dltune stage": by_dltune,
        "cp -r": by_cp,
        "tar | tar": by_tar,
    }
    if shutil.which("rsync"):
        methods["rsync -a"] = by_rsync
    console = Console(stderr=True)
    if "rsync -a" not in methods:
        console.print("rsync is not installed: left out (apt-get install rsync)")
    work = Path(tempfile.mkdtemp(prefix="dltune-stage-bench-", dir="/var/tmp"))
    data_mb = args.files * 8 // 1024 + args.large * args.large_mb
    loops: list[str] = []
    try:
        src_loop, src = make_disk(work, "shared", data_mb * 2 + 256, args.files + 10000)
        dst_loop, dst = make_disk(work, "local", data_mb * 2 + 256, args.files + 10000)
        loops += [src_loop, dst_loop]
        console.print(f"writing {args.files} small and {args.large} x {args.large_mb} MiB files ...")
        populate(src, args.files, args.large, args.large_mb)
        large_bytes = sum(p.stat().st_size for p in (src / "large").iterdir())
        samples: dict[tuple[str, str], list[float]] = {
            (m, part): [] for m in methods for part in ("small", "large")
        }
        limits: list[float] = []
        ceilings: list[float] = []
        slow: dict[str, list[float]] = {m: [] for m in methods}
        names = list(methods)
        with Progress(console=console) as progress:
            task = progress.add_task("rounds", total=args.rounds * (len(names) * 2 + 2))
            for round_index in range(args.rounds):
                limits.append(read_limit_mb_s(src / "large/shard0.bin"))
                ceilings.append(copy_ceiling_mb_s(src / "large/shard0.bin", dst))
                progress.advance(task, 2)
                order = names[round_index % len(names) :] + names[: round_index % len(names)]
                for name in order:
                    for part in ("small", "large"):
                        samples[(name, part)].append(timed(methods[name], src / part, dst))
                        progress.advance(task)
            if args.slow_rounds:
                with SlowSource(src, work / "slow") as source:
                    slow_task = progress.add_task("slow source", total=args.slow_rounds * len(names))
                    for round_index in range(args.slow_rounds):
                        order = names[round_index % len(names) :] + names[: round_index % len(names)]
                        for name in order:
                            slow[name].append(timed(methods[name], work / "slow/small", dst))
                            progress.advance(slow_task)
                    console.print(f"slow source served: {source.stats()}")
        # --bwlimit: half what the copy reached unlimited, on the large files.
        cap = round(large_bytes / 1e6 / statistics.median(samples[("dltune stage", "large")]) / 2)
        capped = timed(lambda s, d: staging.stage(s, d, bwlimit=cap), src / "large", dst)
        console.print(f"--bwlimit {cap}: {large_bytes / 1e6 / capped:.0f} MB/s reached on the large files")
        limit, ceiling = statistics.median(limits), statistics.median(ceilings)
        table = Table(
            title=f"median of {args.rounds} cold-cache rounds; read limit (dd) {limit:.0f} MB/s, "
            f"copy ceiling (dd, direct I/O) {ceiling:.0f} MB/s; slow source: {args.slow_rounds} round(s)"
        )
        columns = ("method", "small s", "x cp -r", "large s", "large MB/s", "of read limit", "of ceiling")
        for column in (*columns, "slow small s", "x cp -r"):
            table.add_column(column)
        cp_small = statistics.median(samples[("cp -r", "small")])
        cp_slow = statistics.median(slow["cp -r"]) if args.slow_rounds else 0.0
        for name in names:
            small_s = statistics.median(samples[(name, "small")])
            large_s = statistics.median(samples[(name, "large")])
            rate = large_bytes / 1e6 / large_s
            slow_s = statistics.median(slow[name]) if args.slow_rounds else 0.0
            table.add_row(
                name,
                f"{small_s:.2f}",
                f"{cp_small / small_s:.2f}",
                f"{large_s:.2f}",
                f"{rate:.0f}",
                f"{rate / limit:.2f}",
                f"{rate / ceiling:.2f}",
                f"{slow_s:.1f}" if slow_s else "-",
                f"{cp_slow / slow_s:.2f}" if slow_s else "-",
            )
        Console(width=160).print(table)
        return 0
    finally:
        for mnt in (work / "slow", work / "shared", work / "local"):
            subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
        for loop in loops:
            subprocess.run(["losetup", "--detach", loop], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
