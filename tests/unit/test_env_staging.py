"""The env and staging areas judged on snapshots (pure checks), and their probes on real temp trees."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from dltune.checks.env import cublas_workspace, node_files
from dltune.checks.job_scratch import (
    DEFAULT_MIN_FREE_GB,
    REMOTE_FSTYPES,
    is_remote,
    slurm_hooks,
    slurm_tmpdir,
)
from dltune.model import Status
from dltune.probes import collect_snapshot
from dltune.probes.jobenv import parse_env_file, parse_slurm_conf
from dltune.snapshot import PathInfo, Snapshot
from tests.conftest import REPO_ROOT

DL_ENV = {
    "role": "dl_env",
    "variables": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"},
    "files": {
        "profile": "/etc/profile.d/dltune-dl-env.sh",
        "pam": "/etc/environment",
        "job_env": "/etc/dltune/job-env",
    },
}
GOOD_FILES = {
    "/etc/profile.d/dltune-dl-env.sh": "# Ansible managed\nexport CUBLAS_WORKSPACE_CONFIG=':4096:8'\n",
    "/etc/environment": (
        'PATH="/usr/bin"\n# BEGIN dltune dl_env\nCUBLAS_WORKSPACE_CONFIG=:4096:8\n# END dltune dl_env\n'
    ),
    "/etc/dltune/job-env": "# managed\nCUBLAS_WORKSPACE_CONFIG=:4096:8\n",
}
SLURM = {
    "role": "slurm_tmpdir",
    "base": "/localscratch",
    "conf": "/etc/slurm/slurm.conf",
    "manage_conf": True,
    "hooks": {
        "prolog": "/etc/slurm/dltune/prolog",
        "epilog": "/etc/slurm/dltune/epilog",
        "task_prolog": "/etc/slurm/dltune/task_prolog",
    },
}
CONF_OK = (
    "ClusterName=ci\nPrologFlags=Alloc\nProlog=/etc/slurm/dltune/prolog\n"
    "Epilog=/etc/slurm/dltune/epilog\nTaskProlog=/etc/slurm/dltune/task_prolog\n"
)
HOOK = PathInfo(exists=True, is_file=True, uid=0, mode=0o755, fstype="ext4")
BASE = PathInfo(exists=True, is_dir=True, uid=0, mode=0o755, fstype="ext4", free_bytes=500 * 10**9)
JOB_DIR = PathInfo(exists=True, is_dir=True, uid=1000, mode=0o700, fstype="ext4", free_bytes=400 * 10**9)
IN_JOB = {"SLURM_JOB_ID": "7", "SLURM_TMPDIR": "/localscratch/alice.7", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def parsed_files(files: dict[str, str]) -> dict[str, object]:
    """Raw file texts as the probe hands them to the checks: parsed, by path."""
    kinds = {path: kind for kind, path in DL_ENV["files"].items()}  # type: ignore[attr-defined]
    return {
        "env_values": {
            p: parse_env_file(kinds[p], t) for p, t in files.items() if p in kinds and t is not None
        },
        "slurm_conf": {
            p: parse_slurm_conf(t) for p, t in files.items() if p == SLURM["conf"] and t is not None
        },
    }


def snap(environ=None, files=None, paths=None, expected=None, uid=1000) -> Snapshot:  # type: ignore[no-untyped-def]
    return Snapshot(
        root="/",
        environ=environ or {},
        **parsed_files(GOOD_FILES if files is None else files),
        paths=paths or {},
        expected={"dl_env": DL_ENV, "slurm_tmpdir": SLURM} if expected is None else expected,
        uid=uid,
    )


def test_cublas_in_a_job_passes_and_missing_fails() -> None:
    assert cublas_workspace(snap(IN_JOB)).status is Status.PASS
    missing = cublas_workspace(snap({k: v for k, v in IN_JOB.items() if k != "CUBLAS_WORKSPACE_CONFIG"}))
    assert missing.status is Status.FAIL and "not in this job" in missing.summary


def test_cublas_malformed_in_a_job_fails_and_an_override_warns() -> None:
    assert cublas_workspace(snap({**IN_JOB, "CUBLAS_WORKSPACE_CONFIG": "4096:8"})).status is Status.FAIL
    assert cublas_workspace(snap({**IN_JOB, "CUBLAS_WORKSPACE_CONFIG": ":0:8"})).status is Status.FAIL
    assert cublas_workspace(snap({**IN_JOB, "CUBLAS_WORKSPACE_CONFIG": ":16:8"})).status is Status.WARN


def test_cublas_outside_a_job_judges_the_plan_and_warns_without_dl_env() -> None:
    assert cublas_workspace(snap()).status is Status.PASS
    assert cublas_workspace(snap(expected={})).status is Status.WARN


def test_node_files_pass_when_every_file_carries_the_planned_values() -> None:
    results = node_files(snap())
    assert [r.status for r in results] == [Status.PASS] * 3


def test_node_files_name_the_file_that_drifted_or_is_missing() -> None:
    drifted = dict(GOOD_FILES)
    drifted["/etc/environment"] = "CUBLAS_WORKSPACE_CONFIG=:16:8\n"
    del drifted["/etc/dltune/job-env"]
    by_subject = {r.subject: r for r in node_files(snap(files=drifted))}
    assert by_subject["/etc/environment"].status is Status.FAIL
    assert (
        by_subject["/etc/environment"].evidence["differences"]["CUBLAS_WORKSPACE_CONFIG"]["found"] == ":16:8"
    )
    assert by_subject["/etc/dltune/job-env"].status is Status.FAIL
    assert by_subject["/etc/profile.d/dltune-dl-env.sh"].status is Status.PASS


def test_job_dir_private_local_and_roomy_passes() -> None:
    r = slurm_tmpdir(snap(IN_JOB, paths={"/localscratch/alice.7": JOB_DIR}))
    assert r.status is Status.PASS, r.summary
    assert r.metrics["free_bytes"] == 400 * 10**9


def test_job_dir_problems_each_fail() -> None:
    cases = {
        "mode 0o755": PathInfo(
            exists=True, is_dir=True, uid=1000, mode=0o755, fstype="ext4", free_bytes=10**12
        ),
        "owned by uid 0": PathInfo(
            exists=True, is_dir=True, uid=0, mode=0o700, fstype="ext4", free_bytes=10**12
        ),
        "on nfs4": PathInfo(exists=True, is_dir=True, uid=1000, mode=0o700, fstype="nfs4", free_bytes=10**12),
        "not a real directory": PathInfo(exists=True, is_link=True, uid=1000, mode=0o777, fstype="ext4"),
    }
    for words, info in cases.items():
        r = slurm_tmpdir(snap(IN_JOB, paths={"/localscratch/alice.7": info}))
        assert r.status is Status.FAIL and words in r.summary, (words, r.summary)
    unset = slurm_tmpdir(snap({"SLURM_JOB_ID": "7"}))
    assert unset.status is Status.FAIL and "not set" in unset.summary


def test_job_dir_with_little_room_warns_and_outside_a_job_skips() -> None:
    small = PathInfo(exists=True, is_dir=True, uid=1000, mode=0o700, fstype="ext4", free_bytes=10**9)
    assert slurm_tmpdir(snap(IN_JOB, paths={"/localscratch/alice.7": small})).status is Status.WARN
    assert slurm_tmpdir(snap()).status is Status.SKIP


def free(free_bytes: int) -> dict[str, PathInfo]:
    return {
        "/localscratch/alice.7": PathInfo(
            exists=True, is_dir=True, uid=1000, mode=0o700, fstype="ext4", free_bytes=free_bytes
        )
    }


def test_little_room_is_judged_at_the_roles_threshold_or_ten_gb() -> None:
    """Without a recorded threshold, 10 GB: one byte below warns, exactly 10 GB passes. The role's
    slurm_tmpdir_min_free_gb (manifest min_free_gb) moves the line both ways, and the warning names it."""
    assert DEFAULT_MIN_FREE_GB == 10
    assert slurm_tmpdir(snap(IN_JOB, paths=free(10 * 10**9 - 1))).status is Status.WARN
    assert slurm_tmpdir(snap(IN_JOB, paths=free(10 * 10**9))).status is Status.PASS
    lab = {"dl_env": DL_ENV, "slurm_tmpdir": {**SLURM, "min_free_gb": 1.5}}
    assert slurm_tmpdir(snap(IN_JOB, paths=free(2 * 10**9), expected=lab)).status is Status.PASS
    low = slurm_tmpdir(snap(IN_JOB, paths=free(15 * 10**8 - 1), expected=lab))
    assert low.status is Status.WARN and "below 1.5 GB" in low.summary
    assert low.evidence["min_free_gb"] == 1.5
    strict = {"dl_env": DL_ENV, "slurm_tmpdir": {**SLURM, "min_free_gb": 500}}
    assert slurm_tmpdir(snap(IN_JOB, paths=free(400 * 10**9), expected=strict)).status is Status.WARN
    never = {"dl_env": DL_ENV, "slurm_tmpdir": {**SLURM, "min_free_gb": 0}}
    assert slurm_tmpdir(snap(IN_JOB, paths=free(0), expected=never)).status is Status.PASS


def hook_paths() -> dict[str, PathInfo]:
    return {**{p: HOOK for p in SLURM["hooks"].values()}, "/localscratch": BASE}  # type: ignore[attr-defined]


def test_hooks_wired_as_applied_pass() -> None:
    r = slurm_hooks(snap(files={"/etc/slurm/slurm.conf": CONF_OK}, paths=hook_paths()))
    assert r.status is Status.PASS, r.summary


def test_hooks_drift_fails_naming_the_line() -> None:
    conf = CONF_OK.replace("Prolog=/etc/slurm/dltune/prolog", "Prolog=/etc/slurm/other").replace(
        "PrologFlags=Alloc", "PrologFlags=Serial"
    )
    r = slurm_hooks(snap(files={"/etc/slurm/slurm.conf": conf}, paths=hook_paths()))
    assert r.status is Status.FAIL
    assert "prolog=/etc/slurm/other" in r.summary and "PrologFlags lacks Alloc" in r.summary


def test_hooks_fail_when_users_could_write_the_base() -> None:
    paths = {
        **hook_paths(),
        "/localscratch": PathInfo(exists=True, is_dir=True, uid=0, mode=0o1777, fstype="ext4"),
    }
    r = slurm_hooks(snap(files={"/etc/slurm/slurm.conf": CONF_OK}, paths=paths))
    assert r.status is Status.FAIL and "users could plant" in r.summary


def test_slurm_conf_parsing_is_case_insensitive_and_last_wins() -> None:
    """Comments are cut; a record line's pairs (NodeName=n1 CPUs=2 Prolog=/x) are the record's, not
    global settings: only its first key is read, as Slurm reads it."""
    parsed = parse_slurm_conf(
        "prolog=/a\n#Prolog=/commented\nPROLOG=/b # site\nNodeName=n1 CPUs=2 Prolog=/x\n"
    )
    assert parsed["prolog"] == "/b" and parsed["nodename"] == "n1" and "cpus" not in parsed


def test_probe_reads_the_job_dir_with_lstat_under_a_root(tmp_path: Path) -> None:
    """collect_snapshot on a temp tree: a link planted as $SLURM_TMPDIR is reported as a link."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text("22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n")
    (tmp_path / "localscratch").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "localscratch/alice.7")
    s = collect_snapshot(
        tmp_path,
        areas=["staging"],
        environ={"SLURM_JOB_ID": "7", "SLURM_TMPDIR": "/localscratch/alice.7", "HOME": "/x"},
    )
    assert s.environ == {"SLURM_JOB_ID": "7", "SLURM_TMPDIR": "/localscratch/alice.7"}
    info = s.paths["/localscratch/alice.7"]
    assert info.is_link and not info.is_dir and info.fstype == "ext4"
    assert slurm_tmpdir(s).status is Status.FAIL


def test_the_role_and_the_audit_agree_on_which_filesystems_are_not_node_local() -> None:
    """slurm_tmpdir refuses a base directory on a shared filesystem and the audit's staging area
    warns about staging onto one: the role carries its own list (it runs where dltune may be
    absent), so the two lists must not drift apart."""
    role_vars = yaml.safe_load((REPO_ROOT / "roles/slurm_tmpdir/vars/main.yml").read_text())
    role_remote = set(role_vars["slurm_tmpdir__remote_fstypes"])
    assert all(is_remote(fstype) for fstype in role_remote), role_remote - set(REMOTE_FSTYPES)
    assert set(REMOTE_FSTYPES) <= role_remote, set(REMOTE_FSTYPES) - role_remote
