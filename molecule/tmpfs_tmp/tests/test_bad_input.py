"""Bad input to tmpfs_tmp fails clearly, names the variable, and leaves the node untouched.

Runs the role again through bad_input.py, with wrong variables, against the jammy node, and reads
Ansible's JSON output: the failed task's message must name the variable and nothing may change.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.molecule_support import only_on

SCENARIO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("extra_vars", "named"),
    [
        ('{"tmpfs_tmp_size": "150%"}', "tmpfs_tmp_size=150%"),
        ('{"tmpfs_tmp_size": "0"}', "tmpfs_tmp_size=0"),
        ('{"tmpfs_tmp_size": "lots"}', "tmpfs_tmp_size=lots"),
        ('{"tmpfs_tmp_options": ["noatime", "size=50%"]}', "tmpfs_tmp_options"),
        ('{"tmpfs_tmp_live_mount": "sometimes"}', "tmpfs_tmp_live_mount"),
        ('{"tmpfs_tmp_options": ["noatime", "relatime"]}', "tmpfs_tmp_options=noatime,relatime is refused"),
        ('{"tmpfs_tmp_options": ["noatime", "nosuid,exec"]}', "the item 'nosuid,exec' holds a comma"),
        ('{"tmpfs_tmp_options": ["mode=1777", "mode=0755"]}', "'mode=1777' and 'mode=0755' contradict"),
    ],
)
def test_bad_input_is_refused_before_any_change(host: Any, extra_vars: str, named: str) -> None:
    only_on(host, group="tmp_clean", not_hostname="noble", why="run once, against the jammy node")
    name = host.backend.get_hostname()
    before = host.run(
        "sha256sum /etc/fstab /etc/dltune/expected.d/tmpfs_tmp.json && findmnt -no OPTIONS /tmp"
    )
    run = subprocess.run(
        [
            "ansible-playbook",
            "-i",
            os.environ["MOLECULE_INVENTORY_FILE"],
            "--limit",
            name,
            "-e",
            extra_vars,
            str(SCENARIO / "bad_input.yml"),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"},
    )
    assert run.returncode != 0, run.stdout[-3000:]
    report = json.loads(run.stdout)
    failures = [
        str(task["hosts"][name].get("msg", ""))
        for play in report["plays"]
        for task in play["tasks"]
        if task["hosts"].get(name, {}).get("failed")
    ]
    assert len(failures) == 1 and named in failures[0], failures
    assert report["stats"][name]["changed"] == 0
    after = host.run("sha256sum /etc/fstab /etc/dltune/expected.d/tmpfs_tmp.json && findmnt -no OPTIONS /tmp")
    assert after.stdout == before.stdout
