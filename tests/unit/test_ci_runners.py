"""The scripts CI's time depends on: tests/run_molecule.sh (which scenarios run beside which) and
tests/run_all.sh's late report (a run still going near CI's limit says where the time went).

run_molecule.sh runs here against a stand-in `molecule` on PATH that only records when each scenario
started and ended (and fails the one it is told to): what is tested is the schedule and the failure
accounting, not molecule. run_all.sh runs as CI runs it, with its own phases swapped for short ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from molecule.interpolation import Interpolator, TemplateWithDefaults

from tests.conftest import REPO_ROOT

FAKE_MOLECULE = """#!/usr/bin/env bash
# molecule test -s SCENARIO: record start and end, sleep (nvidia_driver the longest, as the real one
# is), fail where told.
scenario=$3
echo "start $scenario $(date +%s.%N)" >>"$RECORD"
echo "output of $scenario"
if [ "$scenario" = nvidia_driver ]; then sleep 3; else sleep 0.5; fi
echo "end $scenario $(date +%s.%N)" >>"$RECORD"
[ "$scenario" != "${FAIL:-}" ]
"""


def run_molecule(tmp_path: Path, scenarios: list[str], fail: str = "") -> tuple[int, str, dict[str, tuple]]:
    """tests/run_molecule.sh in a copy of the repository's layout under tmp_path: its exit code, its
    output, and each scenario's (start, end)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/run_molecule.sh").write_text((REPO_ROOT / "tests/run_molecule.sh").read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "molecule").write_text(FAKE_MOLECULE)
    (bin_dir / "molecule").chmod(0o755)
    record = tmp_path / "record"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD": str(record), "FAIL": fail}
    done = subprocess.run(["bash", "tests/run_molecule.sh", *scenarios], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    spans: dict[str, list[float]] = {}
    for line in record.read_text().splitlines():
        what, scenario, at = line.split()
        spans.setdefault(scenario, []).append(float(at))
        assert (what == "start") == (len(spans[scenario]) == 1)
    return done.returncode, done.stdout, {s: (a, b) for s, (a, b) in spans.items()}


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_nvidia_driver_runs_beside_the_others_which_run_one_at_a_time(tmp_path: Path) -> None:
    scenarios = ["data_disks", "nvidia_driver", "slurm_tmpdir", "tmpfs_tmp"]
    rc, out, spans = run_molecule(tmp_path, scenarios)
    assert rc == 0, out
    assert sorted(spans) == scenarios
    others = [s for s in scenarios if s != "nvidia_driver"]
    assert overlap(spans["nvidia_driver"], spans["data_disks"])
    # data_disks (six of the host's eight loop devices) never overlaps another of the rest.
    for i, first in enumerate(others):
        for second in others[i + 1 :]:
            assert not overlap(spans[first], spans[second]), (first, second)
    assert spans["data_disks"][1] <= spans["slurm_tmpdir"][0] <= spans["tmpfs_tmp"][0]
    for scenario in scenarios:
        assert f"output of {scenario}" in out and f"[time] molecule {scenario}:" in out
        log = tmp_path / f"build/logs/molecule-{scenario}.log"
        assert log.read_text() == f"output of {scenario}\n"
    assert (tmp_path / "build/logs/molecule-failed").read_text().strip() == ""


def test_a_failed_scenario_fails_the_run_after_every_other_ran(tmp_path: Path) -> None:
    scenarios = ["data_disks", "nvidia_driver", "slurm_tmpdir", "tmpfs_tmp"]
    rc, out, spans = run_molecule(tmp_path, scenarios, fail="data_disks")
    assert rc == 1
    assert sorted(spans) == scenarios  # the ones after it in its stream still ran
    assert "[time] molecule data_disks:" in out and "FAILED (rc 1)" in out
    assert (tmp_path / "build/logs/molecule-failed").read_text().split() == ["data_disks"]
    assert "molecule scenarios failed: data_disks" in out


def run_all_with(tmp_path: Path, phases: str, report_at: str) -> subprocess.CompletedProcess[str]:
    """tests/run_all.sh with its phases (from `phase venv` on) replaced by ``phases`` and no lab to
    bring down, read to the end of its output (as CI reads it) within a minute."""
    script = (REPO_ROOT / "tests/run_all.sh").read_text()
    head = script[: script.index("phase venv ")].replace("phase lab-down make -s lab-down || true", "true")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/run_all.sh").write_text(head + phases + "\nexit $status\n")
    env = {**os.environ, "DLTUNE_REPORT_AT": report_at}
    return subprocess.run(["bash", "tests/run_all.sh"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_a_run_past_the_report_time_says_the_phases_done_and_the_one_running(tmp_path: Path) -> None:
    phases = "phase alpha sleep 1\nphase beta false || status=1\nphase gamma sleep 8"
    done = run_all_with(tmp_path, phases, "4")
    assert done.returncode == 1
    late = done.stderr[done.stderr.index("=== still running after 4 s; phase times so far:") :]
    assert "alpha" in late and "beta" in late and "FAILED (rc 1)" in late
    assert "running: gamma (from " in late
    # The end's table has every phase, the one that was running too.
    table = done.stdout[done.stdout.index("Phase times:") :]
    assert all(name in table for name in ("alpha", "beta", "gamma"))


def test_a_run_that_ends_before_the_report_time_ends_at_once(tmp_path: Path) -> None:
    """The report's sleep is killed with the run and holds no descriptor of its output: a caller that
    reads the output to its end (CI does) is not kept waiting for it (else subprocess.run's one-minute
    timeout fails this test)."""
    done = run_all_with(tmp_path, "phase alpha sleep 1", "600")
    assert done.returncode == 0
    assert "still running" not in done.stderr
    assert "alpha" in done.stdout[done.stdout.index("Phase times:") :]


def test_make_test_leaves_the_molecule_tests_marked_slow_to_make_test_slow() -> None:
    """Each scenario's verifier deselects the tests marked slow unless DLTUNE_MOLECULE_MARKS says
    otherwise (molecule's own interpolation of molecule.yml), and `make test-slow` runs again exactly
    the scenarios that hold such tests, with every test."""
    interpolate = Interpolator(TemplateWithDefaults, {}).interpolate
    overridden = Interpolator(TemplateWithDefaults, {"DLTUNE_MOLECULE_MARKS": "slow or not slow"}).interpolate
    with_slow = set()
    for config in sorted((REPO_ROOT / "molecule").glob("*/molecule.yml")):
        text = config.read_text()
        options = yaml.safe_load(interpolate(text))["verifier"]["options"]
        assert options["m"] == "not slow", config
        assert yaml.safe_load(overridden(text))["verifier"]["options"]["m"] == "slow or not slow", config
        if any("mark.slow" in test.read_text() for test in config.parent.glob("tests/*.py")):
            with_slow.add(config.parent.name)
    assert {"nvidia_driver", "slurm_tmpdir"} <= with_slow
    planned = subprocess.run(["make", "-s", "-n", "test-slow"], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=60, check=True).stdout  # fmt: skip
    (line,) = [line for line in planned.splitlines() if "tests/run_molecule.sh" in line]
    assert line.startswith('DLTUNE_MOLECULE_MARKS="slow or not slow" ')
    assert set(line.split("tests/run_molecule.sh", 1)[1].split()) == with_slow


VERIFIER_TESTS = {
    "conftest.py": """
from tests.molecule_support import one_worker_per_node


def pytest_xdist_make_scheduler(config, log):
    return one_worker_per_node(config, log)
""",
    "test_first.py": """
import os
import time

import pytest


def record(host, name):
    with open(os.environ["RECORD"], "a") as out:
        out.write(f"{os.environ['PYTEST_XDIST_WORKER']} {host.backend.get_pytest_id()} {name}\\n")


@pytest.mark.parametrize("case", [1, 2, 3])
def test_refusal(host, case):
    record(host, f"refusal-{case}")
    time.sleep(0.2 if host.backend.get_pytest_id().endswith("-a") else 0.05)
""",
    "test_second.py": """
from test_first import record


def test_state(host):
    record(host, "state")
""",
    "test_zz_rollback.py": """
from test_first import record


def test_rollback(host):
    record(host, "rollback")
""",
}


def test_a_verifier_checks_each_node_on_one_worker_in_file_order(tmp_path: Path) -> None:
    """tests/molecule_support.py's scheduler (what nvidia_driver's verifier gives pytest-xdist): three
    workers, each node's tests on one of them in file order, the rollback last. The hosts are ssh://
    names that nothing connects to (the tests only record). Nodes whose names begin one another's
    (`n`, `n-1`: the ids of `n`'s tests with a parameter 1 and of `n-1`'s) are refused."""
    for name, text in VERIFIER_TESTS.items():
        (tmp_path / name).write_text(text)
    record = tmp_path / "record"
    hosts = "ssh://node-a,ssh://node-b,ssh://node-c"
    env = {**os.environ, "RECORD": str(record), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", f"--hosts={hosts}",
         "-c", "/dev/null", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs: dict[str, list[tuple[str, str]]] = {}
    for line in record.read_text().splitlines():
        worker, node, test = line.split()
        runs.setdefault(node, []).append((worker, test))
    assert sorted(runs) == ["ssh://node-a", "ssh://node-b", "ssh://node-c"]
    order = ["refusal-1", "refusal-2", "refusal-3", "state", "rollback"]
    for node, tests in runs.items():
        assert [test for _, test in tests] == order, (node, tests)
        assert len({worker for worker, _ in tests}) == 1, (node, tests)
    assert len({tests[0][0] for tests in runs.values()}) == 3, runs  # the nodes in parallel

    refused = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--hosts=ssh://n,ssh://n-1",
         "-c", "/dev/null", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "nodes ssh://n and ssh://n-1: a node's name begins another's" in refused.stdout + refused.stderr
