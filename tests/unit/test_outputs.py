"""Prometheus textfile and Ansible local facts: parsed back by a real Prometheus text parser and by
Ansible's own setup module, as node_exporter and playbooks would read them."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from dltune.cli import app
from dltune.model import Result, Status
from dltune.report import render_prometheus
from dltune.text import unescape
from tests.conftest import FIXTURES, REPO_ROOT


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def test_prometheus_output_of_a_fixture_tree_parses() -> None:
    out = CliRunner().invoke(
        app,
        [
            "audit",
            "--root",
            str(FIXTURES / "tmp_drift_managed"),
            "--format",
            "prometheus",
            "--only",
            "storage",
        ],
    )
    assert out.exit_code == 1
    parsed = families(out.stdout)
    status = {
        (labels["id"], labels["subject"]): labels["status"] for labels, _ in parsed["dltune_check_status"]
    }
    assert status[("storage.tmp_tmpfs", "/tmp")] == "fail"
    metrics = {(labels["id"], labels["metric"]): value for labels, value in parsed["dltune_check_metric"]}
    assert metrics[("storage.tmp_tmpfs", "size_bytes")] == 1048576 * 1024
    counts = {labels["status"]: value for labels, value in parsed["dltune_checks"]}
    assert counts["fail"] >= 1


def test_label_values_survive_quotes_backslashes_and_newlines() -> None:
    """The label is the subject as every output shows it (dltune.text: backslash and control characters
    escaped), exactly: the exposition format's own escaping round-trips it, and it maps back to the
    original bytes."""
    subject = '/mnt/a "b"\\c\nd'
    text = render_prometheus(
        [Result("storage.data_space", Status.WARN, "x", subject=subject)], datetime.now(timezone.utc)
    )
    ((labels, value),) = families(text)["dltune_check_status"]
    assert labels["subject"] == '/mnt/a "b"\\\\c\\x0ad' and value == 1
    assert unescape(labels["subject"]) == subject.encode()


def test_textfile_dir_is_written_atomically_and_readable(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        app,
        [
            "audit",
            "--root",
            str(FIXTURES / "tmp_tmpfs_ok"),
            "--format",
            "json",
            "--textfile-dir",
            str(tmp_path),
        ],
    )
    assert out.exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["dltune.prom"]  # no temporary file left behind
    prom = tmp_path / "dltune.prom"
    assert prom.stat().st_mode & 0o777 == 0o644
    assert "dltune_check_status" in families(prom.read_text())
    json.loads(out.stdout)  # stdout still carries the chosen format


def test_missing_textfile_dir_is_a_usage_error(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["audit", "--textfile-dir", str(tmp_path / "nope")])
    assert out.exit_code == 2 and "--textfile-dir" in out.output


def test_facts_file_is_read_back_by_ansible_setup(tmp_path: Path) -> None:
    facts = tmp_path / "dltune.fact"
    out = CliRunner().invoke(
        app,
        [
            "audit",
            "--root",
            str(FIXTURES / "tmp_drift_managed"),
            "--only",
            "storage",
            "--facts-file",
            str(facts),
        ],
    )
    assert out.exit_code == 1
    done = subprocess.run(
        [
            "ansible",
            "localhost",
            "-c",
            "local",
            "-m",
            "ansible.builtin.setup",
            "-a",
            f"filter=ansible_local fact_path={tmp_path}",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
        env={
            **os.environ,
            "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        },
    )
    result = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    dltune_facts = result["ansible_facts"]["ansible_local"]["dltune"]
    assert dltune_facts["schema_version"] == 1
    assert dltune_facts["summary"]["tuned"] is False
    assert "storage.tmp_tmpfs" in dltune_facts["summary"]["failed"]


def test_the_human_table_groups_thousands_of_one_finding_and_json_keeps_each() -> None:
    """A host with many container bind mounts: one row per check and status in the table, one
    result per mount in JSON (and so in Prometheus)."""
    import io

    from rich.console import Console

    from dltune.model import Result, Status
    from dltune.report import render_human, render_json

    results = [
        Result("storage.data_noatime", Status.WARN, f"/b/{i} (ext4) is mounted relatime", subject=f"/b/{i}")
        for i in range(5000)
    ] + [Result("system.reboot_required", Status.PASS, "no reboot pending")]
    out = io.StringIO()
    render_human(results, Console(file=out, width=200), "node1")
    text = out.getvalue()
    assert "5000 subjects" in text and "(and 4999 more: /b/1, /b/2, /b/3, ...)" in text
    assert text.count("storage.data_noatime") == 1 and "5000 warn" in text
    assert len(json.loads(render_json(results, "node1", datetime.now(timezone.utc)))["results"]) == 5001
