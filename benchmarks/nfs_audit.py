"""`dltune audit --only nfs` wall time on a node with healthy NFS mounts vs the same node after its
NFS server died (root; brings up tests/lab's NFS storage namespace and VM, ~5 min under TCG).

Goal (issue 5): with a dead server the audit returns within --nfs-timeout + 1 s instead of hanging
on a hard mount. Times are taken inside the VM (no SSH in them); medians of --runs runs. The healthy
run is the baseline of the same session; the dead run is reported against the goal.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.lab.nfsvm import apply_roles, stop_nfs_server, storage_and_vm, vm

TIMED_AUDIT = (
    "python3 -c 'import subprocess, time; t = time.monotonic();"
    ' subprocess.run(["dltune", "audit", "--only", "nfs", "--nfs-timeout", "{timeout}"],'
    " stdout=subprocess.DEVNULL); print(time.monotonic() - t)'"
)


def audit_seconds(timeout: float) -> float:
    done = vm(TIMED_AUDIT.format(timeout=timeout), timeout=120)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return float(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nfs-timeout", type=float, default=3.0)
    args = parser.parse_args()
    with storage_and_vm():
        apply_roles()
        healthy = [audit_seconds(args.nfs_timeout) for _ in range(args.runs)]
        stop_nfs_server()
        time.sleep(3)
        dead = [audit_seconds(args.nfs_timeout) for _ in range(args.runs)]
    h, d = statistics.median(healthy), statistics.median(dead)
    goal = args.nfs_timeout + 1.0
    print(
        f"4 NFS mounts over 4 VIPs, --nfs-timeout {args.nfs_timeout:g}s,"
        f" median of {args.runs} runs (in the VM)"
    )
    print(f"  healthy server : {h:6.2f}s  (baseline, 1.00x)")
    print(f"  dead server    : {d:6.2f}s  ({d / h:.2f}x the healthy audit; goal <= {goal:.1f}s: "
          f"{'met' if max(dead) <= goal else 'NOT met'}, worst {max(dead):.2f}s)")  # fmt: skip


if __name__ == "__main__":
    main()
