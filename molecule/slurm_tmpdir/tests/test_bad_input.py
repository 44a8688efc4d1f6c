"""Bad input to dl_env and slurm_tmpdir fails clearly, names the variable, and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SCENARIO, run_playbook, run_playbook_per_case

WATCHED = "/etc/slurm/slurm.conf /etc/environment /etc/dltune/job-env /etc/slurm/dltune/hooks.json"
# What a role without its allow-lists would have chowned or chmodded (the base, the cache root).
WATCHED_DIRS = "/dev/shm /var/tmp /usr/lib /tmp /localscratch"
# A mount table where /scratch is NFS: the fixture the role judges slurm_tmpdir_base against.
NFS_MOUNTINFO = (
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "40 22 0:50 / /scratch rw,noatime - nfs4 10.0.0.5:/export rw,vers=4.2\n"
)
# Refusals a host variable can carry: one run of both roles for all of them, each case a host alias
# of this node (tests/molecule_support.run_playbook_per_case; a run alone costs 15-30 s here). That a
# case is refused naming its value is the proof that its variable reached the roles.
ALIASED = {
    "base-relative": ({"slurm_tmpdir_base": "localscratch"}, "slurm_tmpdir_base=localscratch"),
    "base-root": ({"slurm_tmpdir_base": "/"}, "slurm_tmpdir_base=/"),
    "cublas-size": (
        {"dl_env_variables": {"CUBLAS_WORKSPACE_CONFIG": "4096:8"}},
        "CUBLAS_WORKSPACE_CONFIG=4096:8",
    ),
    "cublas-empty": (
        {"dl_env_variables": {"CUBLAS_WORKSPACE_CONFIG": ":0:8"}},
        "CUBLAS_WORKSPACE_CONFIG=:0:8",
    ),
    "variable-name": ({"dl_env_variables": {"BAD NAME": "x"}}, "dl_env_variables"),
    "base-dev-shm": (
        {"slurm_tmpdir_base": "/dev/shm"},
        "slurm_tmpdir_base=/dev/shm is refused: a system directory",
    ),
    "base-var-tmp": (
        {"slurm_tmpdir_base": "/var/tmp"},
        "slurm_tmpdir_base=/var/tmp is refused: a system directory",
    ),
    "base-var-run": ({"slurm_tmpdir_base": "/var/run/jobs"}, "slurm_tmpdir_base=/var/run/jobs is refused"),
    "conf-passwd": ({"slurm_tmpdir_conf": "/etc/passwd"}, "slurm_tmpdir_conf=/etc/passwd is refused"),
    "min-free": ({"slurm_tmpdir_min_free_gb": -1}, "slurm_tmpdir_min_free_gb=-1 must be a number of GB"),
    "job-env-tmp": ({"dl_env_job_env_file": "/tmp/job-env"}, "dl_env_job_env_file=/tmp/job-env is refused"),
    "absent-other-conf": (
        {"slurm_tmpdir_state": "absent", "slurm_tmpdir_conf": "/etc/slurm-llnl/slurm.conf"},
        "slurm_tmpdir_conf=/etc/slurm-llnl/slurm.conf is refused: not what the role recorded creating",
    ),
}
# Refusals that need -e, a run each: the play sets dl_env_cache_dir as a role parameter, and the mount
# table is a test seam in slurm_tmpdir's vars/main.yml; either would hide a host variable. The cache
# directory's path checks are also in tests/integration/test_roles_refuse_unsafe_inputs.py (make
# test): here they wait for make test-slow.
SLOW = pytest.mark.slow


@pytest.fixture(scope="module")
def aliased_runs(host: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    before = watched_state(host)
    runs = run_playbook_per_case(
        host,
        SCENARIO / "bad_input.yml",
        {case: extra_vars for case, (extra_vars, _named) in ALIASED.items()},
        tmp_path_factory.mktemp("cases"),
    )
    return {"runs": runs, "before": before, "after": watched_state(host)}


def watched_state(host: Any) -> str:
    listing = host.run(f"sha256sum {WATCHED} && stat -c '%n %a %U %G' {WATCHED_DIRS}")
    assert listing.rc == 0, listing.stderr
    return str(listing.stdout)


@pytest.mark.parametrize("case", list(ALIASED))
def test_bad_input_is_refused_before_any_change(aliased_runs: dict[str, Any], case: str) -> None:
    run = aliased_runs["runs"][case]
    named = ALIASED[case][1]
    assert run.rc != 0
    assert any(named in failure for failure in run.failures), run.failures
    assert run.changed == 0


def test_the_refused_runs_left_the_node_as_it_was(host: Any, aliased_runs: dict[str, Any]) -> None:
    assert aliased_runs["after"] == aliased_runs["before"]
    assert not host.file("/scratch/jobs").exists


@pytest.mark.parametrize(
    ("extra_vars", "named"),
    [
        pytest.param({"dl_env_cache_dir": "cache"}, "dl_env_cache_dir=cache", marks=SLOW),
        pytest.param(
            {"dl_env_cache_dir": "/usr/lib"},
            "dl_env_cache_dir=/usr/lib is refused: a system directory",
            marks=SLOW,
        ),
        (
            {"slurm_tmpdir_base": "/scratch/jobs", "slurm_tmpdir__mountinfo_path": "/root/nfs-mountinfo"},
            "slurm_tmpdir_base=/scratch/jobs is on a nfs4",
        ),
    ],
)
def test_bad_input_given_with_e_is_refused_before_any_change(
    host: Any, extra_vars: dict[str, Any], named: str
) -> None:
    host.run(f"printf '{NFS_MOUNTINFO}' > /root/nfs-mountinfo")
    before = watched_state(host)
    run = run_playbook(host, SCENARIO / "bad_input.yml", extra_vars)
    assert run.rc != 0
    assert any(named in failure for failure in run.failures), run.failures
    assert run.changed == 0
    assert watched_state(host) == before
    assert not host.file("/scratch/jobs").exists
