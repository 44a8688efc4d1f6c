"""Role dltune's periodic audit (enabled in this scenario's converge): a systemd timer run as root
that leaves a Prometheus textfile node_exporter can parse and Ansible local facts playbooks can read."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def test_timer_is_enabled_and_active(host: Any) -> None:
    timer = host.service("dltune-audit.timer")
    assert timer.is_enabled and timer.is_running


def test_first_audit_ran_and_left_a_parsable_textfile(host: Any) -> None:
    prom = host.file("/var/lib/prometheus/node-exporter/dltune.prom")
    assert prom.exists and prom.mode == 0o644
    families = {f.name: f for f in text_string_to_metric_families(prom.content_string)}
    ids = {s.labels["check"] for s in families["dltune_check_status"].samples}
    assert {"storage.tmp_tmpfs", "system.reboot_required"} <= ids
    # No temporary file left beside it.
    assert host.check_output("ls -A /var/lib/prometheus/node-exporter") == "dltune.prom"


def test_local_facts_read_back_through_ansible_setup(host: Any) -> None:
    facts = host.ansible("setup", "filter=ansible_local", check=False)["ansible_facts"]["ansible_local"]
    summary = facts["dltune"]["summary"]
    tmp = next(r for r in facts["dltune"]["results"] if r["id"] == "storage.tmp_tmpfs")
    busy = "tmp_busy" in host.ansible.get_variables().get("group_names", [])
    # The handler ran the audit after the whole play: the facts describe the tuned node.
    assert tmp["status"] == ("warn" if busy else "pass")
    assert summary["tuned"] is True
    assert json.loads(host.file("/etc/ansible/facts.d/dltune.fact").content_string)["schema_version"] == 1
