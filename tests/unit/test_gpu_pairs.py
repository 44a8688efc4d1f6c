"""bench.gpu_pairs: every ordered GPU pair's copy bandwidth judged against the node's own median pair
(a pair below 85% of it names both GPUs) and, on models with a published per-pair figure, against that
figure (below it warns, below half fails). The measuring loop runs for real on the CPU path."""

from __future__ import annotations

import pytest

from dltune.bench import measure
from dltune.bench.judge import OUTLIER, PairCopy, judge_gpu_pairs
from dltune.bench.specs import PAIR_COPY
from dltune.model import Status

H100 = "NVIDIA H100 80GB HBM3"


def node(
    gb_s: float = 390.0, name: str = H100, gpus: int = 8, peer: bool | None = True, **slow: float
) -> list[PairCopy]:
    """All ordered pairs at `gb_s`, except those named "s_d" (source, destination index) in `slow`."""
    return [
        PairCopy(f"cuda:{s}", f"cuda:{d}", name, slow.get(f"p{s}_{d}", gb_s), peer)
        for s in range(gpus)
        for d in range(gpus)
        if s != d
    ]


def test_a_healthy_h100_node_passes_with_its_whole_matrix_in_the_evidence() -> None:
    result = judge_gpu_pairs(node())
    assert result.status is Status.PASS, result.summary
    assert len(result.evidence["gb_s"]) == 56 and "335 GB/s" in result.evidence["judged_against"]
    assert result.metrics == {"min_gb_s": 390.0, "median_gb_s": 390.0}


def test_one_slow_pair_is_named_by_both_gpus_at_the_nodes_median_boundary() -> None:
    """A pair at exactly 85% of the median is not a finding; just below it is, and the summary names
    the pair. A model with no per-pair figure is judged by the median alone."""
    at_line = judge_gpu_pairs(node(100.0, name="NVIDIA L40S", p2_5=100.0 * OUTLIER))
    assert at_line.status is Status.PASS, at_line.summary
    below = judge_gpu_pairs(node(100.0, name="NVIDIA L40S", p2_5=100.0 * OUTLIER - 0.01))
    assert below.status is Status.WARN
    assert "cuda:2 -> cuda:5 85 GB/s: 85% of the node's median pair (100 GB/s)" in below.summary
    assert "judged_against" not in below.evidence


@pytest.mark.parametrize(
    ("every_pair", "status"),
    [(335.0, Status.PASS), (334.9, Status.WARN), (167.5, Status.WARN), (167.4, Status.FAIL)],
)
def test_a_whole_h100_node_below_the_published_figure(every_pair: float, status: Status) -> None:
    """Every pair equally slow: nothing is an outlier, the figure alone judges (335 GB/s, half: 167.5)."""
    result = judge_gpu_pairs(node(every_pair))
    assert result.status is status, result.summary
    assert (result.remedy is None) == (status is Status.PASS)


def test_pairs_without_peer_access_are_judged_by_the_median_only_and_said() -> None:
    result = judge_gpu_pairs(node(20.0, peer=False))
    assert result.status is Status.PASS
    assert "56 without peer access" in result.summary and len(result.evidence["without_peer_access"]) == 56


def test_a_fail_is_not_hidden_by_later_warnings_and_the_summary_stays_short() -> None:
    slow = {f"p{s}_{d}": 300.0 for s in range(8) for d in range(8) if s != d and s < 2}
    slow["p0_1"] = 100.0  # below half the figure
    result = judge_gpu_pairs(node(390.0, **slow))
    assert result.status is Status.FAIL
    assert result.summary.count("GB/s:") == 4 and "and 10 more" in result.summary


def test_no_pairs_is_a_skip() -> None:
    assert judge_gpu_pairs([]).status is Status.SKIP


def test_every_pair_figure_names_its_source() -> None:
    assert all(figure.source and figure.model == model for model, figure in PAIR_COPY.items())


def test_the_pair_copy_loop_measures_for_real_on_the_cpu_path() -> None:
    """measure.pair_copy with CPU tensors: the same loop as between GPUs (no peer access to report)."""
    torch = pytest.importorskip("torch")
    pair = measure.pair_copy(torch, "cpu", "cpu", 4, seconds=0.02)
    assert pair.source == "cpu" and pair.peer is None and pair.gb_s > 0


def test_the_words_and_numbers_an_admin_reads() -> None:
    """Exact summary, remedy and evidence: the pairs joined by "; ", both problems of one pair by ", ",
    figures rounded to 0.1 GB/s in the matrix, and four findings shown before "and N more"."""
    skip = judge_gpu_pairs([])
    assert skip.id == "bench.gpu_pairs" and skip.summary == "fewer than two GPUs: no GPU pairs to measure"
    slow = judge_gpu_pairs(node(390.04, p1_2=100.0, p0_1=390.46))
    assert slow.id == "bench.gpu_pairs" and slow.status is Status.FAIL
    assert slow.summary == (
        "56 GPU pairs copied 100-390 GB/s (median 390); cuda:1 -> cuda:2 100 GB/s: 26% of the node's median "
        "pair (390 GB/s), below the 335 GB/s a healthy H100 SXM pair passes"
    )
    assert (
        slow.evidence["gb_s"]["cuda:0 -> cuda:2"] == 390.0
        and slow.evidence["gb_s"]["cuda:0 -> cuda:1"] == 390.5
    )
    assert slow.remedy == (
        "a slow pair names both GPUs: check their NVLinks (`nvidia-smi nvlink -s -i <gpu>`, audit "
        "fabric) and `nvidia-smi topo -m`; the same GPU in every slow pair is the GPU (or its slot)"
    )
    two = judge_gpu_pairs(node(390.0, p1_2=300.0, p2_1=300.0))
    assert "; cuda:1 -> cuda:2 300 GB/s: " in two.summary and "; cuda:2 -> cuda:1 300 GB/s: " in two.summary
    four = judge_gpu_pairs(node(390.0, p0_1=300.0, p0_2=300.0, p0_3=300.0, p0_4=300.0))
    assert four.summary.count("GB/s: ") == 4 and "more" not in four.summary
    five = judge_gpu_pairs(node(390.0, p0_1=300.0, p0_2=300.0, p0_3=300.0, p0_4=300.0, p0_5=300.0))
    assert five.summary.endswith("; and 1 more")
    assert "peer access" not in judge_gpu_pairs(node()).summary
    staged = judge_gpu_pairs(node(20.0, peer=False))
    assert (
        staged.summary
        == "56 GPU pairs copied 20-20 GB/s (median 20); 56 without peer access (staged through host memory)"
    )
