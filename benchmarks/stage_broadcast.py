"""What `dltune stage --broadcast` costs, and saves, against staging on one node (needs `make lab`).

A dataset of --files small files (and --large-mb of large ones) sits behind the lab's slow shared
source (tests/lab/slowfs.py: FUSE, ~1 ms per lookup/open/readdir, every byte counted), mounted into
the three lab nodes. In one 3-node Slurm job as the lab user, each round runs, in a rotating order:
    single     `dltune stage SRC` on the first node only (the baseline: one node, one read)
    per node   `srun --ntasks-per-node=1 dltune stage SRC` (every node reads the source)
    broadcast  `dltune stage --broadcast SRC` (one read, sbcast to the others)
each into an empty directory. Prints, per method, the median wall time, its ratio to `single`, and
the bytes the source served (read from its counters inside the job). Needs root (FUSE, docker).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.stage import SlowSource  # noqa: E402

NODES = ("dltune-lab-node1", "dltune-lab-node2", "dltune-lab-node3")
LAB_STATE = Path(os.environ.get("DLTUNE_LAB_STATE", "/var/tmp/dltune-lab"))
METHODS = {
    "single": "dltune stage $SRC --to $D/single",
    "per node": "srun --ntasks-per-node=1 dltune stage $SRC --to $D/pernode",
    "broadcast": "dltune stage --broadcast $SRC --to $D/broadcast",
}
STATS = "cat /shared/bench-slow/.slowfs-stats"


def populate(dataset: Path, files: int, large_mb: int) -> int:
    for i in range(files):
        path = dataset / f"class{i % 100:03d}" / f"img{i:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(2048 + (i * 37) % 6144))
    if large_mb:
        with open(dataset / "shard.bin", "wb") as shard:
            for _ in range(large_mb):
                shard.write(os.urandom(1 << 20))
    return sum(p.stat().st_size for p in dataset.rglob("*") if p.is_file())


def job_script(rounds: int) -> str:
    """The batch script: each method per round, timed, with the source's counters around it."""
    lines = [
        "#!/bin/bash",
        "set -u",
        "SRC=/shared/bench-slow/ds",
        "D=/var/tmp/dltune-bench-$SLURM_JOB_ID",
        'srun --ntasks-per-node=1 sh -c "rm -rf $D && mkdir -p $D/single $D/pernode $D/broadcast"',
    ]
    names = list(METHODS)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            tag = name.replace(" ", "_")
            lines += [
                f'echo "BEFORE {tag} $({STATS})"',
                "start=$(date +%s.%N)",
                f"{METHODS[name]} >/dev/null 2>&1 || echo FAILED {tag}",
                f'echo "TIME {tag} $start $(date +%s.%N)"',
                f'echo "AFTER {tag} $({STATS})"',
                'srun --ntasks-per-node=1 sh -c "rm -rf $D/*/ds $D/*/.ds.* && sync"',
            ]
    lines.append('srun --ntasks-per-node=1 rm -rf "$D"')
    return "\n".join(lines) + "\n"


def ensure_dltune_on_nodes(console: Console) -> None:
    probe = subprocess.run(["docker", "exec", NODES[0], "dltune", "version"], capture_output=True)
    if probe.returncode != 0:
        console.print("installing dltune on the lab nodes (playbooks/dltune.yml) ...")
        subprocess.run(["ansible-playbook", "playbooks/dltune.yml", "-i", "inventory"], cwd=REPO, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--large-mb", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    console = Console(stderr=True)
    if os.geteuid() != 0 or not (LAB_STATE / "shared").is_dir():
        console.print("needs root and the lab's nodes (make lab)")
        return 2
    ensure_dltune_on_nodes(console)
    backing, mountpoint = LAB_STATE / "bench-backing", LAB_STATE / "shared/bench-slow"
    shutil.rmtree(backing, ignore_errors=True)
    console.print(f"writing {args.files} files ({args.large_mb} MiB large) ...")
    dataset_bytes = populate(backing / "ds", args.files, args.large_mb)
    script = Path("/home/alice") / f"stage-broadcast-bench-{time.time_ns()}.sh"
    subprocess.run(
        ["docker", "exec", "-i", NODES[0], "sh", "-c", f"cat > {script} && chown alice {script}"],
        input=job_script(args.rounds).encode(),
        check=True,
    )
    output_file = script.with_suffix(".out")
    with SlowSource(backing, mountpoint):
        console.print(f"3-node job, {args.rounds} round(s) of {', '.join(METHODS)} ...")
        subprocess.run(
            [
                "docker", "exec", NODES[0], "runuser", "-u", "alice", "--",
                "sbatch", "--wait", f"--nodes={len(NODES)}", f"--nodelist={','.join(NODES)}",
                f"--output={output_file}", str(script),
            ],
            check=False,
            timeout=7200,
        )  # fmt: skip
    output = subprocess.run(
        ["docker", "exec", NODES[0], "cat", str(output_file)], capture_output=True, text=True
    ).stdout
    times: dict[str, list[float]] = {}
    served: dict[str, list[int]] = {}
    before: dict[str, int] = {}
    for line in output.splitlines():
        if m := re.match(r"(BEFORE|AFTER) (\S+) (\{.*\})", line):
            read = int(json.loads(m.group(3))["bytes_read"])
            if m.group(1) == "BEFORE":
                before[m.group(2)] = read
            else:
                served.setdefault(m.group(2), []).append(read - before[m.group(2)])
        elif m := re.match(r"TIME (\S+) ([\d.]+) ([\d.]+)", line):
            times.setdefault(m.group(1), []).append(float(m.group(3)) - float(m.group(2)))
        elif line.startswith("FAILED"):
            console.print(f"[red]{line}[/red]: see {output_file} on {NODES[0]}")
    if not times.get("single"):
        console.print(output[-3000:])
        return 1
    single = statistics.median(times["single"])
    table = Table(
        title=f"{args.files} files, {dataset_bytes / 1e6:.0f} MB on the slow source; 3 lab nodes; "
        f"median of {args.rounds} round(s)"
    )
    for column in ("method", "seconds", "x single", "source MB read", "x dataset"):
        table.add_column(column)
    for name in METHODS:
        tag = name.replace(" ", "_")
        seconds = statistics.median(times.get(tag, [float("nan")]))
        read = statistics.median(served.get(tag, [0]))
        table.add_row(
            name,
            f"{seconds:.1f}",
            f"{seconds / single:.2f}",
            f"{read / 1e6:.0f}",
            f"{read / dataset_bytes:.2f}",
        )
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
