"""Every role refuses unsafe paths and mount options in its validate step, before any change, and its
rollback (state absent) removes only what its manifest recorded creating.

The real roles run through `ansible-playbook -c local` on this machine, one play per role with one
inventory host per case (each host carries its own bad value), and Ansible's JSON output is read: the
host must fail at the shared check (roles/dltune/tasks/validate_inputs.yml) with a message naming the
variable and the value, nothing may be reported changed, and the paths named stay as they were
(mode, owner, sha256). A control host with good values shows each run is not refused wholesale.

Safety: every run is `--check` (the bad values are /, /dev/shm, /etc/passwd: a role without its
checks must not touch this machine while the test shows that it would have), validation runs are
limited to the role's `<role>_validate` tag, the role's manifest fragment and install record are
pointed into a temporary tree, and NFS test VIPs are loopback addresses. Nothing here needs root
beyond reading; a run takes a few seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.check_mode_play import ANSIBLE_PLAYBOOK, run_json_play
from tests.conftest import load_role_module

pytestmark = pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not installed")
paths_filter = load_role_module("plugins/filter/dltune_paths.py")
SHARED_CHECK = "Refuse paths and mount options that are not safe, before any change, for "


@dataclass
class HostRun:
    failed_task: str = ""
    message: str = ""
    changed: int = 0
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # task name -> last result


def run_role(
    workdir: Path,
    role: str,
    hosts: dict[str, dict[str, Any]],
    *,
    tags: str | None,
    extra: dict[str, Any] | None = None,
) -> dict[str, HostRun]:
    """Apply `role` in check mode to one local inventory host per case; each host's outcome."""
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"hosts": {name: {**common, **values} for name, values in hosts.items()}}}
    play = (
        f"- name: Apply {role} with each host's variables\n  hosts: all\n  gather_facts: false\n"
        f"  roles:\n    - role: dltune.cluster.{role}\n"
    )
    options = ["--check"] + (["--tags", tags] if tags else []) + (["-e", json.dumps(extra)] if extra else [])
    config = "forks = 4\nfact_caching = memory\n[connection]\npipelining = true\n"
    report = run_json_play(workdir, inventory, play, options, config)
    runs = {name: HostRun(changed=report["stats"].get(name, {}).get("changed", 0)) for name in hosts}
    for play in report["plays"]:
        for task in play["tasks"]:
            for name, result in task["hosts"].items():
                run = runs[name]
                run.tasks[task["task"]["name"]] = result
                if result.get("failed") and not run.failed_task:
                    items = [str(i.get("msg", "")) for i in result.get("results", []) if i.get("failed")]
                    run.failed_task = task["task"]["name"]
                    run.message = " | ".join(items) if items else str(result.get("msg", ""))
    return runs


def node_state(watched: list[str]) -> dict[str, tuple[Any, ...]]:
    """Type, mode, owner and (files) sha256 of each watched path that exists: what a role would change."""
    state: dict[str, tuple[Any, ...]] = {}
    for path in watched:
        try:
            st = os.lstat(path)
        except OSError:
            state[path] = ("missing",)
            continue
        digest = ""
        if stat.S_ISREG(st.st_mode) and st.st_size < (16 << 20):
            try:
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            except OSError:
                digest = "unreadable"
        state[path] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, digest)
    return state


def watched_paths(cases: dict[str, dict[str, Any]]) -> list[str]:
    """Every absolute path a case names, plus the files the roles edit."""
    found = {
        "/etc/fstab",
        "/etc/environment",
        "/etc/profile.d",
        "/etc/dltune",
        "/etc/slurm",
        "/tmp",
        "/dev/shm",
    }

    def walk(value: Any) -> None:
        if isinstance(value, str) and value.startswith("/"):
            found.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(cases)
    return sorted(found)


def assert_refused(run: HostRun, expected: str) -> None:
    assert SHARED_CHECK in run.failed_task or "Refuse" in run.failed_task or "Validate" in run.failed_task, (
        run
    )
    assert expected in run.message, (expected, run.message)
    assert "\n" not in run.message
    assert run.changed == 0 and not any(r.get("changed") for r in run.tasks.values()), run.tasks.keys()


# One role per entry: the cases (host variables -> the words the refusal must contain) and the controls
# (good values that must pass the validation).
VIP = {"address": "127.0.0.2", "interface": "lo", "source": "127.0.0.1"}
NFS = {"nfs_multivip_server_path": "/nfs0", "nfs_multivip_vips": [{**VIP, "mount_point": "/mnt/nfs0"}]}


def nfs_with(mount_point: str = "/mnt/nfs0", **more: Any) -> dict[str, Any]:
    return {**NFS, "nfs_multivip_vips": [{**VIP, "mount_point": mount_point}], **more}


def disk(mount_point: str = "/data/x", **more: Any) -> dict[str, Any]:
    return {
        "data_disks_devices": [{"device": "/dev/disk/by-id/dltune-test", "mount_point": mount_point, **more}]
    }


REFUSED: dict[str, dict[str, tuple[dict[str, Any], str]]] = {
    "slurm_tmpdir": {
        "dev-shm": (
            {"slurm_tmpdir_base": "/dev/shm"},
            "slurm_tmpdir_base=/dev/shm is refused: a system directory",
        ),
        "root": ({"slurm_tmpdir_base": "/"}, "slurm_tmpdir_base=/ is refused: / itself"),
        "var-tmp": (
            {"slurm_tmpdir_base": "/var/tmp"},
            "slurm_tmpdir_base=/var/tmp is refused: a system directory",
        ),
        "tmp": ({"slurm_tmpdir_base": "/tmp"}, "slurm_tmpdir_base=/tmp is refused: a system directory"),
        "home": ({"slurm_tmpdir_base": "/home"}, "slurm_tmpdir_base=/home is refused: a system directory"),
        "usr-lib": ({"slurm_tmpdir_base": "/usr/lib"}, "slurm_tmpdir_base=/usr/lib is refused"),
        "relative": (
            {"slurm_tmpdir_base": "localscratch"},
            "slurm_tmpdir_base=localscratch is refused: not an absolute",
        ),
        "dotdot": (
            {"slurm_tmpdir_base": "/localscratch/../etc"},
            "slurm_tmpdir_base=/localscratch/../etc is refused",
        ),
        "trailing": (
            {"slurm_tmpdir_base": "/localscratch/"},
            "slurm_tmpdir_base=/localscratch/ is refused: ends",
        ),
        "double": (
            {"slurm_tmpdir_base": "//localscratch"},
            "slurm_tmpdir_base=//localscratch is refused: holds '//'",
        ),
        "link": (
            {"slurm_tmpdir_base": "/var/run/jobs"},
            "slurm_tmpdir_base=/var/run/jobs is refused: below /var/run",
        ),
        "elsewhere": (
            {"slurm_tmpdir_base": "/etc/jobs"},
            "slurm_tmpdir_base=/etc/jobs is refused: not at or below",
        ),
        "allow-root": (
            {"slurm_tmpdir_base": "/etc/jobs", "slurm_tmpdir_base_allowed_under": ["/"]},
            "slurm_tmpdir_base=/etc/jobs is refused: its allow-list holds /",
        ),
        "conf-passwd": (
            {"slurm_tmpdir_conf": "/etc/passwd"},
            "slurm_tmpdir_conf=/etc/passwd is refused: not at or",
        ),
        "conf-dir": (
            {"slurm_tmpdir_conf": "/etc/slurm"},
            "slurm_tmpdir_conf=/etc/slurm is refused: a system dir",
        ),
        "job-env": (
            {"slurm_tmpdir_job_env_file": "/etc/shadow"},
            "slurm_tmpdir_job_env_file=/etc/shadow is refused",
        ),
    },
    "dl_env": {
        "usr-lib": (
            {"dl_env_cache_dir": "/usr/lib"},
            "dl_env_cache_dir=/usr/lib is refused: a system directory",
        ),
        "home": ({"dl_env_cache_dir": "/home"}, "dl_env_cache_dir=/home is refused: a system directory"),
        "var-cache": (
            {"dl_env_cache_dir": "/var/cache"},
            "dl_env_cache_dir=/var/cache is refused: a system dir",
        ),
        "dotdot": (
            {"dl_env_cache_dir": "/var/cache/../lib"},
            "dl_env_cache_dir=/var/cache/../lib is refused",
        ),
        "elsewhere": (
            {"dl_env_cache_dir": "/etc/cache"},
            "dl_env_cache_dir=/etc/cache is refused: not at or below",
        ),
        "relative": (
            {"dl_env_cache_dir": "cache"},
            "dl_env_cache_dir=cache is refused: not an absolute path",
        ),
        "profile": ({"dl_env_profile_file": "/etc/evil.sh"}, "dl_env_profile_file=/etc/evil.sh is refused"),
        "pam": (
            {"dl_env_pam_file": "/etc/shadow"},
            "dl_env_pam_file=/etc/shadow is refused: not at or below",
        ),
        "job-env-tmp": (
            {"dl_env_job_env_file": "/tmp/job-env"},
            "dl_env_job_env_file=/tmp/job-env is refused: its directory /tmp, which the role creates and "
            "chmods",
        ),
        "job-env-dir": ({"dl_env_job_env_file": "/etc/dltune"}, "dl_env_job_env_file=/etc/dltune is refused"),
    },
    "dltune": {
        "root": ({"dltune_install_dir": "/"}, "dltune_install_dir=/ is refused: / itself"),
        "usr-lib": (
            {"dltune_install_dir": "/usr/lib"},
            "dltune_install_dir=/usr/lib is refused: a system directory",
        ),
        "opt": ({"dltune_install_dir": "/opt"}, "dltune_install_dir=/opt is refused: a system directory"),
        "home": (
            {"dltune_install_dir": "/home/dltune"},
            "dltune_install_dir=/home/dltune is refused: not at or",
        ),
        "relative": ({"dltune_install_dir": "opt/dltune"}, "dltune_install_dir=opt/dltune is refused"),
        "bin-link": ({"dltune_bin_link": "/usr/bin/dltune"}, "dltune_bin_link=/usr/bin/dltune is refused"),
        "textfile-tmp": ({"dltune_audit_textfile_dir": "/tmp"}, "dltune_audit_textfile_dir=/tmp is refused"),
        "textfile-var-lib": (
            {"dltune_audit_textfile_dir": "/var/lib"},
            "dltune_audit_textfile_dir=/var/lib is ref",
        ),
        "facts": (
            {"dltune_audit_facts_file": "/etc/passwd"},
            "dltune_audit_facts_file=/etc/passwd is refused",
        ),
    },
    "data_disks": {
        "home": (disk("/home"), "data_disks_devices[0].mount_point=/home is refused: a system directory"),
        "root": (disk("/"), "data_disks_devices[0].mount_point=/ is refused: / itself"),
        "mnt": (disk("/mnt"), "data_disks_devices[0].mount_point=/mnt is refused: a system directory"),
        "elsewhere": (
            disk("/var/lib/docker"),
            "data_disks_devices[0].mount_point=/var/lib/docker is refused",
        ),
        "dotdot": (disk("/data/../etc"), "data_disks_devices[0].mount_point=/data/../etc is refused"),
        "relative": (disk("data"), "data_disks_devices[0].mount_point=data is refused: not an absolute path"),
        "trailing": (disk("/data/"), "data_disks_devices[0].mount_point=/data/ is refused: ends with"),
        "space": (disk("/data/a b"), "data_disks_devices[0].mount_point='/data/a b' is refused"),
        "device": (
            {"data_disks_devices": [{"device": "/dev/../root/disk.img", "mount_point": "/data/x"}]},
            "data_disks_devices[0].device=/dev/../root/disk.img is refused",
        ),
        "atime": (
            disk(options=["defaults", "noatime", "relatime"]),
            "data_disks_devices[0].options=defaults,noatime,relatime,nofail,x-systemd.device-timeout=10s is "
            "refused: 'noatime' and 'relatime' contradict each other",
        ),
        "ro-rw": (disk(options=["defaults", "noatime", "ro", "rw"]), "'ro' and 'rw' contradict each other"),
        "comma": (
            disk(options=["defaults", "noatime,ro"]),
            "data_disks_devices[0].options=defaults,noatime,ro,nofail,x-systemd.device-timeout=10s is "
            "refused: the item 'noatime,ro' holds a comma",
        ),
        "timeout": (
            {**disk(), "data_disks_device_timeout": "10s,ro"},
            "data_disks_device_timeout=10s,ro is invalid",
        ),
        "defaults": (
            {**disk(), "data_disks_default_options": ["defaults,relatime", "noatime"]},
            "data_disks_default_options=defaults,relatime,noatime is refused: the item 'defaults,relatime' "
            "holds a comma",
        ),
        "system-noatime": (
            {**disk(), "data_disks_system_noatime": ["/home/"]},
            "data_disks_system_noatime[0]=/home/ is refused: ends with",
        ),
    },
    "nfs_multivip": {
        "home": (nfs_with("/home"), "nfs_multivip_vips[0].mount_point=/home is refused: a system directory"),
        "elsewhere": (
            nfs_with("/etc/nfs"),
            "nfs_multivip_vips[0].mount_point=/etc/nfs is refused: not at or below",
        ),
        "server-path": (
            nfs_with(nfs_multivip_server_path="/nfs0/../x"),
            "nfs_multivip_server_path=/nfs0/../x is refused",
        ),
        "soft": (
            nfs_with(nfs_multivip_extra_options=["soft"]),
            "nfs_multivip_options+nfs_multivip_extra_options=vers=3,proto=tcp,rsize=524288,wsize=524288,hard,"
            "timeo=600,retrans=2,noatime,_netdev,nofail,x-systemd.mount-timeout=30,soft is refused: 'hard' "
            "and 'soft' contradict each other",
        ),
        "comma": (nfs_with(nfs_multivip_extra_options=["nolock,ro"]), "the item 'nolock,ro' holds a comma"),
        "udp": (nfs_with(nfs_multivip_extra_options=["udp"]), "'proto=tcp' and 'udp' contradict each other"),
    },
    "tmpfs_tmp": {
        "atime": (
            {"tmpfs_tmp_options": ["noatime", "relatime"]},
            "tmpfs_tmp_options=noatime,relatime is refused",
        ),
        "comma": ({"tmpfs_tmp_options": ["noatime", "nosuid,exec"]}, "the item 'nosuid,exec' holds a comma"),
        "mode": ({"tmpfs_tmp_options": ["mode=1777", "mode=0755"]}, "'mode=1777' and 'mode=0755' contradict"),
        "suid": ({"tmpfs_tmp_options": ["nosuid", "suid"]}, "'nosuid' and 'suid' contradict each other"),
        "ro-rw": ({"tmpfs_tmp_options": ["ro", "rw", "noatime"]}, "'ro' and 'rw' contradict each other"),
    },
    "slurm_healthcheck": {
        "program-usr-bin": (
            {"slurm_healthcheck_program": "/usr/bin/dltune-healthcheck"},
            "slurm_healthcheck_program=/usr/bin/dltune-healthcheck is refused: not at or below",
        ),
        "program-sbin-dir": (
            {"slurm_healthcheck_program": "/usr/local/sbin"},
            "slurm_healthcheck_program=/usr/local/sbin is refused",
        ),
        "conf-passwd": (
            {"slurm_healthcheck_conf": "/etc/passwd"},
            "slurm_healthcheck_conf=/etc/passwd is refused: not at or",
        ),
        "history-var-lib": (
            {"slurm_healthcheck_history_file": "/var/lib/slurm-health.json"},
            "slurm_healthcheck_history_file=/var/lib/slurm-health.json is refused",
        ),
        "textfile-tmp": (
            {"slurm_healthcheck_textfile_dir": "/tmp"},
            "slurm_healthcheck_textfile_dir=/tmp is refused",
        ),
        "facts-shadow": (
            {"slurm_healthcheck_facts_file": "/etc/shadow"},
            "slurm_healthcheck_facts_file=/etc/shadow is refused",
        ),
        # Not paths: the role's own assert, before any change, naming the variables.
        "idle-only": ({"slurm_healthcheck_node_state": "IDLE"}, "slurm_healthcheck_node_state (IDLE)"),
        "interval": ({"slurm_healthcheck_interval": 4}, "slurm_healthcheck_interval (4) must be 5-86400 s"),
        "limit": ({"slurm_healthcheck_drain_limit": "0%"}, "slurm_healthcheck_drain_limit (0%) a count"),
    },
    "nvidia_driver": {
        "relative": (
            {"nvidia_driver_sys_dir": "sys"},
            "nvidia_driver_sys_dir=sys is refused: not an absolute path",
        ),
        "dotdot": ({"nvidia_driver_sys_dir": "/sys/../etc"}, "nvidia_driver_sys_dir=/sys/../etc is refused"),
    },
}
ACCEPTED: dict[str, dict[str, dict[str, Any]]] = {
    "slurm_tmpdir": {"defaults": {}, "var-tmp-jobs": {"slurm_tmpdir_base": "/var/tmp/jobs"}},
    "dl_env": {"defaults": {}, "cache": {"dl_env_cache_dir": "/var/cache/dl-cache"}},
    "dltune": {"defaults": {}, "usr-local": {"dltune_install_dir": "/usr/local/dltune"}},
    "data_disks": {
        "data": {**disk("/data"), "data_disks_system_noatime": ["/", "/home"]},
        "mnt": disk("/mnt/nvme0", options=["defaults", "noatime", "nodiratime"]),
    },
    # The lab's and tier 1's mount points (tests/integration/test_nfs_multivip_netns.py) stay accepted.
    "nfs_multivip": {"lab": nfs_with("/var/tmp/dltune-lab/nfs/mnt/nfs0")},
    "tmpfs_tmp": {
        "defaults": {},
        "exec": {"tmpfs_tmp_options": ["noatime", "nosuid", "nodev", "exec", "mode=1777"]},
    },
    "slurm_healthcheck": {
        "defaults": {},
        "outputs": {
            "slurm_healthcheck_textfile_dir": "/var/lib/prometheus/node-exporter",
            "slurm_healthcheck_facts_file": "/etc/ansible/facts.d/dltune.fact",
        },
    },
    # Validation goes on past the paths to what this machine may not be (Ubuntu): not refused for them.
    "nvidia_driver": {"test-tree": {"nvidia_driver_sys_dir": "/srv/fake-gpu-sys"}},
}
ROLES = sorted(REFUSED)


@pytest.fixture(scope="module")
def validation_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, HostRun]]]:
    """Each role once, every case and control as a host of its own, limited to the validate tag."""
    every_case = {role: {case: values for case, (values, _) in REFUSED[role].items()} for role in ROLES}
    watched = watched_paths(every_case) + watched_paths(ACCEPTED)
    before = node_state(watched)
    runs = {}
    for role in ROLES:
        hosts = {f"bad-{case}": values for case, values in every_case[role].items()}
        hosts.update({f"good-{case}": values for case, values in ACCEPTED[role].items()})
        runs[role] = run_role(tmp_path_factory.mktemp(role), role, hosts, tags=f"{role}_validate")
    yield runs
    assert node_state(watched) == before, "a validation run changed this machine"


@pytest.mark.parametrize(("role", "case"), [(role, case) for role in ROLES for case in REFUSED[role]])
def test_bad_input_is_refused_at_the_validate_step(
    validation_runs: dict[str, dict[str, HostRun]], role: str, case: str
) -> None:
    assert_refused(validation_runs[role][f"bad-{case}"], REFUSED[role][case][1])


@pytest.mark.parametrize(("role", "case"), [(role, case) for role in ROLES for case in ACCEPTED[role]])
def test_good_input_passes_the_shared_check(
    validation_runs: dict[str, dict[str, HostRun]], role: str, case: str
) -> None:
    run = validation_runs[role][f"good-{case}"]
    assert "is refused" not in run.message, run.message
    if role != "nvidia_driver":
        assert not run.failed_task, (run.failed_task, run.message)
    assert run.changed == 0


# data_disks: what is at a mount point, checked on the node before any change -----------------------


def a_foreign_mount_point() -> str | None:
    """A mount point of this machine that the path check accepts (so the probe is what refuses it)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if target != "/" and not paths_filter.dltune_path_problem(target, "x", [target]):
            return target
    return None


def test_data_disks_refuses_a_mount_point_that_holds_data_or_another_mount(tmp_path: Path) -> None:
    """The probe step stats, lists and findmnt's each mount point before the devices are probed further:
    files, a link, a file or another filesystem there are refused naming the mount point. The device is
    /dev/null: a role without the check goes on to wipefs, which fails on it, so nothing can change."""
    points = tmp_path / "points"
    (points / "full").mkdir(parents=True)
    (points / "full" / "dataset.tar").write_bytes(b"data")
    (points / "empty").mkdir()
    (points / "link").symlink_to("/etc")
    (points / "file").write_text("x")
    foreign = a_foreign_mount_point()

    def host(point: str) -> dict[str, Any]:
        allowed = [str(points)] + ([foreign] if foreign else [])
        return {
            "data_disks_mount_point_allowed_under": allowed,
            "data_disks_devices": [{"device": "/dev/null", "mount_point": point}],
        }

    hosts = {name: host(str(points / name)) for name in ("full", "empty", "link", "file", "new")}
    if foreign:
        hosts["foreign"] = host(foreign)
    watched = [str(points / name) for name in ("full", "full/dataset.tar", "link", "file")] + ["/etc/fstab"]
    before = node_state(watched)
    runs = run_role(tmp_path / "run", "data_disks", hosts, tags=None)
    assert node_state(watched) == before
    refused = "Refuse a mount point that holds data or another mount, before anything changes"
    expected = {
        "full": "it is not empty (holds dataset.tar): mounting /dev/null there would hide that data",
        "link": "it is a link (to /etc), which a mount would follow",
        "file": "it is a file, not a directory",
        "foreign": "is mounted there, not /dev/null",
    }
    for name, words in expected.items():
        if name not in runs:
            continue
        run = runs[name]
        point = foreign if name == "foreign" else str(points / name)
        assert run.failed_task.endswith(refused), (name, run.failed_task, run.message)
        assert (
            f"data_disks_devices[0].mount_point={point} is refused: " in run.message and words in run.message
        )
        assert run.changed == 0
    for name in (
        "empty",
        "new",
    ):  # accepted: the run goes on to the device probes (and fails on /dev/null there)
        assert not runs[name].failed_task.endswith(refused), runs[name]
        assert "mount_point=" not in runs[name].message


# state absent: only what the manifest recorded -------------------------------------------------------


def write_record(directory: Path, name: str, record: dict[str, Any] | None) -> str:
    path = directory / f"{name}.json"
    if record is not None:
        path.write_text(json.dumps({"schema_version": 1, **record}))
    return str(path)


SEAMS = {
    "dl_env__fragment": "{{ test_record }}",
    "slurm_tmpdir__fragment": "{{ test_record }}",
    "data_disks__fragment": "{{ test_record }}",
    "nfs_multivip__fragment": "{{ test_record }}",
    "tmpfs_tmp__fragment": "{{ test_record }}",
    "dltune__install_record": "{{ test_record }}",
}
DL_ENV_FILES = {
    "profile": "/etc/profile.d/dltune-dl-env.sh",
    "pam": "/etc/environment",
    "job_env": "/etc/dltune/job-env",
}
HOOKS = {
    "prolog": "/etc/slurm/dltune/prolog",
    "epilog": "/etc/slurm/dltune/epilog",
    "task_prolog": "/etc/slurm/dltune/task_prolog",
}
DLTUNE_RECORD = {
    "install_dir": "/opt/dltune",
    "install_dir_created": False,
    "bin_link": "/usr/local/bin/dltune",
    "audit_outputs": ["/var/lib/prometheus/node-exporter/dltune.prom", "/etc/ansible/facts.d/dltune.fact"],
}
# role -> host -> (record, host variables, the refusal's words or "" when the rollback may go ahead)
ROLLBACKS: dict[str, dict[str, tuple[dict[str, Any] | None, dict[str, Any], str]]] = {
    "dl_env": {
        "other-file": (
            {"files": {**DL_ENV_FILES, "profile": "/etc/profile.d/other.sh"}},
            {},
            "dl_env_profile_file=/etc/profile.d/dltune-dl-env.sh is refused: not what the role recorded "
            "creating (/etc/profile.d/other.sh)",
        ),
        "recorded": ({"files": DL_ENV_FILES}, {}, ""),
        "no-record": (None, {}, ""),
    },
    "slurm_tmpdir": {
        "other-conf": (
            {"conf": "/etc/slurm-llnl/slurm.conf", "hooks": HOOKS},
            {},
            "slurm_tmpdir_conf=/etc/slurm/slurm.conf is refused: not what the role recorded creating "
            "(/etc/slurm-llnl/slurm.conf)",
        ),
        "no-record": (None, {}, ""),
    },
    "data_disks": {
        "other-disk": (
            {"disks": [{"mount_point": "/data/a", "uuid": "u", "fstype": "ext4"}]},
            disk("/data/b"),
            "data_disks_devices[0].mount_point=/data/b is refused: not what the role recorded creating "
            "(/data/a)",
        ),
        "no-record": (None, disk("/data/b"), ""),
    },
    "nfs_multivip": {
        "other-vip": (
            {"state": "mounted", "vips": [{**VIP, "mount_point": "/mnt/nfs0"}]},
            nfs_with("/mnt/nfs1", nfs_multivip_state="absent"),
            "nfs_multivip_vips[0].mount_point=/mnt/nfs1 is refused: not what the role recorded creating "
            "(/mnt/nfs0)",
        ),
        "no-record": (None, nfs_with("/mnt/nfs1", nfs_multivip_state="absent"), ""),
    },
    "tmpfs_tmp": {
        "other-mount": (
            {"mount_point": "/elsewhere"},
            {},
            "tmpfs_tmp mount point=/tmp is refused: not what the role recorded creating (/elsewhere)",
        ),
        "no-record": (None, {}, ""),
    },
    "dltune": {
        "other-dir": (
            {**DLTUNE_RECORD, "install_dir": "/opt/dltune-old"},
            {},
            "dltune_install_dir=/opt/dltune is refused: not what the role recorded creating "
            "(/opt/dltune-old)",
        ),
        "not-created": (DLTUNE_RECORD, {}, ""),
        "no-record": (None, {}, ""),
    },
}
STATE_VARIABLE = {
    "dl_env": "dl_env_state",
    "slurm_tmpdir": "slurm_tmpdir_state",
    "data_disks": "data_disks_state",
    "tmpfs_tmp": "tmpfs_tmp_state",
    "dltune": "dltune_state",
}


@pytest.fixture(scope="module")
def rollback_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, HostRun]]:
    records = tmp_path_factory.mktemp("records")
    manifest = tmp_path_factory.mktemp("expected.d")
    runs = {}
    for role, hosts in ROLLBACKS.items():
        inventory = {}
        for name, (record, values, _) in hosts.items():
            state = {STATE_VARIABLE[role]: "absent"} if role in STATE_VARIABLE else {}
            inventory[name] = {
                **state,
                **values,
                "test_record": write_record(records, f"{role}-{name}", record),
            }
        extra = {**SEAMS, "dltune__manifest_dir": str(manifest)}
        runs[role] = run_role(
            tmp_path_factory.mktemp(f"{role}-absent"), role, inventory, tags=None, extra=extra
        )
    return runs


@pytest.mark.parametrize(
    ("role", "host"),
    [(role, host) for role in ROLLBACKS for host in ROLLBACKS[role] if ROLLBACKS[role][host][2]],
)
def test_rollback_refuses_what_the_role_did_not_record(
    rollback_runs: dict[str, dict[str, HostRun]], role: str, host: str
) -> None:
    assert_refused(rollback_runs[role][host], ROLLBACKS[role][host][2])


# The first task of each rollback that removes or edits something on the node.
FIRST_REMOVAL = {
    "dl_env": "Ensure login shells no longer get the DL environment",
    "slurm_tmpdir": "Ensure slurm.conf runs the site's own hooks again",
    "data_disks": "Ensure the data disks are unmounted",
    "nfs_multivip": "Ensure each VIP's host route leaves by its interface and source address",
    "tmpfs_tmp": "Read the /tmp line of fstab",
    "dltune": "Remove the virtualenv and the wheelhouse (the directory too, if the install created it)",
}


MANIFEST_WRITE = (
    "dltune.cluster.dltune : Ensure the manifest directory exists",
    "dltune.cluster.dltune : Ensure the manifest fragment describes",
)


def task_result(run: HostRun, name: str) -> dict[str, Any]:
    matches = [result for task, result in run.tasks.items() if task.endswith(name)]
    assert matches, (name, list(run.tasks))
    return matches[-1]


@pytest.mark.parametrize("role", sorted(ROLLBACKS))
def test_rollback_without_a_record_removes_nothing(
    rollback_runs: dict[str, dict[str, HostRun]], role: str
) -> None:
    run = rollback_runs[role]["no-record"]
    assert not run.failed_task, run.message
    result = task_result(run, FIRST_REMOVAL[role])
    if role == "nfs_multivip":  # the routes module runs with no VIP to remove
        assert result["invocation"]["module_args"]["vips"] == [], result
    else:
        assert result.get("skipped") or result.get("results") == [], result
    # nfs_multivip records every run, a rollback too (state absent, no VIPs): the only change allowed.
    changed = [task for task, result in run.tasks.items() if result.get("changed")]
    assert all(task.startswith(MANIFEST_WRITE) for task in changed), changed


def test_rollback_removes_the_recorded_files(rollback_runs: dict[str, dict[str, HostRun]]) -> None:
    run = rollback_runs["dl_env"]["recorded"]
    assert not run.failed_task, run.message
    assert task_result(run, FIRST_REMOVAL["dl_env"])["path"] == DL_ENV_FILES["profile"]


def test_rollback_leaves_an_install_directory_the_role_did_not_create(
    rollback_runs: dict[str, dict[str, HostRun]],
) -> None:
    """The record says /opt/dltune existed before the install: only what the install put in it goes."""
    run = rollback_runs["dltune"]["not-created"]
    assert not run.failed_task, run.message
    removed = [item["path"] for item in task_result(run, FIRST_REMOVAL["dltune"])["results"]]
    assert removed == ["/opt/dltune/venv", "/opt/dltune/wheelhouse", "/opt/dltune/wheelhouse.tar"]
