"""An all-reduce judged for the GPUs it ran on (issue 44): published nccl-tests all_reduce_perf runs over
4 GPUs (tests/fixtures/real/nccl_allreduce/), each given to dltune.bench.judge.judge_allreduce as dltune's
own run would report it: the message and time of the sweep's largest row, the GPUs' names, and the
path dltune.bench.ddp.gpu_path would record on that machine (peer access, NVLinks up, NCCL's settings),
taken from what the source says of its topology (PATHS below)."""

from __future__ import annotations

from typing import Any

import pytest

from dltune.bench.judge import ALLREDUCE_FAIL_SHARE, judge_allreduce, p2p_turned_off, path_between
from dltune.bench.specs import ALLREDUCE_8GPU
from dltune.model import Status
from tests.real_corpus import Sample, samples

NVLINK_4 = {"peer_to_peer": True, "nvlinks_up": [12, 12, 12, 12]}
# What gpu_path reads on each source's machine, from the source's own words: NV12 through NVSwitch on
# the DGX A100 (its `nvidia-smi topo -m`), NVLink on Stanage's A100 SXM nodes, "no NVLINK" on Bessemer's
# V100 PCIe (peer access over PCIe), every pair SYS on the A100 PCIe box (no peer access across the
# sockets), GeForce RTX 5090 without peer-to-peer (nccl-tests #287).
PATHS: dict[str, tuple[str, dict[str, Any]]] = {
    "dgx_a100_4gpu_p2p_disabled_5gbs": (
        "NVIDIA A100-SXM4-40GB",  # a DGX A100 (40 or 80 GB: the same figure)
        {**NVLINK_4, "nccl": {"NCCL_P2P_DISABLE": "1"}},
    ),
    "dgx_a100_4gpu_nvlink_1g_10g": ("NVIDIA A100-SXM4-40GB", NVLINK_4),
    "sheffield_stanage_4x_a100_sxm4_80gb_nvlink": ("NVIDIA A100-SXM4-80GB", NVLINK_4),
    "sheffield_bessemer_4x_v100_pcie_no_nvlink_nccl283": (
        "Tesla V100-PCIE-32GB",
        {"peer_to_peer": True, "nvlinks_up": [0, 0, 0, 0]},
    ),
    "cn_notes_sm02_4x_a100_pcie_all_sys": (
        "NVIDIA A100-PCIE-40GB",
        {"peer_to_peer": False, "nvlinks_up": [0, 0, 0, 0]},
    ),
    "nccltests287_4x_rtx5090_no_p2p_nccl226": (
        "NVIDIA GeForce RTX 5090",
        {"peer_to_peer": False, "nvlinks_up": [0, 0, 0, 0]},
    ),
}


def largest_row(body: str) -> tuple[int, float, float]:
    """(bytes, seconds, busbw GB/s) of the sweep's largest message, out of place. A row is size, count,
    type, redop, [root: nccl-tests 2.10 and later], then time (us), algbw, busbw, #wrong, in place."""
    rows = []
    for line in body.splitlines():
        words = line.split()
        if len(words) in (12, 13) and words[2:4] == ["float", "sum"]:
            time_at = 5 if len(words) == 13 else 4
            rows.append((int(words[0]), float(words[time_at]) / 1e6, float(words[time_at + 2])))
    assert rows, "no nccl-tests row read"
    return max(rows)


@pytest.mark.parametrize("sample", samples("nccl_allreduce"), ids=str)
def test_a_published_4_gpu_all_reduce_gets_the_verdict_its_topology_allows(sample: Sample) -> None:
    name, path = PATHS[sample.name]
    size, seconds, published_busbw = largest_row(sample.body)
    (result,) = [
        r
        for r in judge_allreduce(4, "nccl", size, seconds, None, device_names=[name] * 4, path=path)
        if r.id == "bench.allreduce"
    ]
    assert result.metrics["busbw_gb_s"] == pytest.approx(published_busbw, rel=0.01)
    verdict, _, _ = sample.expect.partition(":")
    if verdict == "fail":
        assert result.status is Status.FAIL, result.summary
        assert "far below what NVLink allows" in result.summary
    elif verdict == "pass":
        assert result.status is Status.PASS and "judged_against" in result.evidence, result
    else:
        assert verdict == "not judged", sample.expect
        assert result.status is Status.PASS and "not_judged" in result.evidence, result
    if "NCCL_P2P_DISABLE=1" in sample.expect:
        assert "NCCL_P2P_DISABLE=1: NCCL uses neither NVLink nor PCIe peer-to-peer" in result.summary
        assert result.remedy and result.remedy.startswith("unset NCCL_P2P_DISABLE"), result.remedy


def test_the_p2p_disabled_dgx_run_is_named_by_path_and_figure() -> None:
    sample = next(s for s in samples("nccl_allreduce") if s.name == "dgx_a100_4gpu_p2p_disabled_5gbs")
    size, seconds, _ = largest_row(sample.body)
    name, path = PATHS[sample.name]
    (result, *_) = judge_allreduce(4, "nccl", size, seconds, None, device_names=[name] * 4, path=path)
    assert result.summary == (
        "nccl all-reduce over 4 processes, 8590 MB: algbw 3.46 GB/s, busbw 5.20 GB/s over NVLink "
        "(NCCL_P2P_DISABLE=1: NCCL uses neither NVLink nor PCIe peer-to-peer), 2% of the 228 GB/s a "
        "healthy 8-GPU node passes: far below what NVLink allows"
    )
    assert result.evidence["path"] == "NVLink" and result.evidence["nccl_settings"] == {
        "NCCL_P2P_DISABLE": "1"
    }


A100_PASS = ALLREDUCE_8GPU["A100 40GB SXM"].pass_gb_s


@pytest.mark.parametrize(
    ("busbw", "status"),
    [
        (A100_PASS * ALLREDUCE_FAIL_SHARE - 0.01, Status.FAIL),
        (A100_PASS * ALLREDUCE_FAIL_SHARE + 0.01, Status.PASS),
    ],
)
def test_fewer_gpus_over_nvlink_fail_only_below_half_of_the_full_nodes_pass_line(
    busbw: float, status: Status
) -> None:
    size = 8 << 30
    seconds = size / (busbw * 4 / (2 * 3)) / 1e9  # busbw = algbw * 2(n-1)/n
    (result, *_) = judge_allreduce(
        4, "nccl", size, seconds, None, device_names=["NVIDIA A100-SXM4-40GB"] * 4, path=NVLINK_4
    )
    assert result.status is status, result.summary


@pytest.mark.parametrize(
    ("path", "route"),
    [
        (NVLINK_4, "NVLink"),
        ({"peer_to_peer": True, "nvlinks_up": [12, 12, 0, 12]}, "peer-to-peer"),  # one GPU's links down
        ({"peer_to_peer": True, "nvlinks_up": [None, None]}, "peer-to-peer"),  # NVML could not say
        ({"peer_to_peer": False, "nvlinks_up": [12, 12]}, "host memory"),
        ({"peer_to_peer": None}, None),
        (None, None),
    ],
)
def test_the_path_is_nvlink_only_when_every_pair_has_peer_access_and_every_gpu_nvlinks_up(
    path: dict[str, Any] | None, route: str | None
) -> None:
    assert path_between(path) == route


def test_fewer_gpus_not_joined_by_nvlink_are_never_held_to_the_nvlink_floor() -> None:
    """A100 SXM GPUs whose path is not known to be NVLink: no figure applies, the run is not judged."""
    size = 8 << 30
    (result, *_) = judge_allreduce(
        4, "nccl", size, 2.0, None, device_names=["NVIDIA A100-SXM4-40GB"] * 4, path={"peer_to_peer": False}
    )
    assert result.status is Status.PASS
    assert result.evidence["not_judged"] == "no published figure for 4 GPUs of this model over host memory"


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"NCCL_P2P_DISABLE": "1"}, "NCCL_P2P_DISABLE=1"),
        ({"NCCL_P2P_DISABLE": "true"}, "NCCL_P2P_DISABLE=true"),
        ({"NCCL_P2P_DISABLE": "0"}, None),
        ({"NCCL_P2P_LEVEL": "LOC"}, "NCCL_P2P_LEVEL=LOC"),
        ({"NCCL_P2P_LEVEL": "NVL"}, None),
        ({}, None),
    ],
)
def test_nccl_settings_that_keep_it_off_peer_to_peer_are_named(
    settings: dict[str, str], named: str | None
) -> None:
    assert p2p_turned_off({"nccl": settings}) == named


def test_the_worker_records_peer_access_nvlinks_and_nccls_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """dltune.bench.ddp.gpu_path against a stand-in of torch.cuda (no GPU exists here: CUDA's runtime is
    faked at its lowest boundary, the calls the worker makes) and of NVML's NVLink answers."""
    from types import SimpleNamespace

    from dltune.bench import ddp

    cuda = SimpleNamespace(
        device_count=lambda: 4,
        can_device_access_peer=lambda a, b: {a, b} != {0, 3},  # GPUs 0 and 3: no peer access
        get_device_properties=lambda i: SimpleNamespace(
            pci_domain_id=0, pci_bus_id=0x18 + 16 * i, pci_device_id=0
        ),
    )
    seen: list[str] = []
    monkeypatch.setattr(ddp, "active_nvlinks", lambda bus: seen.append(bus) or 12)
    monkeypatch.setenv("NCCL_P2P_LEVEL", "LOC")
    monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    path = ddp.gpu_path(SimpleNamespace(cuda=cuda), 4, 0)
    assert path == {
        "peer_to_peer": False,
        "nvlinks_up": [12, 12, 12, 12],
        "nccl": {"NCCL_P2P_LEVEL": "LOC"},
        "gpus": 4,
    }
    assert seen == ["00000000:18:00.0", "00000000:28:00.0", "00000000:38:00.0", "00000000:48:00.0"]
    assert path_between(path) == "host memory" and p2p_turned_off(path) == "NCCL_P2P_LEVEL=LOC"


def test_without_a_usable_nvml_the_nvlinks_are_unknown_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from dltune.bench import ddp

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert ddp.active_nvlinks("00000000:18:00.0") is None
