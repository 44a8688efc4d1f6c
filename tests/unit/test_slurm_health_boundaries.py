"""slurm_health's decisions at their edges: the drain limit (share or count, at the limit, its minimum),
flap damping (a resume exactly at the window's edge), the history file (round trips, corrupt files, its
size bound), scontrol's answers (failures, unknown nodes, the node changing between two calls) and the
exact words each decision logs. Written against the surviving mutants of `make mutation`: each test
checks the observable end state (the decision, the scontrol argv run, the log line, the saved file)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dltune.fleet import slurm_health
from dltune.fleet.slurm_health import (
    Decision,
    DrainLimit,
    History,
    NodeState,
    Policy,
    SlurmUnavailable,
    apply,
    decide,
    drain_order,
    held_by_limit,
    load_history,
    parse_node,
    parse_nodes,
    save_history,
)
from dltune.model import DltuneError, Result, Status
from dltune.probes.runner import CommandResult
from tests.real_corpus import samples
from tests.unit.test_slurm_health import ECC_FAIL, HEALTHY, NFS_FAIL, FakeSlurm, cluster_of, health

NOW = 1.9e9
DAY = 24 * 3600.0
TWO_FAIL = [*ECC_FAIL, *NFS_FAIL]  # critical_failures sorts them: gpu.ecc nfs.responsive
REMEDY = (
    "find the shared cause first (the failing checks' shared dependency: NFS server, subnet manager, time "
    "source); to drain anyway, raise --drain-limit (role: slurm_healthcheck_drain_limit)"
)


@pytest.fixture(autouse=True)
def no_recheck_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dltune.fleet.slurm_health.RECHECK_DELAY_S", 0.0)


def state(
    status: str = "IDLE",
    reason: str = "",
    name: str = "gpu7",
    partitions: tuple[str, ...] = ("gpu",),
    reason_time: str = "",
) -> NodeState:
    return NodeState(status, reason, name, partitions, reason_time)


def line(name: str, status: str = "IDLE", partitions: str = "gpu", reason: str = "") -> str:
    """One node as `scontrol -o show node` prints it."""
    tail = f" Reason={reason} [root@2026-11-25T09:00:00]" if reason else ""
    return f"NodeName={name} Arch=x86_64 CPUAlloc=0 State={status} Partitions={partitions}{tail}"


def listing(*lines: str) -> str:
    return "".join(f"{text}\n" for text in lines)


class ScriptedScontrol:
    """scontrol answering each command line (argv joined with blanks) with its answers in turn, the
    last one again once they are used up; a line not in the script answers like a missing program.
    An answer is stdout, or (returncode, stdout, stderr)."""

    def __init__(self, script: dict[str, list[Any]]) -> None:
        self.script = {key: list(answers) for key, answers in script.items()}
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: list[str] | tuple[str, ...], timeout: float | None = 5.0) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        answers = self.script.get(" ".join(args))
        if not answers:
            return CommandResult(args, 127, "", f"{args[0]}: not recorded")
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        rc, out, err = (0, answer, "") if isinstance(answer, str) else answer
        return CommandResult(args, rc, out, err)

    @property
    def updates(self) -> list[tuple[str, ...]]:
        return [call for call in self.calls if call[1] == "update"]


DRAIN_GPU7 = "scontrol update nodename=gpu7 state=drain reason=dltune: gpu.ecc"
RESUME_GPU7 = "scontrol update nodename=gpu7 state=resume"


def plain(decision: Decision) -> Decision:
    """The decision as these tests pin it: its history's resumes and drain reason (the runs and the
    counters are pinned in test_health_debounce.py)."""
    history = History(decision.history.resumes, decision.history.drained_reason)
    return replace(decision, history=history, undrained=None)


# decide: a node slurmctld has not registered, or someone else's


@pytest.mark.parametrize(
    ("status", "name", "results", "said"),
    [
        ("UNKNOWN", "gpu7", HEALTHY, "gpu7 left as it is: not registered with slurmctld yet (UNKNOWN)"),
        ("", "gpu7", HEALTHY, "gpu7 left as it is: not registered with slurmctld yet (no state)"),
        (
            "IDLE*",
            "",
            TWO_FAIL,
            "this node left as it is: not registered with slurmctld yet (IDLE*); "
            "critical failures not recorded in Slurm: gpu.ecc nfs.responsive",
        ),
    ],
)
def test_a_node_slurmctld_has_not_registered_is_left_with_its_history_and_said_why(
    status: str, name: str, results: list[Result], said: str
) -> None:
    history = History((NOW - 60, NOW - 2 * DAY), "dltune: gpu.ecc")
    decision = decide(state(status, name=name), results, None, Policy(), history, NOW)
    assert plain(decision) == Decision("none", said, history=history)


@pytest.mark.parametrize(
    ("status", "reason", "name", "results", "said"),
    [
        (
            "IDLE+DRAIN",
            "maintenance: PSU swap",
            "gpu7",
            HEALTHY,
            "gpu7 left as it is: out of service by someone else (IDLE+DRAIN, maintenance: PSU swap)",
        ),
        (
            "DOWN",
            "",
            "",
            TWO_FAIL,
            "this node left as it is: out of service by someone else (DOWN, no reason); "
            "critical failures not recorded in Slurm: gpu.ecc nfs.responsive",
        ),
    ],
)
def test_someone_elses_node_is_left_with_its_history_and_said_why(
    status: str, reason: str, name: str, results: list[Result], said: str
) -> None:
    history = History((NOW - 60,))
    decision = decide(state(status, reason, name), results, None, Policy(), history, NOW)
    assert plain(decision) == Decision("none", said, history=history)


# decide: a healthy node


@pytest.mark.parametrize(
    ("status", "reason", "said"),
    [
        ("IDLE", "", "gpu7 left as it is (IDLE)"),
        ("MIXED", "rack moved in November", "gpu7 left as it is (MIXED, rack moved in November)"),
    ],
)
def test_a_healthy_node_in_service_is_left_and_forgets_resumes_outside_the_window(
    status: str, reason: str, said: str
) -> None:
    history = History((NOW - 2 * DAY, NOW - 60))
    decision = decide(state(status, reason), HEALTHY, None, Policy(), history, NOW)
    assert plain(decision) == Decision("none", said, history=History((NOW - 60,)))


def test_a_healthy_flapping_node_stays_drained_for_the_operator() -> None:
    history = History((NOW - 3 * 3600, NOW - 2 * 3600, NOW - 3600), "dltune: flapping: gpu.ecc")
    node = state("IDLE+DRAIN", "dltune: flapping: gpu.ecc")
    decision = decide(node, HEALTHY, None, Policy(), history, NOW)
    assert plain(decision) == Decision(
        "none",
        "gpu7 stays drained (dltune: flapping: gpu.ecc): healthy now, but an operator resumes a flapping "
        "node",
        history=history,
    )


# decide: a failing node, flap damping


DRAINED = "drained gpu7: dltune: gpu.ecc"
FLAPPING = (
    "drained gpu7: dltune: flapping: gpu.ecc ({} resumes by dltune within {} h: "
    "not resumed automatically again)"
)


@pytest.mark.parametrize(
    ("ages", "policy", "reason", "said"),
    [
        ((DAY - 1,), Policy(flap_count=1), "dltune: flapping: gpu.ecc", FLAPPING.format(1, 24)),
        ((DAY,), Policy(flap_count=1), "dltune: gpu.ecc", DRAINED),
        ((DAY + 1,), Policy(flap_count=1), "dltune: gpu.ecc", DRAINED),
        ((3599, 60), Policy(flap_count=2, flap_window_s=3600), "dltune: flapping: gpu.ecc",
         FLAPPING.format(2, 1)),
        ((3600, 60), Policy(flap_count=2, flap_window_s=3600), "dltune: gpu.ecc", DRAINED),
        ((30, 20, 10), Policy(), "dltune: flapping: gpu.ecc", FLAPPING.format(3, 24)),
        ((20, 10), Policy(), "dltune: gpu.ecc", DRAINED),
    ],
)  # fmt: skip
def test_a_failing_node_is_drained_as_flapping_only_for_resumes_strictly_within_the_window(
    ages: tuple[float, ...], policy: Policy, reason: str, said: str
) -> None:
    """A resume exactly ``flap_window_s`` ago is outside the window: it neither counts nor stays in the
    history the decision hands back."""
    node = state()
    history = History(tuple(NOW - age for age in ages))
    decision = decide(node, ECC_FAIL, {"gpu7": node}, policy, history, NOW)
    kept = tuple(NOW - age for age in ages if age < policy.flap_window_s)
    assert plain(decision) == Decision("drain", said, reason, history=History(kept, reason))


@pytest.mark.parametrize("name", ["gpu7", ""])
def test_a_failing_flapping_node_stays_drained_until_resumed_by_hand(name: str) -> None:
    history = History((NOW - 60,), "dltune: flapping: gpu.ecc")
    node = state("IDLE+DRAIN", "dltune: flapping: gpu.ecc", name)
    decision = decide(node, ECC_FAIL, None, Policy(), history, NOW)
    said = f"{name or 'this node'} stays drained (dltune: flapping: gpu.ecc): resume it by hand once fixed"
    assert plain(decision) == Decision("none", said, history=history)


def test_a_node_dltune_drained_for_the_same_checks_stays_drained_and_remembers_the_reason() -> None:
    """The reason names every failing check, blank-separated: the same checks keep the drain as it is."""
    reason = "dltune: gpu.ecc nfs.responsive"
    decision = decide(state("IDLE+DRAIN", reason), TWO_FAIL, None, Policy(), History((NOW - 60,)), NOW)
    assert plain(decision) == Decision(
        "none", f"gpu7 stays drained ({reason})", history=History((NOW - 60,), reason)
    )


def test_a_node_dltune_drained_for_other_checks_is_drained_again_without_asking_the_cluster() -> None:
    """Its drain is counted already: the new reason replaces the old without a limit check."""
    node = state("IDLE+DRAIN", "dltune: gpu.ecc")
    history = History((NOW - 60,), "dltune: gpu.ecc")
    decision = decide(node, NFS_FAIL, None, Policy(), history, NOW)
    assert plain(decision) == Decision(
        "drain",
        "drained gpu7: dltune: nfs.responsive",
        "dltune: nfs.responsive",
        history=History((NOW - 60,), "dltune: nfs.responsive"),
    )


def test_a_failing_node_in_service_first_asks_for_the_cluster() -> None:
    history = History((NOW - 2 * DAY, NOW - 60))
    decision = decide(state(), ECC_FAIL, None, Policy(), history, NOW)
    assert plain(decision) == Decision("need_cluster", "", history=History((NOW - 60,)))


def test_a_failing_node_held_by_the_limit_is_not_drained_and_carries_the_warning() -> None:
    cluster = {n.name: n for n in (state(name=f"gpu{i:02d}") for i in range(1, 28))}
    for i in (28, 29, 30):
        cluster[f"gpu{i}"] = state("IDLE+DRAIN", "dltune: nfs.responsive", f"gpu{i}", reason_time="2026")
    history = History((NOW - 60,))
    decision = decide(cluster["gpu01"], NFS_FAIL, cluster, Policy(), history, NOW)
    held = held_by_limit(cluster["gpu01"], cluster, Policy(), ["nfs.responsive"])
    assert held is not None and held.summary.startswith("3 nodes already drained by dltune")
    assert plain(decision) == Decision(
        "none", f"gpu01 not drained: {held.summary}", results=(held,), history=history
    )


# held_by_limit: where the limit holds, and what its warning says


def group(
    drained: dict[str, tuple[str, str]], size: int, partitions: tuple[str, ...] = ("gpu",)
) -> dict[str, NodeState]:
    """gpu01..gpuNN in ``partitions``, those in ``drained`` drained with (reason, stamp)."""
    nodes = {}
    for i in range(1, size + 1):
        name = f"gpu{i:02d}"
        reason, when = drained.get(name, ("", ""))
        nodes[name] = state("IDLE+DRAIN" if reason else "IDLE", reason, name, partitions, when)
    return nodes


@pytest.mark.parametrize(
    ("limit", "size", "drained", "held"),
    [
        ("10%", 30, 2, False), ("10%", 30, 3, True), ("10%", 31, 3, False), ("10%", 31, 4, True),
        ("10%", 10, 1, False), ("10%", 10, 2, True),  # 10% of 10 is 1: the minimum, 2, holds
        ("5", 100, 4, False), ("5", 100, 5, True), ("0", 100, 0, True), ("100%", 4, 3, False),
    ],
)  # fmt: skip
def test_a_node_is_held_once_the_others_drained_reach_the_limit(
    limit: str, size: int, drained: int, held: bool
) -> None:
    stamp = ("dltune: nfs.responsive", "2026-11-25T09:00:00")
    nodes = group({f"gpu{i:02d}": stamp for i in range(size - drained + 1, size + 1)}, size)
    result = held_by_limit(nodes["gpu01"], nodes, Policy(DrainLimit.parse(limit)), ["nfs.responsive"])
    assert (result is not None) is held


def test_the_limit_warning_names_the_checks_most_drained_first_and_what_was_counted() -> None:
    """Checks by how many nodes each drained, ties by name; only the node's partitions count."""
    nodes = group(
        {
            "gpu08": ("dltune: x.zeta gpu.ecc", "2026-11-25T08:00:00"),
            "gpu09": ("dltune: nfs.responsive", "2026-11-25T09:00:00"),
            "gpu10": ("dltune: flapping: nfs.responsive", "2026-11-25T09:00:00"),
        },
        10,
        ("gpu", "a100"),
    )
    nodes["cpu01"] = state("IDLE+DRAIN", "dltune: system.time_sync", "cpu01", ("cpu",), "2026-11-25T07:00:00")
    held = held_by_limit(nodes["gpu01"], nodes, Policy(), ["gpu.ecc", "nfs.responsive"])
    assert held == Result(
        "system.drain_limit",
        Status.WARN,
        "3 nodes already drained by dltune for nfs.responsive (2), gpu.ecc (1), x.zeta (1): a shared "
        "failure? gpu01 stays in service although gpu.ecc nfs.responsive failed (limit 2 of 10 nodes in "
        "gpu,a100)",
        evidence={
            "drained_nodes": ["gpu08", "gpu09", "gpu10"],
            "checks": {"x.zeta": 1, "gpu.ecc": 1, "nfs.responsive": 2},
            "limit": "10% (at least 2)",
            "nodes_in_partitions": 10,
            "failing_here": ["gpu.ecc", "nfs.responsive"],
        },
        remedy=REMEDY,
        metrics={"drained_nodes": 3.0, "drain_limit": 2.0},
    )


def test_a_node_without_partitions_counts_the_whole_cluster_and_drains_naming_no_check() -> None:
    nodes = {
        "gpu01": state(name="gpu01", partitions=()),
        "gpu02": state("IDLE+DRAIN", "dltune: by hand", "gpu02", ("a",), "2026-11-25T09:00:00"),
        "cpu03": state("IDLE+DRAIN", "dltune: by hand", "cpu03", ("b",), "2026-11-25T09:00:00"),
        "cpu04": state(name="cpu04", partitions=("b",)),
    }
    held = held_by_limit(nodes["gpu01"], nodes, Policy(DrainLimit(count=2)), ["gpu.ecc"])
    assert held is not None
    assert held.summary == (
        "2 nodes already drained by dltune for their checks: a shared failure? gpu01 stays in service "
        "although gpu.ecc failed (limit 2 of 4 nodes in the cluster)"
    )
    assert held.evidence["limit"] == "2 nodes" and held.evidence["nodes_in_partitions"] == 4


def test_the_limit_warning_lists_at_most_fifty_drained_nodes_but_counts_them_all() -> None:
    stamp = ("dltune: nfs.responsive", "2026-11-25T09:00:00")
    nodes = group({f"gpu{i:02d}": stamp for i in range(2, 62)}, 61)
    held = held_by_limit(nodes["gpu01"], nodes, Policy(DrainLimit(count=2)), ["nfs.responsive"])
    assert held is not None
    assert held.evidence["drained_nodes"] == [f"gpu{i:02d}" for i in range(2, 52)]
    assert held.metrics == {"drained_nodes": 60.0, "drain_limit": 2.0}


@pytest.mark.parametrize(
    "reason", ["dltune:nfs.responsive", "dltune: flapping:nfs.responsive", "dltune: flapping: nfs.responsive"]
)
def test_a_check_is_counted_by_its_id_whatever_blank_follows_dltunes_prefix(reason: str) -> None:
    nodes = group({"gpu02": (reason, "2026"), "gpu03": ("dltune: nfs.responsive", "2026")}, 10)
    held = held_by_limit(nodes["gpu01"], nodes, Policy(), ["nfs.responsive"])
    assert held is not None and held.evidence["checks"] == {"nfs.responsive": 2}


def test_drains_are_ordered_by_their_stamp_then_name_and_unstamped_ones_come_last() -> None:
    nodes = [
        state(name="a", reason_time=""),
        state(name="b", reason_time="2026-11-25T10:00:00"),
        state(name="d", reason_time=""),
        state(name="c", reason_time="2026-11-25T09:00:00"),
    ]
    assert [n.name for n in drain_order(nodes)] == ["c", "b", "a", "d"]


# DrainLimit


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("5", DrainLimit(count=5, percent=None), "5 nodes"),
        ("0", DrainLimit(count=0, percent=None), "0 nodes"),
        ("25%", DrainLimit(count=None, percent=25), "25% (at least 2)"),
        (" 10% ", DrainLimit(), "10% (at least 2)"),
    ],
)
def test_a_drain_limit_reads_as_a_count_or_a_share_and_says_which(
    text: str, limit: DrainLimit, shown: str
) -> None:
    assert DrainLimit.parse(text) == limit
    assert str(limit) == shown


def test_a_refused_drain_limit_names_the_option_and_the_text() -> None:
    with pytest.raises(ValueError) as refused:
        DrainLimit.parse("ten")
    assert (
        str(refused.value) == "--drain-limit='ten': give a number of nodes (e.g. 5) or a share (1% to 100%)"
    )


def test_a_limit_with_neither_count_nor_share_is_the_minimum() -> None:
    """No share given counts as 0%: the minimum of 2, however many nodes."""
    assert DrainLimit(count=None, percent=None).of(300) == 2


# apply: what runs in Slurm, and what is said


class TimedSlurm(FakeSlurm):
    """FakeSlurm keeping the timeout of each call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeouts: list[float] = []

    def run(self, argv: list[str] | tuple[str, ...], timeout: float = 5.0) -> CommandResult:
        self.timeouts.append(timeout)
        return super().run(argv, timeout)


def test_every_scontrol_call_is_given_dltunes_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeout is SCONTROL_TIMEOUT_S, passed on each call (never the runner's own default)."""
    monkeypatch.setattr("dltune.fleet.slurm_health.SCONTROL_TIMEOUT_S", 2.5)
    slurm = TimedSlurm({f"gpu{i:02d}": ("IDLE", "gpu", "") for i in range(1, 31)})
    health(slurm, "gpu01", ECC_FAIL, tmp_path)  # show node, show all, drain, show all (the recheck)
    health(slurm, "gpu01", HEALTHY, tmp_path)  # show node, resume
    assert slurm.state("gpu01") == ("IDLE", "")
    assert len(slurm.timeouts) == 6 and set(slurm.timeouts) == {2.5}


def test_a_drain_within_the_limit_says_so_in_few_words_and_saves_its_reason(tmp_path: Path) -> None:
    slurm = cluster_of(30)
    said, added = health(slurm, "gpu01", ECC_FAIL, tmp_path, now=NOW)
    assert (said, added) == ("drained gpu01: dltune: gpu.ecc", [])
    saved = json.loads((tmp_path / "state" / "history.json").read_text())
    assert {
        k: saved[k] for k in ("schema_version", "resumes", "drained_reason", "drains", "check_drains")
    } == {
        "schema_version": 2,
        "resumes": [],
        "drained_reason": "dltune: gpu.ecc",
        "drains": 1,
        "check_drains": {"gpu.ecc": 1},
    }
    assert (saved["last_drain"], saved["failing_runs"]) == (NOW, {"gpu.ecc": 1})


def test_without_a_time_given_the_resume_is_stamped_with_the_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slurm_health, "time", SimpleNamespace(time=lambda: 1.5e9, sleep=lambda s: None))
    slurm = FakeSlurm({"gpu01": ("IDLE+DRAIN", "gpu", "dltune: gpu.ecc")})
    history = tmp_path / "history.json"
    said, _ = apply("gpu01", HEALTHY, slurm, None, str(history))  # type: ignore[arg-type]
    assert said == "resumed gpu01 (dltune had drained it: dltune: gpu.ecc)"
    saved = json.loads(history.read_text())
    assert (saved["resumes"], saved["drained_reason"], saved["resumes_total"], saved["last_resume"]) == (
        [1.5e9],
        "",
        1,
        1.5e9,
    )


def test_a_drain_given_back_at_the_recheck_saves_no_drain_and_keeps_the_history_note(tmp_path: Path) -> None:
    """The recheck finds two earlier drains: the drain is given back, the history saved without a drain
    reason (over the broken file), and the note that the broken file was not used is still said."""
    slurm = cluster_of(10)
    slurm.drains_meanwhile = {"gpu01": "dltune: nfs.responsive", "gpu02": "dltune: nfs.responsive"}
    history = tmp_path / "state" / "history.json"
    history.parent.mkdir()
    history.write_text('{"resumes": "x"}')
    said, added = health(slurm, "gpu03", NFS_FAIL, tmp_path, now=NOW)
    assert slurm.state("gpu03") == ("IDLE", "")
    assert [a.id for a in added] == ["system.drain_limit"]
    assert said == (
        f"gpu03 drained and given back at once: {added[0].summary} "
        f"(history {history} not used: resumes is not a list of times)"
    )
    saved = json.loads(history.read_text())
    assert (saved["resumes"], saved["drained_reason"], saved["drains"], saved["failing_runs"]) == (
        [],
        "",
        0,
        {"nfs.responsive": 1},
    )


def test_a_node_the_admin_drains_between_dltunes_two_questions_is_left_to_the_admin() -> None:
    """The node's own line said IDLE; the cluster's, a moment later, says the admin drained it: the
    cluster's line decides, and the admin's reason is not overwritten."""
    runner = ScriptedScontrol(
        {
            "scontrol -o show node gpu7": [line("gpu7")],
            "scontrol -o show node": [listing(line("gpu6"), line("gpu7", "IDLE+DRAIN", reason="PSU swap"))],
            DRAIN_GPU7: [""],
        }
    )
    said, added = apply("gpu7", ECC_FAIL, runner)
    assert said == (
        "gpu7 left as it is: out of service by someone else (IDLE+DRAIN, PSU swap); "
        "critical failures not recorded in Slurm: gpu.ecc"
    )
    assert (runner.updates, added) == ([], [])


def test_a_node_missing_from_the_cluster_listing_is_drained_by_its_own_line_and_kept() -> None:
    """A cluster listing that lacks the node: the node's own line stands in for it, and the recheck,
    not finding it either, keeps the drain."""
    runner = ScriptedScontrol(
        {
            "scontrol -o show node gpu7": [line("gpu7")],
            "scontrol -o show node": [listing(line("gpu1"), line("gpu2"))],
            DRAIN_GPU7: [""],
            RESUME_GPU7: [""],
        }
    )
    said, added = apply("gpu7", ECC_FAIL, runner)
    assert (said, added) == ("drained gpu7: dltune: gpu.ecc", [])
    assert runner.updates == [tuple(DRAIN_GPU7.split(" ", 4))]


def test_a_drain_the_admin_took_over_before_the_recheck_is_never_given_back() -> None:
    """Other drains landed meanwhile (beyond the limit now), but the admin re-drained this node with
    their own reason: giving the drain back would put the admin's node into service."""
    others = [line(f"gpu{i}", "IDLE+DRAIN", reason="dltune: nfs.responsive") for i in (1, 2, 3)]
    runner = ScriptedScontrol(
        {
            "scontrol -o show node gpu7": [line("gpu7")],
            "scontrol -o show node": [
                listing(*(line(f"gpu{i}") for i in range(1, 11))),
                listing(*others, *(line(f"gpu{i}") for i in range(4, 7)), line("gpu7", "IDLE+DRAIN",
                        reason="PSU swap"), *(line(f"gpu{i}") for i in range(8, 11))),
            ],
            DRAIN_GPU7: [""],
            RESUME_GPU7: [""],
        }
    )  # fmt: skip
    said, added = apply("gpu7", ECC_FAIL, runner)
    assert (said, added) == ("drained gpu7: dltune: gpu.ecc", [])
    assert runner.updates == [tuple(DRAIN_GPU7.split(" ", 4))]


def test_a_node_line_without_its_name_is_said_by_the_name_dltune_was_given() -> None:
    runner = ScriptedScontrol({"scontrol -o show node gpu7": ["State=UNKNOWN Partitions=gpu"]})
    said, added = apply("gpu7", ECC_FAIL, runner)
    assert said == (
        "gpu7 left as it is: not registered with slurmctld yet (UNKNOWN); "
        "critical failures not recorded in Slurm: gpu.ecc"
    )
    assert added == [] and runner.updates == []


LONG = "".join(f"{i:04d}," for i in range(80))  # 400 characters, no two tails alike


def test_a_node_slurm_does_not_know_is_left_quoting_the_last_of_scontrols_words() -> None:
    stderr = f"slurm_load_node: {LONG} Node gpu7 not found\n"
    runner = ScriptedScontrol({"scontrol -o show node gpu7": [(1, "", stderr)]})
    said, added = apply("gpu7", ECC_FAIL, runner)
    assert said == f"gpu7 left as it is: Slurm does not know it ({stderr.strip()[-200:]})"
    assert added == [] and runner.calls == [("scontrol", "-o", "show", "node", "gpu7")]


def test_scontrol_missing_is_slurm_unavailable_whatever_it_printed() -> None:
    """Exit 127 is the program missing (or a wrapper's), never an answer about the node."""
    runner = ScriptedScontrol({"scontrol -o show node gpu7": [(127, "", "Node gpu7 not found")]})
    with pytest.raises(SlurmUnavailable) as refused:
        apply("gpu7", ECC_FAIL, runner)
    assert str(refused.value) == "scontrol show node gpu7 failed: Node gpu7 not found"


def test_the_node_line_failing_quotes_the_last_300_characters() -> None:
    runner = ScriptedScontrol({"scontrol -o show node gpu7": [(1, "", LONG)]})
    with pytest.raises(SlurmUnavailable) as refused:
        apply("gpu7", ECC_FAIL, runner)
    assert str(refused.value) == f"scontrol show node gpu7 failed: {LONG[-300:]}"


@pytest.mark.parametrize(
    ("answer", "quoted"),
    [
        ((1, "", "Invalid user id\n"), "Invalid user id"),
        ((1, "slurm_update error: Invalid node state\n", ""), "slurm_update error: Invalid node state"),
        ((1, "on stdout", "on stderr"), "on stderr"),
        ((2, " \n", ""), "exit 2"),
        ((1, "", LONG), LONG[-300:]),
    ],
)
def test_a_failed_drain_raises_naming_the_command_and_quoting_scontrol(
    answer: tuple[int, str, str], quoted: str
) -> None:
    """stderr, else stdout, else the exit code, cut to the last 300 characters; the command is named
    by its first four words (the reason may be long)."""
    runner = ScriptedScontrol(
        {
            "scontrol -o show node gpu7": [line("gpu7")],
            "scontrol -o show node": [listing(line("gpu7"))],
            DRAIN_GPU7: [answer],
        }
    )
    with pytest.raises(SlurmUnavailable) as refused:
        apply("gpu7", ECC_FAIL, runner)
    assert str(refused.value) == f"scontrol update nodename=gpu7 state=drain failed: {quoted}"


# History and its file


def test_a_history_is_saved_as_versioned_json_and_read_back_the_same(tmp_path: Path) -> None:
    history = History(
        (1.0, 2.5),
        "dltune: gpu.ecc",
        {"gpu.clocks": 2},
        0,
        None,
        4,
        {"gpu.ecc": 3, "gpu.clocks": 1},
        2,
        7200.5,
        3.0,
        2.5,
    )
    assert history.to_json() == {
        "schema_version": 2,
        "resumes": [1.0, 2.5],
        "drained_reason": "dltune: gpu.ecc",
        "failing_runs": {"gpu.clocks": 2},
        "passing_runs": 0,
        "passing_since": None,
        "drains": 4,
        "check_drains": {"gpu.ecc": 3, "gpu.clocks": 1},
        "resumes_total": 2,
        "drained_seconds": 7200.5,
        "last_drain": 3.0,
        "last_resume": 2.5,
        "drained_since": None,
    }
    path = str(tmp_path / "state" / "history.json")
    save_history(path, history)
    assert load_history(path) == (history, "")


@pytest.mark.parametrize(
    ("data", "history"),
    [
        ({"resumes": [1, 2.5], "drained_reason": "dltune: gpu.ecc"}, History((1.0, 2.5), "dltune: gpu.ecc")),
        ({"drained_reason": "dltune: gpu.ecc"}, History((), "dltune: gpu.ecc")),
        ({"resumes": [7]}, History((7.0,), "")),
        ({}, History()),
        ({"resumes": list(range(101))}, History(tuple(float(i) for i in range(1, 101)))),
    ],
)
def test_a_history_reads_missing_fields_as_empty_and_keeps_the_last_hundred_resumes(
    data: dict[str, Any], history: History
) -> None:
    assert History.from_json(data) == history


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ([1, 2], "not a JSON object"),
        ("resumes", "not a JSON object"),
        ({"resumes": "x"}, "resumes is not a list of times"),
        ({"resumes": [1, True]}, "resumes is not a list of times"),
        ({"resumes": None}, "resumes is not a list of times"),
        ({"resumes": [1], "drained_reason": 5}, "drained_reason is not text"),
        ({"drained_reason": None}, "drained_reason is not text"),
        ({"drains": -1}, "one of drains is not a count"),
        ({"passing_runs": "3"}, "one of passing_runs is not a count"),
        ({"drained_seconds": True}, "one of drained_seconds is not a count"),
        ({"last_drain": "x"}, "one of passing_since, last_drain, last_resume, drained_since is not a time"),
        ({"failing_runs": {"gpu.ecc": -1}}, "failing_runs is not a map of check to count"),
        ({"check_drains": []}, "check_drains is not a map of check to count"),
    ],
)
def test_a_history_of_another_shape_is_refused_saying_what_is_wrong(data: Any, said: str) -> None:
    with pytest.raises(ValueError) as refused:
        History.from_json(data)
    assert str(refused.value) == said


def test_no_history_file_or_a_missing_one_starts_afresh_without_a_note(tmp_path: Path) -> None:
    assert load_history(None) == (History(), "")
    assert load_history(str(tmp_path / "absent.json")) == (History(), "")


def test_a_broken_history_file_starts_afresh_with_a_note_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text('{"resumes": [1], "drained_reason": 5}')
    assert load_history(str(path)) == (History(), f" (history {path} not used: drained_reason is not text)")


@pytest.mark.parametrize(("size", "read"), [(1 << 20, True), ((1 << 20) + 1, False)])
def test_a_history_file_is_read_up_to_one_mebibyte(tmp_path: Path, size: int, read: bool) -> None:
    text = '{"resumes": [5], "drained_reason": "dltune: gpu.ecc"}'
    path = tmp_path / "history.json"
    path.write_text(text + " " * (size - len(text)))
    assert path.stat().st_size == size
    if read:
        assert load_history(str(path)) == (History((5.0,), "dltune: gpu.ecc"), "")
    else:
        assert load_history(str(path)) == (
            History(),
            f" (history {path} not used: larger than 1048576 bytes)",
        )


def test_a_history_is_not_written_through_a_linked_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "state").symlink_to(real)
    with pytest.raises(DltuneError) as refused:
        save_history(str(tmp_path / "state" / "history.json"), History((1.0,)))
    assert str(refused.value) == (
        f"{tmp_path / 'state'}: not a directory of this user's that only it may write: the history file is "
        "not written there"
    )
    assert os.listdir(real) == []


# parse_node, parse_nodes


def test_a_node_line_without_name_or_state_reads_them_as_empty() -> None:
    assert parse_node("Reason=cable pulled") == NodeState("", "cable pulled", "", (), "")


def test_every_partition_of_a_node_is_read() -> None:
    (sample,) = [s for s in samples("scontrol_show_node") if s.name.startswith("zh_deploy_")]
    assert parse_nodes(sample.body)["server2"].partitions == ("cpu", "memory", "gpu")
    assert parse_node("NodeName=a State=IDLE Partitions=gpu,,cpu").partitions == ("gpu", "cpu")


def test_node_records_are_split_at_each_nodename_however_indented_and_after_leading_noise() -> None:
    text = (
        "scontrol: warning: the configuration file is newer than slurmctld's\n"
        "  NodeName=a State=IDLE Partitions=gpu\n"
        "     Reason=cable [root@2026-11-25T09:00:00]\n"
        "\n"
        "  NodeName=b State=DOWN Partitions=gpu\n"
    )
    nodes = parse_nodes(text)
    assert nodes == {
        "a": NodeState("IDLE", "cable", "a", ("gpu",), "2026-11-25T09:00:00"),
        "b": NodeState("DOWN", "", "b", ("gpu",), ""),
    }
