"""Drain decisions of `dltune audit --slurm-drain` (the real scontrol path runs in molecule/slurm_tmpdir)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dltune.fleet.slurm_health import (
    CLOCK_SLACK_S,
    DrainLimit,
    Policy,
    SlurmUnavailable,
    apply,
    critical_failures,
    parse_node,
    parse_nodes,
    record_resume,
)
from dltune.model import Result, Status
from dltune.probes.runner import CommandResult, RecordedRunner

SHOWN = (
    "NodeName=slurm-node Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 "
    "Partitions=debug BootTime=2026-11-22T07:00:00 "
    "Reason=dltune: staging.slurm_hooks [root@2026-11-22T08:00:00]"
)


def test_only_critical_fails_drain_never_errors_or_skips() -> None:
    results = [
        Result("staging.slurm_hooks", Status.FAIL, "x", critical=True),
        Result("storage.data_noatime", Status.FAIL, "x", critical=False),
        Result("driver.loaded", Status.ERROR, "a dltune bug", critical=True),
        Result("gpu.present", Status.SKIP, "no GPU", critical=True),
        Result("gpu.ecc", Status.WARN, "x", critical=True),
    ]
    assert critical_failures(results) == ["staging.slurm_hooks"]


def test_scontrol_one_line_output_is_parsed() -> None:
    node = parse_node(SHOWN)
    assert node.drained and node.state == "IDLE+DRAIN"
    assert node.reason == "dltune: staging.slurm_hooks"
    idle = parse_node("NodeName=n1 State=IDLE ThreadsPerCore=1")
    assert not idle.drained and idle.reason == ""


def _node(state: str, reason: str = "") -> str:
    tail = f" Reason={reason} [admin@2026-11-22T08:00:00]" if reason else ""
    return f"NodeName=gpu7 Arch=x86_64 CPUAlloc=0 State={state} ThreadsPerCore=1 Partitions=gpu{tail}"


def _apply(shown: str, results: list[Result]) -> tuple[str, list[tuple[str, ...]]]:
    runner = RecordedRunner(
        {
            "scontrol -o show node gpu7": {"stdout": shown},
            "scontrol update nodename=gpu7 state=drain reason=dltune: gpu.ecc": {},
            "scontrol update nodename=gpu7 state=resume": {},
        }
    )
    said, _ = apply("gpu7", results, runner)
    return said, [call for call in runner.calls if call[1] == "update"]


ECC_FAIL = [Result("gpu.ecc", Status.FAIL, "uncorrected ECC", critical=True)]
HEALTHY = [Result("gpu.ecc", Status.PASS, "no ECC errors", critical=True)]


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("IDLE+DRAIN", "maintenance: PSU swap"),
        ("MIXED+DRAIN", "hw ticket 4711"),
        ("DOWN+DRAIN", "maintenance"),
        ("DOWN*", "Not responding"),
        ("IDLE+MAINT", "planned window"),
        ("IDLE+FAIL", "failing DIMM"),
    ],
)
def test_a_node_someone_else_took_out_is_never_touched(state: str, reason: str) -> None:
    """An admin's (or Slurm's) drain/down: a critical fail adds no dltune reason over theirs, and a
    healthy run does not resume it (that would put back into service a node the admin took out)."""
    said, updates = _apply(_node(state, reason), ECC_FAIL)
    assert updates == [] and "left as it is" in said and "gpu.ecc" in said
    said, updates = _apply(_node(state, reason), HEALTHY)
    assert updates == [] and "left as it is" in said


@pytest.fixture(autouse=True)
def no_recheck_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dltune.fleet.slurm_health.RECHECK_DELAY_S", 0.0)


class FakeSlurm:
    """slurmctld's node table behind `scontrol`, at the command boundary dltune calls (the real Slurm
    runs these paths in tests/integration/test_site_lab.py): `-o show node [NAME]` prints one line per
    node as scontrol does, `update nodename=N state=drain|resume [reason=...]` changes the table and
    stamps the reason with a time, as slurmctld does. ``drains_meanwhile`` are other nodes' drains that
    land between this node's drain and its recheck (nodes deciding in the same second)."""

    def __init__(self, nodes: dict[str, tuple[str, str, str]], stamp: str = "2026-11-25T10:00:00") -> None:
        # name -> (state, partitions, reason)
        self.nodes = {n: [s, p, r, "2026-11-25T09:00:00" if r else ""] for n, (s, p, r) in nodes.items()}
        self.stamp = stamp
        self.calls: list[tuple[str, ...]] = []
        self.drains_meanwhile: dict[str, str] = {}

    def line(self, name: str) -> str:
        state, partitions, reason, when = self.nodes[name]
        tail = f" Reason={reason} [root@{when}]" if reason else ""
        return (
            f"NodeName={name} Arch=x86_64 CoresPerSocket=4 CPUAlloc=0 CPUTot=8 State={state} "
            f"ThreadsPerCore=1 Partitions={partitions} BootTime=2026-11-20T07:00:00{tail}"
        )

    def run(self, argv: list[str] | tuple[str, ...], timeout: float = 5.0) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        if args[:4] == ("scontrol", "-o", "show", "node"):
            if len(args) == 5:
                if args[4] not in self.nodes:
                    return CommandResult(args, 1, "", f"Node {args[4]} not found")
                return CommandResult(args, 0, self.line(args[4]) + "\n")
            return CommandResult(args, 0, "".join(self.line(n) + "\n" for n in sorted(self.nodes)))
        if args[:2] == ("scontrol", "update"):
            fields = dict(a.split("=", 1) for a in args[2:])
            node = self.nodes[fields["nodename"]]
            base = node[0].split("+")[0]
            if fields["state"] == "drain":
                node[0], node[2], node[3] = f"{base}+DRAIN", fields["reason"], self.stamp
                for other, reason in self.drains_meanwhile.items():
                    self.nodes[other][0:4] = [f"{self.nodes[other][0]}+DRAIN", "gpu", reason, self.stamp]
                self.drains_meanwhile = {}
            else:
                node[0], node[2], node[3] = base, "", ""
            return CommandResult(args, 0, "")
        return CommandResult(args, 127, "", f"{args[0]}: not recorded")

    def state(self, name: str) -> tuple[str, str]:
        return self.nodes[name][0], self.nodes[name][2]


def cluster_of(size: int, drained: int = 0, reason: str = "dltune: nfs.responsive") -> FakeSlurm:
    """gpu01..gpuNN in partition gpu, the last ``drained`` of them drained by dltune."""
    return FakeSlurm(
        {
            f"gpu{i:02d}": ("IDLE+DRAIN", "gpu", reason) if i > size - drained else ("IDLE", "gpu", "")
            for i in range(1, size + 1)
        }
    )


def health(slurm: FakeSlurm, node: str, results: list[Result], tmp_path: Path, now: float = 1e9,
           policy: Policy | None = None) -> tuple[str, list[Result]]:  # fmt: skip
    return apply(node, results, slurm, policy, str(tmp_path / "state" / "history.json"), now=now)  # type: ignore[arg-type]


NFS_FAIL = [
    Result("nfs.responsive", Status.FAIL, "stale", critical=True, shared_dependency="NFS server 10.0.0.5")
]


def test_dltune_drains_a_node_in_service_and_resumes_only_its_own_drain(tmp_path: Path) -> None:
    slurm = cluster_of(30)
    health(slurm, "gpu01", ECC_FAIL, tmp_path)
    assert slurm.state("gpu01") == ("IDLE+DRAIN", "dltune: gpu.ecc")
    health(slurm, "gpu01", HEALTHY, tmp_path)
    assert slurm.state("gpu01") == ("IDLE", "")
    before = len(slurm.calls)
    health(slurm, "gpu01", HEALTHY, tmp_path)
    assert [c for c in slurm.calls[before:] if c[1] == "update"] == []


@pytest.mark.parametrize(
    ("text", "nodes", "limit"),
    [("10%", 30, 3), ("10%", 5, 2), ("10%", 100, 10), ("10%", 101, 11), ("25%", 8, 2), ("5", 100, 5),
     ("0", 100, 0), ("100%", 7, 7), ("1%", 300, 3)],
)  # fmt: skip
def test_the_drain_limit_is_a_share_of_the_partitions_nodes_at_least_two(
    text: str, nodes: int, limit: int
) -> None:
    assert DrainLimit.parse(text).of(nodes) == limit


@pytest.mark.parametrize("text", ["0%", "101%", "-1", "5.5", "ten", "", "10 %", "\uff11\uff10", "1e3", "%"])
def test_a_drain_limit_that_is_not_a_count_or_share_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="--drain-limit"):
        DrainLimit.parse(text)


@pytest.mark.parametrize(("already", "drains"), [(2, True), (3, False), (5, False)])
def test_a_node_is_not_drained_once_the_limit_is_reached(already: int, drains: bool, tmp_path: Path) -> None:
    """30 nodes, limit 10% = 3: with 2 drained by dltune the third still drains; with 3 it does not,
    and its system.drain_limit warning says how many and for what."""
    slurm = cluster_of(30, drained=already)
    said, added = health(slurm, "gpu01", NFS_FAIL, tmp_path)
    assert ("DRAIN" in slurm.state("gpu01")[0]) is drains, said
    if drains:
        assert added == []
        return
    (held,) = added
    assert held.id == "system.drain_limit" and held.status is Status.WARN and not held.critical
    assert f"{already} nodes already drained by dltune for nfs.responsive ({already})" in held.summary
    assert "a shared failure?" in held.summary and "limit 3 of 30 nodes in gpu" in held.summary
    assert held.metrics == {"drained_nodes": float(already), "drain_limit": 3.0}


def test_only_the_nodes_partitions_count_toward_its_limit(tmp_path: Path) -> None:
    slurm = cluster_of(10, drained=0)
    for i in range(11, 21):  # ten nodes of another partition, all drained by dltune
        slurm.nodes[f"cpu{i}"] = ["IDLE+DRAIN", "cpu", "dltune: system.time_sync", "2026-11-25T09:00:00"]
    health(slurm, "gpu01", NFS_FAIL, tmp_path)
    assert slurm.state("gpu01")[0] == "IDLE+DRAIN"


def test_drains_by_an_admin_do_not_count_toward_the_limit(tmp_path: Path) -> None:
    slurm = cluster_of(10, drained=5, reason="maintenance: PSU swap")
    health(slurm, "gpu01", NFS_FAIL, tmp_path)
    assert slurm.state("gpu01")[0] == "IDLE+DRAIN"


@pytest.mark.parametrize(
    ("node", "keeps"), [("gpu01", True), ("gpu02", True), ("gpu03", False), ("gpu09", False)]
)
def test_nodes_draining_in_the_same_second_keep_only_the_first_by_name_within_the_limit(
    node: str, keeps: bool, tmp_path: Path
) -> None:
    """No node is drained yet when each asks; all drain in the same second (one stamp): the recheck
    orders them by the stamp, then the name, and each beyond the limit (2 of 10) gives its drain back."""
    slurm = cluster_of(10)
    slurm.drains_meanwhile = {
        n: "dltune: nfs.responsive" for n in ("gpu01", "gpu02", "gpu03", "gpu09") if n != node
    }
    said, added = health(slurm, node, NFS_FAIL, tmp_path)
    assert ("DRAIN" in slurm.state(node)[0]) is keeps, said
    assert (added == []) is keeps
    if not keeps:
        assert "given back at once" in said and added[0].id == "system.drain_limit"


def test_an_earlier_drain_keeps_its_place_before_later_names(tmp_path: Path) -> None:
    slurm = cluster_of(10)
    slurm.nodes["gpu09"] = ["IDLE+DRAIN", "gpu", "dltune: gpu.ecc", "2026-11-25T08:00:00"]
    slurm.drains_meanwhile = {"gpu02": "dltune: nfs.responsive"}
    health(slurm, "gpu01", NFS_FAIL, tmp_path)  # gpu09 (08:00) then gpu01, gpu02 (10:00): gpu02 is third
    assert "DRAIN" in slurm.state("gpu01")[0]
    assert slurm.state("gpu09")[0] == "IDLE+DRAIN"


HOUR = 3600.0


def cycle(slurm: FakeSlurm, tmp_path: Path, start: float, times: int, step: float = HOUR) -> float:
    """``times`` rounds of fail (drain) then healthy (resume), ``step`` apart."""
    now = start
    for _ in range(times):
        health(slurm, "gpu01", ECC_FAIL, tmp_path, now)
        now += step
        health(slurm, "gpu01", HEALTHY, tmp_path, now)
        now += step
    return now


def test_a_node_resumed_three_times_in_a_day_stays_drained_as_flapping(tmp_path: Path) -> None:
    slurm = cluster_of(30)
    now = cycle(slurm, tmp_path, 1e9, 2)
    health(slurm, "gpu01", ECC_FAIL, tmp_path, now)  # 2 resumes so far: an ordinary drain
    assert slurm.state("gpu01")[1] == "dltune: gpu.ecc"
    health(slurm, "gpu01", HEALTHY, tmp_path, now + HOUR)  # the third resume
    said, _ = health(slurm, "gpu01", ECC_FAIL, tmp_path, now + 2 * HOUR)
    assert slurm.state("gpu01") == ("IDLE+DRAIN", "dltune: flapping: gpu.ecc"), said
    assert "3 resumes by dltune within 24 h" in said
    said, _ = health(slurm, "gpu01", HEALTHY, tmp_path, now + 3 * HOUR)
    assert slurm.state("gpu01")[0] == "IDLE+DRAIN" and "an operator resumes" in said


def test_resumes_older_than_the_window_do_not_count(tmp_path: Path) -> None:
    slurm = cluster_of(30)
    now = cycle(slurm, tmp_path, 1e9, 3, step=6 * HOUR)  # resumes 30, 18 and 6 h before the fail
    health(slurm, "gpu01", ECC_FAIL, tmp_path, now)
    assert slurm.state("gpu01")[1] == "dltune: gpu.ecc"


def test_the_operators_resume_clears_flapping_and_its_history(tmp_path: Path) -> None:
    slurm = cluster_of(30)
    now = cycle(slurm, tmp_path, 1e9, 3)
    health(slurm, "gpu01", ECC_FAIL, tmp_path, now)
    assert slurm.state("gpu01")[1].startswith("dltune: flapping:")
    slurm.run(["scontrol", "update", "nodename=gpu01", "state=resume"])  # the operator
    health(slurm, "gpu01", HEALTHY, tmp_path, now + 60)
    health(slurm, "gpu01", ECC_FAIL, tmp_path, now + 120)
    assert slurm.state("gpu01")[1] == "dltune: gpu.ecc", "the history should start afresh"


def test_a_flapping_node_is_drained_even_beyond_the_limit_and_never_given_back(tmp_path: Path) -> None:
    slurm = cluster_of(10)
    now = cycle(slurm, tmp_path, 1e9, 3)
    slurm.drains_meanwhile = {"gpu02": "dltune: gpu.ecc", "gpu03": "dltune: gpu.ecc"}
    health(slurm, "gpu05", HEALTHY, tmp_path / "other")  # unrelated node: nothing
    health(slurm, "gpu01", ECC_FAIL, tmp_path, now)
    assert slurm.state("gpu01")[1] == "dltune: flapping: gpu.ecc"


def test_the_history_file_is_root_only_and_a_broken_one_starts_afresh(tmp_path: Path) -> None:
    slurm = cluster_of(30)
    health(slurm, "gpu01", ECC_FAIL, tmp_path)
    health(slurm, "gpu01", HEALTHY, tmp_path)
    history = tmp_path / "state" / "history.json"
    assert history.stat().st_mode & 0o777 == 0o600 and history.parent.stat().st_mode & 0o777 == 0o700
    assert len(json.loads(history.read_text())["resumes"]) == 1
    for broken in ("{", "[1, 2]", '{"resumes": "x"}', '{"resumes": [true]}', "[" * 100 + "]" * 100):
        history.write_text(broken)
        said, _ = health(slurm, "gpu01", ECC_FAIL, tmp_path)
        assert "history" in said and "not used" in said and "DRAIN" in slurm.state("gpu01")[0]
        health(slurm, "gpu01", HEALTHY, tmp_path)


def test_a_node_slurmctld_has_not_registered_is_left_alone(tmp_path: Path) -> None:
    for state in ("UNKNOWN", "IDLE*", "DOWN*", "IDLE+NOT_RESPONDING", "FUTURE"):
        slurm = FakeSlurm({"gpu01": (state, "gpu", "")})
        said, _ = health(slurm, "gpu01", ECC_FAIL, tmp_path)
        assert slurm.state("gpu01")[0] == state and "left as it is" in said, (state, said)
    said, added = health(FakeSlurm({}), "gpu01", ECC_FAIL, tmp_path)
    assert "Slurm does not know it" in said and added == []


def test_slurm_not_answering_changes_nothing_and_says_so(tmp_path: Path) -> None:
    with pytest.raises(SlurmUnavailable, match="scontrol"):
        apply("gpu01", ECC_FAIL, RecordedRunner({}), None, None)
    late = RecordedRunner(
        {"scontrol -o show node gpu01": {"returncode": 124, "stderr": "timed out after 5s"}}
    )
    with pytest.raises(SlurmUnavailable, match="timed out"):
        apply("gpu01", ECC_FAIL, late, None, None)


def test_scontrol_lines_of_many_nodes_are_parsed_with_partitions_and_stamps() -> None:
    slurm = cluster_of(3, drained=1)
    nodes = parse_nodes(slurm.run(["scontrol", "-o", "show", "node"]).stdout)
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03"]
    assert (
        nodes["gpu03"].reason == "dltune: nfs.responsive"
        and nodes["gpu03"].reason_time == "2026-11-25T09:00:00"
    )
    assert nodes["gpu01"].partitions == ("gpu",) and nodes["gpu03"].drained_by_dltune


def test_a_history_that_cannot_be_saved_is_said_after_the_drain_not_raised(tmp_path: Path) -> None:
    slurm = cluster_of(30)
    (tmp_path / "a-file").write_text("")
    said, _ = apply("gpu01", ECC_FAIL, slurm, None, str(tmp_path / "a-file" / "history.json"))  # type: ignore[arg-type]
    assert slurm.state("gpu01")[0] == "IDLE+DRAIN"
    assert said.startswith("drained gpu01: dltune: gpu.ecc") and "history not saved" in said, said


def remediated(slurm: FakeSlurm, tmp_path: Path, now: float) -> None:
    """What playbooks/remediate.yml does for a node dltune drained, once the node is proven:
    `dltune remedy --record-resume`, then `scontrol update state=resume`."""
    record_resume(str(tmp_path / "state" / "history.json"), now=now)
    slurm.run(["scontrol", "update", "nodename=gpu01", "state=resume"])


def test_a_node_remediated_three_times_in_a_day_is_damped_as_flapping(tmp_path: Path) -> None:
    """The remediation's resume counts as dltune's: fail, remediate, fail again is the same cycle as
    fail, resume, fail. Without --record-resume it looked like an operator's and cleared the history,
    so such a node was never damped."""
    slurm = cluster_of(30)
    now = 1e9
    for _ in range(3):
        health(slurm, "gpu01", ECC_FAIL, tmp_path, now)
        assert slurm.state("gpu01")[1] == "dltune: gpu.ecc"
        remediated(slurm, tmp_path, now + HOUR)
        now += 2 * HOUR
    said, _ = health(slurm, "gpu01", ECC_FAIL, tmp_path, now)
    assert slurm.state("gpu01") == ("IDLE+DRAIN", "dltune: flapping: gpu.ecc"), said


def test_resume_stamps_ahead_of_the_clock_do_not_count_and_are_said(tmp_path: Path) -> None:
    """A history written before the clock was stepped back holds resumes 'in the future': they cannot
    be recent ones, so a node that fails now is drained as an ordinary failure, and the log says why."""
    history = tmp_path / "state" / "history.json"
    history.parent.mkdir(mode=0o700)
    ahead = [1e9 + 3 * HOUR, 1e9 + 4 * HOUR, 1e9 + 5 * HOUR]
    history.write_text(json.dumps({"schema_version": 1, "resumes": ahead, "drained_reason": ""}))
    slurm = cluster_of(30)
    said, _ = health(slurm, "gpu01", ECC_FAIL, tmp_path, 1e9)
    assert slurm.state("gpu01")[1] == "dltune: gpu.ecc", said
    assert "3 resume stamp(s) up to 18000 s ahead of the clock not counted" in said
    assert json.loads(history.read_text())["resumes"] == []


def test_a_stamp_within_the_clock_slack_still_counts(tmp_path: Path) -> None:
    history = tmp_path / "state" / "history.json"
    history.parent.mkdir(mode=0o700)
    stamps = [1e9 - HOUR, 1e9 - 1, 1e9 + CLOCK_SLACK_S]
    history.write_text(json.dumps({"schema_version": 1, "resumes": stamps, "drained_reason": ""}))
    slurm = cluster_of(30)
    health(slurm, "gpu01", ECC_FAIL, tmp_path, 1e9)
    assert slurm.state("gpu01")[1] == "dltune: flapping: gpu.ecc"
