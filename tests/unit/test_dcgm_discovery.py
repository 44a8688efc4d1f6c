"""DCGM's own view of the GPUs against NVML's: `dcgmi discovery -l` runs after a DCGM diagnostic that
ran (`dltune audit --dcgm`), and gpu.dcgm is a pass only when DCGM lists every GPU NVML sees by the
same UUID and PCI bus id. The published listings of tests/fixtures/real/dcgmi_discovery go through
the probe (a recorded runner) and the check against an NVML view: the GPUs the sample's own
nvidia-smi names where it has one, else the listing's own UUIDs and bus ids (its NVML header says
which). The boundaries edit a real listing or the NVML view at the one place a rule looks."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from dltune.checks.dcgm import DISCOVERY_REMEDY, blank, compare_gpus
from dltune.checks.dcgm import dcgm as dcgm_check
from dltune.model import Result, Status
from dltune.probes import collect_snapshot
from dltune.probes.dcgm import (
    DISCOVERY_MIN_S,
    DISCOVERY_TIMEOUT_S,
    parse_dcgm_discovery,
    read_dcgm,
    run_dcgm_discovery,
)
from dltune.probes.runner import CommandResult, RecordedRunner
from dltune.probes.watchdog import Deadline
from dltune.snapshot import DcgmDiag, DcgmDiscovery, DcgmTest, Gpu, NvmlState, Snapshot
from tests.real_corpus import CORPUS, Sample, load, samples

DIAG = "dcgmi diag -r 1 -j --timeout 60"  # level 1 with no audit deadline: DCGM's own 60 s
LISTING = "dcgmi discovery -l"
PASSING = load(CORPUS / "dcgm_diag" / "gcm_dcgm3_all_pass.txt").body
GB10 = load(CORPUS / "dcgm_diag" / "dgx_spark_dcgm423_software_fail.txt").body  # software fails, 0 pass
EIGHT = load(CORPUS / "dcgmi_discovery" / "dcgm83_a100_sxm4_80gb_eight.txt")
NULL_NAMES = load(CORPUS / "dcgmi_discovery" / "dcgm229_h100_null_names.txt")
DCGM_47 = load(CORPUS / "dcgmi_discovery" / "dcgm314_p100_dcgm470_active.txt")
T4G = load(CORPUS / "dcgmi_discovery" / "eks_nma_t4g_dcgm4.txt")


# ------------------------------------------------------------------------------ NVML's view


def nvml_form(bus_id: str) -> str:
    """nvidia-smi's and DCGM's "00000000:31:00.0" as NVML's probe writes a bus id (probes/nvml_read.py:
    the domain's last four digits, lower case), computed here apart from the probe under test."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def listed_view(body: str) -> tuple[Gpu, ...]:
    """NVML's view built from the listing's own text (a sample without nvidia-smi output)."""
    names = re.findall(r"Name: (.+?)\s*\|", body)
    buses = re.findall(r"PCI Bus ID: (\S+)", body)
    uuids = re.findall(r"Device UUID: (\S+)", body)
    assert len(names) == len(buses) == len(uuids)
    return tuple(
        Gpu(index, name=name, pci_bus_id=nvml_form(bus), uuid=uuid)
        for index, (name, bus, uuid) in enumerate(zip(names, buses, uuids, strict=True))
    )


def nvml_view(sample: Sample) -> tuple[Gpu, ...]:
    """The GPUs NVML would report on the sample's node, by what its NVML header names."""
    said = sample.header["NVML"]
    if said.startswith("nvidia-smi -L in the sample"):
        found = re.findall(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$", sample.body, re.MULTILINE)
        return tuple(Gpu(int(index), name=name, uuid=uuid) for index, name, uuid in found)
    if said.startswith("nvidia-smi in the sample"):
        row = r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s+\|\s+([0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]) "
        found = re.findall(row, sample.body, re.MULTILINE)
        return tuple(Gpu(int(i), name=name, pci_bus_id=nvml_form(bus)) for i, name, bus in found)
    assert said.startswith("built from the listing"), said
    return listed_view(sample.body)


def runner(
    listing: str | None, returncode: int = 0, diag: str = PASSING, diag_returncode: int = 0
) -> RecordedRunner:
    recordings: dict[str, Mapping[str, object]] = {DIAG: {"stdout": diag, "returncode": diag_returncode}}
    if listing is not None:
        recordings[LISTING] = {"stdout": listing, "returncode": returncode}
    return RecordedRunner(recordings)


def dcgm(snap: Snapshot) -> list[Result]:
    """The check's results as a list (the @check decorator types them as one or many)."""
    judged = dcgm_check(snap)
    return [judged] if isinstance(judged, Result) else list(judged)


def audited(recorded: RecordedRunner, gpus: Sequence[Gpu], diag_level: int = 1) -> dict[str, Result]:
    diag = read_dcgm(recorded, diag_level, Deadline())
    nvml = NvmlState(available=True, driver_version="580.95.05", gpus=tuple(gpus))
    return {r.id: r for r in dcgm(Snapshot(root="/", dcgm=diag, nvml=nvml))}


def expected(sample: Sample) -> dict[str, str]:
    return dict(pair.split("=") for pair in sample.expect.split())


# ------------------------------------------------------------------------------ the real listings


@pytest.mark.parametrize("sample", samples("dcgmi_discovery"), ids=str)
def test_each_published_listing_against_its_nodes_nvml_view(sample: Sample) -> None:
    """DCGM 2.4.6, 3.1.7, 3.2.6, 4.4.2 and 4.7.0 tables (prompts, indents, trailing blanks, a leading
    nvidia-smi table, trailing CPU and ConnectX tables as published): the GPUs, DCGM's blank names,
    and gpu.dcgm after a passing diagnostic; the listing runs after the diagnostic, never before."""
    want = expected(sample)
    gpus, _note, _messages, problem = parse_dcgm_discovery(sample.body)
    assert problem is None
    assert len(gpus) == int(want["gpus"])
    assert sum(blank(g.name) for g in gpus) == int(want["unnamed"])
    view = nvml_view(sample)
    assert len(view) == len(gpus)  # the node's nvidia-smi (or the listing) names as many GPUs
    recorded = runner(sample.body)
    result = audited(recorded, view)["gpu.dcgm"]
    assert result.status.value == want["gpu.dcgm"], result.summary
    assert recorded.calls == [tuple(DIAG.split()), tuple(LISTING.split())]
    assert not result.critical
    if result.status is Status.PASS:
        assert result.evidence["discovery"]["problems"] == []
        assert f"DCGM lists the {len(gpus)} GPU(s) NVML sees" in result.summary


def test_the_null_names_of_dcgm_229_are_its_only_fault() -> None:
    """The H100s are the ones nvidia-smi -L names (same UUIDs): the fail is the four <<<NULL>>> names,
    and the passed tests are said not to count."""
    result = audited(runner(NULL_NAMES.body), nvml_view(NULL_NAMES))["gpu.dcgm"]
    assert result.status is Status.FAIL and result.remedy == DISCOVERY_REMEDY
    assert result.evidence["discovery"]["problems"] == ["DCGM cannot name GPU 0, 1, 2, 3 (Name: <<<NULL>>>)"]
    assert result.summary.endswith("passed, not counted as a pass")
    assert "NVIDIA/DCGM#229" in (result.remedy or "")


def test_bus_ids_are_compared_in_nvmls_form() -> None:
    """DCGM prints "00000000:31:00.0", NVML's probe "0000:31:00.0": the same device, paired by bus id
    where nvidia-smi showed no UUID."""
    (gpu,), *_ = parse_dcgm_discovery(DCGM_47.body)
    assert gpu.pci_bus_id == "0000:31:00.0" and gpu.uuid == "GPU-c12a000a-e4c9-1239-320a-4b6be760446d"
    assert parse_dcgm_discovery(EIGHT.body)[0][6].pci_bus_id == "0000:a0:1c.0"


def test_a_generic_name_is_a_name() -> None:
    """ "NVIDIA Graphics Device" (DCGM 2.4.6 on a board the driver has no product name for) is what
    NVML itself says: only DCGM's blank markers are "cannot name"."""
    assert not blank("NVIDIA Graphics Device")
    assert all(
        blank(v) for v in (None, "", "<<<NULL>>>", "<<<NOT_FOUND>>>", "<<<NOT_SUPPORTED>>>", "<<<NOT_PERM>>>")
    )
    assert not blank("<<<NULL")


# ------------------------------------------------------------------------------ DCGM's view differs

EIGHT_VIEW = listed_view(EIGHT.body)


def without_gpu_7(body: str, found: str = "7 GPUs found.") -> str:
    rows = body.split("| 7      |")[0].rsplit("\n", 1)[0]  # up to the border above GPU 7
    tail = body[body.index("0 NvSwitches found.") :]
    return rows.replace("8 GPUs found.", found) + "\n" + tail


def test_a_gpu_missing_from_dcgm_fails_without_draining() -> None:
    listing = without_gpu_7(EIGHT.body)
    assert parse_dcgm_discovery(listing)[3] is None and len(parse_dcgm_discovery(listing)[0]) == 7
    result = audited(runner(listing), EIGHT_VIEW)["gpu.dcgm"]
    assert result.status is Status.FAIL and not result.critical
    assert result.evidence["discovery"]["problems"] == [
        "DCGM does not list NVML's GPU 7 (GPU-59e925d1-5f83-fc83-c0e5-a80a31d2ddf3)"
    ]
    assert result.summary.startswith("DCGM's view of the GPUs is not NVML's: DCGM does not list NVML's GPU 7")
    assert "DCGM level 1: " in result.summary and result.summary.endswith("not counted as a pass")


def test_dcgm_45s_note_on_inactive_gpus_is_carried() -> None:
    """DCGM 4.5+ lists active GPUs only and says when it holds others: that is the finding's context."""
    note = "Note: Use -a flag to show all GPUs, including those that are not active."
    listing = without_gpu_7(EIGHT.body, f"7 GPUs found (Active).\n{note}")
    gpus, seen, _messages, problem = parse_dcgm_discovery(listing)
    assert (len(gpus), seen, problem) == (7, note, None)
    result = audited(runner(listing), EIGHT_VIEW)["gpu.dcgm"]
    assert result.status is Status.FAIL and f"({note})" in result.summary
    assert result.evidence["discovery"]["note"] == note


def test_a_gpu_dcgm_knows_by_another_uuid_fails() -> None:
    view = list(EIGHT_VIEW)
    view[3] = Gpu(
        3, name=view[3].name, pci_bus_id=view[3].pci_bus_id, uuid="GPU-00000000-1111-2222-3333-444444444444"
    )
    result = audited(runner(EIGHT.body), view)["gpu.dcgm"]
    assert result.status is Status.FAIL
    assert result.evidence["discovery"]["problems"] == [
        "at 0000:20:1d.0 DCGM's GPU 3 is GPU-58ef2f70-f0c8-ac34-1de3-b8275d460031, "
        "NVML's GPU 3 GPU-00000000-1111-2222-3333-444444444444"
    ]


def test_the_same_uuid_at_another_bus_id_fails() -> None:
    view = list(EIGHT_VIEW)
    view[6] = Gpu(6, name=view[6].name, pci_bus_id="0000:b0:1c.0", uuid=view[6].uuid)
    problems, _ = compare_gpus(tuple(view), parse_dcgm_discovery(EIGHT.body)[0])
    assert problems == [
        "DCGM's GPU 6 is NVML's GPU 6 (GPU-ff69ea16-ce74-810c-5d4f-541bf991b24b) at bus id 0000:a0:1c.0, "
        "NVML's at 0000:b0:1c.0"
    ]


def test_a_gpu_nvml_does_not_have_fails() -> None:
    result = audited(runner(EIGHT.body), EIGHT_VIEW[:7])["gpu.dcgm"]
    assert result.status is Status.FAIL
    assert result.evidence["discovery"]["problems"] == [
        "DCGM lists GPU 7 (GPU-59e925d1-5f83-fc83-c0e5-a80a31d2ddf3), which NVML does not have"
    ]


def test_gpus_nvml_cannot_identify_are_not_held_against_dcgm() -> None:
    """A GPU NVML lost (or that a job's cgroup refuses this process) has no UUID or bus id in NVML's
    view: one DCGM GPU per such GPU may be it (the gpu checks judge the lost GPU); one more is a fail."""
    lost = Gpu(7, error="GPU is lost")
    result = audited(runner(EIGHT.body), [*EIGHT_VIEW[:7], lost])["gpu.dcgm"]
    assert result.status is Status.PASS and result.evidence["discovery"]["nvml_unidentified"] == 1
    problems, unidentified = compare_gpus((*EIGHT_VIEW[:6], lost), parse_dcgm_discovery(EIGHT.body)[0])
    assert unidentified == 1 and problems == [
        "DCGM lists GPU 6 (GPU-ff69ea16-ce74-810c-5d4f-541bf991b24b), 7 (GPU-59e925d1-5f83-fc83-c0e5-"
        "a80a31d2ddf3), which NVML does not have"
    ]


@pytest.mark.parametrize("marker", ["<<<NULL>>>", "<<<NOT_FOUND>>>", "<<<NOT_PERM>>>"])
def test_one_gpu_dcgm_cannot_name_is_enough(marker: str) -> None:
    parts = EIGHT.body.split("Name: NVIDIA A100-SXM4-80GB")
    listing = (
        "Name: NVIDIA A100-SXM4-80GB".join(parts[:3])
        + f"Name: {marker}"
        + "Name: NVIDIA A100-SXM4-80GB".join(parts[3:])
    )
    names = [g.name for g in parse_dcgm_discovery(listing)[0]]
    assert names.count(marker) == 1 and names[2] == marker
    result = audited(runner(listing), EIGHT_VIEW)["gpu.dcgm"]
    assert result.status is Status.FAIL
    assert result.evidence["discovery"]["problems"] == [f"DCGM cannot name GPU 2 (Name: {marker})"]


def test_a_gpu_dcgm_cannot_read_is_named_with_dcgms_words() -> None:
    """dcgmi's row for a GPU whose attributes it cannot get: an ID, DCGM's error, no identity."""
    row = (
        "| 7      | Error: Cannot get device attributes for GPU.                         |\n"
        "|        | Return: Host engine is not loaded                                    |\n"
    )
    start = EIGHT.body.index("| 7      |")
    end = EIGHT.body.index("+--", start)
    listing = EIGHT.body[:start] + row + EIGHT.body[end:]
    result = audited(runner(listing), EIGHT_VIEW)["gpu.dcgm"]
    assert result.status is Status.FAIL
    assert result.evidence["discovery"]["problems"] == [
        "DCGM cannot name GPU 7 (no Name line; Error: Cannot get device attributes for GPU.; Return: Host "
        "engine is not loaded)",
        "DCGM does not list NVML's GPU 7 (GPU-59e925d1-5f83-fc83-c0e5-a80a31d2ddf3)",
    ]


def test_a_named_gpu_without_uuid_or_bus_id_is_said_once() -> None:
    """Named, but with DCGM's blank markers for both identifiers: DCGM cannot say which GPU it is."""
    listing = EIGHT.body.replace("00000000:A0:1D.0", "<<<NULL>>>").replace(
        "GPU-59e925d1-5f83-fc83-c0e5-a80a31d2ddf3", "<<<NULL>>>"
    )
    result = audited(runner(listing), EIGHT_VIEW)["gpu.dcgm"]
    assert result.status is Status.FAIL
    assert result.evidence["discovery"]["problems"] == [
        "DCGM cannot identify GPU 7 (Name: NVIDIA A100-SXM4-80GB; PCI Bus ID: <<<NULL>>>; Device UUID: "
        "<<<NULL>>>)",
        "DCGM does not list NVML's GPU 7 (GPU-59e925d1-5f83-fc83-c0e5-a80a31d2ddf3)",
    ]


def test_a_diagnostic_with_no_pass_still_fails_on_the_list() -> None:
    """The rule holds whatever the tests said: a diagnostic whose only test failed (gpu.dcgm a skip)
    on a DCGM that lists another GPU makes gpu.dcgm a fail, beside the test's own finding."""
    other = Gpu(
        0, name="NVIDIA T4G", pci_bus_id="0000:00:1f.0", uuid="GPU-11111111-2222-3333-4444-555555555555"
    )
    results = audited(runner(T4G.body, diag=GB10, diag_returncode=226), [other])
    assert results["gpu.dcgm_software"].status is Status.FAIL
    assert results["gpu.dcgm"].status is Status.FAIL
    same = listed_view(T4G.body)
    assert audited(runner(T4G.body, diag=GB10, diag_returncode=226), same)["gpu.dcgm"].status is Status.SKIP


def test_without_nvmls_answer_the_lists_are_not_compared() -> None:
    """NVML hung or absent: nothing to compare with (the gpu checks judge that); DCGM's word stands."""
    diag = read_dcgm(runner(EIGHT.body), 1, Deadline())
    for nvml in (
        NvmlState(available=True, hung=True, error="NVML did not answer within 10 s"),
        NvmlState(available=False, error="NVML Shared Library Not Found"),
    ):
        (result,) = dcgm(Snapshot(root="/", dcgm=diag, nvml=nvml))
        assert result.status is Status.PASS and result.evidence["discovery"]["compared"] is False
        assert f"not compared with NVML's: NVML {nvml.error}" in result.summary


# ------------------------------------------------------------------------------ when it runs, how long


def test_dcgm_not_installed_skips_and_lists_nothing() -> None:
    recorded = RecordedRunner({})
    diag = read_dcgm(recorded, 1, Deadline())
    assert not diag.installed and diag.discovery is None
    assert recorded.calls == [tuple(DIAG.split())]
    (result,) = dcgm(Snapshot(root="/", dcgm=diag))
    assert result.status is Status.SKIP and "discovery" not in result.evidence


@pytest.mark.parametrize(
    ("stdout", "returncode"),
    [
        ("Error: unable to establish a connection to the specified host: localhost\n", 255),
        ("", 124),  # the client killed: no answer
    ],
)
def test_a_diagnostic_that_did_not_run_is_not_listed(stdout: str, returncode: int) -> None:
    recorded = runner(EIGHT.body, diag=stdout, diag_returncode=returncode)
    diag = read_dcgm(recorded, 1, Deadline())
    assert diag.error is not None and diag.discovery is None
    assert recorded.calls == [tuple(DIAG.split())]


def test_check_dcgm_n_judges_the_diagnostic_alone() -> None:
    """`dltune check --dcgm N` runs the diagnostic without the listing: gpu.dcgm as before."""
    diag = DcgmDiag(2, "dcgmi diag -r 2 -j --timeout 900", tests=(DcgmTest("memory", "pass", {"0": "pass"}),))
    nvml = NvmlState(available=True, gpus=EIGHT_VIEW)
    (result,) = dcgm(Snapshot(root="/", dcgm=diag, nvml=nvml))
    assert result.status is Status.PASS and "discovery" not in result.evidence
    assert result.summary == "DCGM level 2: 1 test(s) passed"


class TimedRunner:
    """Recorded answers; remembers each command's timeout, and can spend the audit's time on one."""

    def __init__(self, answers: Mapping[str, CommandResult], deadline: Deadline, spend: Mapping[str, float]):
        self.answers, self.deadline, self.spend = answers, deadline, spend
        self.timeouts: dict[str, float] = {}

    def run(self, argv: Sequence[str], timeout: float = 5.0) -> CommandResult:
        command = " ".join(argv)
        self.timeouts[command] = timeout
        self.deadline.start -= self.spend.get(argv[1], 0.0)  # as if the command took that long
        return self.answers.get(argv[1]) or CommandResult(tuple(argv), 127, "", "not recorded")


def answers(listing: CommandResult | None = None) -> dict[str, CommandResult]:
    found = {"diag": CommandResult((), 0, PASSING)}
    return {**found, "discovery": listing} if listing else found


def test_the_listing_gets_its_own_limit_within_the_audits_deadline() -> None:
    roomy = Deadline(300)
    timed = TimedRunner(answers(CommandResult((), 0, EIGHT.body)), roomy, {})
    read_dcgm(timed, 1, roomy)
    assert timed.timeouts[LISTING] == DISCOVERY_TIMEOUT_S
    tight = Deadline(30)
    timed = TimedRunner(answers(CommandResult((), 0, EIGHT.body)), tight, {"diag": 25})
    read_dcgm(timed, 1, tight)
    assert DISCOVERY_MIN_S <= timed.timeouts[LISTING] <= 5.0


def test_no_time_left_for_the_listing_is_an_error_and_a_miss() -> None:
    """The diagnostic used what was left: the listing is not run, the pass is not counted, and the
    audit names what it could not finish (system.audit_timeout)."""
    tight = Deadline(30)
    timed = TimedRunner(answers(CommandResult((), 0, EIGHT.body)), tight, {"diag": 29.5})
    diag = read_dcgm(timed, 1, tight)
    assert LISTING not in timed.timeouts and "dcgm_discovery" in tight.missed
    assert diag.discovery is not None and diag.discovery.timed_out
    (result,) = dcgm(Snapshot(root="/", dcgm=diag, nvml=NvmlState(True, gpus=EIGHT_VIEW)))
    assert result.status is Status.ERROR and "--timeout was too short" in result.summary


def test_a_listing_that_times_out_is_an_error_not_a_pass() -> None:
    discovery = run_dcgm_discovery(RecordedRunner({LISTING: {"returncode": 124}}), 10.0)
    assert discovery.timed_out and discovery.error == "no answer within 10 s"
    result = audited(runner("", 124), EIGHT_VIEW)["gpu.dcgm"]
    assert result.status is Status.ERROR and not result.critical
    assert result.summary.startswith("DCGM's own GPU list could not be read (`dcgmi discovery -l`: no answer")
    assert result.summary.endswith("not counted as a pass")
    assert result.evidence["discovery"]["timed_out"] is True


@pytest.mark.parametrize(
    ("stdout", "returncode", "why"),
    [
        (
            "Error: unable to establish a connection to the specified host: localhost\n",
            255,
            "dcgmi printed no GPU list: Error: unable to establish",
        ),
        (EIGHT.body.replace("8 GPUs found.", "9 GPUs found."), 0, "dcgmi counted 9 GPU(s) but listed 8"),
        (EIGHT.body[: EIGHT.body.index("| 7      |")], 0, "dcgmi counted 8 GPU(s) but listed 7"),
        ("", 0, "dcgmi printed no GPU list: no output"),
    ],
)
def test_a_listing_that_failed_or_was_cut_short_is_an_error(stdout: str, returncode: int, why: str) -> None:
    result = audited(runner(stdout, returncode), EIGHT_VIEW)["gpu.dcgm"]
    assert result.status is Status.ERROR and why in result.summary


def test_a_complete_gpu_table_counts_whatever_dcgmi_exits_with() -> None:
    """With the host engine's NvSwitch module denylisted dcgmi exits 223 after printing every GPU
    (KempnerInstitute/kempnerpulse#15): the GPU table is DCGM's view all the same."""
    failed_switches = (
        "Error: Cannot get NvSwitch list from remote node. Return: This request is serviced by a module "
        "of DCGM that is not currently loaded\n"
    )
    listing = EIGHT.body[: EIGHT.body.index("0 NvSwitches found.")] + failed_switches
    result = audited(runner(listing, 223), EIGHT_VIEW)["gpu.dcgm"]
    assert result.status is Status.PASS
    assert result.evidence["discovery"]["returncode"] == 223
    assert result.evidence["discovery"]["messages"] == [failed_switches.strip()]


def test_only_the_gpu_table_is_read() -> None:
    """DCGM 4.x's CPU table has rows of the GPU table's shape ("Name: Grace"), and a listing may follow
    nvidia-smi's table: neither is a GPU."""
    cpu_table = (
        "1 CPU found.\n"
        "+--------+----------------------------------------------------------------------+\n"
        "| CPU ID | Device Information                                                   |\n"
        "+--------+----------------------------------------------------------------------+\n"
        "| 0      | Name: Grace                                                          |\n"
        "|        | Serial number : 0x0000000000000001                                   |\n"
        "|        | Cores: 0-71                                                          |\n"
        "+--------+----------------------------------------------------------------------+\n"
    )
    listing = DCGM_47.body[: DCGM_47.body.index("0 CPUs found.")] + cpu_table
    gpus, _note, _messages, problem = parse_dcgm_discovery(listing)
    assert problem is None and [g.name for g in gpus] == ["Tesla P100-PCIE-16GB"]


def test_the_audit_lists_dcgms_gpus_after_its_diagnostic(tmp_path: Path) -> None:
    """collect_snapshot with --dcgm: the listing rides on the diagnostic; NVML is not read under a
    fixture root, so the lists are not compared there."""
    recorded = runner(EIGHT.body)
    snap = collect_snapshot(tmp_path, runner=recorded, areas=["gpu"], dcgm_level=1)
    assert snap.dcgm is not None and isinstance(snap.dcgm.discovery, DcgmDiscovery)
    assert len(snap.dcgm.discovery.gpus) == 8
    assert (tuple(DIAG.split()), tuple(LISTING.split())) == tuple(
        call for call in recorded.calls if call[0] == "dcgmi"
    )
    (result,) = dcgm(snap)
    assert result.evidence["discovery"]["compared"] is False


@pytest.mark.parametrize(
    "count",
    ["\u0663", "9" * 5000],  # an Arabic-Indic three (int() reads it), more digits than int() will take
)
def test_a_count_that_is_no_ascii_number_is_no_list(count: str) -> None:
    listing = EIGHT.body.replace("8 GPUs found.", f"{count} GPUs found.")
    assert parse_dcgm_discovery(listing)[3] == "dcgmi printed no GPU list"


def test_an_empty_name_is_a_name_dcgm_cannot_give() -> None:
    listing = T4G.body.replace("Name: NVIDIA T4G", "Name:")
    (gpu,), *_ = parse_dcgm_discovery(listing)
    assert gpu.name == "" and gpu.said == ()
    assert audited(runner(listing), listed_view(T4G.body))["gpu.dcgm"].status is Status.FAIL
