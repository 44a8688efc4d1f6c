"""How long `dltune audit` takes, as a ratio against the bare interpreter start in the same run.

The audit must answer in seconds on any node; most of its cost is Python's start and imports.
Baseline: `python -c pass` with the same interpreter. Reports medians of N runs each, interleaved
so that machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests/fixtures/tmp_tmpfs_ok"


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    cases = {
        "baseline: python -c pass": [sys.executable, "-c", "pass"],
        "dltune audit --format json (host)": [
            sys.executable,
            "-m",
            "dltune.cli",
            "audit",
            "--format",
            "json",
        ],
        "dltune audit --root fixture": [
            sys.executable,
            "-m",
            "dltune.cli",
            "audit",
            "--format",
            "json",
            "--root",
            str(FIXTURE),
        ],
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            samples[name].append(timed(argv))
    base = statistics.median(samples["baseline: python -c pass"])
    print(f"{'case':40} {'median s':>9} {'x baseline':>11}")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"{name:40} {med:9.3f} {med / base:11.1f}")


if __name__ == "__main__":
    main()
