"""What `noatime` buys when reading many small files: strictatime vs relatime vs noatime.

A loop-device ext4 disk holds N small files (a few KiB each, like audio clips or image crops).
Each round, for each atime mode in turn (interleaved, so machine noise hits all alike):
  1. remount the disk with that mode,
  2. age every file's atime by two days (a dataset written long ago: relatime then updates
     once, like the first epoch of the day; strictatime updates on every read),
  3. sync and drop the page cache (cold cache, as on a fresh node or a dataset bigger than RAM),
  4. read every file --epochs times (the first cold, the rest warm, like training epochs), then
     sync: the time includes writing back the access times.
Prints the median per mode and its ratio to noatime. Needs root (loop device, drop_caches).

--method-check compares how `dltune check` prices storage.data_noatime (dltune.bench.io_cost: the
same reads with and without O_NOATIME on the mount as it is, warm cache, writeback inside the timed
part) with what remounting the disk noatime gives for the same files and reads, round by round:
`dltune check`'s fraction must agree with the remount's. --mount DIR runs it on a mounted disk
(remounted between the modes, its options restored after) instead of a loop device; --json prints
one JSON object (the lab test reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

MODES = ("strictatime", "relatime", "noatime")
TWO_DAYS = 2 * 24 * 3600


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def make_dataset(root: Path, count: int, rng: random.Random) -> list[Path]:
    files = []
    for i in range(count):
        directory = root / f"class{i % 100:03d}"
        directory.mkdir(exist_ok=True)
        path = directory / f"clip{i:06d}.wav"
        path.write_bytes(rng.randbytes(rng.randint(2048, 8192)))
        files.append(path)
    return files


def read_round(files: list[Path], epochs: int) -> float:
    start = time.perf_counter()
    for _ in range(epochs):
        for path in files:
            with open(path, "rb") as f:
                f.read()
    os.sync()
    return time.perf_counter() - start


def method_check(mount: Path, files: int, epochs: int, rounds: int) -> dict[str, float]:
    """dltune's O_NOATIME arm and a noatime remount against the same strictatime reads, interleaved."""
    from dltune.bench import io_cost

    options = run("findmnt", "-n", "-o", "OPTIONS", "--target", str(mount))
    times: dict[str, list[float]] = {"strictatime": [], "o_noatime": [], "noatime_mount": []}
    try:
        with io_cost._private_directory(mount) as fd:
            if isinstance(fd, str):
                raise SystemExit(fd)
            paths = io_cost._files(fd, files, 4096)
            directory = fd

            def timed(flags: int) -> float:
                io_cost._age(paths, directory)
                io_cost._syncfs(directory)
                return io_cost._read_all(paths, epochs, flags, directory)

            def strict_arms(index: int) -> None:
                run("mount", "-o", "remount,strictatime", "--options-source", "disable", str(mount))
                arms = [("strictatime", 0), ("o_noatime", os.O_NOATIME)]
                for name, flags in arms if index % 2 == 0 else arms[::-1]:
                    times[name].append(timed(flags))

            def noatime_arm() -> None:
                run("mount", "-o", "remount,noatime", "--options-source", "disable", str(mount))
                times["noatime_mount"].append(timed(0))

            # The remounted arm first in every other round: a read right after a remount is not always
            # the noatime one (in a fixed order, that position's cost read as the option's).
            for index in range(rounds):
                if index % 2 == 0:
                    strict_arms(index)
                    noatime_arm()
                else:
                    noatime_arm()
                    strict_arms(index)
    finally:
        run("mount", "-o", f"remount,{options}", "--options-source", "disable", str(mount))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        **{f"{name}_s": value for name, value in medians.items()},
        "dltune_fraction": 1.0 - medians["o_noatime"] / medians["strictatime"],
        "remount_fraction": 1.0 - medians["noatime_mount"] / medians["strictatime"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=30000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--image-mb", type=int, default=768)
    parser.add_argument("--method-check", action="store_true", help="dltune check's method vs a remount")
    parser.add_argument("--mount", type=Path, help="--method-check on this mounted disk (no loop device)")
    parser.add_argument("--json", action="store_true", help="--method-check's figures as one JSON object")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root: a loop device and /proc/sys/vm/drop_caches", file=sys.stderr)
        return 2
    console = Console(stderr=True)
    if args.method_check and args.mount:
        return report_method_check(method_check(args.mount, args.files, args.epochs, args.rounds), args.json)
    work = Path(tempfile.mkdtemp(prefix="dltune-noatime-", dir="/var/tmp"))
    image, mnt = work / "disk.img", work / "mnt"
    mnt.mkdir()
    loop = None
    try:
        with open(image, "wb") as f:
            f.truncate(args.image_mb << 20)
        loop = run("losetup", "--find", "--show", str(image))
        run("mkfs.ext4", "-q", "-N", str(args.files + 10000), loop)
        run("mount", "-o", "noatime", loop, str(mnt))
        if args.method_check:
            return report_method_check(method_check(mnt, args.files, args.epochs, args.rounds), args.json)
        console.print(f"writing {args.files} files on {loop} ...")
        files = make_dataset(mnt, args.files, random.Random(1))  # noqa: S311 - test data, not secrets
        samples: dict[str, list[float]] = {m: [] for m in MODES}
        with Progress(console=console) as progress:
            task = progress.add_task("rounds", total=args.rounds * len(MODES))
            for _ in range(args.rounds):
                for mode in MODES:
                    run("mount", "-o", f"remount,{mode}", "--options-source", "disable", str(mnt))
                    old = time.time() - TWO_DAYS
                    for path in files:
                        os.utime(path, (old, path.stat().st_mtime))
                    drop_caches()
                    samples[mode].append(read_round(files, args.epochs))
                    progress.advance(task)
        base = statistics.median(samples["noatime"])
        table = Table(
            title=f"{args.files} small files x {args.epochs} epochs (first cold), "
            f"median of {args.rounds} rounds"
        )
        for column in ("mount option", "median s", "files/s", "x noatime time"):
            table.add_column(column)
        for mode in MODES:
            med = statistics.median(samples[mode])
            rate = args.files * args.epochs / med
            table.add_row(mode, f"{med:.2f}", f"{rate:,.0f}", f"{med / base:.3f}")
        Console().print(table)
        return 0
    finally:
        subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
        if loop:
            subprocess.run(["losetup", "--detach", loop], check=False)
        shutil.rmtree(work, ignore_errors=True)


def report_method_check(figures: dict[str, float], as_json: bool) -> int:
    if as_json:
        print(json.dumps(figures))
        return 0
    table = Table(title="dltune check's O_NOATIME reads vs a noatime remount (warm cache, medians)")
    for column in ("strictatime s", "O_NOATIME s", "noatime mount s", "dltune's fraction", "remount's"):
        table.add_column(column)
    table.add_row(
        f"{figures['strictatime_s']:.4f}",
        f"{figures['o_noatime_s']:.4f}",
        f"{figures['noatime_mount_s']:.4f}",
        f"{figures['dltune_fraction']:.1%}",
        f"{figures['remount_fraction']:.1%}",
    )
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
