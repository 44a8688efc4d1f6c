"""bench.allreduce judged against what a healthy node of the model reaches: the bus bandwidth computed
as nccl-tests does, the per-model 8-GPU figures (specs.ALLREDUCE_8GPU) at their boundaries, the
configurations that have no figure (not judged, never failed), and the message size each GPU runs."""

from __future__ import annotations

import pytest

from dltune.bench.ddp import message_megabytes
from dltune.bench.judge import ALLREDUCE_JUDGED_MB, allreduce_verdict, judge_allreduce
from dltune.bench.run import ALLREDUCE_MB
from dltune.bench.specs import ALLREDUCE_8GPU, allreduce_figure
from dltune.model import Status

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
GB = 10**9
SIZE = 8 << 30


def seconds_for(busbw_gb_s: float, world: int = 8, size: int = SIZE) -> float:
    """The time an all-reduce of `size` bytes takes at this bus bandwidth (nccl-tests: busbw = algbw
    x 2(n-1)/n)."""
    return size / (busbw_gb_s * GB * world / (2 * (world - 1)))


def allreduce(busbw: float, names: list[str], size: int = SIZE, **options: object) -> object:
    (result,) = judge_allreduce(len(names), "nccl", size, seconds_for(busbw, len(names), size), None,
                                device_names=names, **options)  # type: ignore[arg-type]  # fmt: skip
    return result


def test_bus_bandwidth_is_nccl_tests_formula() -> None:
    """An all-reduce of 8 GiB in 32 ms over 8 ranks: algbw = bytes/s, busbw = algbw x 14/8."""
    (result,) = judge_allreduce(8, "nccl", SIZE, 0.032, None)
    assert result.metrics["algbw_gb_s"] == pytest.approx(SIZE / 0.032 / GB)
    assert result.metrics["busbw_gb_s"] == pytest.approx(SIZE / 0.032 / GB * 14 / 8)


@pytest.mark.parametrize(
    ("busbw", "status"),
    [(460.0, Status.PASS), (459.999, Status.WARN), (230.0, Status.WARN), (229.999, Status.FAIL)],
)
def test_the_verdict_is_exact_at_the_pass_line_and_at_half_of_it(busbw: float, status: Status) -> None:
    assert allreduce_verdict(busbw, 460.0) is status


@pytest.mark.parametrize(
    ("busbw", "status"),
    [
        (480.0, Status.PASS),
        (460.5, Status.PASS),
        (459.5, Status.WARN),
        (230.5, Status.WARN),
        (229.5, Status.FAIL),
    ],
)
def test_eight_h100s_are_judged_at_azures_pass_line_and_half_of_it(busbw: float, status: Status) -> None:
    result = allreduce(busbw, [H100] * 8)
    assert result.status is status, result.summary
    assert "460 GB/s" in result.evidence["judged_against"]
    assert (result.remedy is None) == (status is Status.PASS)


def test_eight_a100s_have_their_own_line() -> None:
    assert allreduce(228.5, [A100] * 8).status is Status.PASS
    assert allreduce(227.0, [A100] * 8).status is Status.WARN
    # An H100 node at the A100's figure is far behind its own.
    assert allreduce(240.0, [H100] * 8).status is Status.WARN


@pytest.mark.parametrize(
    "names",
    [
        [H100] * 4,  # the figure is for 8 GPUs: 4 reach another busbw
        [H100] * 7 + [A100],  # mixed models
        ["NVIDIA L40S"] * 8,  # a model without a published figure
        ["NVIDIA A100-SXM4-40GB MIG 1g.5gb"] * 8,  # MIG instances: no whole-card figure
    ],
)
def test_configurations_without_a_figure_are_reported_not_judged(names: list[str]) -> None:
    result = allreduce(50.0, names)
    assert result.status is Status.PASS and "judged_against" not in result.evidence


def test_gloo_multi_node_and_small_messages_are_not_judged() -> None:
    (gloo,) = judge_allreduce(8, "gloo", SIZE, seconds_for(5.0), None, device_names=[H100] * 8)
    assert gloo.status is Status.PASS
    hosts = [f"n{i // 8}" for i in range(16)]
    multi = judge_allreduce(
        16, "nccl", SIZE, seconds_for(5.0, 16), None, hosts=hosts, device_names=[H100] * 16
    )
    assert multi[0].id == "bench.multinode_allreduce" and multi[0].status is Status.PASS
    small = allreduce(50.0, [H100] * 8, size=(ALLREDUCE_JUDGED_MB << 20) - 1)
    assert small.status is Status.PASS and "below the 4096 MB" in small.evidence["not_judged"]
    at_line = allreduce(50.0, [H100] * 8, size=ALLREDUCE_JUDGED_MB << 20)
    assert at_line.status is Status.FAIL


def test_every_figure_names_its_source_and_sits_below_its_healthy_measurement() -> None:
    for model, figure in ALLREDUCE_8GPU.items():
        assert figure.gpus == 8 and figure.source, model
        assert figure.healthy_gb_s is None or figure.pass_gb_s < figure.healthy_gb_s, model
    assert allreduce_figure([H100] * 8) is ALLREDUCE_8GPU["H100 SXM"]
    assert allreduce_figure(["NVIDIA H200"] * 8) is ALLREDUCE_8GPU["H200 SXM"]


@pytest.mark.parametrize(
    ("memory_gb", "megabytes"),
    [(80, 8192), (141, 8192), (40, 4096), (48, 4096), (32, 4096), (16, 2048), (0.25, 64)],
)
def test_the_message_is_8_gb_or_an_eighth_of_the_card_rounded_down_to_a_power_of_two(
    memory_gb: float, megabytes: int
) -> None:
    assert message_megabytes(ALLREDUCE_MB["nccl"], int(memory_gb * 2**30)) == megabytes


def test_the_cards_that_have_a_figure_run_a_message_large_enough_to_be_judged() -> None:
    """Every model in the table has 40 GB or more: its message (an eighth of that, 4 GB) is judged."""
    assert message_megabytes(ALLREDUCE_MB["nccl"], 40 * 2**30) >= ALLREDUCE_JUDGED_MB
    assert message_megabytes(16, 80 * 2**30) == 16  # a smaller request is kept


def test_the_words_and_numbers_an_admin_reads() -> None:
    judged = allreduce(230.5, [H100] * 8)
    assert judged.summary.startswith("nccl all-reduce over 8 processes, 8590 MB: algbw ")
    assert judged.summary.endswith(", 50% of the 460 GB/s a healthy node passes")
    assert judged.remedy == (
        "check each GPU's NVLinks (audit fabric, `nvidia-smi nvlink -s`), the fabric manager and "
        "the GPU pairs (bench.gpu_pairs); NCCL_DEBUG=INFO shows the transport NCCL chose"
    )
    small = allreduce(50.0, [H100] * 8, size=512 << 20)
    assert small.evidence["not_judged"] == "537 MB is below the 4096 MB where busbw nears its plateau"
