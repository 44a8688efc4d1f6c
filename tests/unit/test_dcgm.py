"""DCGM's diagnostic: `dcgmi diag` outputs (tests/fixtures/real/dcgm_diag) through the probe, with a
recorded runner, and the gpu.dcgm check. The commands that run it, with a stand-in `dcgmi` on PATH,
are in tests/integration/test_dcgm_commands.py."""

from __future__ import annotations

import json

import pytest

from dltune.checks.dcgm import dcgm, result_id
from dltune.model import Result, Status
from dltune.probes.dcgm import DCGM_TIMEOUT_S, parse_dcgm_diag, run_dcgm_diag
from dltune.probes.runner import RecordedRunner
from dltune.snapshot import DcgmDiag, DcgmTest, NvmlState, Snapshot
from tests.real_corpus import CORPUS, load

GB10 = load(CORPUS / "dcgm_diag" / "dgx_spark_dcgm423_software_fail.txt").body
PASSING = load(CORPUS / "dcgm_diag" / "dcgm310_eight_gpus_real_output.txt").body


def judged(diag: DcgmDiag) -> dict[str, Result]:
    return {r.id: r for r in dcgm(Snapshot(root="/", dcgm=diag))}


def recorded(stdout: str = "", returncode: int = 0, stderr: str = "") -> RecordedRunner:
    return RecordedRunner(
        {"dcgmi diag -r 1 -j --timeout 30": {"stdout": stdout, "returncode": returncode, "stderr": stderr}}
    )


def test_not_asked_says_nothing_and_not_installed_skips() -> None:
    assert dcgm(Snapshot(root="/")) == []
    (result,) = dcgm(Snapshot(root="/", dcgm=run_dcgm_diag(RecordedRunner({}), 1, 30)))
    assert result.status is Status.SKIP and "not installed" in result.summary


def test_a_diagnostic_that_does_not_answer_is_critical() -> None:
    """Without NVML's answer (none probed here, as in `dltune check` before it asks again), a hang is
    the GPU's until shown otherwise."""
    result = judged(run_dcgm_diag(recorded(returncode=124), 1, 30))["gpu.dcgm"]
    assert result.status is Status.FAIL and result.critical and "did not finish" in result.summary


ANSWERING = NvmlState(available=True, driver_version="580.95.05")


@pytest.mark.parametrize(
    ("nvml", "critical"),
    [
        (ANSWERING, False),
        (NvmlState(available=True, hung=True, error="NVML did not answer within 10 s"), True),
        (NvmlState(available=False, error="NVML Shared Library Not Found"), True),
        (NvmlState(available=False, error="not probed"), True),
    ],
)
def test_a_diagnostic_out_of_time_is_critical_only_when_nvml_does_not_answer_either(
    nvml: NvmlState, critical: bool
) -> None:
    """DCGM that runs out of time on a node whose GPUs still answer NVML ran out of time, not the GPU:
    a fail (the diagnostic did not finish) that must not drain a healthy node, naming the longer limit.
    A hung NVML as well keeps it critical."""
    for diag in (
        run_dcgm_diag(recorded(returncode=124), 1, 30),  # the client killed at the grace
        run_dcgm_diag(recorded("Error: The diagnostic timed out.\n", 226), 1, 30),  # DCGM's own abort
    ):
        assert diag.timed_out, diag
        (result,) = dcgm(Snapshot(root="/", dcgm=diag, nvml=nvml))
        assert result.status is Status.FAIL and result.critical is critical, result
        assert result.evidence["nvml_answers"] is (not critical)
        if not critical:
            assert "--dcgm-timeout" in (result.remedy or "") and "NVML still answers" in result.summary


def test_default_limits_are_above_the_published_measurements() -> None:
    """8-GPU nodes took up to 10.5 min at level 2 and 2.25 h at level 4 (README, DCGM section): each
    default must leave a healthy node room to finish."""
    assert DCGM_TIMEOUT_S[2] >= 900 > 10.5 * 60
    assert DCGM_TIMEOUT_S[3] >= 2700
    assert DCGM_TIMEOUT_S[4] >= 9000 > 2.25 * 3600
    assert DCGM_TIMEOUT_S[1] < DCGM_TIMEOUT_S[2] < DCGM_TIMEOUT_S[3] < DCGM_TIMEOUT_S[4]


def test_a_message_that_only_repeats_the_option_is_not_a_timeout() -> None:
    diag = run_dcgm_diag(recorded("Error: bad argument --timeout\n", 255), 1, 30)
    assert not diag.timed_out and diag.error is not None


def test_dcgm_that_cannot_run_fails_and_an_unsupported_gpu_skips() -> None:
    no_engine = run_dcgm_diag(
        recorded("Error: unable to establish a connection to the specified host: localhost\n", 255), 1, 30
    )
    result = judged(no_engine)["gpu.dcgm"]
    assert result.status is Status.FAIL and not result.critical and "host engine" in (result.remedy or "")
    unsupported = run_dcgm_diag(
        recorded("Error: Unable to run diagnostic on unsupported GPU 0.\n", 226), 1, 30
    )
    assert judged(unsupported)["gpu.dcgm"].status is Status.SKIP


def test_failures_carry_dcgms_words_and_drain() -> None:
    results = judged(run_dcgm_diag(recorded(GB10, 226), 1, 30))
    software = results["gpu.dcgm_software"]
    assert software.status is Status.FAIL and software.critical
    assert "on GPU 0" in software.summary and "Persistence mode for GPU 0 is disabled" in software.summary


def test_a_status_word_nobody_knows_is_never_a_pass() -> None:
    doc = json.dumps(
        {
            "DCGM Diagnostic": {
                "test_categories": [
                    {"tests": [{"name": "memory", "results": [{"entity_id": 0, "status": "Inconclusive"}]}]}
                ]
            }
        }
    )
    result = judged(run_dcgm_diag(recorded(doc), 1, 30))["gpu.dcgm_memory"]
    assert result.status is Status.FAIL and "does not know" in result.summary


def test_one_failing_gpu_fails_the_test_and_is_named() -> None:
    doc = json.dumps(
        {
            "DCGM Diagnostic": {
                "test_categories": [
                    {
                        "tests": [
                            {
                                "name": "memory",
                                "results": [
                                    {"entity_id": 0, "status": "Pass"},
                                    {
                                        "entity_id": 3,
                                        "status": "Fail",
                                        "warnings": [{"warning": "Uncorrectable ECC error on GPU 3"}],
                                    },
                                ],
                            }
                        ]
                    }
                ]
            }
        }
    )
    result = judged(run_dcgm_diag(recorded(doc), 1, 30))["gpu.dcgm_memory"]
    assert result.status is Status.FAIL and "on GPU 3:" in result.summary and "GPU 0" not in result.summary


def test_parser_edges() -> None:
    assert parse_dcgm_diag("")[2] == "dcgmi printed no JSON"
    assert "not readable" in (parse_dcgm_diag("{not json")[2] or "")
    assert parse_dcgm_diag('{"DCGM Diagnostic": {"version": "4.2.3"}}')[1:] == (
        "4.2.3",
        "dcgmi's JSON holds no test results",
    )
    tests, version, problem = parse_dcgm_diag("Successfully ran diagnostic for group.\n" + PASSING)
    assert problem is None and version == "3.1.0" and len(tests) == 10
    assert all(t.status == "pass" for t in tests)
    assert result_id("Page Retirement/Row Remap") == "gpu.dcgm_page_retirement_row_remap"


def test_warned_test_warns_and_skipped_tests_are_counted() -> None:
    diag = DcgmDiag(
        2,
        "dcgmi diag -r 2 -j --timeout 600",
        tests=(
            DcgmTest("pcie", "warn", {"0": "warn"}, ("PCIe replay rate above the threshold",)),
            DcgmTest("memory", "pass", {"0": "pass"}),
            DcgmTest("eud", "skip", {"0": "skip"}),
        ),
    )
    results = judged(diag)
    assert results["gpu.dcgm_pcie"].status is Status.WARN and not results["gpu.dcgm_pcie"].critical
    assert results["gpu.dcgm"].status is Status.PASS and "1 skipped (eud)" in results["gpu.dcgm"].summary


# ------------------------------------------------------------------------------ the commands
# (the commands themselves, on this host with a stand-in dcgmi: tests/integration/test_dcgm_commands.py)


def test_check_does_not_load_gpus_the_audit_found_unfit() -> None:
    from dltune.commands.check import _dcgm_results

    blocked = Result("bench.run", Status.SKIP, "bench not run: critical check(s) failed: gpu.ecc")
    (result,) = _dcgm_results(2, 600, blocked, 5.0, NvmlState(False))
    assert result.id == "gpu.dcgm" and result.status is Status.SKIP
    assert result.summary == "DCGM's diagnostic not run: critical check(s) failed: gpu.ecc"
