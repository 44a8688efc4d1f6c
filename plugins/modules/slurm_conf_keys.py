#!/usr/bin/python3
"""Set single-valued slurm.conf keys (HealthCheckProgram, HealthCheckInterval, HealthCheckNodeState),
recording what the site had, so that state=absent puts exactly that back.

slurm.conf keys are case-insensitive and the last assignment wins (as slurm_tmpdir_conf reads them;
tests/unit/test_slurm_healthcheck_role.py holds the two readers to the same answers). The record is
written before slurm.conf, and keeps the first values seen: a rerun never records dltune's own values
as the site's. slurm.conf is replaced by rename, keeping its owner and mode.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dltune.cluster.plugins.module_utils.slurm_conf import (
    LINE,
    UntrustedLink,
    edit_target,
    reassign,
    write_atomically,
)

DOCUMENTATION = r"""
module: slurm_conf_keys
short_description: Set slurm.conf keys, recording the site's values for a rollback
options:
  conf: {type: path, required: true, description: slurm.conf}
  keys: {type: dict, required: true, description: key -> value (single words)}
  record: {type: path, required: true, description: JSON file keeping the site's values}
  state: {type: str, default: present, choices: [present, absent], description: absent restores}
"""


def assignments(text: str) -> dict[str, tuple[int, str]]:
    """Lower-cased key -> (line index, value) of its last uncommented assignment."""
    found: dict[str, tuple[int, str]] = {}
    for index, raw in enumerate(text.splitlines()):
        match = LINE.match(raw.split("#", 1)[0])
        if match and " " not in match.group(3):
            found[match.group(2).lower()] = (index, match.group(3))
    return found


def set_keys(text: str, wanted: dict[str, str | None]) -> str:
    """``text`` with each key's last assignment set to its value, the rest of its line as the site wrote
    it (appended where absent; a None value removes the key's assignments, as a site that never set it
    had none)."""
    lines = text.splitlines()
    for key, value in wanted.items():
        found = assignments("\n".join(lines))
        at = found.get(key.lower())
        if value is None:
            lines = [
                line for line in lines
                if not ((m := LINE.match(line.split("#", 1)[0])) and m.group(2).lower() == key.lower())
            ]  # fmt: skip
        elif at is None:
            lines.append(f"{key}={value}")
        elif at[1] != value:
            lines[at[0]] = reassign(lines[at[0]], value)
    return "\n".join(lines) + "\n"


def plan(
    text: str, keys: dict[str, str], recorded: dict[str, str | None], state: str
) -> tuple[str, dict[str, str | None]]:
    """(new slurm.conf, the record to keep)."""
    found = assignments(text)
    if state == "absent":
        # Only a key that still holds our value goes back: a value changed since is the site's.
        back = {k: v for k, v in recorded.items() if found.get(k.lower(), (0, None))[1] == keys.get(k)}
        return set_keys(text, back), {}
    record = dict(recorded)
    for key in keys:
        record.setdefault(key, found[key.lower()][1] if key.lower() in found else None)
    return set_keys(text, dict(keys)), record


def _write_atomically(path: str, content: str, like: os.stat_result | None) -> None:
    # The record of the site's values is root's alone.
    write_atomically(path, content, like, new_mode=0o600)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "conf": {"type": "path", "required": True},
            "keys": {"type": "dict", "required": True},
            "record": {"type": "path", "required": True},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:  # before anything changes: a link to slurm.conf that the site's admin did not make is refused
        edit_target(p["conf"])
    except (UntrustedLink, OSError) as exc:
        module.fail_json(msg=f"{p['conf']}: {exc}")
    keys = {str(k): str(v) for k, v in p["keys"].items()}
    bad = [f"{k}={v}" for k, v in keys.items() if not LINE.match(f"{k}={v}") or " " in v or "#" in v or not v]
    if bad:
        module.fail_json(msg=f"slurm.conf values must be single words: {', '.join(bad)}")
    try:
        with open(p["record"]) as handle:
            recorded: dict[str, Any] = json.load(handle).get("site_values", {})
    except FileNotFoundError:
        recorded = {}
    except (ValueError, AttributeError) as exc:
        module.fail_json(msg=f"{p['record']} is not the role's JSON record ({exc}): fix or remove it")
    if p["state"] == "absent" and not recorded:
        module.exit_json(changed=False, msg="no record: nothing was set by this role")
    try:
        with open(p["conf"]) as handle:
            before = handle.read()
    except FileNotFoundError:
        module.fail_json(msg=f"slurm_healthcheck_conf={p['conf']} does not exist: is Slurm configured here?")
    after, record = plan(before, keys, recorded, p["state"])
    record_changed = record != recorded
    if not module.check_mode:
        if p["state"] == "present" and record_changed:
            _write_atomically(
                p["record"], json.dumps({"site_values": record}, indent=2, sort_keys=True) + "\n", None
            )
        if after != before:
            _write_atomically(p["conf"], after, os.stat(p["conf"]))
        if p["state"] == "absent" and os.path.exists(p["record"]):
            os.unlink(p["record"])
    module.exit_json(
        changed=after != before or record_changed,
        conf_changed=after != before,
        site_values=recorded or record,
        diff={"before": before, "after": after, "before_header": p["conf"], "after_header": p["conf"]},
    )


if __name__ == "__main__":
    main()
