"""The launcher's decision about a data-parallel run whose worker dies after rank 0 wrote its
result (gloo's teardown aborted 5 runs in 20 on these machines: "terminate called without an active
exception"). torchrun itself is replaced here by a stand-in interpreter that behaves as such a run
ends: it writes rank 0's result where the launcher asked, then exits as an aborted worker makes
torchrun exit. The real run is tests/integration/test_bench_cpu.py's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dltune.bench import run

RESULT = {"world": 2, "backend": "gloo", "bytes": 1 << 24, "seconds": 0.01, "images_per_s_total": 50.0}


def stand_in(tmp_path: Path, writes_result: bool) -> Path:
    script = tmp_path / "torchrun-stand-in"
    body = (
        "import json, sys\n"
        "out = sys.argv[sys.argv.index('--out') + 1]\n"
        + (f"open(out, 'w').write(json.dumps({RESULT!r}))\n" if writes_result else "")
        + "sys.stderr.write('Traceback (most recent call last):\\nRuntimeError: worker own error\\n'"
        " + 'torchrun summary\\n' * 400)\n"
        "sys.exit(134)\n"
    )
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(0o755)
    return script


SIZE = {"model": "resnet18", "batch": 8, "image_size": 64, "steps": 5, "warmup": 2}


@pytest.mark.parametrize("writes_result", [True, False])
def test_a_result_rank_0_completed_is_taken_and_a_worker_error_without_one_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes_result: bool
) -> None:
    monkeypatch.setattr(run.sys, "executable", str(stand_in(tmp_path, writes_result)))
    numbers, error = run.start_data_parallel(["cpu"], SIZE, timeout=60)
    if writes_result:
        assert error is None and numbers == json.loads(json.dumps(RESULT))
    else:
        assert numbers is None and error is not None and error.status.value == "error"
        assert "RuntimeError: worker own error" in error.evidence["stderr"]
