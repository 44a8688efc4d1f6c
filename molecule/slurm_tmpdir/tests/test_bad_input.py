"""Bad input to dl_env and slurm_tmpdir fails clearly, names the variable, and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SCENARIO, run_playbook

WATCHED = "/etc/slurm/slurm.conf /etc/environment /etc/dltune/job-env /etc/slurm/dltune/hooks.json"
# What a role without its allow-lists would have chowned or chmodded (the base, the cache root).
WATCHED_DIRS = "/dev/shm /var/tmp /usr/lib /tmp /localscratch"
# A mount table where /scratch is NFS: the fixture the role judges slurm_tmpdir_base against.
NFS_MOUNTINFO = (
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "40 22 0:50 / /scratch rw,noatime - nfs4 10.0.0.5:/export rw,vers=4.2\n"
)
# Each case is a whole run of both roles (15-30 s here). The path refusals of
# tests/integration/test_roles_refuse_unsafe_inputs.py (the same shared check, in check mode, with the
# paths' state compared) are marked slow here: make test keeps one of each kind on this real node, make
# test-slow runs them all.
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    ("extra_vars", "named"),
    [
        pytest.param({"slurm_tmpdir_base": "localscratch"}, "slurm_tmpdir_base=localscratch", marks=SLOW),
        pytest.param({"slurm_tmpdir_base": "/"}, "slurm_tmpdir_base=/", marks=SLOW),
        ({"dl_env_variables": {"CUBLAS_WORKSPACE_CONFIG": "4096:8"}}, "CUBLAS_WORKSPACE_CONFIG=4096:8"),
        ({"dl_env_variables": {"CUBLAS_WORKSPACE_CONFIG": ":0:8"}}, "CUBLAS_WORKSPACE_CONFIG=:0:8"),
        ({"dl_env_variables": {"BAD NAME": "x"}}, "dl_env_variables"),
        pytest.param({"dl_env_cache_dir": "cache"}, "dl_env_cache_dir=cache", marks=SLOW),
        ({"slurm_tmpdir_base": "/dev/shm"}, "slurm_tmpdir_base=/dev/shm is refused: a system directory"),
        pytest.param(
            {"slurm_tmpdir_base": "/var/tmp"},
            "slurm_tmpdir_base=/var/tmp is refused: a system directory",
            marks=SLOW,
        ),
        pytest.param(
            {"slurm_tmpdir_base": "/var/run/jobs"}, "slurm_tmpdir_base=/var/run/jobs is refused", marks=SLOW
        ),
        ({"slurm_tmpdir_conf": "/etc/passwd"}, "slurm_tmpdir_conf=/etc/passwd is refused"),
        ({"slurm_tmpdir_min_free_gb": -1}, "slurm_tmpdir_min_free_gb=-1 must be a number of GB"),
        pytest.param(
            {"dl_env_cache_dir": "/usr/lib"},
            "dl_env_cache_dir=/usr/lib is refused: a system directory",
            marks=SLOW,
        ),
        ({"dl_env_job_env_file": "/tmp/job-env"}, "dl_env_job_env_file=/tmp/job-env is refused"),
        (
            {"slurm_tmpdir_state": "absent", "slurm_tmpdir_conf": "/etc/slurm-llnl/slurm.conf"},
            "slurm_tmpdir_conf=/etc/slurm-llnl/slurm.conf is refused: not what the role recorded creating",
        ),
        (
            {"slurm_tmpdir_base": "/scratch/jobs", "slurm_tmpdir__mountinfo_path": "/root/nfs-mountinfo"},
            "slurm_tmpdir_base=/scratch/jobs is on a nfs4",
        ),
    ],
)
def test_bad_input_is_refused_before_any_change(host: Any, extra_vars: dict[str, Any], named: str) -> None:
    host.run(f"printf '{NFS_MOUNTINFO}' > /root/nfs-mountinfo")
    before = host.run(f"sha256sum {WATCHED} && stat -c '%n %a %U %G' {WATCHED_DIRS}").stdout
    run = run_playbook(host, SCENARIO / "bad_input.yml", extra_vars)
    assert run.rc != 0
    assert any(named in failure for failure in run.failures), run.failures
    assert run.changed == 0
    assert host.run(f"sha256sum {WATCHED} && stat -c '%n %a %U %G' {WATCHED_DIRS}").stdout == before
    assert not host.file("/scratch/jobs").exists
