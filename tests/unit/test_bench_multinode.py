"""`dltune bench --multi-node`: where a task sits in its srun step, and how the result names the nodes.
Pure logic; the real multi-node run over the lab's Slurm is in tests/integration/test_site_lab.py."""

from __future__ import annotations

import pytest

from dltune.bench.judge import judge_allreduce
from dltune.bench.measure import BenchError
from dltune.bench.run import slurm_step, torchrun_env
from dltune.model import Status


def expand(nodelist: str) -> list[str]:
    """Stand-in for `scontrol show hostnames` on the two lists these tests use."""
    return {"node[1-2]": ["node1", "node2"], "node1": ["node1"]}[nodelist]


def step_env(**overrides: str) -> dict[str, str]:
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURMD_NODENAME": "node2",
        "SLURM_STEP_NODELIST": "node[1-2]",
        "SLURM_STEP_NUM_TASKS": "2",
    }
    env.update(overrides)
    return env


def test_a_task_finds_its_node_rank_and_the_leader() -> None:
    step = slurm_step(step_env(), expand)
    assert step.hosts == ["node1", "node2"] and step.node_rank == 1 and step.leader == "node1"
    assert step.port == 29600 + 242
    assert slurm_step(step_env(SLURMD_NODENAME="node1"), expand).node_rank == 0


def test_outside_srun_the_error_names_the_missing_variables_and_the_srun_line() -> None:
    with pytest.raises(BenchError, match=r"SLURM_JOB_ID.*not set.*srun --nodes=N --ntasks-per-node=1"):
        slurm_step({"SLURMD_NODENAME": "node1", "SLURM_STEP_NODELIST": "node1"}, expand)


def test_more_than_one_task_per_node_is_refused() -> None:
    with pytest.raises(BenchError, match=r"4 tasks on 2 node\(s\).*--ntasks-per-node=1"):
        slurm_step(step_env(SLURM_STEP_NUM_TASKS="4"), expand)


def test_a_one_node_step_is_refused() -> None:
    with pytest.raises(BenchError, match="two nodes or more"):
        slurm_step(step_env(SLURM_STEP_NODELIST="node1", SLURM_STEP_NUM_TASKS="1"), expand)


def test_multi_node_results_name_every_node_and_keep_each_ranks_host() -> None:
    hosts = ["node1", "node1", "node2", "node2"]
    allreduce, scaling = judge_allreduce(4, "nccl", 1_000_000_000, 0.1, 0.5, hosts=hosts)
    assert allreduce.id == "bench.multinode_allreduce" and scaling.id == "bench.multinode_scaling"
    assert "on 2 nodes (node1, node2)" in allreduce.summary
    assert allreduce.evidence["hosts"] == hosts
    assert scaling.status is Status.WARN and "between the nodes" in (scaling.remedy or "")
    single = judge_allreduce(4, "nccl", 1_000_000_000, 0.1, 0.5)[1]
    assert "nvidia-smi topo -m" in (single.remedy or "") and "nodes" not in single.summary


def test_torchrun_workers_see_the_gpus_the_job_was_given_not_the_first_ones() -> None:
    """Inside a Slurm job with GPUs 2 and 3, PyTorch's cuda:0/cuda:1 are physical 2/3: the workers'
    CUDA_VISIBLE_DEVICES must name 2,3 (or the job's UUIDs), never 0,1."""

    def visible(devices: list[str], environ: dict[str, str]) -> str:
        return torchrun_env(devices, environ)["CUDA_VISIBLE_DEVICES"]

    assert visible(["cuda:0", "cuda:1"], {"CUDA_VISIBLE_DEVICES": "2,3"}) == "2,3"
    assert visible(["cuda:1"], {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}) == "GPU-b"
    assert visible(["cuda:0", "cuda:2"], {}) == "0,2"
    assert "CUDA_VISIBLE_DEVICES" not in torchrun_env(["cpu"], {"PATH": "/usr/bin"})
