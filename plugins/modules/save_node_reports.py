#!/usr/bin/python3
"""Documentation of the save_node_reports action (plugins/action/save_node_reports.py): it runs on the
controller only, so this module is never executed; ansible-doc and ansible-lint read it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: save_node_reports
short_description: Write every node's dltune report into the controller's report directory at once
description:
  - One task for the whole play instead of a copy per node; each file is written beside its final name
    and renamed over it relative to the directory (a link there is replaced, never followed).
  - Runs on the controller, whatever the task's host; never reports a change.
options:
  dir:
    type: str
    required: true
    description: The report directory on the controller; it must exist and must not be a link.
  suffix:
    type: str
    required: true
    choices: [.audit.json, .bench.json, .multinode.bench.json]
    description: Each file is named after its inventory host and this suffix.
  problems:
    type: dict
    required: true
    description:
      - "Every inventory host to what kept it from reporting, empty when nothing did; a problem is saved
        as C({\"problem\": ...}), which dltune report shows as a node without a report."
  outputs:
    type: dict
    description: Inventory host to its dltune output, saved as it came where the host has no problem.
attributes:
  check_mode: {support: full, description: Nothing is written in check mode.}
"""
