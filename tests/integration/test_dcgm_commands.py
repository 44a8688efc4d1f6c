"""`dltune audit --dcgm` and `dltune check --dcgm` as commands, on this host: DCGM cannot run here (no
GPU, no host engine), so `dcgmi` is replaced at its boundary, the program on PATH, by scripts that
print what dcgmi prints (tests/fixtures/real/dcgm_diag), exit as it exits, or hang ignoring SIGTERM as
a diagnostic stuck on a faulty GPU does. They record the argv they were given, so the tests see that
DCGM itself was told when to abort. The audit reads this host's gpu area (integration, not unit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dltune.cli import app
from dltune.probes.dcgm import CLIENT_GRACE_S, DCGM_TIMEOUT_S
from tests.real_corpus import CORPUS, load

GB10 = load(CORPUS / "dcgm_diag" / "dgx_spark_dcgm423_software_fail.txt").body
PASSING = load(CORPUS / "dcgm_diag" / "dcgm310_eight_gpus_real_output.txt").body


@pytest.fixture
def fake_dcgmi(tmp_path: Path) -> tuple[Path, Path]:
    """A directory with a `dcgmi` stand-in, and the file it records its argv in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    return bin_dir, tmp_path / "dcgmi-argv"


def write_dcgmi(bin_dir: Path, argv_log: Path, body: str) -> None:
    script = bin_dir / "dcgmi"
    script.write_text(f'#!/bin/sh\necho "$@" >> {argv_log}\n{body}\n')
    script.chmod(0o755)


def run_dltune(bin_dir: Path, *args: str, timeout: float = 60) -> tuple[int, list[dict[str, object]], float]:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "dltune.cli", *args, "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=timeout,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)["results"], time.monotonic() - start


def test_audit_dcgm_runs_level_one_and_reports_each_failed_test(
    fake_dcgmi: tuple[Path, Path], tmp_path: Path
) -> None:
    bin_dir, argv_log = fake_dcgmi
    (tmp_path / "out.json").write_text(GB10)
    write_dcgmi(bin_dir, argv_log, f"cat {tmp_path / 'out.json'}\nexit 226")
    rc, results, _ = run_dltune(bin_dir, "audit", "--only", "gpu", "--dcgm")
    by_id = {r["id"]: r for r in results}
    assert (
        rc == 1 and by_id["gpu.dcgm_software"]["status"] == "fail" and by_id["gpu.dcgm_software"]["critical"]
    )
    args = argv_log.read_text().split()
    assert args[:4] == ["diag", "-r", "1", "-j"] and args[4] == "--timeout" and 1 <= int(args[5]) <= 30


def test_a_hung_diagnostic_ends_within_the_audits_time(fake_dcgmi: tuple[Path, Path]) -> None:
    bin_dir, argv_log = fake_dcgmi
    write_dcgmi(bin_dir, argv_log, "trap '' TERM\nsleep 300")
    rc, results, seconds = run_dltune(bin_dir, "audit", "--only", "gpu", "--dcgm", "--timeout", "8")
    result = {r["id"]: r for r in results}["gpu.dcgm"]
    assert rc == 1 and result["status"] == "fail" and result["critical"]
    assert seconds < 20, f"the audit took {seconds:.1f} s with --timeout 8"
    told = argv_log.read_text().split()
    assert told[4] == "--timeout" and 1 <= int(told[5]) <= 8 - CLIENT_GRACE_S, (
        f"DCGM itself must be told to abort before the client gives up: {told}"
    )


def test_check_runs_the_asked_level_with_dcgms_own_timeout_then_asks_which_gpus_dcgm_sees(
    fake_dcgmi: tuple[Path, Path], tmp_path: Path
) -> None:
    """The stand-in dcgmi answers `discovery -l` with a published listing (8 A100s, NVIDIA/DCGM#83);
    this host's NVML has no GPU to compare it with, so the diagnostic's verdict stands."""
    bin_dir, argv_log = fake_dcgmi
    dcgmi_passing_with_a_listing(bin_dir, argv_log, tmp_path)
    _rc, results, _ = run_dltune(bin_dir, "check", "--no-bench", "--dcgm", "2", "--dcgm-timeout", "900")
    dcgm_results = [r for r in results if r["id"].startswith("gpu.dcgm")]
    assert [r["status"] for r in dcgm_results] == ["pass"]
    assert argv_log.read_text().splitlines() == ["diag -r 2 -j --timeout 900", "discovery -l"]


def dcgmi_passing_with_a_listing(bin_dir: Path, argv_log: Path, tmp_path: Path) -> None:
    """The stand-in dcgmi: a passing diagnostic, and for `discovery -l` a published listing (8 A100s,
    NVIDIA/DCGM#83)."""
    from tests.real_corpus import samples

    (tmp_path / "out.json").write_text(PASSING)
    listing = next(s for s in samples("dcgmi_discovery") if s.name == "dcgm83_a100_sxm4_80gb_eight")
    (tmp_path / "listing.txt").write_text(listing.body)
    write_dcgmi(
        bin_dir,
        argv_log,
        f'[ "$1" = discovery ] && exec cat {tmp_path / "listing.txt"}\ncat {tmp_path / "out.json"}',
    )


def test_check_gives_level_two_the_measured_default(fake_dcgmi: tuple[Path, Path], tmp_path: Path) -> None:
    bin_dir, argv_log = fake_dcgmi
    dcgmi_passing_with_a_listing(bin_dir, argv_log, tmp_path)
    run_dltune(bin_dir, "check", "--no-bench", "--dcgm", "2")
    assert argv_log.read_text().splitlines()[0].split()[4:] == ["--timeout", str(int(DCGM_TIMEOUT_S[2]))]


def test_check_without_its_bench_is_the_audit_in_one_envelope() -> None:
    outcome = CliRunner().invoke(app, ["check", "--no-bench", "--format", "json"])
    document = json.loads(outcome.stdout)
    ids = [r["id"] for r in document["results"]]
    assert "system.reboot_required" in ids and ids[-1] == "bench.run"
    assert document["results"][-1]["status"] == "skip" and "--no-bench" in document["results"][-1]["summary"]
    statuses = {r["status"] for r in document["results"]}
    assert outcome.exit_code == (1 if "fail" in statuses else 2 if "error" in statuses else 0)
