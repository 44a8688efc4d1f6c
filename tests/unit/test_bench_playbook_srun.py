"""The srun line of playbooks/bench.yml's multi-node run, rendered by Ansible's own templating against
the lab inventory's play hosts (gpu_nodes that are also in slurm), with sinfo rows in the shapes Slurm
prints gres ("gpu:h100:8(S:0-1)", several types, "(null)" on a CPU node). The run itself goes through
the lab's real Slurm in tests/integration/test_site_lab.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytest.importorskip("ansible")

# Rendered in a child: Ansible's templating patches the interpreter (sys.intern), which later
# imports of torch._dynamo in this pytest process do not survive.
RENDER = """
import json, sys
import yaml
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

repo, sinfo_lines, extra = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
loader = DataLoader()
inventory = InventoryManager(loader=loader, sources=[repo + "/inventory/lab.yml"])
gpu_nodes = {h.name for h in inventory.get_hosts("gpu_nodes")}
hosts = sorted(gpu_nodes & {h.name for h in inventory.get_hosts("slurm")})
plays = yaml.safe_load(open(repo + "/playbooks/bench.yml"))
play = next(p for p in plays if "Slurm" in p["name"])
variables = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in play["vars"].items()}
variables.update(
    ansible_play_hosts=hosts,
    hostvars={h: {"bench__slurm_name": h.split(".")[0]} for h in hosts},
    bench__sinfo={"stdout_lines": sinfo_lines},
    playbook_dir=repo + "/playbooks",
    **extra,
)
argv = Templar(loader=loader, variables=variables).template(trust_as_template("{{ bench__srun_argv }}"))
print(json.dumps(list(argv)))
"""


def srun_argv(sinfo_lines: list[str], **extra: object) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", RENDER, str(REPO_ROOT), json.dumps(sinfo_lines), json.dumps(extra)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_step_asks_for_every_gpu_and_cpu_of_each_node() -> None:
    """Without --gpus-per-node a gres-managed node gives the step no GPU; without --cpus-per-task Slurm
    binds the one task (torchrun and its eight workers) to one CPU."""
    argv = srun_argv(
        [
            "dltune-lab-node1|128|gpu:h100:8(S:0-1)",
            "dltune-lab-node2|128|gpu:h100:8(S:0-1)",
            "dltune-lab-node3|96|gpu:h100:4(S:0),gpu:a100:4(S:1)",
        ]
    )
    assert argv[:4] == [
        "srun",
        "--nodes=3",
        "--ntasks-per-node=1",
        "--nodelist=dltune-lab-node1,dltune-lab-node2,dltune-lab-node3",
    ]
    assert "--exclusive" in argv and "--cpus-per-task=96" in argv and "--gpus-per-node=8" in argv
    assert argv.index("--gpus-per-node=8") < argv.index("dltune")


def test_a_cpu_only_step_asks_for_no_gpu_and_overrides_win() -> None:
    argv = srun_argv(["dltune-lab-node1|2|(null)", "dltune-lab-node2|2|(null)", "dltune-lab-node3|2|(null)"])
    assert "--cpus-per-task=2" in argv and not any(a.startswith("--gpus-per-node") for a in argv)
    pinned = srun_argv(
        ["dltune-lab-node1|64|gpu:8"], dltune_bench_cpus_per_task=16, dltune_bench_gpus_per_node=4
    )
    assert "--cpus-per-task=16" in pinned and "--gpus-per-node=4" in pinned
