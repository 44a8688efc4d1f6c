"""remediation.remedy_for: what playbooks/remediate.yml may do for a drained node, judged on the
audit's own results. The GPU cases come from real kernel logs (tests/fixtures/real/kernel_log) through
the gpu.xid check, so the bucket NVIDIA's catalog gives a published Xid decides the action. The play
itself runs on the lab's real Slurm (tests/integration/test_site_lab.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dltune.checks.gpu import xid
from dltune.cli import app
from dltune.fleet.remediation import REAPPLIED_ROLES, remedy_for, remedy_for_node
from dltune.fleet.slurm_health import NodeState, parse_node
from dltune.model import Result, Status
from dltune.probes.packages import kernel_log_of
from dltune.snapshot import Snapshot
from tests.real_corpus import CORPUS, load


def xid_results(sample: str) -> list[Result]:
    body = load(CORPUS / "kernel_log" / f"{sample}.txt").body
    return list(xid(Snapshot(root="/", kernel_log=kernel_log_of(body))))


DRIFT = Result(
    "staging.slurm_hooks", Status.FAIL, "scratch base /localscratch is not root-owned 0755",
    remedy="apply role slurm_tmpdir", critical=True,
)  # fmt: skip
ENV_DRIFT = Result(
    "env.job_env",
    Status.FAIL,
    "x",
    remedy="apply roles dl_env and slurm_tmpdir (its TaskProlog ...)",
    critical=True,
)
ECC = Result(
    "gpu.ecc", Status.FAIL, "uncorrected ECC errors", remedy="drain the node; replace the GPU", critical=True
)


@pytest.mark.parametrize(
    ("sample", "action"),
    [
        ("egpu_xid79_xid154_reboot", "reboot"),  # Xid 79 fallen off the bus, 154 to OS Reboot
        ("kenorb_gist_xid79", "reboot"),
        ("pastebin_fallen_off_bus_no_xid", "reboot"),
        ("ogkm_461_xid119_gsp", "reset_gpu"),  # Xid 119 GSP timeout: RESET_GPU
        ("gpud_xid13_sm_warp", "resume"),  # the application's error: a warning, nothing to fix
    ],
)
def test_real_xids_get_the_action_nvidias_catalog_gives(sample: str, action: str) -> None:
    decided = remedy_for(xid_results(sample))
    assert decided.action == action, (decided, [r.to_dict() for r in xid_results(sample)])
    if action == "reset_gpu":
        assert decided.gpus and all(g.count(":") == 2 and g.endswith(".0") for g in decided.gpus), decided


def test_drift_reapplies_the_roles_its_remedy_names() -> None:
    decided = remedy_for([DRIFT, ENV_DRIFT, Result("gpu.ecc", Status.PASS, "ok", critical=True)])
    assert decided.action == "reapply" and decided.roles == ("slurm_tmpdir", "dl_env")
    assert decided.checks == ("env.job_env", "staging.slurm_hooks")


def test_one_cause_no_remediation_fixes_holds_the_whole_node() -> None:
    for fails in ([ECC], [DRIFT, ECC], [*xid_results("ogkm_461_xid119_gsp"), ECC]):
        decided = remedy_for(fails)
        assert decided.action == "hold" and "gpu.ecc" in decided.why, decided
        assert decided.roles == () and decided.gpus == ()


def test_a_reboot_outranks_a_reset_and_drift() -> None:
    decided = remedy_for([DRIFT, *xid_results("ogkm_461_xid119_gsp"), *xid_results("kenorb_gist_xid79")])
    assert decided.action == "reboot" and decided.gpus == ()


def test_a_remedy_naming_a_role_outside_dltunes_tunings_holds() -> None:
    driver = Result("driver.loaded", Status.FAIL, "x", remedy="apply role nvidia_driver", critical=True)
    assert "nvidia_driver" not in REAPPLIED_ROLES
    assert remedy_for([driver]).action == "hold"


def test_only_critical_fails_count() -> None:
    warn = Result("storage.data_noatime", Status.FAIL, "relatime", remedy="apply role data_disks")
    assert remedy_for([warn, Result("gpu.ecc", Status.ERROR, "bug", critical=True)]).action == "resume"


# --- what the node's state in Slurm allows (remedy_for_node, `dltune remedy`) ----------------------------


def node(state: str, reason: str = "") -> NodeState:
    return parse_node(f"NodeName=gpu7 State={state} Partitions=gpu" + (f" Reason={reason}" if reason else ""))


@pytest.mark.parametrize(
    ("state", "reason", "action", "said"),
    [
        (
            "IDLE+DRAIN",
            "dltune: gpu.ecc",
            "resume",
            "no critical check fails: prove the node, then resume it",
        ),
        ("IDLE", "", "none", "not drained (IDLE): nothing to remedy; the audit finds no critical fail"),
        ("MIXED", "", "none", "not drained (MIXED): nothing to remedy; the audit finds no critical fail"),
        (
            "IDLE+DRAIN",
            "hw ticket 4711",
            "none",
            "drained by someone else (IDLE+DRAIN, hw ticket 4711): theirs to resume; the audit finds no "
            "critical fail",
        ),
        (
            "IDLE+DRAIN",
            "dltune: flapping: gpu.xid",
            "hold",
            "drained as flapping (IDLE+DRAIN, dltune: flapping: gpu.xid): only an operator resumes it; the "
            "audit finds no critical fail",
        ),
        (
            "IDLE+DRAIN+MAINTENANCE+RESERVED",
            "dltune: gpu.ecc",
            "none",
            "dltune leaves it alone: in maintenance (IDLE+DRAIN+MAINTENANCE+RESERVED, dltune: gpu.ecc); the "
            "audit finds no critical fail",
        ),
    ],
)
def test_resume_only_for_a_node_dltune_drained_and_may_resume(
    state: str, reason: str, action: str, said: str
) -> None:
    """Issue 46: `dltune remedy` answered "resume" for a node that was not drained: the audit's verdict
    alone. Now the node's state decides first: "none" for a node in service, an admin's drain or a
    state dltune leaves alone; "hold" for a flapping node; the audit's remedy only for dltune's drain."""
    decided = remedy_for_node([], node(state, reason))
    assert (decided.action, decided.why) == (action, said)


def test_a_node_in_service_with_a_critical_fail_is_named_but_not_remedied() -> None:
    decided = remedy_for_node([ECC], node("ALLOCATED"))
    assert decided.action == "none" and decided.checks == ("gpu.ecc",)
    assert decided.why == (
        "not drained (ALLOCATED): nothing to remedy; the audit's remedy would be hold: gpu.ecc: uncorrected "
        "ECC errors"
    )
    assert remedy_for_node([DRIFT], node("IDLE+DRAIN", "dltune: staging.slurm_hooks")).action == "reapply"


@pytest.mark.parametrize(
    ("state", "unread", "why"),
    [
        (None, "slurm_load_node error: Unable to contact slurm controller", "slurm_load_node error: Unable"),
        (None, "", "scontrol printed no State= for it"),
        (NodeState("", ""), "", "scontrol printed no State= for it"),
    ],
)
def test_an_unread_slurm_state_is_unknown_never_resume(
    state: NodeState | None, unread: str, why: str
) -> None:
    decided = remedy_for_node([], state, unread)
    assert decided.action == "unknown"
    assert decided.why.startswith(f"the node's state in Slurm could not be read ({why}")
    assert decided.why.endswith(
        "whether it is drained, and by whom, is unknown, so nothing is done; the audit finds no critical fail"
    )


def test_the_remedy_command_answers_unknown_when_scontrol_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command as remediate.yml runs it: a fresh audit with no critical fail and an scontrol that
    cannot reach slurmctld: "unknown", and the JSON's keys as before."""
    from dltune.commands import remedy as command
    from dltune.probes.runner import CommandResult, SubprocessRunner

    def scontrol(_self: object, argv: list[str], timeout: float = 5.0) -> CommandResult:
        return CommandResult(
            tuple(argv), 1, "", "slurm_load_node error: Unable to contact slurm controller\n"
        )

    monkeypatch.setattr(command, "audit_results", lambda *_args: (None, [], "gpu7"))
    monkeypatch.setattr(SubprocessRunner, "run", scontrol)
    done = CliRunner().invoke(app, ["remedy", "--slurm-node", "gpu7"])
    assert done.exit_code == 0, done.output
    answer = json.loads(done.stdout)
    assert answer["slurm"] == {
        "error": "slurm_load_node error: Unable to contact slurm controller",
        "drained_by_dltune": False,
    }
    assert answer["remedy"]["action"] == "unknown" and set(answer["remedy"]) == {
        "action",
        "why",
        "checks",
        "roles",
        "gpus",
    }

    def idle(_self: object, argv: list[str], timeout: float = 5.0) -> CommandResult:
        return CommandResult(tuple(argv), 0, "NodeName=gpu7 State=IDLE Partitions=gpu\n")

    monkeypatch.setattr(SubprocessRunner, "run", idle)
    answer = json.loads(CliRunner().invoke(app, ["remedy", "--slurm-node", "gpu7"]).stdout)
    assert answer["remedy"]["action"] == "none" and answer["slurm"]["state"] == "IDLE"
