"""Which node holds a job back: the schedule and the judgement of `dltune bench --multi-node
--find-slow` (pure functions; dltune.bench.run runs the rounds).

Every node runs an all-reduce with one partner per round, all pairs of a round at once. A slow node
slows every pair it is in; a healthy node is slow only in the round it meets a slow one. So each node's
score is the best bus bandwidth of the pairs it was in: with ROUNDS rounds of distinct partners (a
round-robin, the circle method), up to ROUNDS - 1 slow nodes never drag a healthy node's score down.
A node whose score is more than `behind` below the job's median node is a suspect; each suspect then
runs once more beside the best-scoring node (the second pass, as Google's cluster-health-scanner
retests), and only a suspect that is behind again is named. ROUNDS + 1 rounds in all, whatever the
number of nodes: each costs one short 2-node all-reduce."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from dltune.model import Result, Status
from dltune.records import record

ROUNDS = 3
# A node more than this far below the job's median node is named. SuperBench flags a figure 5% below
# its baseline and gpu-fryer a GPU 10% behind the node's best; across nodes, through a network, the
# noise of one short all-reduce is larger: 20%.
DEFAULT_BEHIND = 0.20


def round_robin(nodes: int, rounds: int = ROUNDS) -> list[list[tuple[int, int]]]:
    """Up to `rounds` rounds of disjoint pairs in which no two nodes meet twice (the circle method:
    node 0 stays, the others rotate). With an odd count one node sits each round out; with n nodes
    there are at most n - 1 distinct rounds (n even) or n (n odd)."""
    slots = list(range(nodes)) + ([None] if nodes % 2 else [])
    size = len(slots)
    schedule: list[list[tuple[int, int]]] = []
    for _ in range(min(rounds, size - 1)):
        pairs = []
        for i in range(size // 2):
            a, b = slots[i], slots[size - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        schedule.append(sorted(pairs))
        slots = [slots[0], slots[-1], *slots[1:-1]]
    return schedule


@record(frozen=True)
class PairRun:
    """One pair's all-reduce in one round: its bus bandwidth, or why there is none."""

    round: int
    first: int
    second: int
    busbw_gb_s: float | None
    error: str | None = None


def scores(nodes: int, runs: Sequence[PairRun]) -> dict[int, float | None]:
    """Each node's best bus bandwidth over the pairs it was in (None: none of its pairs measured)."""
    best: dict[int, float | None] = dict.fromkeys(range(nodes))
    for run in runs:
        if run.busbw_gb_s is None:
            continue
        for node in (run.first, run.second):
            current = best[node]
            best[node] = run.busbw_gb_s if current is None else max(current, run.busbw_gb_s)
    return best


def behind(score: float | None, median: float, fraction: float) -> bool:
    return score is not None and score < (1 - fraction) * median


def suspects(best: Mapping[int, float | None], fraction: float) -> list[int]:
    """Nodes more than `fraction` below the median score (nodes with no score are judged apart)."""
    measured = [s for s in best.values() if s is not None]
    if len(measured) < 2:
        return []
    median = statistics.median(measured)
    return sorted(node for node, score in best.items() if behind(score, median, fraction))


def retest_pairs(best: Mapping[int, float | None], suspected: Sequence[int]) -> list[tuple[int, int]]:
    """Each suspect beside a node that scored well, the best first; every node in one pair at most (the
    retest is one round). Suspects beyond the good nodes are left unpaired: they stay suspects."""
    good = sorted(
        (node for node, score in best.items() if score is not None and node not in suspected),
        key=lambda node: (-(best[node] or 0.0), node),
    )
    return [(min(s, g), max(s, g)) for s, g in zip(suspected, good, strict=False)]


# long: one verdict per node of the job, each with its rounds as evidence, built in one pass
def judge_slow_nodes(
    hosts: Sequence[str],
    runs: Sequence[PairRun],
    retests: Sequence[PairRun],
    fraction: float = DEFAULT_BEHIND,
) -> list[Result]:
    """One `bench.slow_node` result per node: `warn` for a node behind the job's median in the rounds
    and again in its retest, `error` for a node none of whose pairs measured, else `pass`."""
    best = scores(len(hosts), runs)
    measured = [s for s in best.values() if s is not None]
    median = statistics.median(measured) if measured else 0.0
    suspected = set(suspects(best, fraction))
    retest_of = {node: run for run in retests for node in (run.first, run.second) if node in suspected}
    results = []
    for node, host in enumerate(hosts):
        mine = [r for r in runs if node in (r.first, r.second)]
        evidence: dict[str, object] = {
            "rounds": [
                {
                    "round": r.round,
                    "partner": hosts[r.second if r.first == node else r.first],
                    "busbw_gb_s": r.busbw_gb_s,
                    **({"error": r.error} if r.error else {}),
                }
                for r in mine
            ],
            "job_median_gb_s": median,
            "behind_fraction": fraction,
        }
        score = best[node]
        if score is None:
            errors = sorted({r.error for r in mine if r.error})
            results.append(
                Result(
                    "bench.slow_node",
                    Status.ERROR,
                    f"{host}: none of its {len(mine)} pair all-reduces completed"
                    + (f" ({errors[0]})" if errors else ""),
                    subject=host,
                    evidence=evidence,
                    remedy="check the node's network, and run `dltune check` on it alone",
                )
            )
            continue
        share = score / median if median else 1.0
        metrics = {"busbw_gb_s": score, "share_of_median": share}
        retest = retest_of.get(node)
        if node in suspected and retest is not None:
            evidence["retest"] = {
                "partner": hosts[retest.second if retest.first == node else retest.first],
                "busbw_gb_s": retest.busbw_gb_s,
                **({"error": retest.error} if retest.error else {}),
            }
        confirmed = node in suspected and (
            retest is None or retest.busbw_gb_s is None or behind(retest.busbw_gb_s, median, fraction)
        )
        figure = f"best pair {score:.3g} GB/s busbw, {share:.0%} of the job's median node ({median:.3g} GB/s)"
        if confirmed:
            again = (
                f"; again {retest.busbw_gb_s:.3g} GB/s beside {evidence['retest']['partner']}"  # type: ignore[index]
                if retest is not None and retest.busbw_gb_s is not None
                else "; its retest did not measure"
            )
            summary = f"{host} holds the job back: {figure}{again}"
        elif node in suspected:
            summary = f"{host}: {figure}, but its retest reached {retest.busbw_gb_s:.3g} GB/s: not named"  # type: ignore[union-attr]
        else:
            summary = f"{host}: {figure}"
        results.append(
            Result(
                "bench.slow_node",
                Status.WARN if confirmed else Status.PASS,
                summary,
                subject=host,
                evidence=evidence,
                metrics=metrics,
                remedy="drain the node and check it alone: `dltune check` (GPU clocks, NVLink, its network "
                "ports), then rerun --find-slow without it"
                if confirmed
                else None,
            )
        )
    return results
