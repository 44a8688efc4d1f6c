"""What the Slurm health check asks of slurmctld at fleet scale (issue 47): every node runs it every
interval (the role's HealthCheckNodeState ANY,CYCLE spreads the runs over the interval), so its queries
are per node, and a shared failure makes every node fail at once. The bound: a node asks for its own
line once per run; only a node that would drain lists the cluster (to count the drain limit), once
before and once after its drain; the limit's count of nodes drain, and the rest, held by it, change
nothing. slurmctld is faked at the command boundary (tests/unit/test_slurm_health.FakeSlurm, the real
Slurm runs these paths in the lab at 3 nodes); 200 nodes cannot run here."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from dltune.fleet.slurm_health import apply
from tests.unit.test_slurm_health import HEALTHY, NFS_FAIL, FakeSlurm, cluster_of

NODES = 200


@pytest.fixture(autouse=True)
def _no_recheck_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dltune.fleet.slurm_health.RECHECK_DELAY_S", 0.0)


def one_interval(slurm: FakeSlurm, results: list, tmp_path: Path) -> dict[str, Counter[str]]:
    """Every node's health check once, in turn (CYCLE), each with its own history file: the kinds of
    Slurm call each node made ('self', 'cluster', 'update')."""
    made: dict[str, Counter[str]] = {}
    for node in sorted(slurm.nodes):
        before = len(slurm.calls)
        apply(node, results, slurm, None, str(tmp_path / node / "history.json"), now=1e9)  # type: ignore[arg-type]
        made[node] = Counter(
            "update" if call[1] == "update" else "self" if len(call) == 5 else "cluster"
            for call in slurm.calls[before:]
        )
    return made


def test_a_healthy_fleet_asks_for_one_nodes_line_per_node_and_nothing_else(tmp_path: Path) -> None:
    made = one_interval(cluster_of(NODES), HEALTHY, tmp_path)
    assert all(calls == Counter(self=1) for calls in made.values()), made


def test_a_shared_failure_drains_the_limit_listing_the_cluster_at_most_twice_per_node(tmp_path: Path) -> None:
    """All 200 fail NFS at once: 10 % (20) drain; each asks once for its own line and lists the cluster
    once to count the limit, the 20 once more after their drain; the 180 held make no change."""
    slurm = cluster_of(NODES)
    made = one_interval(slurm, NFS_FAIL, tmp_path)
    drained = sorted(n for n in slurm.nodes if "DRAIN" in slurm.state(n)[0])
    assert len(drained) == 20
    assert all(made[n] == Counter(self=1, cluster=2, update=1) for n in drained), made
    held = [n for n in slurm.nodes if n not in drained]
    assert all(made[n] == Counter(self=1, cluster=1) for n in held), made
    total = sum(made.values(), Counter())
    assert total == Counter(self=NODES, cluster=NODES + 20, update=20)


def test_the_next_interval_of_a_held_fleet_changes_nothing_more(tmp_path: Path) -> None:
    """The failure goes on: the drained stay drained without a call to change them, the held stay held."""
    slurm = cluster_of(NODES)
    one_interval(slurm, NFS_FAIL, tmp_path)
    made = one_interval(slurm, NFS_FAIL, tmp_path)
    assert sum(made.values(), Counter())["update"] == 0
    assert sum("DRAIN" in slurm.state(n)[0] for n in slurm.nodes) == 20
