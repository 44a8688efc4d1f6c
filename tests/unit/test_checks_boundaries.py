"""Boundaries of the check-side decisions the other tests reach only in passing: DCGM's findings and
their words, NFS option gaps and server names, data disks, NVMe health, the driver node tests, and
the check registry. Each case sits where a comparison, guard or text would change the verdict a user
reads."""

from __future__ import annotations

import re

import pytest

from dltune import checks
from dltune.checks import blockers, check, run_checks
from dltune.checks.dcgm import DCGM_REMEDY, dcgm, result_id
from dltune.checks.driver import _major, branch, driver_loaded, nouveau
from dltune.checks.nfs import _option_gaps, _shared_connections, nfs_server, responsive
from dltune.checks.storage import _flags, data_fstab, data_noatime, judge_nvme, tmpfs_size_kb
from dltune.model import Result, Status
from dltune.probes.dcgm import run_dcgm_diag
from dltune.probes.mounts import parse_fstab
from dltune.probes.mountstats import parse_mountstats
from dltune.probes.nvme import parse_smart_log
from dltune.snapshot import (
    DcgmDiag,
    DcgmTest,
    Mount,
    NfsMountStats,
    NvmlState,
    RebootState,
    Responsiveness,
    Snapshot,
    Transport,
)
from tests.real_corpus import CORPUS, load
from tests.unit.test_dcgm import GB10, recorded
from tests.unit.test_driver_checks import DRIVER_MANIFEST, NOT_LOADED
from tests.unit.test_real_health_samples import _unquoted

# ------------------------------------------------------------------------------------------ DCGM

LEVEL_1 = "dcgmi diag -r 1 -j --timeout 30"
GCM_FAIL_WARN = load(CORPUS / "dcgm_diag" / "gcm_dcgm3_persistence_fail_environment_warn.txt").body
GCM_ALL_PASS = load(CORPUS / "dcgm_diag" / "gcm_dcgm3_all_pass.txt").body


NOT_PROBED = NvmlState(available=False, error="not probed")


def by_id(diag: DcgmDiag, nvml: NvmlState = NOT_PROBED) -> dict[str, Result]:
    return {r.id: r for r in dcgm(Snapshot(root="/", dcgm=diag, nvml=nvml))}


def test_a_real_failure_names_its_gpu_and_carries_dcgms_words_and_the_diagnostic_remedy() -> None:
    result = by_id(run_dcgm_diag(recorded(GB10, 226), 1, 30))["gpu.dcgm_software"]
    message = (
        "Persistence Mode: Persistence mode for GPU 0 is disabled. Enable persistence mode by running "
        '"nvidia-smi -i <gpuId> -pm 1 " as root.'
    )
    assert result.summary == f"DCGM level 1 test software failed on GPU 0: {message}"
    assert result.evidence == {
        "test": "software",
        "per_gpu": {"0": "fail"},
        "warnings": [message],
        "command": LEVEL_1,
    }
    assert result.remedy == DCGM_REMEDY and result.status is Status.FAIL and result.critical


def test_a_real_fail_and_warn_without_messages_say_so_and_only_the_fail_drains() -> None:
    """gcm's sample: DCGM 3 names no GPU ("all") and gives no warning text for either test."""
    results = by_id(run_dcgm_diag(recorded(GCM_FAIL_WARN), 1, 30))
    persistence, environment = results["gpu.dcgm_persistence_mode"], results["gpu.dcgm_environment_variables"]
    assert persistence.summary == "DCGM level 1 test Persistence Mode failed on every GPU: no message"
    assert (persistence.status, persistence.critical) == (Status.FAIL, True)
    assert environment.summary == "DCGM level 1 test Environment Variables warned on every GPU: no message"
    assert (environment.status, environment.critical) == (Status.WARN, False)
    assert environment.remedy == DCGM_REMEDY
    assert results["gpu.dcgm"].summary == "DCGM level 1: 7 test(s) passed, 2 with findings (gpu.dcgm_*)"


@pytest.mark.parametrize(
    ("test", "summary"),
    [
        pytest.param(
            DcgmTest("memory", "fail", {"0": "pass", "3": "fail", "1": "warn"}, ("ECC on 3", "slow on 1")),
            "DCGM level 2 test memory failed on GPU 1, 3: ECC on 3; slow on 1",
            id="the-failing-and-warning-gpus-in-order-and-every-message",
        ),
        pytest.param(
            DcgmTest("pcie", "warn", {"0": "pass"}, ("replays",)),
            "DCGM level 2 test pcie warned: replays",
            id="no-gpu-named-when-none-failed",
        ),
        pytest.param(
            DcgmTest("eud", "unknown", {}),
            "DCGM level 2 test eud ended with a status dltune does not know: no message",
            id="an-unknown-word-said-as-such",
        ),
    ],
)
def test_a_finding_says_which_gpus_and_what_dcgm_said(test: DcgmTest, summary: str) -> None:
    diag = DcgmDiag(2, "dcgmi diag -r 2 -j --timeout 900", tests=(test,), version="4.2.3")
    assert by_id(diag)[result_id(test.name)].summary == summary


@pytest.mark.parametrize(
    ("tests", "version", "status", "summary"),
    [
        pytest.param(
            (DcgmTest("memory", "pass"), DcgmTest("eud", "skip"), DcgmTest("pcie", "skip")),
            "4.2.3",
            Status.PASS,
            "DCGM level 2 (DCGM 4.2.3): 1 test(s) passed, 2 skipped (eud, pcie)",
            id="skipped-tests-named",
        ),
        pytest.param(
            (DcgmTest("memory", "pass"),),
            None,
            Status.PASS,
            "DCGM level 2: 1 test(s) passed",
            id="no-version-no-skips-no-findings",
        ),
        pytest.param(
            (DcgmTest("memory", "fail"),),
            "3.1.0",
            Status.SKIP,
            "DCGM level 2 (DCGM 3.1.0): no test passed, 1 with findings (gpu.dcgm_*)",
            id="nothing-passed-beside-a-finding",
        ),
        # Issue 46: these two were passes that said "0 test(s) passed": nothing vouches for the GPUs.
        pytest.param(
            (DcgmTest("eud", "skip"), DcgmTest("pcie", "skip")),
            None,
            Status.SKIP,
            "DCGM level 2: no test passed, 2 skipped (eud, pcie)",
            id="every-test-skipped-is-no-pass",
        ),
        pytest.param((), None, Status.SKIP, "DCGM level 2: no test in its output", id="no-test-is-no-pass"),
    ],
)
def test_the_summary_result_counts_what_passed_skipped_and_has_findings(
    tests: tuple[DcgmTest, ...], version: str | None, status: Status, summary: str
) -> None:
    diag = DcgmDiag(2, "dcgmi diag -r 2 -j --timeout 900", returncode=0, tests=tests, version=version)
    result = by_id(diag)["gpu.dcgm"]
    assert (result.status, result.summary) == (status, summary)
    assert result.evidence == {
        "command": "dcgmi diag -r 2 -j --timeout 900",
        "level": 2,
        "dcgm_version": version,
        "returncode": 0,
        "passed": [t.name for t in tests if t.status == "pass"],
        "skipped": [t.name for t in tests if t.status == "skip"],
    }


def test_a_real_all_pass_run_is_one_pass_result() -> None:
    (result,) = by_id(run_dcgm_diag(recorded(GCM_ALL_PASS), 1, 30)).values()
    assert (result.id, result.status) == ("gpu.dcgm", Status.PASS)
    assert result.summary == "DCGM level 1: 9 test(s) passed"


def test_out_of_time_while_nvml_answers_is_a_plain_fail_that_asks_for_a_longer_limit() -> None:
    diag = run_dcgm_diag(recorded(returncode=124), 1, 30)
    (result,) = by_id(diag, NvmlState(available=True, driver_version="580.95.05")).values()
    assert result.id == "gpu.dcgm" and result.status is Status.FAIL and not result.critical
    assert result.summary == (
        f"`{LEVEL_1}` did not finish (no answer within 35 s) while NVML still answers: the diagnostic ran "
        "out of time, which says nothing about the GPUs yet"
    )
    assert result.remedy == (
        "rerun with a longer limit (dltune check --dcgm 1 --dcgm-timeout SECONDS) when no job runs; a rerun"
        " that also runs out of time is a fault to chase with nv-hostengine's log"
    )
    assert result.evidence == {
        "command": LEVEL_1,
        "level": 1,
        "dcgm_version": None,
        "returncode": None,
        "nvml_answers": True,
        "nvml_error": None,
    }


@pytest.mark.parametrize(
    ("nvml", "said"),
    [
        pytest.param(
            NvmlState(available=False, error="NVML Shared Library Not Found"), "NVML Shared Library Not Found"
        ),
        pytest.param(NvmlState(available=True, hung=True), "hung", id="hung-without-a-message"),
    ],
)
def test_out_of_time_while_nvml_does_not_answer_drains_and_says_why(nvml: NvmlState, said: str) -> None:
    (result,) = by_id(run_dcgm_diag(recorded(returncode=124), 1, 30), nvml).values()
    assert result.id == "gpu.dcgm" and result.status is Status.FAIL and result.critical
    assert result.summary == (
        f"`{LEVEL_1}` did not finish (no answer within 35 s) and NVML does not answer either ({said}): "
        "a GPU or the driver hangs"
    )
    assert (
        result.remedy == "drain the node; check nv-hostengine and the GPUs (nvidia-smi), then rerun the level"
    )
    assert result.evidence["nvml_answers"] is False and result.evidence["nvml_error"] == nvml.error


@pytest.mark.parametrize(
    ("name", "result_id_"),
    [
        ("Page Retirement/Row Remap", "gpu.dcgm_page_retirement_row_remap"),
        (" (memory) ", "gpu.dcgm_memory"),
        ("", "gpu.dcgm_unnamed"),
        ("///", "gpu.dcgm_unnamed"),
    ],
)
def test_result_ids_trim_separators_and_name_the_nameless(name: str, result_id_: str) -> None:
    assert result_id(name) == result_id_


# ------------------------------------------------------------------------------------------- NFS


@pytest.mark.parametrize(
    ("planned", "actual", "gaps"),
    [
        pytest.param(["vers=4"], ("vers=4.2",), {}, id="a-minor-version-under-the-planned-major"),
        pytest.param(["vers=3"], ("vers=3",), {}, id="the-same-version"),
        pytest.param(
            ["vers=4.1"], ("vers=4.2",), {"vers": {"planned": "4.1", "actual": "4.2"}}, id="another-minor"
        ),
        pytest.param(
            ["vers=4"], ("vers=42",), {"vers": {"planned": "4", "actual": "42"}}, id="no-dot-no-prefix"
        ),
        pytest.param(
            ["nconnect=8", "proto=tcp"],
            ("proto=tcp",),
            {"nconnect": {"planned": "8", "actual": None}},
            id="a-planned-option-missing",
        ),
        pytest.param(
            ["hard"], ("soft",), {"hard": {"planned": True, "actual": False}}, id="a-planned-flag-missing"
        ),
        pytest.param(
            ["hard", "_netdev"], ("hard", "vers=3"), {}, id="unplanned-and-unjudged-options-ignored"
        ),
    ],
)
def test_option_gaps_compare_the_planned_options_only(
    planned: list[str], actual: tuple[str, ...], gaps: dict[str, object]
) -> None:
    assert _option_gaps(planned, actual) == gaps


def nfs(mount_point: str, source: str) -> Mount:
    return Mount(mount_point, "nfs4", source, ("rw",), ("rw", "vers=4.2"))


@pytest.mark.parametrize(
    ("mounts", "asked", "named"),
    [
        pytest.param((nfs("/mnt/a", "10.0.0.5:/export"),), "/mnt/a", "NFS server 10.0.0.5", id="ipv4"),
        pytest.param(
            (nfs("/mnt/a", "10.0.0.5:/export"),), "/mnt/a/", "NFS server 10.0.0.5", id="asked-with-slash"
        ),
        pytest.param(
            (nfs("/mnt/a/", "10.0.0.5:/export"),), "/mnt/a", "NFS server 10.0.0.5", id="mounted-with-slash"
        ),
        pytest.param((nfs("/mnt/a", "[fd00::5]:/export"),), "/mnt/a", "NFS server fd00::5", id="ipv6"),
        pytest.param((nfs("/mnt/a", "NAS-X:/export"),), "/mnt/a", "NFS server NAS-X", id="hostname"),
        pytest.param((), "/mnt/a", "NFS server of /mnt/a", id="not-mounted"),
        pytest.param(
            (nfs("/mnt/a", "export"),), "/mnt/a", "NFS server of /mnt/a", id="source-names-no-server"
        ),
        pytest.param(
            (nfs("/srv/dataX", "10.0.0.9:/b"), nfs("/srv/data", "10.0.0.8:/a")),
            "/srv/data",
            "NFS server 10.0.0.8",
            id="a-longer-mount-point-is-another-mount",
        ),
        pytest.param(
            (nfs("/srv/dataX", "10.0.0.9:/b"), nfs("/srv/data", "10.0.0.8:/a")),
            "/srv/dataX",
            "NFS server 10.0.0.9",
            id="the-longer-one-asked",
        ),
    ],
)
def test_nfs_server_names_the_server_behind_a_mount_point(
    mounts: tuple[Mount, ...], asked: str, named: str
) -> None:
    assert nfs_server(Snapshot(root="/", mounts=mounts), asked) == named


def test_a_stale_mount_names_its_server_as_the_shared_cause() -> None:
    snap = Snapshot(
        root="/",
        mounts=(nfs("/mnt/nfs0", "10.21.115.6:/nfs0"),),
        nfs_responsive={"/mnt/nfs0": Responsiveness(False, 5.0, "statfs gave no answer within 5 s")},
    )
    (result,) = responsive(snap)
    assert result.shared_dependency == "NFS server 10.21.115.6" and result.critical


def stats(mount_point: str, *transports: Transport) -> NfsMountStats:
    return NfsMountStats("10.0.0.5:/nfs0", mount_point, "nfs", "1.1", transports=transports)


def test_mountstats_keyed_with_a_trailing_slash_still_show_a_shared_connection() -> None:
    tcp = Transport("tcp", 875, 1)
    snap = Snapshot(
        root="/", nfs_stats={"/mnt/nfs0/": stats("/mnt/nfs0/", tcp), "/mnt/nfs1/": stats("/mnt/nfs1/", tcp)}
    )
    # A VIP mount with no mountstats block (not mounted) does not end the search for the others.
    assert _shared_connections(snap, ["/mnt/gone", "/mnt/nfs0", "/mnt/nfs1"]) == {
        "/mnt/nfs0": ["/mnt/nfs1"],
        "/mnt/nfs1": ["/mnt/nfs0"],
    }


def test_one_client_port_to_two_servers_is_two_connections() -> None:
    """The peer is part of the connection: the mount table's addr= first, else mountstats' device."""
    tcp = Transport("tcp", 875, 1)
    apart = {
        "/mnt/nfs0": NfsMountStats("10.0.0.5:/nfs0", "/mnt/nfs0", "nfs", "1.1", transports=(tcp,)),
        "/mnt/nfs1": NfsMountStats("10.0.0.6:/nfs0", "/mnt/nfs1", "nfs", "1.1", transports=(tcp,)),
    }
    assert _shared_connections(Snapshot(root="/", nfs_stats=apart), sorted(apart)) == {}
    trunked = tuple(
        Mount(point, "nfs4", f"{host}:/nfs0", ("rw",), ("rw", "vers=4.1", "addr=10.0.0.5"))
        for point, host in (("/mnt/nfs0", "10.0.0.5"), ("/mnt/nfs1", "10.0.0.6"))
    )
    snap = Snapshot(root="/", mounts=trunked, nfs_stats=apart)
    assert _shared_connections(snap, sorted(apart)) == {
        "/mnt/nfs0": ["/mnt/nfs1"],
        "/mnt/nfs1": ["/mnt/nfs0"],
    }


def test_unconnected_or_udp_transports_are_not_a_shared_connection() -> None:
    """The CSI node's sample shows two mounts with client port 0 (no connection made yet): no shared
    TCP connection. UDP has no connection to share either."""
    csi = parse_mountstats(load(CORPUS / "mountstats" / "csi_pnfs_shared_transport.txt").body).nfs
    unconnected = {m.mount_point: m for m in csi if m.transports and m.transports[0].source_port == 0}
    assert len(unconnected) == 2
    assert _shared_connections(Snapshot(root="/", nfs_stats=unconnected), sorted(unconnected)) == {}
    udp = Transport("udp", 875, None)
    snap = Snapshot(
        root="/", nfs_stats={"/mnt/nfs0": stats("/mnt/nfs0", udp), "/mnt/nfs1": stats("/mnt/nfs1", udp)}
    )
    assert _shared_connections(snap, ["/mnt/nfs0", "/mnt/nfs1"]) == {}


# ---------------------------------------------------------------------------------- data disks


def data_snap(**changes: object) -> Snapshot:
    return Snapshot(root="/", **changes)  # type: ignore[arg-type]


def test_system_noatime_mounts_are_judged_without_any_managed_disk() -> None:
    """A manifest with only ``system_noatime`` (role data_disks with no data disk of its own)."""
    snap = data_snap(
        expected={"data_disks": {"system_noatime": ["/", "/var"]}},
        mounts=(
            Mount("/", "ext4", "/dev/vda1", ("rw", "noatime"), ("rw",)),
            Mount("/var", "ext4", "/dev/vda2", ("rw", "strictatime"), ("rw",)),
        ),
    )
    results = {r.subject: r for r in data_noatime(snap)}
    assert list(results) == ["/", "/var"]
    assert (results["/"].status, results["/"].summary) == (Status.PASS, "/ is mounted noatime")
    assert results["/var"].status is Status.FAIL
    assert results["/var"].summary == "/var is mounted strictatime, but role data_disks applied noatime"


def test_a_mount_the_kernel_shows_without_an_atime_flag_is_named_strictatime() -> None:
    """The kernel writes "relatime" and "noatime" among a mount's options when set and nothing for
    strictatime (the lab test remounts a real disk strictatime and reads the summary back)."""
    snap = data_snap(
        expected={"data_disks": {"disks": [{"mount_point": "/data", "uuid": "U1"}]}},
        mounts=(Mount("/data", "xfs", "/dev/nvme0n1", ("rw",), ("rw",)),),
    )
    (result,) = data_noatime(snap)
    assert result.summary == "/data is mounted strictatime, but role data_disks applied noatime"


DATA_FSTAB = parse_fstab("UUID=U1 /data xfs defaults,noatime 0 2\n")
DATA_MANIFEST = {
    "data_disks": {"disks": [{"mount_point": "/data", "uuid": "U1", "options": ["defaults", "noatime"]}]}
}


@pytest.mark.parametrize(
    ("source", "uuid_device", "device_paths", "status"),
    [
        pytest.param(
            "/dev/dm-0",
            "/dev/mapper/vg-data",
            {"/dev/mapper/vg-data": "/dev/dm-0"},
            Status.PASS,
            id="uuid-via-link",
        ),
        pytest.param(
            "/dev/mapper/vg-data",
            "/dev/dm-0",
            {"/dev/mapper/vg-data": "/dev/dm-0"},
            Status.PASS,
            id="mount-via-link",
        ),
        pytest.param("/dev/nvme0n1", "/dev/nvme0n1", {}, Status.PASS, id="unresolved-but-equal"),
        pytest.param("/dev/nvme1n1", "/dev/nvme0n1", {}, Status.FAIL, id="another-device"),
    ],
)
def test_the_uuids_device_and_the_mounted_one_are_compared_with_links_resolved(
    source: str, uuid_device: str, device_paths: dict[str, str], status: Status
) -> None:
    snap = data_snap(
        expected=DATA_MANIFEST,
        fstab=DATA_FSTAB,
        mounts=(Mount("/data", "xfs", source, ("rw", "noatime"), ("rw",)),),
        uuid_devices={"U1": uuid_device},
        device_paths=device_paths,
    )
    (result,) = data_fstab(snap)
    assert result.status is status, result.summary
    if status is Status.FAIL:
        assert result.summary == f"/data: /data is mounted from {source}, but UUID U1 is {uuid_device}"


def test_an_option_name_ends_at_its_first_equals_sign() -> None:
    """size and mode are judged on their own, whatever their value holds; ignored options never count."""
    assert _flags(
        ["noatime", "size=10%", "mode=1777", "size=1g=x", "defaults", "x-systemd.requires=a=b"]
    ) == {
        "noatime",
        "x-systemd.requires=a=b",
    }


def test_a_percentage_size_without_the_memory_size_is_unknown() -> None:
    assert tmpfs_size_kb("10%", None) is None


# ------------------------------------------------------------------------------------------ NVMe


def smart(name: str) -> dict[str, int]:
    body = load(CORPUS / "nvme_smart" / f"{name}.txt").body
    return dict(parse_smart_log(body if body.lstrip().startswith("{") else "\n".join(_unquoted(body))))


@pytest.mark.parametrize(
    ("figures", "verdict"),
    [
        pytest.param(
            smart("nvme_cli_1037_wd_smart_log_text_healthy"), (Status.PASS, [], False), id="healthy"
        ),
        pytest.param(
            smart("kanai_blog_crucial_p3_nvme_smart_log_text_0x9"),
            (
                Status.FAIL,
                [
                    "critical_warning 0x09: available spare below its threshold, "
                    "media placed in read-only mode",
                    "available_spare 0% below its threshold 5%",
                ],
                True,
            ),
            id="read-only-and-spare-gone",
        ),
        pytest.param(
            smart("zbx_smartctl_129_samsung_smartctl_H_failed_reliability"),
            (Status.FAIL, ["critical_warning 0x00: the drive reports it failing"], False),
            id="failing-without-a-bit",
        ),
        pytest.param(
            smart("smartmontools_537_samsung_0x04_percentage_used_100"),
            (
                Status.FAIL,
                [
                    "critical_warning 0x04: NVM subsystem reliability degraded",
                    "percentage_used 100%: the rated endurance is (nearly) used up",
                ],
                True,
            ),
            id="degraded-and-worn-out",
        ),
        pytest.param(
            {"critical_warning": 0x02},
            (Status.WARN, ["critical_warning 0x02: temperature outside its thresholds"], False),
            id="temperature-only-warns",
        ),
        pytest.param(
            {"critical_warning": 0x40},
            (Status.FAIL, ["critical_warning 0x40: the drive reports it failing"], False),
            id="a-bit-nvme-does-not-define",
        ),
        pytest.param(
            {"percentage_used": 90},
            (Status.WARN, ["percentage_used 90%: the rated endurance is (nearly) used up"], False),
            id="endurance-at-its-warning",
        ),
        pytest.param({"percentage_used": 89}, (Status.PASS, [], False), id="endurance-under-its-warning"),
        pytest.param(
            {"available_spare": 9, "available_spare_threshold": 10},
            (Status.FAIL, ["available_spare 9% below its threshold 10%"], False),
            id="spare-under-its-threshold",
        ),
        pytest.param(
            {"available_spare": 10, "available_spare_threshold": 10}, (Status.PASS, [], False), id="spare-at"
        ),
    ],
)
def test_nvme_health_figures_are_judged_and_said_bit_by_bit(
    figures: dict[str, int], verdict: tuple[Status, list[str], bool]
) -> None:
    assert judge_nvme(figures) == verdict


# ---------------------------------------------------------------------------------------- driver


@pytest.mark.parametrize(
    ("nvml", "module", "status"),
    [
        pytest.param(NvmlState(True, driver_version="580.95.05"), None, Status.FAIL, id="nvml-answers"),
        pytest.param(
            NvmlState(False, "NVML Shared Library Not Found", 12), "570.86.15", Status.FAIL, id="module-only"
        ),
        pytest.param(NOT_LOADED, None, Status.FAIL, id="nvml-says-driver-not-loaded"),
        pytest.param(NvmlState(False, "NVML Shared Library Not Found", 12), None, Status.SKIP, id="cpu-node"),
        pytest.param(NvmlState(False, "not probed"), None, Status.SKIP, id="nothing-known"),
    ],
)
def test_nouveau_is_judged_on_any_sign_of_an_nvidia_gpu(
    nvml: NvmlState, module: str | None, status: Status
) -> None:
    snap = Snapshot(root="/", nvml=nvml, nvidia_module_version=module, kernel_modules=frozenset({"nouveau"}))
    assert nouveau(snap).status is status


@pytest.mark.parametrize(
    ("version", "major"), [("580.95.05", "580"), ("580", "580"), (None, None), ("", None)]
)
def test_the_driver_branch_is_the_versions_first_number(version: str | None, major: str | None) -> None:
    assert _major(version) == major


def test_a_reboot_pending_for_another_package_does_not_excuse_the_driver() -> None:
    other = RebootState(required=True, packages=("linux-image-6.8.0-60-generic",))
    snap = Snapshot(
        root="/", expected=DRIVER_MANIFEST, nvml=NvmlState(True, driver_version="570.86.15"), reboot=other
    )
    result = branch(snap)
    assert result.status is Status.FAIL and result.remedy == "apply role nvidia_driver, then reboot"
    assert result.summary == "driver 570.86.15 is loaded but role nvidia_driver installed branch 580"
    loaded = driver_loaded(Snapshot(root="/", expected=DRIVER_MANIFEST, nvml=NOT_LOADED, reboot=other))
    assert loaded.status is Status.FAIL and loaded.critical


# ------------------------------------------------------------------------------- check registry


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, object], dict[str, object]]:
    """An empty registry for the test's own checks: the real one stays as imported."""
    fns: dict[str, object] = {}
    needs: dict[str, object] = {}
    monkeypatch.setattr(checks, "_REGISTRY", fns)
    monkeypatch.setattr(checks, "_NEEDS", needs)
    return fns, needs


def passing(check_id: str) -> object:
    return lambda _snap: Result(check_id, Status.PASS, "fine")


@pytest.mark.parametrize(
    "needs", [(), ("mountinfo",), ("fstab",), ("manifest:data_disks",), ("mountinfo", "manifest:x")]
)
def test_known_inputs_register(
    registry: tuple[dict[str, object], dict[str, object]], needs: tuple[str, ...]
) -> None:
    check("storage.known_inputs", needs=needs)(passing("storage.known_inputs"))  # type: ignore[arg-type]
    assert registry[1] == {"storage.known_inputs": needs}


@pytest.mark.parametrize("need", ["proc_mounts", "data_disks", "Manifest:x"])
def test_an_unknown_input_is_refused_by_name(registry: object, need: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"check storage.x: unknown input '{need}'")):
        check("storage.x", needs=(need,))


def test_a_check_registered_twice_is_refused(registry: object) -> None:
    check("storage.twice")(passing("storage.twice"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("check storage.twice registered twice")):
        check("storage.twice")(passing("storage.twice"))  # type: ignore[arg-type]


def test_the_area_is_what_precedes_the_first_dot(
    registry: tuple[dict[str, object], dict[str, object]],
) -> None:
    check("gpu.dcgm.extra")(passing("gpu.dcgm.extra"))  # type: ignore[arg-type]
    assert [r.id for r in run_checks(Snapshot(root="/"), ["gpu"])] == ["gpu.dcgm.extra"]
    assert run_checks(Snapshot(root="/"), ["storage"]) == []


def test_a_check_that_raises_becomes_an_error_naming_the_exception(
    registry: tuple[dict[str, object], dict[str, object]],
) -> None:
    def broken(_snap: Snapshot) -> Result:
        raise KeyError("nvme0")

    registry[0]["storage.broken"] = broken  # registered without its needs: it needs nothing
    (result,) = run_checks(Snapshot(root="/"))
    assert (result.id, result.status) == ("storage.broken", Status.ERROR)
    assert result.summary == "check raised KeyError: 'nvme0'"
    assert result.remedy == "report this as a dltune bug, with the JSON output"


def test_every_unusable_input_is_named_and_the_check_not_run(
    registry: tuple[dict[str, object], dict[str, object]],
) -> None:
    check("storage.needs_all", needs=("mountinfo", "fstab"))(passing("storage.needs_all"))  # type: ignore[arg-type]
    snap = Snapshot(
        root="/",
        errors={
            "/proc/self/mountinfo": "PermissionError: denied",
            "/etc/fstab": "IsADirectoryError: a directory",
        },
    )
    (result,) = run_checks(snap)
    assert (result.id, result.status, result.critical) == ("storage.needs_all", Status.FAIL, False)
    assert result.summary == "cannot judge: PermissionError: denied; IsADirectoryError: a directory"
    assert result.evidence == {"unusable_inputs": dict(snap.errors)}
    assert result.remedy == (
        "repair or remove the file named (a role's fragment: apply that role again); "
        "dltune never judges without it"
    )


def test_a_problem_with_every_manifest_blocks_each_roles_check() -> None:
    """``*``: the manifest directory itself could not be read."""
    snap = Snapshot(root="/", manifest_problems={"*": "PermissionError: expected.d"})
    assert blockers(snap, ("manifest:data_disks", "mountinfo")) == {
        f"{snap.manifest_dir}/data_disks.json": "PermissionError: expected.d"
    }
