"""Prometheus textfile and Ansible local facts: parsed back by a real Prometheus text parser and by
Ansible's own setup module, as node_exporter and playbooks would read them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from dltune import __version__
from dltune.cli import app
from dltune.model import Result, Status
from dltune.outputs.prometheus import last_success_of, render_prometheus
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
    # A state set: every status a series, the current one 1.
    tmp = {
        labels["status"]: value
        for labels, value in parsed["dltune_check_status"]
        if labels["check"] == "storage.tmp_tmpfs" and labels.get("mountpoint") == "/tmp"
    }
    assert tmp == {"pass": 0.0, "warn": 0.0, "fail": 1.0, "error": 0.0, "skip": 0.0}
    # One metric per measurement, its unit in the name, labelled as node_exporter labels the mount.
    ((labels, size),) = parsed["dltune_storage_size_bytes"]
    assert labels == {"check": "storage.tmp_tmpfs", "mountpoint": "/tmp"} and size == 1048576 * 1024
    counts = {labels["status"]: value for labels, value in parsed["dltune_checks"]}
    assert counts["fail"] >= 1
    ((build, one),) = parsed["dltune_build_info"]
    assert one == 1 and build["version"] == __version__ and build["metrics_version"] == "3"


GPU_UUID = "GPU-416fcfbe-0a03-edba-6935-b6410d25ea7e"  # the lab's H200, tests/fixtures/real/bench/


def test_gpu_results_join_dcgm_exporter_on_gpu_and_uuid_in_base_units() -> None:
    """DCGM exporter labels a GPU `gpu` (NVML index) and `UUID`: dltune's series carry the same, so a
    PromQL `on(UUID)` joins them; watts, degrees Celsius and seconds are the metrics' units."""
    results = [
        Result(
            "gpu.thermal_power",
            Status.PASS,
            "38 C, 79 W",
            subject=f"0:{GPU_UUID}",
            metrics={"power_w": 79.0, "temperature_c": 38.0},
        ),
        Result("nfs.responsive", Status.PASS, "ok", subject="/mnt/nfs0", metrics={"statfs_seconds": 0.012}),
        Result("storage.nvme_health", Status.PASS, "ok", subject="/dev/nvme0", metrics={"media_errors": 0.0}),
        Result("network.vip_routes", Status.WARN, "x", subject="10.21.115.6"),
        Result("bench.memory", Status.PASS, "x", subject="cuda:0:device copy", metrics={"gb_s": 4168.1}),
    ]
    parsed = families(render_prometheus(results, datetime.now(timezone.utc)))
    assert parsed["dltune_gpu_power_watts"] == [
        ({"check": "gpu.thermal_power", "gpu": "0", "UUID": GPU_UUID}, 79.0)
    ]
    assert parsed["dltune_gpu_temperature_celsius"][0][1] == 38.0
    assert parsed["dltune_nfs_statfs_seconds"] == [
        ({"check": "nfs.responsive", "mountpoint": "/mnt/nfs0"}, 0.012)
    ]
    assert parsed["dltune_storage_media_errors"] == [
        ({"check": "storage.nvme_health", "device": "nvme0"}, 0.0)
    ]
    ((labels, rate),) = parsed["dltune_bench_bytes_per_second"]
    assert labels == {"check": "bench.memory", "subject": "cuda:0:device copy"}
    assert rate == pytest.approx(4168.1e9)
    vip = {
        labels["status"]
        for labels, value in parsed["dltune_check_status"]
        if labels.get("vip") == "10.21.115.6" and value
    }
    assert vip == {"warn"}


def test_promtool_accepts_the_textfile(tmp_path: Path) -> None:
    """Prometheus's own linter (`promtool check metrics`, Debian's prometheus package) on a real
    audit's textfile: names, units, HELP and TYPE as Prometheus wants them."""
    promtool = shutil.which("promtool")
    if promtool is None:
        assert not os.environ.get("CI"), "promtool is not installed (Debian package prometheus)"
        pytest.skip("promtool is not installed (apt install prometheus)")
    out = CliRunner().invoke(
        app, ["audit", "--root", str(FIXTURES / "tmp_drift_managed"), "--format", "prometheus"]
    )
    linted = subprocess.run(
        [promtool, "check", "metrics"], input=out.stdout, capture_output=True, text=True, check=False
    )
    assert linted.returncode == 0 and not linted.stdout.strip() and not linted.stderr.strip(), linted


def test_last_success_is_kept_across_an_audit_with_an_error() -> None:
    """A run whose checks all gave a verdict is a success; a run with an error keeps the last success
    the former textfile recorded (so `time() - last success` grows and its alert can fire)."""
    ok = render_prometheus(
        [Result("gpu.present", Status.PASS, "8 GPUs answer")], datetime.fromtimestamp(1000, timezone.utc)
    )
    assert last_success_of(ok) == 1000.0
    broken = [Result("system.audit_timeout", Status.ERROR, "the GPU probe hung")]
    later = render_prometheus(broken, datetime.fromtimestamp(2000, timezone.utc), last_success_of(ok))
    assert last_success_of(later) == 1000.0
    assert families(later)["dltune_audit_last_run_timestamp_seconds"] == [({}, 2000.0)]
    # Never a success yet: no series rather than a zero (which would read as 1970).
    assert "last_success" not in render_prometheus(broken, datetime.now(timezone.utc))


def test_label_values_survive_quotes_backslashes_and_newlines() -> None:
    """The label is the subject as every output shows it (dltune.text: backslash and control characters
    escaped), exactly: the exposition format's own escaping round-trips it, and it maps back to the
    original bytes."""
    subject = '/mnt/a "b"\\c\nd'
    text = render_prometheus(
        [Result("storage.data_space", Status.WARN, "x", subject=subject)], datetime.now(timezone.utc)
    )
    (warn,) = [(labels, value) for labels, value in families(text)["dltune_check_status"] if value == 1]
    assert warn[0]["mountpoint"] == '/mnt/a "b"\\\\c\\x0ad' and warn[0]["status"] == "warn"
    assert unescape(warn[0]["mountpoint"]) == subject.encode()


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
    # The next run finds this one's last success in the file it replaces.
    assert last_success_of(prom.read_text()) is not None
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
    from dltune.outputs.human import render_human
    from dltune.outputs.report import render_json

    results = [
        Result("storage.data_noatime", Status.WARN, f"/b/{i} (ext4) is mounted relatime", subject=f"/b/{i}")
        for i in range(5000)
    ] + [Result("system.reboot_required", Status.PASS, "no reboot pending")]
    out = io.StringIO()
    render_human(results, Console(file=out, width=200), "node1")
    text = out.getvalue()
    assert "5000 subjects" in text and "(and 4999 more: /b/1, /b/2, /b/3, ...)" in text
    assert text.count("storage.data_noatime") == 1 and "5000 warnings, 1 passed" in text
    assert len(json.loads(render_json(results, "node1", datetime.now(timezone.utc)))["results"]) == 5001


def _facts_summary(tmp_path: Path, fixture: str) -> dict[str, object]:
    facts = tmp_path / f"{fixture}.fact"
    out = CliRunner().invoke(
        app, ["audit", "--root", str(FIXTURES / fixture), "--only", "storage", "--facts-file", str(facts)]
    )
    assert out.exit_code in (0, 1), out.output
    summary: dict[str, object] = json.loads(facts.read_text())["summary"]
    return summary


def test_tuned_means_a_role_applied_its_tuning_and_nothing_fails(tmp_path: Path) -> None:
    """A node no role ever touched passed the storage checks and was called `tuned: true`: now only a
    node with a role's record (its manifest fragment) and no fail or error is tuned."""
    managed = _facts_summary(tmp_path, "data_ok_managed")
    assert managed["roles_applied"] == ["data_disks"]
    assert managed["tuned"] is managed["passing"] is True
    untouched = _facts_summary(tmp_path, "data_relatime_unmanaged")
    assert untouched["roles_applied"] == [] and untouched["passing"] is True and untouched["tuned"] is False


REAL_PROMETHEUS = FIXTURES / "real" / "prometheus"


@pytest.mark.parametrize(
    "sample", sorted((REAL_PROMETHEUS / "dcgm_exporter").glob("*.txt")), ids=lambda p: p.stem
)
def test_a_gpu_result_carries_the_labels_dcgm_exporter_gives_that_gpu(sample: Path) -> None:
    """Real dcgm-exporter output: for each GPU it names, a dltune result about that GPU (subject
    "<index>:<UUID>") gets exactly its `gpu` and `UUID` label values, so `on(gpu, UUID)` joins them."""
    from dltune.outputs.prometheus import entity_labels
    from tests.real_corpus import load

    seen = set()
    for _, series in families(load(sample).body).items():
        for labels, _value in series:
            gpu = {"gpu": labels["gpu"], "UUID": labels["UUID"]}
            assert entity_labels(f"{gpu['gpu']}:{gpu['UUID']}") == gpu
            seen.add(gpu["UUID"])
    assert seen


def test_the_textfile_of_a_real_h200_audit_is_what_the_rules_and_dashboard_read() -> None:
    """dltune's own textfile from a real GPU (tests/fixtures/real/prometheus/): the GPU's series carry
    gpu and UUID as dcgm-exporter does, every check is a full state set, and the build is labelled."""
    parsed = families((REAL_PROMETHEUS / "dltune_h200_textfile.prom").read_text())
    ((labels, watts),) = parsed["dltune_gpu_power_watts"]
    assert labels["gpu"] == "0" and re.fullmatch(
        r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", labels["UUID"]
    )
    assert 20 < watts < 700
    per_check: dict[tuple[tuple[str, str], ...], set[str]] = {}
    for series, _value in parsed["dltune_check_status"]:
        key = tuple(sorted((k, v) for k, v in series.items() if k != "status"))
        per_check.setdefault(key, set()).add(series["status"])
    assert per_check and all(
        statuses == {"pass", "warn", "fail", "error", "skip"} for statuses in per_check.values()
    )
    assert parsed["dltune_build_info"][0][0]["metrics_version"] == "2"
