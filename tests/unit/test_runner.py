"""The command runner seam: real subprocesses without a shell, and recorded outputs for tests."""

from __future__ import annotations

import json

from dltune.probes.runner import RecordedRunner, SubprocessRunner


def test_subprocess_runner_runs_argv_and_reports_missing_programs() -> None:
    ok = SubprocessRunner().run(["echo", "a b;c"])
    assert ok.ok and ok.stdout == "a b;c\n"  # no shell: the ; is data
    missing = SubprocessRunner().run(["dltune-no-such-program"])
    assert missing.returncode == 127 and not missing.ok


def test_subprocess_runner_times_out_as_data() -> None:
    slow = SubprocessRunner().run(["sleep", "5"], timeout=0.2)
    assert slow.returncode == 124 and "timed out" in slow.stderr


def test_recorded_runner_answers_from_a_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec = tmp_path / "commands.json"
    rec.write_text(json.dumps({"ip -j route": {"stdout": "[]"}, "false": {"returncode": 1}}))
    runner = RecordedRunner.from_file(rec)
    assert runner.run(["ip", "-j", "route"]).stdout == "[]"
    assert runner.run(["false"]).returncode == 1
    assert runner.run(["nvidia-smi"]).returncode == 127
    assert runner.calls == [("ip", "-j", "route"), ("false",), ("nvidia-smi",)]
