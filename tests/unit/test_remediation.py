"""remediation.remedy_for: what playbooks/remediate.yml may do for a drained node, judged on the
audit's own results. The GPU cases come from real kernel logs (tests/fixtures/real/kernel_log) through
the gpu.xid check, so the bucket NVIDIA's catalog gives a published Xid decides the action. The play
itself runs on the lab's real Slurm (tests/integration/test_site_lab.py)."""

from __future__ import annotations

import pytest

from dltune.checks.gpu import xid
from dltune.fleet.remediation import REAPPLIED_ROLES, remedy_for
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
