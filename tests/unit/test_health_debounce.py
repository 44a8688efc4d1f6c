"""The health check's debounce by failure class, its recovery window, its profiles and its counters,
run by run against slurmctld's node table behind `scontrol` (FakeSlurm: the command boundary; the
real Slurm runs the same paths in tests/integration/test_site_lab.py). Each test walks a node through
several health-check runs, as slurmd would, and asserts what Slurm shows after each run and what the
node's history file keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dltune.checks import failure_classes
from dltune.commands.node import drain_policy
from dltune.commands.options import HealthProfile
from dltune.fleet.slurm_health import Policy, apply_and_report, debounce
from dltune.health_state import History, Profile
from dltune.model import FailureClass, Result, Status
from tests.unit.test_slurm_health import ECC_FAIL, HEALTHY, FakeSlurm

CLOCKS_FAIL = [Result("gpu.clocks", Status.FAIL, "clocks held down by hardware", "0", critical=True)]
CLOCKS_PASS = [Result("gpu.clocks", Status.PASS, "clocks free", "0", critical=True)]
T0 = 1.9e9
RUN = 300.0  # slurm_healthcheck_interval's default


@pytest.fixture(autouse=True)
def no_recheck_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dltune.fleet.slurm_health.RECHECK_DELAY_S", 0.0)


def policy(profile: Profile = Profile.DRAIN, transient_runs: int = 3, **more: object) -> Policy:
    runs, transient = debounce(failure_classes(), {"hard": 1, "transient": transient_runs}, {})
    return Policy(profile=profile, runs_needed=runs, transient=transient, **more)  # type: ignore[arg-type]


class Node:
    """One node of a 30-node partition and its history file, run by run."""

    def __init__(self, tmp_path: Path, chosen: Policy) -> None:
        self.slurm = FakeSlurm({f"gpu{i:02d}": ("IDLE", "gpu", "") for i in range(1, 31)})
        self.history = tmp_path / "state" / "history.json"
        self.policy = chosen
        self.now = T0
        self.said: list[str] = []

    def run(self, results: list[Result]) -> str:
        said, _added, self.report = apply_and_report(
            "gpu01", results, self.slurm, self.policy, str(self.history), self.now
        )
        self.now += RUN
        self.said.append(said)
        return said

    @property
    def state(self) -> tuple[str, str]:
        state, _partitions, reason, _when = self.slurm.nodes["gpu01"]
        return state, reason

    def saved(self) -> dict[str, object]:
        return json.loads(self.history.read_text())  # type: ignore[no-any-return]


def test_the_checks_declare_their_class_and_the_transient_ones_are_those_that_clear_by_themselves() -> None:
    classes = failure_classes()
    transient = sorted(c for c, kind in classes.items() if kind is FailureClass.TRANSIENT)
    assert transient == [
        "fabric.ib_ports",
        "gpu.clocks",
        "gpu.thermal_power",
        "nfs.responsive",
        "system.audit_timeout",
    ]
    for hard in ("gpu.present", "gpu.ecc", "gpu.xid", "driver.loaded", "nfs.vip_mounts", "fabric.pcie_aer"):
        assert classes[hard] is FailureClass.HARD, hard


def test_a_transient_fail_drains_only_at_its_nth_consecutive_run_and_says_the_count(tmp_path: Path) -> None:
    node = Node(tmp_path, policy())
    assert node.run(CLOCKS_FAIL) == "gpu01 not drained yet: gpu.clocks failed 1 of 3 runs"
    assert node.run(CLOCKS_FAIL) == "gpu01 not drained yet: gpu.clocks failed 2 of 3 runs"
    assert node.state == ("IDLE", "")
    assert node.report.pending == {"gpu.clocks": (2, 3)}
    assert node.run(CLOCKS_FAIL) == "drained gpu01: dltune: gpu.clocks"
    assert node.state == ("IDLE+DRAIN", "dltune: gpu.clocks")
    assert node.report.pending == {} and node.report.drained_by_dltune


def test_a_pass_between_transient_fails_starts_the_count_again(tmp_path: Path) -> None:
    node = Node(tmp_path, policy())
    node.run(CLOCKS_FAIL)
    node.run(CLOCKS_FAIL)
    node.run(CLOCKS_PASS)
    assert node.run(CLOCKS_FAIL) == "gpu01 not drained yet: gpu.clocks failed 1 of 3 runs"
    node.run(CLOCKS_FAIL)
    assert node.state == ("IDLE", "")
    assert node.saved()["failing_runs"] == {"gpu.clocks": 2}


def test_a_hard_fail_drains_at_once_and_names_the_transient_one_still_pending(tmp_path: Path) -> None:
    node = Node(tmp_path, policy())
    said = node.run([*ECC_FAIL, *CLOCKS_FAIL])
    assert said == "drained gpu01: dltune: gpu.ecc (gpu.clocks failed 1 of 3 runs)"
    assert node.state == ("IDLE+DRAIN", "dltune: gpu.ecc")


def test_one_run_for_the_transient_class_is_todays_behaviour_and_a_check_may_have_its_own(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path, policy(transient_runs=1))
    assert node.run(CLOCKS_FAIL) == "drained gpu01: dltune: gpu.clocks"
    runs, _ = debounce(failure_classes(), {"hard": 1, "transient": 3}, {"gpu.clocks": 5, "gpu.ecc": 2})
    assert runs["gpu.clocks"] == 5 and runs["gpu.ecc"] == 2 and runs["nfs.responsive"] == 3
    assert "gpu.present" not in runs  # 1: at once


def test_a_transient_drain_is_resumed_only_after_its_runs_and_its_minutes(tmp_path: Path) -> None:
    """Three passing runs spanning 15 minutes: at 300 s a run, the third pass comes 10 minutes after the
    first, so the window (not the runs) holds the resume until the fourth."""
    node = Node(tmp_path, policy(recovery_runs=3, recovery_window_s=900.0))
    for _ in range(3):
        node.run(CLOCKS_FAIL)
    assert node.state == ("IDLE+DRAIN", "dltune: gpu.clocks")
    said = node.run(CLOCKS_PASS)
    assert (
        said
        == "gpu01 stays drained (dltune: gpu.clocks): passing 1 of 3 runs, 15 of 15 min left before a resume"
    )
    assert node.report.recovery == (1, 3, 0.0, 900.0)
    node.run(CLOCKS_PASS)
    said = node.run(CLOCKS_PASS)
    assert (
        said
        == "gpu01 stays drained (dltune: gpu.clocks): passing 3 of 3 runs, 5 of 15 min left before a resume"
    )
    assert node.state == ("IDLE+DRAIN", "dltune: gpu.clocks")
    assert node.run(CLOCKS_PASS) == "resumed gpu01 (dltune had drained it: dltune: gpu.clocks)"
    assert node.state == ("IDLE", "")


def test_a_fail_during_the_recovery_window_starts_it_again(tmp_path: Path) -> None:
    node = Node(tmp_path, policy(recovery_runs=2, recovery_window_s=0.0))
    for _ in range(3):
        node.run(CLOCKS_FAIL)
    node.run(CLOCKS_PASS)
    node.run(CLOCKS_FAIL)  # back to failing: the passing run is lost
    assert node.run(CLOCKS_PASS).startswith("gpu01 stays drained (dltune: gpu.clocks): passing 1 of 2 runs")
    assert node.run(CLOCKS_PASS) == "resumed gpu01 (dltune had drained it: dltune: gpu.clocks)"


def test_a_hard_drain_is_resumed_at_its_first_pass(tmp_path: Path) -> None:
    node = Node(tmp_path, policy(recovery_runs=10, recovery_window_s=3600.0))
    node.run(ECC_FAIL)
    assert node.run(HEALTHY) == "resumed gpu01 (dltune had drained it: dltune: gpu.ecc)"


def test_the_observe_profile_says_what_it_would_do_and_changes_nothing(tmp_path: Path) -> None:
    node = Node(tmp_path, policy(Profile.OBSERVE))
    assert node.run(ECC_FAIL) == "observe profile: would drain gpu01 (within the drain limit); nothing done"
    assert node.state == ("IDLE", "")
    assert [c for c in node.slurm.calls if c[1] == "update"] == []
    saved = node.saved()
    assert (saved["drains"], saved["drained_reason"], saved["failing_runs"]) == (0, "", {"gpu.ecc": 1})
    assert node.report.profile is Profile.OBSERVE and not node.report.drained_by_dltune
    # A node dltune drained before the group went to observe: it would be resumed, and stays.
    node.slurm.nodes["gpu01"][0:4] = ["IDLE+DRAIN", "gpu", "dltune: gpu.ecc", "2026-11-25T09:00:00"]
    said = node.run(HEALTHY)
    assert said == "observe profile: would resume gpu01 (dltune: gpu.ecc); nothing done"
    assert node.state == ("IDLE+DRAIN", "dltune: gpu.ecc")


def test_the_counters_count_drains_resumes_and_the_time_drained(tmp_path: Path) -> None:
    node = Node(tmp_path, policy())
    node.run(ECC_FAIL)
    node.run(ECC_FAIL)  # stays drained: not a second drain
    node.run(HEALTHY)  # resumed 600 s after the drain
    node.run(ECC_FAIL)
    saved = node.saved()
    assert (saved["drains"], saved["check_drains"], saved["resumes_total"]) == (2, {"gpu.ecc": 2}, 1)
    assert saved["drained_seconds"] == 2 * RUN and saved["last_drain"] == T0 + 3 * RUN
    assert saved["last_resume"] == T0 + 2 * RUN
    # An operator resumes it: the drain's time counts, dltune's resumes (flap damping) start afresh.
    node.slurm.nodes["gpu01"][0:3] = ["IDLE", "gpu", ""]
    node.run(HEALTHY)
    saved = node.saved()
    assert saved["drained_seconds"] == 3 * RUN and saved["resumes"] == [] and saved["resumes_total"] == 1


def test_a_history_of_the_first_schema_reads_with_zero_counters(tmp_path: Path) -> None:
    node = Node(tmp_path, policy())
    node.history.parent.mkdir(mode=0o700)
    node.history.write_text('{"schema_version": 1, "resumes": [1899999000.0], "drained_reason": ""}')
    node.run(ECC_FAIL)
    saved = node.saved()
    assert saved["schema_version"] == 2 and saved["drains"] == 1 and saved["resumes"] == [1899999000.0]


def test_the_options_build_the_policy_and_refuse_what_they_cannot_mean() -> None:
    built = drain_policy("10%", 3, 24, HealthProfile.observe, ["transient=4", "gpu.ecc=2"], 5, 30)
    assert built.profile is Profile.OBSERVE and built.recovery_runs == 5 and built.recovery_window_s == 1800
    assert (
        built.needed("gpu.clocks") == 4 and built.needed("gpu.ecc") == 2 and built.needed("gpu.present") == 1
    )
    assert "nfs.responsive" in built.transient and "gpu.ecc" not in built.transient
    import typer

    for given in ("gpu.nope=3", "transient=0", "transient=x", "hard", "transient=1001"):
        with pytest.raises(typer.BadParameter) as refused:
            drain_policy("10%", 3, 24, HealthProfile.drain, [given])
        assert refused.value.param_hint == "--debounce", given


def test_history_observed_counts_each_failing_check_and_the_passing_run() -> None:
    seen = History().observed(["gpu.clocks"], T0).observed(["gpu.clocks", "gpu.ecc"], T0 + 1)
    assert seen.failing_runs == {"gpu.clocks": 2, "gpu.ecc": 1} and seen.passing_runs == 0
    passed = seen.observed([], T0 + 2).observed([], T0 + 3)
    assert passed.failing_runs == {} and (passed.passing_runs, passed.passing_since) == (2, T0 + 2)


def test_the_health_checks_series_say_its_profile_pending_runs_recovery_and_counters(tmp_path: Path) -> None:
    """Parsed back by prometheus_client's parser (Prometheus's text format): counters as counters."""
    from datetime import datetime, timezone

    from prometheus_client.parser import text_string_to_metric_families

    from dltune.outputs.prometheus import render_prometheus

    def series(results: list[Result]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = render_prometheus(results, datetime.fromtimestamp(node.now, timezone.utc), None, node.report)
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith("dltune_health")
        }

    node = Node(tmp_path, policy(Profile.REMEDIATE, recovery_runs=2, recovery_window_s=0.0))
    node.run(CLOCKS_FAIL)
    found = series(CLOCKS_FAIL)
    assert found[("dltune_health_profile", (("profile", "remediate"),))] == 1.0
    assert found[("dltune_health_profile", (("profile", "drain"),))] == 0.0
    assert found[("dltune_health_failing_runs", (("check", "gpu.clocks"),))] == 1.0
    assert found[("dltune_health_needed_runs", (("check", "gpu.clocks"),))] == 3.0
    assert found[("dltune_health_drained", ())] == 0.0
    node.run(CLOCKS_FAIL)
    node.run(CLOCKS_FAIL)
    node.run(CLOCKS_PASS)
    found = series(CLOCKS_PASS)
    assert found[("dltune_health_drained", ())] == 1.0
    assert found[("dltune_health_recovery_passing_runs", ())] == 1.0
    assert found[("dltune_health_recovery_needed_runs", ())] == 2.0
    assert found[("dltune_health_drains_total", ())] == 1.0
    assert found[("dltune_health_check_drains_total", (("check", "gpu.clocks"),))] == 1.0
    assert found[("dltune_health_last_drain_timestamp_seconds", ())] == T0 + 2 * RUN
    node.run(CLOCKS_PASS)
    found = series(CLOCKS_PASS)
    assert found[("dltune_health_drained", ())] == 0.0
    assert found[("dltune_health_resumes_total", ())] == 1.0
    assert found[("dltune_health_drained_seconds_total", ())] == 2 * RUN
    assert ("dltune_health_recovery_passing_runs", ()) not in found
    assert found[("dltune_health_last_drain_timestamp_seconds", ())] == T0 + 2 * RUN  # kept after the resume


def test_the_health_series_go_to_a_file_of_their_own_that_the_audit_timer_never_rewrites(
    tmp_path: Path,
) -> None:
    """The timer's `dltune audit --textfile-dir` rewrites dltune.prom every 15 minutes: the health
    check's series live in dltune-health.prom, so they do not vanish between two health-check runs."""
    from dltune.commands.node import HEALTH_TEXTFILE, write_node_outputs

    node = Node(tmp_path, policy())
    node.run(ECC_FAIL)
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    write_node_outputs(ECC_FAIL, "gpu01", textfiles, None, (), node.report)
    health = (textfiles / HEALTH_TEXTFILE).read_text()
    assert "dltune_health_drains_total 1.0" in health and "dltune_check_status" not in health
    write_node_outputs(HEALTHY, "gpu01", textfiles, None)  # the timer's audit
    assert (textfiles / HEALTH_TEXTFILE).read_text() == health
    assert "dltune_health" not in (textfiles / "dltune.prom").read_text()
