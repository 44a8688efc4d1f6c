"""Wall time of `dltune bench --quick` (goal: <= 60 s on a 2-core machine without a GPU), against a
baseline taken in the same run: the bare start-up of a Python that imports torch and torchvision.

Rounds alternate baseline and bench, so machine noise hits both; prints the medians and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from rich.console import Console
from rich.progress import Progress
from rich.table import Table


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    baseline_argv = [sys.executable, "-c", "import torch, torchvision"]
    bench_argv = [sys.executable, "-m", "dltune.cli", "bench", "--quick", "--format", "json"]
    baseline, bench = [], []
    with Progress(console=Console(stderr=True)) as progress:
        task = progress.add_task("rounds", total=args.rounds * 2)
        for _ in range(args.rounds):
            baseline.append(timed(baseline_argv))
            progress.advance(task)
            bench.append(timed(bench_argv))
            progress.advance(task)
    table = Table(title=f"dltune bench --quick, median of {args.rounds} rounds")
    for column in ("run", "median s", "x baseline"):
        table.add_column(column)
    base = statistics.median(baseline)
    table.add_row("import torch, torchvision (baseline)", f"{base:.1f}", "1.0")
    table.add_row(
        "dltune bench --quick", f"{statistics.median(bench):.1f}", f"{statistics.median(bench) / base:.1f}"
    )
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
