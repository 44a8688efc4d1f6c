"""Helpers shared by the molecule verifiers (they run on the controller against the containers), and
the platform-skip accounting every verifier's conftest takes in by importing its two hooks:

    from tests.molecule_support import pytest_runtest_logreport, pytest_sessionfinish  # noqa: F401

A test meant for some nodes only calls `only_on(host, group=...)`; the run counts those skips and
fails when such a test ran on no node at all (a renamed group or platform would otherwise turn it
into a silent skip with a green run)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import testinfra
from xdist.scheduler import LoadScopeScheduling

PLATFORM_SKIP = "only on "
_platform_skipped: dict[str, str] = {}  # test (without its host parameter) -> why it skipped
_ran: set[str] = set()


def groups_of(host: Any) -> list[str]:
    return list(host.ansible.get_variables().get("group_names", []))


def only_on(host: Any, *, group: str, why: str, not_hostname: str | None = None) -> None:
    """Skip unless this host is in inventory `group` (and its name lacks `not_hostname`: tests that
    run once, on one of two nodes of a group). Counted: see the module's docstring."""
    if group not in groups_of(host) or (not_hostname and not_hostname in host.backend.get_hostname()):
        pytest.skip(f"{PLATFORM_SKIP}{group}: {why}")


class OneWorkerPerNode(LoadScopeScheduling):
    """pytest-xdist's scheduler for a verifier of several nodes (its conftest returns it from
    `pytest_xdist_make_scheduler`): the nodes are checked in parallel, each node's tests in file order
    on one worker (a verifier's last file may change its node, e.g. roll it back). A test's scope is
    the node of its first parameter, testinfra's host.

    Not `--dist loadgroup` with an `xdist_group` mark per node, as before: on pytest 9.2 that grouping
    silently stops (xdist still writes the group into the old `_nodeid` field;
    pytest-dev/pytest-xdist#1386), and a node's rollback ran beside its other tests."""

    def __init__(self, config: pytest.Config, log: Any, node_ids: list[str]) -> None:
        super().__init__(config, log)
        # A parameter id names the node and then the test's own parameters, joined by "-": node "n"
        # with parameter 1 reads as node "n-1" would. Such names are refused, never guessed.
        for node in node_ids:
            for other in node_ids:
                if other.startswith(f"{node}-"):
                    raise pytest.UsageError(f"nodes {node} and {other}: a node's name begins another's")
        self.node_ids = node_ids

    def _split_scope(self, nodeid: str) -> str:
        parameters = nodeid.partition("[")[2]
        for node in self.node_ids:
            if parameters == f"{node}]" or parameters.startswith(f"{node}-"):
                return node
        raise AssertionError(
            f"{nodeid}: no node of the inventory ({', '.join(self.node_ids)}) in its parameters"
        )


def one_worker_per_node(config: pytest.Config, log: Any) -> OneWorkerPerNode:
    """The scheduler above, for the hosts testinfra parametrizes the tests with (its own options)."""
    option = config.option
    hosts = testinfra.get_hosts(
        option.hosts.split(",") if option.hosts is not None else [None],
        connection=option.connection,
        ssh_config=option.ssh_config,
        ssh_identity_file=option.ssh_identity_file,
        sudo=option.sudo,
        sudo_user=option.sudo_user,
        ansible_inventory=option.ansible_inventory,
        force_ansible=option.force_ansible,
    )
    return OneWorkerPerNode(config, log, [host.backend.get_pytest_id() for host in hosts])


def _test_of(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and PLATFORM_SKIP in str(report.longrepr):
        _platform_skipped[_test_of(report.nodeid)] = str(report.longrepr)
    elif report.when == "call":
        _ran.add(_test_of(report.nodeid))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker sees its own nodes only; the controller receives every report
    nowhere = sorted(set(_platform_skipped) - _ran)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and _platform_skipped:
        reporter.write_line(
            f"platform skips: {len(_platform_skipped)} test(s) skip on some nodes; "
            f"{len(_platform_skipped) - len(nowhere)} of them ran on another"
        )
    if nowhere:
        if reporter is not None:
            for test in nowhere:
                reporter.write_line(f"RAN ON NO NODE: {test} ({_platform_skipped[test]})", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@dataclass
class PlaybookRun:
    rc: int
    failures: list[str]
    changed: int
    # task name -> this host's result, for the last task of that name
    results: dict[str, dict[str, Any]] = field(default_factory=dict)


def run_playbook(
    host: Any, playbook: Path, extra_vars: dict[str, Any], *, check: bool = False
) -> PlaybookRun:
    """Run a playbook against this one molecule host and read Ansible's JSON callback output."""
    name = host.backend.get_hostname()
    argv = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "--limit", name]
    argv += ["-e", json.dumps(extra_vars), str(playbook)]
    if check:
        argv.append("--check")
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"},
    )
    return replace(_host_run(json.loads(done.stdout), name), rc=done.returncode)


def run_playbook_per_case(
    host: Any, playbook: Path, cases: dict[str, dict[str, Any]], tmp_dir: Path
) -> dict[str, PlaybookRun]:
    """One run of ``playbook`` for many refusal cases on this one molecule node: each case is a host
    alias of the node (its connection, groups and variables, then the case's) run beside the others.
    A run of a role through the docker connection costs 15-30 s; the aliases pay it once.

    Only for runs that change nothing (refusals before any change), since the aliases act on one
    machine at once; the caller compares the node's state before and after. A case variable is a host
    variable here: play or role `vars` and a role's vars/main.yml win over it, so a case of such a
    variable (a test seam, a role parameter the play sets) needs run_playbook's -e instead; the
    caller's control cases show the variables did reach the roles."""
    name = host.backend.get_hostname()
    listed = subprocess.run(
        ["ansible-inventory", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "--list"],
        capture_output=True,
        text=True,
        check=True,
    )
    inventory = json.loads(listed.stdout)
    node_vars = inventory["_meta"]["hostvars"][name]
    groups = [group for group, body in inventory.items() if name in body.get("hosts", [])]
    aliases = {f"case-{index}": case for index, case in enumerate(cases)}
    hosts = {
        alias: {**node_vars, "ansible_host": node_vars.get("ansible_host", name), **cases[case]}
        for alias, case in aliases.items()
    }
    children = {
        group: {"hosts": dict.fromkeys(aliases)} for group in groups if group not in ("all", "ungrouped")
    }
    path = tmp_dir / "cases-inventory.yml"
    path.write_text(json.dumps({"all": {"hosts": hosts, "children": children}}))  # JSON is YAML
    done = subprocess.run(
        ["ansible-playbook", "-i", str(path), "--forks", str(len(aliases)), str(playbook)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"},
    )
    report = json.loads(done.stdout)
    return {case: _host_run(report, alias) for alias, case in aliases.items()}


def _host_run(report: dict[str, Any], name: str) -> PlaybookRun:
    """One host's part of ansible.builtin.json's report; its rc is 2 where the host failed or was
    unreachable (ansible-playbook's own code for a failed host), else 0."""
    failures, results = [], {}
    for play in report["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get(name, {})
            # role tasks are named "<role> : <task name>" in the JSON output
            results[task["task"]["name"].split(" : ", 1)[-1]] = result
            if not result.get("failed"):
                continue
            # A looped assert fails as "One or more items failed"; its message is in the failed item.
            items = [str(i.get("msg", "")) for i in result.get("results", []) if i.get("failed")]
            failures.append(" | ".join(items) if items else str(result.get("msg", "")))
    stats = report["stats"][name]
    rc = 2 if stats.get("failures") or stats.get("unreachable") else 0
    return PlaybookRun(rc, failures, stats["changed"], results)


def audit_report_as_user(host: Any, *args: str) -> tuple[int, dict[str, Any]]:
    """`dltune audit --format json` as an ordinary user, as the contract promises it works: the exit
    code and the envelope."""
    cmd = host.run("runuser -u nobody -- dltune audit --format json " + " ".join(args))
    assert cmd.rc in (0, 1), f"dltune audit exited {cmd.rc}: {cmd.stderr}"
    return cmd.rc, dict(json.loads(cmd.stdout))


def audit_as_user(host: Any, *args: str) -> tuple[int, dict[tuple[str, str | None], dict[str, Any]]]:
    """The audit as an ordinary user, its results by (id, subject)."""
    rc, report = audit_report_as_user(host, *args)
    return rc, {(r["id"], r["subject"]): r for r in report["results"]}
