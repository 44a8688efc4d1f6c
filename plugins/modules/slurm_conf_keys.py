#!/usr/bin/python3
"""Set single-valued slurm.conf keys (HealthCheckProgram, HealthCheckInterval, HealthCheckNodeState),
recording the bytes the site had, so that state=absent puts exactly those back.

slurm.conf is read and edited as Slurm reads it, as bytes (module_utils/slurm_conf): only the bytes of
the value Slurm uses change; a key set in a file slurm.conf Includes is refused with its file named. The
record is written before slurm.conf, and keeps the first values seen: a rerun never records dltune's own
values as the site's. slurm.conf is replaced by rename, keeping its owner and mode (and a link, a link).
"""

from __future__ import annotations

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dltune.cluster.plugins.module_utils.slurm_conf import (
    ConfError,
    UntrustedLink,
    edit_target,
    edits_shaped,
    load,
    read_file,
    read_json,
    restore_values,
    set_values,
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

# A value dltune writes: one word Slurm reads as it is (no quote, escape, comment or blank to read).
WORD = re.compile(r"^[^\s\\\"#]+$")
KEY = re.compile(r"^[A-Za-z0-9_.]+$")


def plan(
    before: bytes, conf_path: str, keys: dict[str, str], edits: dict[str, dict], state: str
) -> tuple[bytes, dict[str, dict]]:
    """(slurm.conf's new bytes, the record to keep: key -> {site: the bytes its value had, or None
    where the site had none; ours: the value written})."""
    conf = load(conf_path, before)
    if state == "absent":
        # Only a key that still holds our value goes back: a value changed since is the site's.
        ours = {key: edit["ours"] for key, edit in edits.items()}
        return restore_values(conf, ours, {key: edit["site"] for key, edit in edits.items()}), {}
    after, replaced = set_values(conf, keys)
    record = {key: dict(edit) for key, edit in edits.items()}
    for key, value in keys.items():
        if key in record:  # the first value seen stays the site's: a rerun never records ours as theirs
            record[key]["ours"] = value
        elif key in replaced:
            record[key] = {"site": replaced[key], "ours": value}
        else:  # the site had our value already: it stays the site's
            setting = conf.last(key)
            start, end = setting.value_span
            record[key] = {"site": before[start:end].decode("utf-8", "surrogateescape"), "ours": value}
    return after, record


def read_record(path: str, keys: dict[str, str]) -> dict[str, dict]:
    """The record as key -> {site, ours}; a record of an earlier release ({"site_values": {key:
    value}}) reads as the same. ConfError names the file where it is of another shape."""
    document = read_json(path, "the role's JSON record")
    if document is None:
        return {}
    edits = document.get("edits", {}) if isinstance(document, dict) else None
    if isinstance(document, dict) and "edits" not in document and "site_values" in document:
        old = document["site_values"]
        edits = {k: {"site": v, "ours": keys.get(k)} for k, v in old.items()} if isinstance(old, dict) else []
    if not edits_shaped(edits):
        raise ConfError(
            f"{path} is not the role's record (an object with edits: key -> site, ours): fix or remove it"
        )
    return edits


def _write_atomically(path: str, content: bytes, like: os.stat_result | None) -> None:
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
    keys = {str(k): str(v) for k, v in p["keys"].items()}
    bad = [f"{k}={v}" for k, v in keys.items() if not KEY.match(k) or not WORD.match(v)]
    if bad:
        module.fail_json(msg=f"slurm.conf values must be single words: {', '.join(bad)}")
    try:  # before anything changes: a link to slurm.conf that the site's admin did not make is refused
        target = edit_target(p["conf"])
        edits = read_record(p["record"], keys)
        if p["state"] == "absent" and not edits:
            module.exit_json(changed=False, msg="no record: nothing was set by this role")
        if not os.path.exists(target):
            module.fail_json(
                msg=f"slurm_healthcheck_conf={p['conf']} does not exist: is Slurm configured here?"
            )
        before = read_file(target)
        after, record = plan(before, target, keys, edits, p["state"])
    except (ConfError, UntrustedLink) as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{p['conf']}: {exc.strerror or exc}")
    record_changed = record != edits
    if not module.check_mode:
        try:
            if p["state"] == "present" and record_changed:
                text = json.dumps({"edits": record}, indent=2, sort_keys=True) + "\n"
                _write_atomically(p["record"], text.encode(), None)
            if after != before:
                _write_atomically(p["conf"], after, os.stat(target))
            if p["state"] == "absent" and os.path.exists(p["record"]):
                os.unlink(p["record"])
        except (ConfError, UntrustedLink) as exc:
            module.fail_json(msg=str(exc))
        except OSError as exc:
            module.fail_json(msg=f"{p['record']}: {exc.strerror or exc}")
    shown = {key: edit["site"] for key, edit in (edits or record).items()}
    module.exit_json(
        changed=after != before or record_changed,
        conf_changed=after != before,
        site_values=shown,
        diff={
            "before": before.decode("utf-8", "replace"),
            "after": after.decode("utf-8", "replace"),
            "before_header": p["conf"],
            "after_header": p["conf"],
        },
    )


if __name__ == "__main__":
    main()
