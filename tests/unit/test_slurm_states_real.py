"""Every node of the real `scontrol show node` outputs (tests/fixtures/real/scontrol_show_node: Slurm
14.11 to 25.11; maintenance reservations, reservations alone, power saving, cloud nodes up and down,
reboots, not-responding nodes, admins' drains) through dltune's drain decision, against a slurmctld
that answers with the sample itself. EXPECT says per node "-> may drain" or "-> left as it is: <why>":
a failing critical check drains exactly the first (one `scontrol update ... state=drain` with dltune's
reason), and leaves the others as Slurm has them, with a line that names why and the state."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dltune.fleet.slurm_health import History, Policy, apply, decide, parse_nodes
from dltune.probes.runner import CommandResult
from tests.real_corpus import Sample, samples
from tests.unit.test_scontrol_real import expected
from tests.unit.test_slurm_health import ECC_FAIL, HEALTHY

NOW = 1.9e9
SAMPLES = samples("scontrol_show_node")
CASES = [
    pytest.param(sample, name, verdict, id=f"{sample.name}/{name}")
    for sample in SAMPLES
    for name, (_state, _reason, _stamp, verdict) in expected(sample).items()
]


@pytest.fixture(autouse=True)
def no_recheck_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dltune.fleet.slurm_health.RECHECK_DELAY_S", 0.0)


def records(body: str) -> dict[str, str]:
    """Each node's record of a sample as `scontrol -o` prints it: its lines joined by a blank."""
    found: list[list[str]] = []
    for line in body.splitlines():
        if line.lstrip().startswith("NodeName="):
            found.append([line.strip()])
        elif found and line.strip():
            found[-1].append(line.strip())
    return {record[0].split()[0].removeprefix("NodeName="): " ".join(record) for record in found}


class SampleSlurm:
    """slurmctld answering with a sample: `scontrol -o show node NAME` prints that node's record,
    `scontrol -o show node` all of them; an update is recorded (and succeeds)."""

    def __init__(self, sample: Sample) -> None:
        self.records = records(sample.body)
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: list[str] | tuple[str, ...], timeout: float | None = 5.0) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        if args[:4] == ("scontrol", "-o", "show", "node"):
            shown = [self.records[args[4]]] if len(args) == 5 else list(self.records.values())
            return CommandResult(args, 0, "".join(f"{line}\n" for line in shown))
        if args[:2] == ("scontrol", "update"):
            return CommandResult(args, 0, "")
        return CommandResult(args, 127, "", f"{args[0]}: not recorded")

    @property
    def updates(self) -> list[tuple[str, ...]]:
        return [call for call in self.calls if call[1] == "update"]


def test_the_samples_cover_maintenance_reservations_power_saving_cloud_and_reboots() -> None:
    """The corpus holds each kind of node the decision must leave (and says so in its decisions), and
    nodes in service beside them: reservations alone, cloud nodes that are up, dynamic nodes."""
    said = []
    for sample in SAMPLES:
        for node in parse_nodes(sample.body).values():
            said.append(decide(node, ECC_FAIL, None, Policy(), History(), NOW).said)
    for why in (
        "in maintenance",
        "powered down by power saving",
        "powering up",
        "powering down",
        "rebooting",
        "not registered with slurmctld yet",
        "out of service by someone else",
    ):
        assert any(why in line.partition("left as it is: ")[2].partition(" (")[0] for line in said), why
    verdicts = {state: verdict for sample in SAMPLES for state, _, _, verdict in expected(sample).values()}
    for state in ("RESERVED", "IDLE+CLOUD", "IDLE+DYNAMIC_NORM+RESERVED", "ALLOCATED", "IDLE"):
        assert verdicts[state] == "may drain", state
    assert len(SAMPLES) >= 19


@pytest.mark.parametrize(("sample", "name", "verdict"), CASES)
def test_a_failing_critical_check_drains_only_a_node_dltune_may_touch(
    sample: Sample, name: str, verdict: str
) -> None:
    slurm = SampleSlurm(sample)
    said, added = apply(name, ECC_FAIL, slurm, Policy(), None, now=NOW)  # type: ignore[arg-type]
    state = parse_nodes(sample.body)[name].state
    if verdict == "may drain":
        assert slurm.updates == [
            ("scontrol", "update", f"nodename={name}", "state=drain", "reason=dltune: gpu.ecc")
        ]
        assert (said, added) == (f"drained {name}: dltune: gpu.ecc", [])
    else:
        assert slurm.updates == [], (state, said)
        assert said.startswith(f"{name} {verdict} ({state}"), said
        assert said.endswith("; critical failures not recorded in Slurm: gpu.ecc")


@pytest.mark.parametrize(("sample", "name", "verdict"), CASES)
def test_a_healthy_run_changes_no_sample_node(sample: Sample, name: str, verdict: str) -> None:
    """None of these nodes was drained by dltune: a healthy run resumes none of them (an admin's drain,
    a maintenance window, a powered-down cloud node stay as they are)."""
    slurm = SampleSlurm(sample)
    said, _ = apply(name, HEALTHY, slurm, Policy(), None, now=NOW)  # type: ignore[arg-type]
    assert slurm.updates == []
    assert said.startswith(f"{name} {verdict if verdict != 'may drain' else 'left as it is'} ("), said


@pytest.mark.parametrize(("sample", "name", "verdict"), CASES)
def test_a_drain_of_dltunes_own_is_resumed_only_where_the_state_lets_dltune_judge(
    sample: Sample, name: str, verdict: str
) -> None:
    """The same node with dltune's reason on it (dltune drained it, then the admin's maintenance window,
    power saving or a reboot came): healthy again, dltune resumes it only if its state is in service or
    drained/down, never when it is in maintenance, powered down, rebooting or not responding."""
    node = replace(parse_nodes(sample.body)[name], reason="dltune: gpu.ecc", name=name)
    decision = decide(node, HEALTHY, {name: node}, Policy(), History(), NOW)
    if verdict == "may drain" or "DRAIN" not in node.state:
        assert decision.action == "none"
    elif verdict == "left as it is: out of service by someone else":
        assert decision.action == "resume"
    else:
        assert decision.action == "none"
        assert decision.said == f"{name} {verdict} ({node.state}, dltune: gpu.ecc)"
