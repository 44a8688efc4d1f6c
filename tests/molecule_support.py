"""Helpers shared by the molecule verifiers (they run on the controller against the containers)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
    report = json.loads(done.stdout)
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
    return PlaybookRun(done.returncode, failures, report["stats"][name]["changed"], results)


def audit_as_user(host: Any, *args: str) -> tuple[int, dict[tuple[str, str | None], dict[str, Any]]]:
    """`dltune audit --format json` as an ordinary user, as the contract promises it works."""
    cmd = host.run("runuser -u nobody -- dltune audit --format json " + " ".join(args))
    assert cmd.rc in (0, 1), f"dltune audit exited {cmd.rc}: {cmd.stderr}"
    return cmd.rc, {(r["id"], r["subject"]): r for r in json.loads(cmd.stdout)["results"]}
