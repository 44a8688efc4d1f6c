"""How fast `site.yml` converges the lab, as ratios against a floor taken in the same run (root; starts
its own lab containers `dltune-bench-N` from the lab image and removes them at the end).

Measured, each wall time of one `ansible-playbook` process:
- site.yml first run and idempotent re-run on 1 node, then on N nodes (default 4) of fresh containers;
- the floor: a no-op playbook that runs `ansible.builtin.ping` on every node as many times as the
  re-run executed tasks per node (same connection, same forks, no work in the modules);
- the re-run on N nodes with SSH-style pipelining off, and with the fact cache off (facts gathered
  again by every play), against the defaults of ansible.cfg.

Goals (issue 8): idempotent re-run / no-op floor <= 2; N nodes / 1 node <= 1.3 (re-run). On this
2-core machine every container shares the same two cores, so the node-scaling ratio measures CPU
contention as much as Ansible's parallelism: read it against a cluster's controller with more cores.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


# nodes.sh makes its nodes a Slurm cluster with a controller of their own (never the lab's).
CONTROLLER = "dltune-bench-slurmctl"


def start_nodes(names: list[str]) -> None:
    # No loop data disks: 1 + N nodes would exhaust the machine's 8 loop devices beside the lab's.
    env = {
        **os.environ,
        "DLTUNE_LAB_NODES": " ".join(names),
        "DLTUNE_LAB_CONTROLLER": CONTROLLER,
        "DLTUNE_LAB_DATA_DISKS": "0",
    }
    subprocess.run(["bash", str(REPO_ROOT / "tests/lab/nodes.sh")], check=True, env=env)


def remove_nodes(names: list[str]) -> None:
    subprocess.run(["docker", "rm", "-f", *names, CONTROLLER], check=False, capture_output=True)


def write_inventory(directory: Path, names: list[str]) -> Path:
    hosts = "".join(f"        {name}:\n" for name in names)
    inventory = directory / f"bench-{len(names)}.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
        + hosts
        + "      vars:\n        ansible_connection: community.docker.docker\n"
        "        ansible_python_interpreter: /usr/bin/python3\n        ansible_user: root\n"
        "    nvidia_driver_excluded:\n      hosts:\n" + hosts
    )
    return inventory


def write_noop(directory: Path, tasks: int) -> Path:
    playbook = directory / f"noop-{tasks}.yml"
    body = "".join(f"    - name: No-op {i}\n      ansible.builtin.ping:\n" for i in range(tasks))
    playbook.write_text(f"- name: Floor\n  hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n{body}")
    return playbook


def play(playbook: Path, inventory: Path, env: dict[str, str]) -> tuple[float, dict[str, tuple[int, int]]]:
    """Wall seconds of one run and, per host, (tasks that ran, tasks that changed)."""
    start = time.perf_counter()
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook), "-i", str(inventory)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    recap = {m[1]: (int(m[2]), int(m[3])) for m in RECAP.finditer(done.stdout) if m[1] != "localhost"}
    if done.returncode != 0 or any(int(m[4]) or int(m[5]) for m in RECAP.finditer(done.stdout)):
        raise RuntimeError(f"{playbook.name} failed (rc {done.returncode}):\n{done.stdout[-3000:]}")
    return seconds, recap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4, help="nodes of the scaled run (default 4)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("benchmarks/playbook.py: run as root (it starts privileged lab containers)")
    one = ["dltune-bench-1"]
    many = [f"dltune-bench-{i}" for i in range(1, args.nodes + 1)]
    work = Path(tempfile.mkdtemp(prefix="dltune-bench-playbook-"))
    base_env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(work / "facts"),
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    site = REPO_ROOT / "site.yml"
    rows: list[tuple[str, float]] = []
    try:
        remove_nodes(many)
        start_nodes(one)
        inv_one = write_inventory(work, one)
        rows.append(("site.yml first run, 1 node", play(site, inv_one, base_env)[0]))
        rerun_one, recap = play(site, inv_one, base_env)
        rows.append(("site.yml re-run, 1 node", rerun_one))
        ran, changed = recap[one[0]]
        if changed:
            raise RuntimeError(f"site.yml re-run changed {changed} task(s): not idempotent")
        noop = write_noop(work, ran)
        floor_one = play(noop, inv_one, base_env)[0]
        rows.append((f"no-op floor ({ran} pings), 1 node", floor_one))

        remove_nodes(many)
        shutil.rmtree(work / "facts", ignore_errors=True)
        start_nodes(many)
        inv_many = write_inventory(work, many)
        rows.append((f"site.yml first run, {args.nodes} nodes", play(site, inv_many, base_env)[0]))
        rerun_many = play(site, inv_many, base_env)[0]
        rows.append((f"site.yml re-run, {args.nodes} nodes", rerun_many))
        floor_many = play(noop, inv_many, base_env)[0]
        rows.append((f"no-op floor, {args.nodes} nodes", floor_many))
        no_pipelining = play(site, inv_many, {**base_env, "ANSIBLE_PIPELINING": "False"})[0]
        rows.append((f"re-run, {args.nodes} nodes, pipelining off", no_pipelining))
        no_cache = play(site, inv_many, {**base_env, "ANSIBLE_CACHE_PLUGIN": "memory"})[0]
        rows.append((f"re-run, {args.nodes} nodes, fact cache off", no_cache))
    finally:
        remove_nodes(many)
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{'case':44} {'seconds':>8}")
    for name, seconds in rows:
        print(f"{name:44} {seconds:8.1f}")
    print("\nratios (goal):")
    print(f"  re-run / no-op floor, 1 node          {rerun_one / floor_one:5.2f}  (<= 2)")
    print(f"  re-run / no-op floor, {args.nodes} nodes         {rerun_many / floor_many:5.2f}  (<= 2)")
    print(f"  re-run {args.nodes} nodes / 1 node               {rerun_many / rerun_one:5.2f}  (<= 1.3)")
    print(f"  pipelining off / on ({args.nodes} nodes)         {no_pipelining / rerun_many:5.2f}")
    print(f"  fact cache off / on ({args.nodes} nodes)         {no_cache / rerun_many:5.2f}")


if __name__ == "__main__":
    main()
