"""Role slurm_healthcheck: its slurm.conf planner on slurm.conf's bytes (the role itself runs against the
lab's real Slurm in tests/integration/test_site_lab.py), held to the same reading of slurm.conf as
slurm_tmpdir's (case-insensitive keys, the last assignment wins, comments cut, as Slurm reads it), and
state=absent giving the site its file back byte for byte.

Slurm's newer options (HealthCheckTimeout, HealthCheckNodeState=START_ONLY/REBOOT_ONLY) go through the
real role with `ansible-playbook -c local --check` on this machine, as
tests/integration/test_roles_refuse_unsafe_inputs.py runs it: one play per cluster (the lowest Slurm
of a play's hosts decides), stand-in `slurmd`/`slurmctld` on slurm_healthcheck_path printing published
`-V` lines, a refusal read from Ansible's JSON output with nothing changed. What the role writes is
read from the diffs of its present and absent tasks in check mode against a slurm.conf in a
temporary directory, the wrapper's options checked by the real dltune beside this interpreter."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import stat
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.check_mode_play import ANSIBLE_PLAYBOOK, run_json_play
from tests.conftest import load_role_module

keys_module = load_role_module("plugins/modules/slurm_conf_keys.py")
tmpdir_module = load_role_module("plugins/modules/slurm_tmpdir_conf.py")

OURS = {
    "HealthCheckProgram": "/usr/local/sbin/dltune-healthcheck",
    "HealthCheckInterval": "300",
    "HealthCheckNodeState": "ANY,CYCLE",
}
SITE = (
    "ClusterName=ci\n"
    "HealthCheckProgram=/usr/sbin/nhc  # the site's NHC\n"
    "healthcheckinterval=60\n"
    "HealthCheckInterval=120\n"
    "NodeName=n1 CPUs=2\n"
)
# Each text with what Slurm reads from it: lower-cased key -> the value it uses.
TEXTS = [
    (SITE, {"clustername": "ci", "healthcheckprogram": "/usr/sbin/nhc", "healthcheckinterval": "120",
            "nodename": "n1"}),
    ("", {}),
    ("# HealthCheckProgram=/commented\nPrologFlags=Alloc\nprologflags=Contain\n", {"prologflags": "Contain"}),
    # Slurm reads the first word of `Epilog=/c d`.
    ("  Prolog = /a\nPROLOG=/b # later wins\nEpilog=/c d\n", {"prolog": "/b", "epilog": "/c"}),
]  # fmt: skip
READ_KEYS = ("ClusterName", "HealthCheckProgram", "HealthCheckInterval", "PrologFlags", "Prolog", "Epilog")


def read(data: bytes) -> dict[str, str]:
    """slurm.conf as slurm_conf_keys reads it: lower-cased key -> the value Slurm uses."""
    return keys_module.load("slurm.conf", data).values()


@pytest.mark.parametrize(("text", "values"), TEXTS)
def test_both_roles_read_slurm_conf_alike(text: str, values: dict[str, str]) -> None:
    """slurm_tmpdir_conf reads each key's value as Slurm does, and slurm_conf_keys records that same
    value as the site's when it sets the key (None where Slurm reads none)."""
    assert tmpdir_module.parse(text) == values
    for key in READ_KEYS:
        _, record = keys_module.plan(text.encode(), "slurm.conf", {key: "ours"}, {}, "present")
        assert record == {key: {"site": values.get(key.lower()), "ours": "ours"}}, key


def test_our_values_replace_the_last_assignment_and_the_site_values_are_recorded() -> None:
    after, record = keys_module.plan(SITE.encode(), "slurm.conf", OURS, {}, "present")
    found = read(after)
    assert {k: found[k.lower()] for k in OURS} == OURS
    assert record == {
        "HealthCheckProgram": {"site": "/usr/sbin/nhc", "ours": OURS["HealthCheckProgram"]},
        "HealthCheckInterval": {"site": "120", "ours": OURS["HealthCheckInterval"]},
        "HealthCheckNodeState": {"site": None, "ours": OURS["HealthCheckNodeState"]},
    }
    assert b"\nhealthcheckinterval=60\n" in after and b"\nNodeName=n1 CPUs=2\n" in after
    # A rerun keeps the site's values, never records its own.
    again, record_again = keys_module.plan(after, "slurm.conf", OURS, record, "present")
    assert again == after and record_again == record


def test_absent_puts_back_exactly_what_the_site_had() -> None:
    """Byte for byte: the last assignment of each key gets the site's bytes back, the earlier
    `healthcheckinterval=60` was never touched, and the key the site had none of is taken out."""
    after, record = keys_module.plan(SITE.encode(), "slurm.conf", OURS, {}, "present")
    restored, kept = keys_module.plan(after, "slurm.conf", OURS, record, "absent")
    assert restored == SITE.encode() and kept == {}


def test_absent_takes_out_only_our_setting_of_a_key_the_site_had_none_of() -> None:
    """The setting dltune appended (the one Slurm uses) goes; an earlier one the site added since stays."""
    after, record = keys_module.plan(SITE.encode(), "slurm.conf", OURS, {}, "present")
    site_line = b"ClusterName=ci\nHealthCheckNodeState=IDLE\n"
    added = after.replace(b"ClusterName=ci\n", site_line)
    restored, _ = keys_module.plan(added, "slurm.conf", OURS, record, "absent")
    assert restored == SITE.encode().replace(b"ClusterName=ci\n", site_line)
    assert read(restored)["healthchecknodestate"] == "IDLE"


def test_absent_leaves_a_value_the_site_changed_since() -> None:
    after, record = keys_module.plan(SITE.encode(), "slurm.conf", OURS, {}, "present")
    changed = after.replace(b"HealthCheckInterval=300", b"HealthCheckInterval=900")
    restored, _ = keys_module.plan(changed, "slurm.conf", OURS, record, "absent")
    assert read(restored)["healthcheckinterval"] == "900"
    assert read(restored)["healthcheckprogram"] == "/usr/sbin/nhc"


# Slurm's newer options through the real role ---------------------------------------------------------

BIN = Path(sys.executable).parent
DLTUNE = BIN / "dltune"
needs_ansible = pytest.mark.skipif(
    not (ANSIBLE_PLAYBOOK.exists() and DLTUNE.exists()), reason="no ansible-playbook and dltune beside python"
)
REFUSE_VERSION = "Refuse what the lowest Slurm of the play does not read, before anything changes"
UNREAD_VERSION = "Fail when a host's Slurm version cannot be read"
PROBE = "Read this host's Slurm version (slurmctld -V on the controller, slurmd -V on a node)"
TIMEOUT_TASK = "Ensure slurm.conf's HealthCheckTimeout is slurm_healthcheck_timeout, or at 0 the site's own"
KEYS_TASK = "Ensure slurm.conf runs it as the HealthCheckProgram"
WRAPPER_TASK = "Ensure the health check program is installed"
OPTIONS_TASK = "Check the health check's options with the dltune it runs (an option it refuses names itself)"


@dataclass
class HostRun:
    failed_task: str = ""
    message: str = ""
    changed: int = 0
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # task name -> last result

    def task(self, name: str) -> dict[str, Any]:
        found = [result for task, result in self.tasks.items() if task.endswith(name)]
        assert found, (name, list(self.tasks))
        return found[-1]


def stand_in(directory: Path, program: str, printed: str, code: int = 0) -> None:
    """A `program` on slurm_healthcheck_path that prints ``printed`` (a published -V line) and exits."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / program
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' {json.dumps(printed)}\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def ansible_playbook(
    workdir: Path,
    play: str,
    inventory: dict[str, Any],
    *,
    tags: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, HostRun]:
    """`play` run in check mode with --diff against ``inventory`` on this machine: each host's outcome."""
    options = (
        ["--check", "--diff"]
        + (["--tags", tags] if tags else [])
        + (["-e", json.dumps(extra)] if extra else [])
    )
    report = run_json_play(workdir, inventory, play, options, config="forks = 8\n")
    runs: dict[str, HostRun] = {}
    for play_report in report["plays"]:
        for task in play_report["tasks"]:
            for name, result in task["hosts"].items():
                run = runs.setdefault(name, HostRun())
                run.tasks[task["task"]["name"]] = result
                if result.get("failed") and not run.failed_task:
                    run.failed_task, run.message = task["task"]["name"], str(result.get("msg", ""))
    for name, stats in report["stats"].items():
        runs.setdefault(name, HostRun()).changed = stats.get("changed", 0)
    return runs


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, run: Callable[[Path], dict[str, HostRun]]
) -> dict[str, HostRun]:
    """``run(workdir)`` once per pytest run: xdist's workers (`make unit` runs two) would each run the
    playbook of a module fixture whose tests they share; the first runs it under a lock and leaves
    the outcome for the others."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this run's directory, above each worker's own
    outcome = base / f"{name}.json"
    with (base / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not outcome.exists():
            workdir = base / name
            workdir.mkdir()
            outcome.write_text(
                json.dumps({host: asdict(host_run) for host, host_run in run(workdir).items()})
            )
    return {host: HostRun(**fields) for host, fields in json.loads(outcome.read_text()).items()}


LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
# Published -V lines (tests/fixtures/real/slurm_version/) and Slurm's own formats for the others.
DEBIAN_21_08 = "slurm-wlm 21.08.5"
SLURM_25_11 = "slurm 25.11.5"
RC_26_05 = "slurm 26.05.0-0rc1"  # auxdir/slurm.m4: -RELEASE unless 1
SLURM_26_05 = "slurm 26.05.1"

# One play per cluster: group -> host -> (what its slurmd/slurmctld prints, or None for no program;
# the host's role variables). A host in group slurm_controller is read through slurmctld -V. Hosts
# refused by the role's own checks, and hosts that ask for nothing new, ride along: they do not count
# towards a play's lowest version.
CLUSTERS: dict[str, dict[str, tuple[str | None, dict[str, Any]]]] = {
    "debian2108": {
        "old-timeout": (DEBIAN_21_08, {"slurm_healthcheck_timeout": 90}),
        "old-start": (DEBIAN_21_08, {"slurm_healthcheck_node_state": "START_ONLY"}),
        "old-periodic": (DEBIAN_21_08, {}),
        # The role's own checks, before any version is read.
        "i-only-mixed": (SLURM_26_05, {"slurm_healthcheck_node_state": "START_ONLY,ANY"}),
        "i-unknown": (SLURM_26_05, {"slurm_healthcheck_node_state": "ANY,BOOT_ONLY"}),
        "i-short": (SLURM_26_05, {"slurm_healthcheck_timeout": 59}),
        "i-interval": (SLURM_26_05, {"slurm_healthcheck_timeout": 300}),
        "i-uint16": (SLURM_26_05, {"slurm_healthcheck_timeout": 65536, "slurm_healthcheck_interval": 86400}),
        "i-version": (None, {"slurm_healthcheck_timeout": 90, "slurm_healthcheck_slurm_version": "25"}),
    },
    "slurm2511": {
        "m-start": (SLURM_25_11, {"slurm_healthcheck_node_state": "start_only"}),
        "m-reboot": (SLURM_25_11, {"slurm_healthcheck_node_state": "REBOOT_ONLY"}),
        "m-timeout": (SLURM_25_11, {"slurm_healthcheck_timeout": 120}),
        # Nothing new asked: no probe, so a host without slurmd (the lab's controller) passes.
        "p-broken": ("slurmd: fatal: oops", {}),
    },
    "rc2605": {
        "n-both": (
            RC_26_05,
            {"slurm_healthcheck_timeout": 90, "slurm_healthcheck_node_state": "REBOOT_ONLY"},
        ),
        "n-long": (RC_26_05, {"slurm_healthcheck_timeout": 65535, "slurm_healthcheck_interval": 86400}),
        "v-given": (None, {"slurm_healthcheck_timeout": 90, "slurm_healthcheck_slurm_version": "26.05"}),
    },
    # slurm.conf is one for all: a 26.05 node with a 25.11 controller is refused on every host.
    "mixed": {
        "x-node": (SLURM_26_05, {"slurm_healthcheck_timeout": 90}),
        "x-ctl": (SLURM_25_11, {"slurm_healthcheck_timeout": 90}),
    },
    "unread": {"u-none": (None, {"slurm_healthcheck_timeout": 90})},
    "given-old": {
        "v-given-old": (
            SLURM_26_05,
            {"slurm_healthcheck_timeout": 90, "slurm_healthcheck_slurm_version": "25.11.3"},
        )
    },
}
CONTROLLERS = {"x-ctl"}


@pytest.fixture(scope="module")
def gate_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    return once_per_run(tmp_path_factory, "slurm-healthcheck-gates", run_gates)


def run_gates(work: Path) -> dict[str, HostRun]:
    """Every cluster once, limited to the validate tag. A host with the defaults and no Slurm program
    (no-slurm) joins each play: it asks for nothing new, so it neither counts towards the play's lowest
    version nor is refused, and the run goes on where every host of a cluster is refused."""
    groups: dict[str, Any] = {"bystander": {"hosts": {"no-slurm": {}}}, "slurm_controller": {"hosts": {}}}
    plays = []
    for cluster, hosts in CLUSTERS.items():
        group: dict[str, Any] = {}
        for host, (printed, values) in hosts.items():
            bin_dir = work / "bin" / host
            bin_dir.mkdir(parents=True)
            if printed is not None:
                stand_in(
                    bin_dir,
                    "slurmctld" if host in CONTROLLERS else "slurmd",
                    printed,
                    1 if "fatal" in printed else 0,
                )
            group[host] = {"slurm_healthcheck_path": f"{bin_dir}:/usr/bin:/bin", **values}
            if host in CONTROLLERS:
                groups["slurm_controller"]["hosts"][host] = {}
        groups[cluster] = {"hosts": group}
        plays.append(
            f"- name: Apply slurm_healthcheck to cluster {cluster}\n  hosts: {cluster}:bystander\n"
            "  gather_facts: false\n  roles:\n    - role: dltune.cluster.slurm_healthcheck\n"
        )
    inventory = {"all": {"vars": LOCAL, "children": groups}}
    return ansible_playbook(work, "".join(plays), inventory, tags="slurm_healthcheck_validate")


def refused(run: HostRun, task: str, *words: str) -> None:
    assert run.failed_task.endswith(task), (run.failed_task, run.message)
    for word in words:
        assert word in run.message, (word, run.message)
    assert "\n" not in run.message
    assert run.changed == 0 and not any(r.get("changed") for r in run.tasks.values())


def accepted(run: HostRun) -> None:
    assert not run.failed_task, (run.failed_task, run.message)
    assert run.changed == 0


@needs_ansible
@pytest.mark.parametrize(
    ("host", "words"),
    [
        (
            "old-timeout",
            ["slurm_healthcheck_timeout=90 needs Slurm >= 26.05 (HealthCheckTimeout)",
             "the lowest Slurm of this play is 21.08 (old-timeout: slurmd -V gave \"slurm-wlm 21.08.5\")"],
        ),
        (
            "old-start",
            ["slurm_healthcheck_node_state=START_ONLY needs Slurm >= 25.11 (HealthCheckNodeState=START_ONLY)",
             "is 21.08"],
        ),
        ("m-reboot", ["slurm_healthcheck_node_state=REBOOT_ONLY needs Slurm >= 26.05", "is 25.11"]),
        ("m-timeout", ["slurm_healthcheck_timeout=120 needs Slurm >= 26.05", "is 25.11"]),
        # The controller's slurmctld is the lowest: both hosts refused, the controller named.
        ("x-node", ["slurm_healthcheck_timeout=90", "is 25.11 (x-ctl: slurmctld -V gave \"slurm 25.11.5\")"]),
        ("x-ctl", ["slurm_healthcheck_timeout=90", "is 25.11 (x-ctl: slurmctld -V gave"]),
        # What the admin gave wins over the program (which is not run).
        ("v-given-old", ["is 25.11 (v-given-old: slurm_healthcheck_slurm_version=25.11.3)"]),
    ],
)  # fmt: skip
def test_an_older_slurm_is_refused_naming_the_variable_and_the_version(
    gate_runs: dict[str, HostRun], host: str, words: list[str]
) -> None:
    refused(gate_runs[host], REFUSE_VERSION, *words)


@needs_ansible
def test_a_host_whose_version_cannot_be_read_is_named_with_the_override(
    gate_runs: dict[str, HostRun],
) -> None:
    refused(
        gate_runs["u-none"],
        UNREAD_VERSION,
        "cannot read the Slurm version of u-none (slurmd -V gave",
        "which the role needs for slurm_healthcheck_timeout",
        "set slurm_healthcheck_slurm_version",
    )


@needs_ansible
@pytest.mark.parametrize(
    "host", ["m-start", "n-both", "n-long", "v-given", "old-periodic", "p-broken", "no-slurm"]
)
def test_what_the_slurm_reads_is_accepted(gate_runs: dict[str, HostRun], host: str) -> None:
    accepted(gate_runs[host])


@needs_ansible
@pytest.mark.parametrize(
    ("host", "probed"), [("p-broken", False), ("no-slurm", False), ("v-given", False), ("m-start", True)]
)
def test_the_version_is_read_only_when_an_input_needs_it(
    gate_runs: dict[str, HostRun], host: str, probed: bool
) -> None:
    """Nothing new asked (or the version given): slurmd -V is not run, so a broken or missing one is
    no reason to refuse."""
    assert bool(gate_runs[host].task(PROBE).get("skipped")) is not probed


@needs_ansible
@pytest.mark.parametrize(
    ("host", "words"),
    [
        ("i-only-mixed", "slurm_healthcheck_node_state (START_ONLY,ANY) must be"),
        ("i-unknown", "slurm_healthcheck_node_state (ANY,BOOT_ONLY)"),
        ("i-short", "slurm_healthcheck_timeout (59) must be 0 (Slurm's 60 s) or 60 to 65535 s"),
        ("i-interval", "slurm_healthcheck_timeout (300) must be 0 (Slurm's 60 s) or 60 to 65535 s and below "
                       "slurm_healthcheck_interval (300)"),
        ("i-uint16", "slurm_healthcheck_timeout (65536)"),
        ("i-version", "slurm_healthcheck_slurm_version (25) must be"),
    ],
)  # fmt: skip
def test_inputs_slurm_would_refuse_or_misread_are_refused_first(
    gate_runs: dict[str, HostRun], host: str, words: str
) -> None:
    refused(gate_runs[host], "", words)
    assert "Validate" in gate_runs[host].failed_task
    assert PROBE not in " ".join(gate_runs[host].tasks)


# What the role writes: its version check, then its present (or absent) tasks, in check mode ----------

WRITE_PLAY = """- name: Apply slurm_healthcheck's version check, then its present or absent tasks
  hosts: all
  gather_facts: false
  tasks:
    - name: Check the Slurm version
      ansible.builtin.include_role:
        name: dltune.cluster.slurm_healthcheck
        tasks_from: version.yml
    - name: Apply the present tasks
      ansible.builtin.include_role:
        name: dltune.cluster.slurm_healthcheck
        tasks_from: present.yml
      when: slurm_healthcheck_state | default('present') == 'present'
    - name: Apply the absent tasks
      ansible.builtin.include_role:
        name: dltune.cluster.slurm_healthcheck
        tasks_from: absent.yml
      when: slurm_healthcheck_state | default('present') == 'absent'
"""
SITE_CONF = b"ClusterName=ci\nNodeName=n1 CPUs=2\n"
WRITE_CASES: dict[str, dict[str, Any]] = {
    "set": {"slurm_healthcheck_timeout": 90, "slurm_healthcheck_node_state": "REBOOT_ONLY"},
    "back-to-0": {"slurm_healthcheck_timeout": 0},  # the role had set 90, the site had none
    "site-value": {"slurm_healthcheck_timeout": 0},  # the role had set 90 over the site's 120
    "never-set": {"slurm_healthcheck_timeout": 0},
    "absent": {"slurm_healthcheck_state": "absent", "slurm_healthcheck_timeout": 90},
}


def with_timeout(conf: bytes, seconds: str, record_path: Path | None = None) -> bytes:
    """slurm.conf after the role set HealthCheckTimeout=seconds, its record written as the module does."""
    after, record = keys_module.plan(conf, "slurm.conf", {"HealthCheckTimeout": seconds}, {}, "present")
    if record_path is not None:
        record_path.write_text(json.dumps({"edits": record}))
    return bytes(after)


# Each case's slurm.conf before the run.
WRITTEN = {
    "set": SITE_CONF,
    "back-to-0": with_timeout(SITE_CONF, "90"),
    "site-value": with_timeout(SITE_CONF + b"HealthCheckTimeout=120\n", "90"),
    "never-set": SITE_CONF,
    "absent": keys_module.plan(with_timeout(SITE_CONF, "90"), "slurm.conf", OURS, {}, "present")[0],
}


@pytest.fixture(scope="module")
def write_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    return once_per_run(tmp_path_factory, "slurm-healthcheck-writes", run_writes)


def run_writes(work: Path) -> dict[str, HostRun]:
    """The version check and the present (absent) tasks in check mode, one host per case, each with its
    slurm.conf (WRITTEN[host]) and records in a directory of its own."""
    hosts: dict[str, Any] = {}
    for host, values in WRITE_CASES.items():
        directory = work / host
        directory.mkdir()
        timeout_record = directory / "timeout.json"
        conf = SITE_CONF
        if host in ("back-to-0", "absent"):
            conf = with_timeout(conf, "90", timeout_record)
        elif host == "site-value":
            conf = with_timeout(conf + b"HealthCheckTimeout=120\n", "90", timeout_record)
        if host == "absent":
            after, record = keys_module.plan(conf, "slurm.conf", OURS, {}, "present")
            (directory / "keys.json").write_text(json.dumps({"edits": record}))
            conf = after
        assert conf == WRITTEN[host]
        (directory / "slurm.conf").write_bytes(conf)
        hosts[host] = {
            "slurm_healthcheck_conf": str(directory / "slurm.conf"),
            "slurm_healthcheck_program": str(directory / "dltune-healthcheck"),
            "test_keys_record": str(directory / "keys.json"),
            "test_timeout_record": str(timeout_record),
            # The options check runs the real dltune where the wrapper's options differ; elsewhere the
            # dltune named is missing, which check mode lets through with the check skipped.
            "slurm_healthcheck_dltune": str(DLTUNE)
            if host in ("set", "back-to-0")
            else str(directory / "none"),
            "slurm_healthcheck_reconfigure": False,
            "slurm_healthcheck_slurm_version": "26.05",
            **values,
        }
    inventory = {"all": {"vars": LOCAL, "hosts": hosts}}
    # The records are the role's own variables: only extra vars outrank them (each host's file).
    seams = {
        "slurm_healthcheck__record": "{{ test_keys_record }}",
        "slurm_healthcheck__timeout_record": "{{ test_timeout_record }}",
    }
    runs = ansible_playbook(work, WRITE_PLAY, inventory, extra=seams)
    for host in WRITE_CASES:  # check mode: nothing written
        assert (work / host / "slurm.conf").read_bytes() == WRITTEN[host]
        assert not (work / host / "dltune-healthcheck").exists()
    return runs


def wrapper_argv(wrapper: str) -> str:
    """The wrapper's exec line, its continuation lines joined and its words unquoted, one space apart."""
    line = wrapper.replace("\\\n", " ").split("\nexec ", 1)[1]
    return " ".join(shlex.split(line))


def diff_after(result: dict[str, Any]) -> str:
    diff = result["diff"]
    return str((diff[-1] if isinstance(diff, list) else diff)["after"])


@needs_ansible
def test_a_26_05_cluster_gets_the_timeout_in_slurm_conf_and_the_wrapper(
    write_runs: dict[str, HostRun],
) -> None:
    run = write_runs["set"]
    assert not run.failed_task, (run.failed_task, run.message)
    assert read(diff_after(run.task(TIMEOUT_TASK)).encode())["healthchecktimeout"] == "90"
    assert read(diff_after(run.task(KEYS_TASK)).encode())["healthchecknodestate"] == "REBOOT_ONLY"
    wrapper = diff_after(run.task(WRAPPER_TASK))
    # The audit gets the timeout less 35 s, and the dltune it runs accepts the pair.
    assert "--slurm-timeout 90 --timeout 55" in wrapper_argv(wrapper) and "kills it after\n# 90 s." in wrapper
    assert run.task(OPTIONS_TASK)["rc"] == 0


@needs_ansible
def test_back_at_0_the_role_takes_its_timeout_out_or_gives_the_site_its_own_back(
    write_runs: dict[str, HostRun],
) -> None:
    runs = write_runs
    for host in ("back-to-0", "site-value", "never-set"):
        assert not runs[host].failed_task, (host, runs[host].message)
        argv = wrapper_argv(diff_after(runs[host].task(WRAPPER_TASK)))
        assert "--slurm-timeout" not in argv and "--timeout" not in argv and "--profile drain" in argv, host
    assert diff_after(runs["back-to-0"].task(TIMEOUT_TASK)).encode() == SITE_CONF
    site = diff_after(runs["site-value"].task(TIMEOUT_TASK)).encode()
    assert site == SITE_CONF + b"HealthCheckTimeout=120\n"
    never = runs["never-set"].task(TIMEOUT_TASK)
    assert never["changed"] is False and never["msg"] == "no record: nothing was set by this role"


@needs_ansible
def test_absent_takes_out_the_timeout_with_the_other_keys(
    write_runs: dict[str, HostRun],
) -> None:
    run = write_runs["absent"]
    assert not run.failed_task, (run.failed_task, run.message)
    without_timeout = read(
        diff_after(run.task("Ensure slurm.conf has the site's own HealthCheckTimeout back")).encode()
    )
    assert (
        "healthchecktimeout" not in without_timeout
        and without_timeout["healthcheckprogram"] == OURS["HealthCheckProgram"]
    )
    without_keys = read(
        diff_after(run.task("Ensure slurm.conf has the site's own HealthCheck settings back")).encode()
    )
    assert "healthcheckprogram" not in without_keys and without_keys["healthchecktimeout"] == "90"
