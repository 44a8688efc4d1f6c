#!/usr/bin/python3
"""Wire the slurm_tmpdir hooks into slurm.conf without losing a site's own Prolog/Epilog/TaskProlog.

slurm.conf takes one program per hook on every version this role supports, so a site's existing
hook is recorded in hooks.json and run by ours (chained), and slurm.conf's value then names ours.
slurm.conf is read and edited as Slurm reads it, as bytes (module_utils/slurm_conf): only the bytes of
the values Slurm uses change, and hooks.json's conf_edits keeps the bytes each had. A rerun recognises
its own hooks and keeps the recorded site hooks: the edit is idempotent. state=absent undoes it: each key
that still holds our value (hooks, and PrologFlags where Alloc was added) gets the site's bytes back (or
goes, if the site had none), giving the site its file byte for byte; then hooks.json is removed. Keys
that no longer hold ours are the site's and stay.
"""

from __future__ import annotations

import json
import os
from typing import Any

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
module: slurm_tmpdir_conf
short_description: Point slurm.conf's Prolog/Epilog/TaskProlog at dltune's hooks, chaining the site's
options:
  conf: {type: path, required: true, description: slurm.conf}
  hooks: {type: dict, required: true, description: prolog/epilog/task_prolog -> our program path}
  hooks_config: {type: path, required: true, description: JSON file our hooks read (site hooks etc.)}
  settings: {type: dict, default: {}, description: extra keys written into hooks_config}
  manage_conf: {type: bool, default: true, description: false where another host edits slurm.conf}
  site_hooks: {type: dict, default: null, description: "manage_conf false: the site hooks its editor found"}
  state: {type: str, default: present, choices: [present, absent], description: absent restores site hooks}
"""

KEYS = {"prolog": "Prolog", "epilog": "Epilog", "task_prolog": "TaskProlog"}
# slurm.conf(5): Alloc makes the Prolog run at allocation (salloc, sbatch), and Contain, DeferBatch,
# NoHold, ForceRequeueOnFail, RunInJob and X11 each "implicitly sets the Alloc flag".
ALLOC_FLAGS = {"alloc", "contain", "deferbatch", "forcerequeueonfail", "nohold", "runinjob", "x11"}


def runs_at_allocation(prolog_flags: str) -> bool:
    """The audit's staging.slurm_hooks decides the same (tests/unit/test_slurm_conf_parity.py)."""
    return bool(ALLOC_FLAGS.intersection(flag.strip().lower() for flag in prolog_flags.split(",")))


def parse(text: str) -> dict[str, str]:
    """Lower-cased key -> the value Slurm uses (the last one read), as the audit reads it."""
    return load("slurm.conf", text.encode("utf-8", "surrogateescape"), read=_no_includes).values()


def _no_includes(path: str) -> bytes:
    raise ConfError(f"{path}: not read")


def plan(
    conf_path: str, before: bytes, ours: dict[str, str], recorded: dict[str, str], edits: dict[str, dict]
) -> tuple[bytes, dict[str, str], list[str], dict[str, dict]]:
    """New slurm.conf bytes, the site hooks to chain, human notes about what changed, and the record of
    the edits (key -> {site: the bytes its value had, None where the site had none; ours})."""
    conf = load(conf_path, before)
    site_hooks: dict[str, str] = {}
    notes: list[str] = []
    wanted: dict[str, str] = {}
    for hook, key in KEYS.items():
        setting = conf.last(key)
        current = setting.value if setting else ""
        if current == ours[hook]:
            site = recorded.get(hook, "")
        elif any(ch in current for ch in ",*?["):
            raise ConfError(
                f"{key}={current} is a list or a glob: add {ours[hook]} to it yourself and set "
                f"slurm_tmpdir_manage_conf: false, or make {key} a single program"
            )
        else:
            site = current
            chained = f", chaining {site}" if site else ""
            notes.append(f"{key}: {current or '(none)'} -> {ours[hook]}{chained}")
        if site:
            site_hooks[hook] = site
        wanted[key] = ours[hook]
    flags_setting = conf.last("PrologFlags")
    flags = flags_setting.value if flags_setting else ""
    if not runs_at_allocation(flags):
        new_flags = ",".join([*[f for f in flags.split(",") if f], "Alloc"])
        notes.append(f"PrologFlags: {flags or '(none)'} -> {new_flags}")
        wanted["PrologFlags"] = new_flags
    after, replaced = set_values(conf, wanted)
    record = {key: dict(edit) for key, edit in edits.items()}
    for key, value in wanted.items():
        if key in replaced:  # a value not ours: the site's own (set since, where we had set it before)
            record[key] = {"site": replaced[key], "ours": value}
    return after, site_hooks, notes, record


def restore(conf_path: str, before: bytes, edits: dict[str, dict]) -> tuple[bytes, list[str]]:
    """slurm.conf with the bytes each edited key had given back where it still holds our value (the
    setting taken out where the site had none); a value changed since is the site's and stays."""
    conf = load(conf_path, before)
    ours = {key: edit["ours"] for key, edit in edits.items()}
    after = restore_values(conf, ours, {key: edit["site"] for key, edit in edits.items()})
    notes = [
        f"{key}: {edit['ours']} -> {edit['site'] or '(none)'}"
        for key, edit in edits.items()
        if (conf.last(key) is not None and conf.last(key).value == edit["ours"])
    ]
    return after, notes


def recorded_edits(previous: dict[str, Any], ours: dict[str, str]) -> dict[str, dict]:
    """The record of slurm.conf's edits in hooks.json; one of an earlier release (site_hooks only)
    reads as the hooks it took over."""
    edits = previous.get("conf_edits")
    if edits is None:
        site = previous.get("site_hooks", {})
        return {key: {"site": site.get(hook), "ours": ours[hook]} for hook, key in KEYS.items()}
    if not edits_shaped(edits):
        raise ConfError("conf_edits is not an object of key -> {site, ours}")
    return edits


def _write_atomically(path: str, content: bytes, like: os.stat_result | None) -> None:
    # hooks.json is read by the hooks as SlurmdUser.
    write_atomically(path, content, like, new_mode=0o644)


def _exit(
    module: AnsibleModule,
    conf: str,
    before: bytes,
    after: bytes,
    changed: bool,
    site_hooks: dict[str, str],
    notes: list[str],
) -> None:
    module.exit_json(
        changed=changed,
        conf_changed=after != before,
        site_hooks=site_hooks,
        notes=notes,
        diff={
            "before": before.decode("utf-8", "replace"),
            "after": after.decode("utf-8", "replace"),
            "before_header": conf,
            "after_header": conf,
        },
    )


def remove(
    module: AnsibleModule, p: dict[str, Any], target: str, edits: dict[str, dict], recorded: dict
) -> None:
    conf_before = conf_after = b""
    notes: list[str] = []
    if p["manage_conf"] and os.path.exists(target):
        conf_before = read_file(target)
        conf_after, notes = restore(target, conf_before, edits)
    conf_changed = conf_after != conf_before
    config_exists = os.path.exists(p["hooks_config"])
    if not module.check_mode:
        # slurm.conf first: hooks.json must outlive every slurm.conf line that still names our hooks.
        if conf_changed:
            _write_atomically(p["conf"], conf_after, os.stat(target))
        if config_exists:
            os.unlink(p["hooks_config"])
    _exit(module, p["conf"], conf_before, conf_after, conf_changed or config_exists, recorded, notes)


def read_hooks_config(path: str) -> dict[str, Any]:
    previous = read_json(path, "JSON")
    if previous is None:
        return {}
    if not isinstance(previous, dict) or not isinstance(previous.get("site_hooks", {}), dict):
        raise ConfError(f"{path} is not this role's record (an object with site_hooks): fix or remove it")
    return previous


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "conf": {"type": "path", "required": True},
            "hooks": {"type": "dict", "required": True},
            "hooks_config": {"type": "path", "required": True},
            "settings": {"type": "dict", "default": {}},
            "manage_conf": {"type": "bool", "default": True},
            "site_hooks": {"type": "dict", "default": None},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        },
        supports_check_mode=True,
    )
    p = module.params
    ours = {hook: str(p["hooks"][hook]) for hook in KEYS}
    try:  # before anything changes: a link to slurm.conf that the site's admin did not make is refused
        target = edit_target(p["conf"]) if p["manage_conf"] else p["conf"]
        previous = read_hooks_config(p["hooks_config"])
        recorded = dict(previous.get("site_hooks", {}))
        edits = recorded_edits(previous, ours)
    except ConfError as exc:
        module.fail_json(msg=f"{p['hooks_config']}: {exc}" if "conf_edits" in str(exc) else str(exc))
    except (UntrustedLink, OSError) as exc:
        module.fail_json(msg=f"{p['conf']}: {exc}")
    try:
        if p["state"] == "absent":
            remove(module, p, target, edits, recorded)
        conf_before = conf_after = b""
        notes: list[str] = []
        # A host that does not edit slurm.conf (configless, or one file shared by every host) chains the
        # site's hooks that the editing host found there: without them its jobs would skip the site's own.
        site_hooks = recorded if p["site_hooks"] is None or p["manage_conf"] else dict(p["site_hooks"])
        record = {key: edit for key, edit in edits.items() if "conf_edits" in previous}
        if p["manage_conf"]:
            if not os.path.exists(target):
                module.fail_json(
                    msg=f"slurm_tmpdir_conf={p['conf']} does not exist: is Slurm installed and configured "
                    "here? Where one host edits a shared slurm.conf (configless Slurm, or one file over NFS),"
                    " "
                    "name it in slurm_tmpdir_conf_writer."
                )
            conf_before = read_file(target)
            conf_after, site_hooks, notes, record = plan(target, conf_before, ours, recorded, edits)
        config = {**p["settings"], "site_hooks": site_hooks}
        if record:
            config["conf_edits"] = record
        config_text = json.dumps(config, indent=2, sort_keys=True) + "\n"
        config_changed = config != previous
        conf_changed = p["manage_conf"] and conf_after != conf_before
        if not module.check_mode:
            # hooks.json first: a slurm.conf that names our hooks must find the site hooks recorded.
            if config_changed:
                _write_atomically(p["hooks_config"], config_text.encode(), None)
            if conf_changed:
                _write_atomically(p["conf"], conf_after, os.stat(target))
    except (ConfError, UntrustedLink) as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or p['conf']}: {exc.strerror or exc}")
    _exit(module, p["conf"], conf_before, conf_after, config_changed or conf_changed, site_hooks, notes)


if __name__ == "__main__":
    main()
