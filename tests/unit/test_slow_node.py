"""`--find-slow`'s schedule and judgement (dltune.bench.slow_node): distinct partners each round, a
slow node named with its figures, a healthy partner of a slow node never named, a suspect cleared by
its retest, the `behind` boundary, and nodes none of whose pairs measured."""

from __future__ import annotations

import itertools

import pytest

from dltune.bench.slow_node import (
    DEFAULT_BEHIND,
    ROUNDS,
    PairRun,
    judge_slow_nodes,
    retest_pairs,
    round_robin,
    scores,
    suspects,
)
from dltune.model import Status


@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 8, 9, 200])
def test_each_round_pairs_disjoint_nodes_and_no_pair_meets_twice(nodes: int) -> None:
    schedule = round_robin(nodes)
    assert len(schedule) == min(ROUNDS, nodes - 1 if nodes % 2 == 0 else nodes)
    met = [pair for round_ in schedule for pair in round_]
    assert len(met) == len(set(met)), schedule
    for round_ in schedule:
        busy = [node for pair in round_ for node in pair]
        assert len(busy) == len(set(busy)) and all(0 <= n < nodes for n in busy)
        assert len(round_) == nodes // 2  # everybody but one (odd n) has a partner
    assert all(a < b for a, b in met)


def measured(nodes: int, slow: dict[int, float], healthy: float = 10.0) -> list[PairRun]:
    """Every scheduled pair at the slower of its two nodes' speeds (a collective ends with its last rank)."""
    speed = {n: slow.get(n, healthy) for n in range(nodes)}
    return [
        PairRun(r, a, b, min(speed[a], speed[b]))
        for r, round_ in enumerate(round_robin(nodes))
        for a, b in round_
    ]


@pytest.mark.parametrize(("nodes", "slow_nodes"), [(3, [2]), (4, [1]), (8, [0, 5]), (9, [3, 4])])
def test_up_to_rounds_minus_one_slow_nodes_are_suspected_and_no_healthy_one(
    nodes: int, slow_nodes: list[int]
) -> None:
    runs = measured(nodes, dict.fromkeys(slow_nodes, 4.0))
    assert suspects(scores(nodes, runs), DEFAULT_BEHIND) == slow_nodes


def test_the_behind_boundary_is_a_fraction_of_the_median_node() -> None:
    """Median 10: a node at exactly 8.0 (20% behind) is not a suspect; just below it is."""
    assert suspects({0: 10.0, 1: 10.0, 2: 8.0}, 0.2) == []
    assert suspects({0: 10.0, 1: 10.0, 2: 7.999}, 0.2) == [2]
    assert suspects({0: 10.0, 1: 10.0, 2: 7.0}, 0.35) == []
    assert suspects({0: 10.0, 1: None, 2: 1.0}, 0.2) == [2]  # an unmeasured node is judged apart
    assert suspects({0: 10.0}, 0.2) == []


def test_retests_pair_each_suspect_with_the_best_nodes_once() -> None:
    best = {0: 9.0, 1: 10.0, 2: 2.0, 3: 3.0, 4: None}
    assert retest_pairs(best, [2, 3]) == [(1, 2), (0, 3)]
    assert retest_pairs({0: 10.0, 1: 1.0, 2: 1.0}, [1, 2]) == [(0, 1)]  # one good node: one retest


HOSTS = ["node1", "node2", "node3"]


def test_the_throttled_node_is_named_with_its_numbers_and_its_partners_pass() -> None:
    runs = measured(3, {2: 0.5}, healthy=1.0)
    (retest,) = [PairRun(ROUNDS, a, b, 0.5) for a, b in retest_pairs(scores(3, runs), [2])]
    results = {r.subject: r for r in judge_slow_nodes(HOSTS, runs, [retest])}
    assert [results[h].status for h in HOSTS] == [Status.PASS, Status.PASS, Status.WARN]
    slow = results["node3"]
    assert slow.id == "bench.slow_node" and slow.metrics["share_of_median"] == pytest.approx(0.5)
    assert (
        "node3 holds the job back: best pair 0.5 GB/s busbw, 50% of the job's median node (1 GB/s)"
        in slow.summary
    )
    assert "again 0.5 GB/s beside node1" in slow.summary
    assert [r["partner"] for r in slow.evidence["rounds"]] == ["node2", "node1"]
    assert results["node1"].remedy is None and slow.remedy


def test_a_suspect_whose_retest_reaches_the_median_is_not_named() -> None:
    runs = measured(3, {2: 0.5}, healthy=1.0)
    results = {r.subject: r for r in judge_slow_nodes(HOSTS, runs, [PairRun(ROUNDS, 0, 2, 0.95)])}
    assert results["node3"].status is Status.PASS and "not named" in results["node3"].summary
    assert results["node3"].evidence["retest"] == {"partner": "node1", "busbw_gb_s": 0.95}


def test_a_suspect_without_a_retest_figure_stays_named() -> None:
    runs = measured(3, {2: 0.5}, healthy=1.0)
    failed = PairRun(ROUNDS, 0, 2, None, "the data-parallel run timed out")
    results = {r.subject: r for r in judge_slow_nodes(HOSTS, runs, [failed])}
    assert results["node3"].status is Status.WARN and "did not measure" in results["node3"].summary


def test_no_node_slowed_names_none() -> None:
    results = judge_slow_nodes(HOSTS, measured(3, {}, healthy=1.0), [])
    assert {r.status for r in results} == {Status.PASS}


def test_a_node_none_of_whose_pairs_measured_is_an_error_named_with_the_cause() -> None:
    runs = [
        PairRun(0, 1, 2, None, "node3 never joined"),
        PairRun(1, 0, 2, None, "node3 never joined"),
        PairRun(2, 0, 1, 1.0),
    ]
    results = {r.subject: r for r in judge_slow_nodes(HOSTS, runs, [])}
    assert results["node3"].status is Status.ERROR and "node3 never joined" in results["node3"].summary
    assert results["node1"].status is Status.PASS and results["node2"].status is Status.PASS


def test_every_node_gets_exactly_one_result() -> None:
    for nodes in (2, 5, 16):
        hosts = [f"n{i}" for i in range(nodes)]
        results = judge_slow_nodes(hosts, measured(nodes, {1: 0.1}), [])
        assert [r.subject for r in results] == hosts
        assert list(itertools.chain.from_iterable([r.id] for r in results)) == ["bench.slow_node"] * nodes


def test_every_field_of_a_named_node_and_its_remedy() -> None:
    """The evidence keys and words an admin (and the report) reads, on a suspect that is the first of
    its retest pair, and a node without a retest error."""
    runs = [PairRun(0, 0, 1, 1.0), PairRun(1, 0, 2, 1.0, None), PairRun(2, 1, 2, 2.0)]
    retest = PairRun(ROUNDS, 0, 2, None, "node1: the data-parallel run timed out")
    results = {r.subject: r for r in judge_slow_nodes(HOSTS, runs, [retest])}
    named = results["node1"]
    assert named.id == "bench.slow_node" and named.status is Status.WARN
    assert named.evidence["retest"] == {
        "partner": "node3",
        "busbw_gb_s": None,
        "error": "node1: the data-parallel run timed out",
    }
    assert named.evidence["rounds"][0] == {"round": 0, "partner": "node2", "busbw_gb_s": 1.0}
    assert named.evidence["job_median_gb_s"] == 2.0 and named.evidence["behind_fraction"] == DEFAULT_BEHIND
    assert named.metrics == {"busbw_gb_s": 1.0, "share_of_median": 0.5}
    assert named.summary.endswith("; its retest did not measure")
    assert named.remedy == (
        "drain the node and check it alone: `dltune check` (GPU clocks, NVLink, its network "
        "ports), then rerun --find-slow without it"
    )
    healthy = results["node2"]
    assert healthy.summary == "node2: best pair 2 GB/s busbw, 100% of the job's median node (2 GB/s)"
    assert healthy.evidence["rounds"][1] == {"round": 2, "partner": "node3", "busbw_gb_s": 2.0}


def test_a_failed_node_in_the_middle_does_not_stop_the_others_and_errors_are_kept() -> None:
    runs = [
        PairRun(0, 0, 1, None, "node2 never joined"),
        PairRun(1, 1, 2, None, "node2 never joined"),
        PairRun(2, 0, 2, 1.0),
    ]
    results = judge_slow_nodes(HOSTS, runs, [])
    assert [r.status for r in results] == [Status.PASS, Status.ERROR, Status.PASS]
    failed = results[1]
    assert failed.id == "bench.slow_node" and failed.evidence["rounds"][0]["error"] == "node2 never joined"
    assert failed.summary == "node2: none of its 2 pair all-reduces completed (node2 never joined)"
    assert failed.remedy == "check the node's network, and run `dltune check` on it alone"
    assert "error" not in results[0].evidence["rounds"][1]


def test_nobody_measured_is_an_error_per_node_with_no_median() -> None:
    results = judge_slow_nodes(HOSTS, [], [])
    assert {r.status for r in results} == {Status.ERROR}
    assert results[0].summary == "node1: none of its 0 pair all-reduces completed"
    assert results[0].evidence["job_median_gb_s"] == 0.0
