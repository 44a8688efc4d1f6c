#!/usr/bin/python3
"""Wire the slurm_tmpdir hooks into slurm.conf without losing a site's own Prolog/Epilog/TaskProlog.

slurm.conf takes one program per hook on every version this role supports, so a site's existing
hook is recorded in hooks.json and run by ours (chained), and the slurm.conf line then names ours.
A rerun recognises its own hooks and keeps the recorded site hooks: the edit is idempotent.
state=absent undoes it: each key that names our hook gets the recorded site hook back (or goes, if the
site had none), then hooks.json is removed; keys that no longer name ours are the site's and stay.
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


def parse(text: str) -> dict[str, tuple[int, str]]:
    """Lower-cased key -> (line index, value) of the last uncommented assignment (slurm.conf keys are
    case-insensitive and a later line wins)."""
    found: dict[str, tuple[int, str]] = {}
    for index, raw in enumerate(text.splitlines()):
        line = raw.split("#", 1)[0]
        match = LINE.match(line)
        # A value with blanks in it is several settings on one line (Slurm splits them at any
        # whitespace, tabs too), not a single program: left to the site, as the audit leaves it.
        if match and not any(ch.isspace() for ch in match.group(3)):
            found[match.group(2).lower()] = (index, match.group(3))
    return found


def plan(text: str, ours: dict[str, str], recorded: dict[str, str]) -> tuple[str, dict[str, str], list[str]]:
    """New slurm.conf text, the site hooks to chain, and human notes about what changed."""
    lines = text.splitlines()
    found = parse(text)
    site_hooks: dict[str, str] = {}
    notes: list[str] = []
    for hook, key in KEYS.items():
        current = found.get(key.lower(), (None, ""))[1]
        if current == ours[hook]:
            site = recorded.get(hook, "")
        elif any(ch in current for ch in ",*?["):
            raise ValueError(
                f"{key}={current} is a list or a glob: add {ours[hook]} to it yourself and set "
                f"slurm_tmpdir_manage_conf: false, or make {key} a single program"
            )
        else:
            site = current
            chained = f", chaining {site}" if site else ""
            notes.append(f"{key}: {current or '(none)'} -> {ours[hook]}{chained}")
        if site:
            site_hooks[hook] = site
        lines = _assign(lines, found, key, ours[hook])
    flags = found.get("prologflags", (None, ""))[1]
    flag_list = [f for f in flags.split(",") if f]
    if not runs_at_allocation(flags):
        new_flags = ",".join([*flag_list, "Alloc"])
        notes.append(f"PrologFlags: {flags or '(none)'} -> {new_flags}")
        lines = _assign(lines, found, "PrologFlags", new_flags)
    return "\n".join(lines) + "\n", site_hooks, notes


def restore(text: str, ours: dict[str, str], recorded: dict[str, str]) -> tuple[str, list[str]]:
    """slurm.conf with the site's recorded hooks back where ours are named (the line goes when the site
    had none); PrologFlags stays (Alloc is harmless, and the site may rely on it by now)."""
    lines = text.splitlines()
    found = parse(text)
    dropped: set[int] = set()
    notes: list[str] = []
    for hook, key in KEYS.items():
        at = found.get(key.lower())
        if at is None or at[1] != ours[hook]:
            continue
        site = recorded.get(hook, "")
        if site:
            lines[at[0]] = reassign(lines[at[0]], site)
        else:
            dropped.add(at[0])
        notes.append(f"{key}: {ours[hook]} -> {site or '(none)'}")
    kept = [line for index, line in enumerate(lines) if index not in dropped]
    return "\n".join(kept) + "\n", notes


def _assign(lines: list[str], found: dict[str, tuple[int, str]], key: str, value: str) -> list[str]:
    at = found.get(key.lower())
    new = list(lines)
    if at is None:
        new.append(f"{key}={value}")
        found[key.lower()] = (len(new) - 1, value)
    elif at[1] != value:
        new[at[0]] = reassign(new[at[0]], value)
    return new


def _write_atomically(path: str, content: str, like: os.stat_result | None) -> None:
    # hooks.json is read by the hooks as SlurmdUser.
    write_atomically(path, content, like, new_mode=0o644)


def _exit(
    module: AnsibleModule,
    conf: str,
    before: str,
    after: str,
    changed: bool,
    site_hooks: dict[str, str],
    notes: list[str],
) -> None:
    module.exit_json(
        changed=changed,
        conf_changed=after != before,
        site_hooks=site_hooks,
        notes=notes,
        diff={"before": before, "after": after, "before_header": conf, "after_header": conf},
    )


def remove(module: AnsibleModule, p: dict[str, Any], ours: dict[str, str], recorded: dict[str, str]) -> None:
    conf_before = conf_after = ""
    notes: list[str] = []
    if p["manage_conf"] and os.path.exists(p["conf"]):
        with open(p["conf"]) as handle:
            conf_before = handle.read()
        conf_after, notes = restore(conf_before, ours, recorded)
    conf_changed = conf_after != conf_before
    config_exists = os.path.exists(p["hooks_config"])
    if not module.check_mode:
        # slurm.conf first: hooks.json must outlive every slurm.conf line that still names our hooks.
        if conf_changed:
            _write_atomically(p["conf"], conf_after, os.stat(p["conf"]))
        if config_exists:
            os.unlink(p["hooks_config"])
    _exit(module, p["conf"], conf_before, conf_after, conf_changed or config_exists, recorded, notes)


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
    try:  # before anything changes: a link to slurm.conf that the site's admin did not make is refused
        edit_target(p["conf"])
    except (UntrustedLink, OSError) as exc:
        module.fail_json(msg=f"{p['conf']}: {exc}")
    ours = {hook: str(p["hooks"][hook]) for hook in KEYS}
    try:
        with open(p["hooks_config"]) as handle:
            previous = json.load(handle)
    except FileNotFoundError:
        previous = {}
    except ValueError as exc:
        module.fail_json(msg=f"{p['hooks_config']} is not JSON ({exc}): fix or remove it")
    site_hooks = previous.get("site_hooks", {}) if isinstance(previous, dict) else None
    if not isinstance(site_hooks, dict):
        module.fail_json(
            msg=f"{p['hooks_config']} is not this role's record (an object with site_hooks): fix or remove it"
        )
    recorded = dict(site_hooks)
    if p["state"] == "absent":
        remove(module, p, ours, recorded)

    conf_before = conf_after = ""
    notes: list[str] = []
    # A host that does not edit slurm.conf (configless, or one file shared by every host) chains the
    # site's hooks that the editing host found there: without them its jobs would skip the site's own.
    site_hooks = recorded if p["site_hooks"] is None or p["manage_conf"] else dict(p["site_hooks"])
    if p["manage_conf"]:
        try:
            with open(p["conf"]) as handle:
                conf_before = handle.read()
        except FileNotFoundError:
            module.fail_json(
                msg=f"slurm_tmpdir_conf={p['conf']} does not exist: is Slurm installed and configured here? "
                "Where one host edits a shared slurm.conf (configless Slurm, or one file over NFS), name it "
                "in slurm_tmpdir_conf_writer."
            )
        try:
            conf_after, site_hooks, notes = plan(conf_before, ours, recorded)
        except ValueError as exc:
            module.fail_json(msg=str(exc))
    config = {**p["settings"], "site_hooks": site_hooks}
    config_text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    config_changed = config != previous
    conf_changed = p["manage_conf"] and conf_after != conf_before
    if not module.check_mode:
        # hooks.json first: a slurm.conf that names our hooks must find the site hooks recorded.
        if config_changed:
            _write_atomically(p["hooks_config"], config_text, None)
        if conf_changed:
            _write_atomically(p["conf"], conf_after, os.stat(p["conf"]))
    _exit(module, p["conf"], conf_before, conf_after, config_changed or conf_changed, site_hooks, notes)


if __name__ == "__main__":
    main()
