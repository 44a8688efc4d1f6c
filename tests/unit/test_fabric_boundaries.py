"""The fabric area's judgements at their boundaries, whole: status, critical flag, the words a user
reads (summary, remedy) and the evidence the next audit compares against. Each table row is one
decision of dltune/checks/fabric.py on its edge (at a threshold, one below, one above; each branch of
a guard), so a changed comparison, threshold, key or text fails a row. Checks are pure: snapshots
are built here, nothing is probed."""

from __future__ import annotations

from typing import Any

import pytest

from dltune.checks import fabric
from dltune.model import Result, Status
from dltune.snapshot import AerCounts, Fabric, Gpu, IbPort, NvLink, NvmlState, PciDevice
from tests.unit.test_fabric import aer_snapshot, expecting, fm_node, links, port, snap

# The remedies a user reads, verbatim: a remedy that changes should change here on purpose.
SM_REMEDY = "check that a subnet manager (opensm, or the switch's) runs on this fabric and sees the port"
CABLE_REMEDY = "check the cable and the switch port; disable the port if it is meant to be unused"
BRING_UP_REMEDY = "bring the port up (cable, switch port, adapter firmware)"
SHORT_LINK_REMEDY = (
    "a link that trained below its rate or width has a bad cable, transceiver or port: "
    "reseat or replace it (ibdiagnet, mlxlink -d <dev> show the lane errors)"
)
WEDGED_REMEDY = "an adapter that does not answer in sysfs is wedged: drain the node and reset or replace it"
FLAP_REMEDY = (
    "a flapping link breaks NCCL and MPI jobs: drain the node, then replace the cable or "
    "transceiver (mlxlink shows the physical errors)"
)
IB_ERRORS_REMEDY = (
    "errors that keep rising mean a marginal cable or transceiver: check it with mlxlink or "
    "ibdiagnet, then clear the counters (perfquery -x -R) to watch the rate"
)
AER_FATAL_REMEDY = (
    "drain the node; reseat the device or riser and check the slot (the kernel log names the "
    "error); replace it if the errors return"
)
AER_NONFATAL_REMEDY = (
    "check the kernel log for the failing requests; reseat or replace the device if they recur"
)
AER_MARGINAL_REMEDY = (
    "a marginal PCIe link (riser, slot, cable) retries transfers and later drops speed or "
    "fails: reseat the device at the next maintenance"
)
HCA_WIDTH_REMEDY = (
    "reseat the adapter in a full-width slot (or its riser); check the BIOS bifurcation setting"
)
HCA_SPEED_REMEDY = (
    "a link that trained at a lower generation has a signal problem or a BIOS limit: reseat, "
    "and check the slot's configured generation"
)
NVLINK_MISSING_REMEDY = "check the GPU's NVLink bridge or baseboard (nvidia-smi nvlink -s)"
NVLINK_DOWN_REMEDY = (
    "drain the node: reset the GPU (or the baseboard) and check the links with nvidia-smi nvlink "
    "-s; on NVSwitch systems check Fabric Manager's log"
)
NVLINK_ERRORS_REMEDY = (
    "errors that keep rising mean a failing link: watch them (nvidia-smi nvlink -e), and have "
    "the GPU or baseboard checked if they continue"
)
NOT_LISTED = " (not listed in the expected ports)"
POLLING = "enabled but no link (Polling): cable unplugged or faulty, or the switch port down"
EXPECTED = {"device": "mlx5_0", "port": 1}
AT_400 = {"device": "mlx5_*", "port": 1, "rate_gbps": 400}


def port_evidence(judged: IbPort, wanted: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "state": judged.state,
        "phys_state": judged.phys_state,
        "rate_gbps": judged.rate_gbps,
        "width": judged.width,
        "link_layer": judged.link_layer,
        "expected": wanted,
    }


def judge_port(judged: IbPort, wanted: dict[str, Any] | None) -> Result:
    node = snap(fabric=Fabric(ib_ports=(judged,)), expected=expecting(wanted) if wanted else {})
    (result,) = fabric.ib_ports(node)
    return result


# ------------------------------------------------------------------------------------- RDMA ports


@pytest.mark.parametrize(
    ("changes", "wanted", "status", "summary", "remedy", "shared"),
    [
        pytest.param(
            {"state": "DOWN", "phys_state": "Disabled"},
            None,
            Status.PASS,
            "InfiniBand port disabled and not expected: unused",
            None,
            None,
            id="a disabled port nobody expects is unused",
        ),
        pytest.param(
            {"state": "DOWN", "phys_state": "Disabled", "link_layer": "Ethernet"},
            None,
            Status.PASS,
            "RoCE port disabled and not expected: unused",
            None,
            None,
            id="an Ethernet link layer is named RoCE",
        ),
        pytest.param(
            {"state": "DOWN", "phys_state": "Disabled"},
            EXPECTED,
            Status.FAIL,
            "InfiniBand port DOWN/Disabled",
            BRING_UP_REMEDY,
            None,
            id="an expected port switched off fails",
        ),
        pytest.param(
            {"state": "DOWN", "phys_state": "Sleep"},
            None,
            Status.WARN,
            "InfiniBand port DOWN/Sleep" + NOT_LISTED,
            BRING_UP_REMEDY,
            None,
            id="an unexpected port in another state warns and says it is not listed",
        ),
        pytest.param(
            {"state": "INIT", "phys_state": "LinkUp"},
            EXPECTED,
            Status.FAIL,
            "InfiniBand port link up but port INIT: no subnet manager has configured it",
            SM_REMEDY,
            "InfiniBand subnet manager",
            id="an expected port left in INIT names the subnet manager",
        ),
        pytest.param(
            {"state": "ARMED", "phys_state": "LinkUp", "link_layer": "Ethernet"},
            None,
            Status.WARN,
            "RoCE port link up but port ARMED: no subnet manager has configured it" + NOT_LISTED,
            SM_REMEDY,
            "InfiniBand subnet manager",
            id="a port left ARMED names the subnet manager too",
        ),
        pytest.param(
            {"state": "DOWN", "phys_state": "LinkUp"},
            EXPECTED,
            Status.FAIL,
            "InfiniBand port link up but port DOWN",
            SM_REMEDY,
            None,
            id="a link up on a DOWN port does not blame the subnet manager",
        ),
        pytest.param(
            {"state": "DOWN", "phys_state": "Polling"},
            EXPECTED,
            Status.FAIL,
            f"InfiniBand port {POLLING}",
            CABLE_REMEDY,
            None,
            id="an expected port polling for a link fails on its cable",
        ),
        pytest.param(
            {"state": "INIT", "phys_state": "Polling"},
            None,
            Status.WARN,
            f"InfiniBand port {POLLING}" + NOT_LISTED,
            CABLE_REMEDY,
            None,
            id="INIT without a physical link is the cable's, not the subnet manager's",
        ),
    ],
)
def test_a_port_without_a_link(
    changes: dict[str, Any],
    wanted: dict[str, Any] | None,
    status: Status,
    summary: str,
    remedy: str | None,
    shared: str | None,
) -> None:
    """Expected ports fail (critical), unexpected ones warn; only a port whose link is up but which no
    subnet manager configured (INIT, ARMED) names the subnet manager as the shared cause."""
    judged = port(**changes)
    assert judge_port(judged, wanted) == Result(
        "fabric.ib_ports",
        status,
        summary,
        "mlx5_0/1",
        port_evidence(judged, wanted),
        remedy,
        critical=wanted is not None,
        shared_dependency=shared,
    )


@pytest.mark.parametrize(
    ("changes", "wanted", "summary", "rate"),
    [
        pytest.param({}, AT_400, "InfiniBand port active at 400 Gb/s (4X)", 400.0, id="at its rate"),
        pytest.param(
            {"rate_gbps": 800.0}, AT_400, "InfiniBand port active at 800 Gb/s (4X)", 800.0, id="above it"
        ),
        pytest.param(
            {"link_layer": "Ethernet", "width": None, "rate_gbps": 100.0},
            None,
            "RoCE port active at 100 Gb/s",
            100.0,
            id="no width known: none named",
        ),
        pytest.param(
            {"rate_gbps": None},
            None,
            "InfiniBand port active at unknown rate (4X)",
            0.0,
            id="no rate known and none expected",
        ),
    ],
)
def test_an_active_port_that_meets_its_expectation_passes(
    changes: dict[str, Any], wanted: dict[str, Any] | None, summary: str, rate: float
) -> None:
    judged = port(**changes)
    assert judge_port(judged, wanted) == Result(
        "fabric.ib_ports",
        Status.PASS,
        summary,
        "mlx5_0/1",
        port_evidence(judged, wanted),
        metrics={"rate_gbps": rate},
    )


@pytest.mark.parametrize(
    ("changes", "wanted", "summary", "rate"),
    [
        pytest.param(
            {"rate_gbps": 399.0},
            AT_400,
            "InfiniBand port active at 399.0 Gb/s, expected 400",
            399.0,
            id="one below its rate",
        ),
        pytest.param(
            {"rate_gbps": None},
            AT_400,
            "InfiniBand port active at an unknown rate Gb/s, expected 400",
            0.0,
            id="a rate sysfs did not give cannot meet one",
        ),
        pytest.param(
            {"width": None},
            {"device": "mlx5_0", "width": "4X"},
            "InfiniBand port active at width unknown, expected 4X",
            400.0,
            id="an unknown width cannot meet one",
        ),
        pytest.param(
            {"link_layer": "Ethernet"},
            {"device": "mlx5_0", "link_layer": "InfiniBand"},
            "RoCE port active at link layer Ethernet, expected InfiniBand",
            400.0,
            id="the wrong link layer",
        ),
    ],
)
def test_an_active_port_below_its_expectation_fails_without_draining(
    changes: dict[str, Any], wanted: dict[str, Any], summary: str, rate: float
) -> None:
    """A link that trained short still carries traffic: a failure to fix, not critical."""
    judged = port(**changes)
    assert judge_port(judged, wanted) == Result(
        "fabric.ib_ports",
        Status.FAIL,
        summary,
        "mlx5_0/1",
        port_evidence(judged, wanted),
        SHORT_LINK_REMEDY,
        metrics={"rate_gbps": rate},
    )


def test_an_expectation_names_its_port_number() -> None:
    """{device: mlx5_0, port: 2} is mlx5_0's second port, not its first (port 1 is only the default)."""
    wanted = {"device": "mlx5_0", "port": 2}
    ports = (port(port=1), port(port=2))
    results = fabric.ib_ports(snap(fabric=Fabric(ib_ports=ports), expected=expecting(wanted)))
    assert [(r.subject, r.status, r.evidence["expected"]) for r in results] == [
        ("mlx5_0/1", Status.PASS, None),
        ("mlx5_0/2", Status.PASS, wanted),
    ]


@pytest.mark.parametrize("check", [fabric.ib_ports, fabric.ib_errors])
def test_adapters_that_do_not_answer_fail_both_port_checks_critically(check: Any) -> None:
    wedged = snap(fabric=Fabric(ib_error="the RDMA adapters did not answer within 5 s"))
    check_id = f"fabric.{check.__name__}"
    assert check(wedged) == [
        Result(
            check_id,
            Status.FAIL,
            "cannot judge the RDMA ports: the RDMA adapters did not answer within 5 s",
            remedy=WEDGED_REMEDY,
            critical=True,
        )
    ]


# ---------------------------------------------------------------------------- RDMA error counters


def judge_counters(counters: dict[str, int], previous: dict[str, int] | None = None) -> Result:
    node = snap(
        fabric=Fabric(ib_ports=(port(counters=counters),)),
        previous={"fabric.ib_errors|mlx5_0/1": previous} if previous is not None else {},
    )
    (result,) = fabric.ib_errors(node)
    return result


def test_counters_below_every_threshold_pass_and_are_recorded() -> None:
    counters = {"symbol_error": 99, "port_rcv_errors": 99, "link_downed": 4}
    assert judge_counters(counters) == Result(
        "fabric.ib_errors",
        Status.PASS,
        "no link errors above the thresholds",
        "mlx5_0/1",
        {"counters": counters, "rose": {}, "saturated": []},
    )


def test_unreadable_counters_are_a_skip() -> None:
    assert judge_counters({}) == Result(
        "fabric.ib_errors", Status.SKIP, "the port's error counters cannot be read", "mlx5_0/1"
    )


def test_a_link_that_went_down_since_the_previous_audit_flaps() -> None:
    counters = {"symbol_error": 30, "link_downed": 3}
    assert judge_counters(counters, {"symbol_error": 30, "link_downed": 1}) == Result(
        "fabric.ib_errors",
        Status.FAIL,
        "the link went down 2 time(s) since the previous audit: it flaps",
        "mlx5_0/1",
        {"counters": counters, "rose": {"link_downed": 2}, "saturated": []},
        FLAP_REMEDY,
    )


def test_high_rising_and_saturated_counters_are_each_named() -> None:
    """Levels in name order, then rises; the counters stuck at their width's maximum last."""
    counters = {"symbol_error": 0xFFFF, "link_error_recovery": 0xFF, "port_rcv_errors": 150}
    previous = {"symbol_error": 0xFFFF - 10, "port_rcv_errors": 140}
    assert judge_counters(counters, previous) == Result(
        "fabric.ib_errors",
        Status.WARN,
        "link errors: link_error_recovery 255, port_rcv_errors 150, symbol_error 65535, "
        "port_rcv_errors +10 since the previous audit, symbol_error +10 since the previous audit "
        "(symbol_error, link_error_recovery at the counter's maximum)",
        "mlx5_0/1",
        {
            "counters": counters,
            "rose": {"symbol_error": 10, "port_rcv_errors": 10},
            "saturated": ["symbol_error", "link_error_recovery"],
        },
        IB_ERRORS_REMEDY,
    )


def test_a_counter_at_its_level_without_saturation_says_only_its_level() -> None:
    assert judge_counters({"symbol_error": 100}) == Result(
        "fabric.ib_errors",
        Status.WARN,
        "link errors: symbol_error 100",
        "mlx5_0/1",
        {"counters": {"symbol_error": 100}, "rose": {}, "saturated": []},
        IB_ERRORS_REMEDY,
    )


def test_a_counter_without_a_threshold_is_recorded_never_judged() -> None:
    """A counter dltune has no threshold for (a newer probe's) is evidence only: neither its level, its
    rise nor a maximum makes a finding of it."""
    counters = {"symbol_error": 0, "port_xmit_discards": 7}
    assert judge_counters(counters, {"port_xmit_discards": 0}) == Result(
        "fabric.ib_errors",
        Status.PASS,
        "no link errors above the thresholds",
        "mlx5_0/1",
        {"counters": counters, "rose": {"port_xmit_discards": 7}, "saturated": []},
    )


# -------------------------------------------------------------------------------------- PCIe AER

GPU3 = "GPU 3 (0000:18:00.0)"


@pytest.mark.parametrize(
    ("aer", "previous", "status", "critical", "summary", "remedy", "rose"),
    [
        pytest.param(
            AerCounts(2, 1, 7, {"fatal:Undefined": 2}),
            None,
            Status.FAIL,
            True,
            f"{GPU3}: 2 fatal PCIe error(s) since boot: the link was reset under the driver",
            AER_FATAL_REMEDY,
            None,
            id="a fatal error drains the node",
        ),
        pytest.param(
            AerCounts(0, 3, 7, {"nonfatal:Completion Timeout": 3}),
            None,
            Status.FAIL,
            False,
            f"{GPU3}: 3 uncorrectable (non-fatal) PCIe error(s) since boot: transfers were lost",
            AER_NONFATAL_REMEDY,
            None,
            id="a non-fatal uncorrectable error fails",
        ),
        pytest.param(
            AerCounts(0, 0, fabric.AER_CORRECTABLE_WARN),
            None,
            Status.WARN,
            False,
            f"{GPU3}: 1000 correctable PCIe errors since boot: a marginal link",
            AER_MARGINAL_REMEDY,
            {},
            id="correctable errors at the level warn",
        ),
        pytest.param(
            AerCounts(0, 0, 150),
            {"correctable": 150 - fabric.AER_CORRECTABLE_RISE_WARN},
            Status.WARN,
            False,
            f"{GPU3}: 150 correctable PCIe errors since boot, 100 since the previous audit: a marginal link",
            AER_MARGINAL_REMEDY,
            {"correctable": 100},
            id="correctable errors rising by the limit warn",
        ),
        pytest.param(
            AerCounts(0, 0, fabric.AER_CORRECTABLE_WARN - 1),
            None,
            Status.PASS,
            False,
            f"{GPU3}: no uncorrectable PCIe errors, 999 correctable since boot",
            None,
            None,
            id="one below the level passes and counts them",
        ),
        pytest.param(
            AerCounts(None, None, None),
            None,
            Status.PASS,
            False,
            f"{GPU3}: no uncorrectable PCIe errors, 0 correctable since boot",
            None,
            None,
            id="no totals in sysfs count as none",
        ),
    ],
)
def test_aer_verdicts(
    aer: AerCounts,
    previous: dict[str, int] | None,
    status: Status,
    critical: bool,
    summary: str,
    remedy: str | None,
    rose: dict[str, int] | None,
) -> None:
    counters = {
        name: value
        for name, value in (
            ("fatal", aer.fatal),
            ("nonfatal", aer.nonfatal),
            ("correctable", aer.correctable),
        )
        if value is not None
    }
    # source: the kernel's sysfs counters decided (a kernel without them: its log, test_aer_kernel_log.py)
    evidence: dict[str, Any] = {"counters": counters, "nonzero": dict(aer.nonzero), "source": "sysfs"}
    if rose is not None:
        evidence["rose"] = rose
    node = aer_snapshot(aer, {"fabric.pcie_aer|0000:18:00.0": previous} if previous else None)
    assert fabric.pcie_aer(node) == [
        Result("fabric.pcie_aer", status, summary, "0000:18:00.0", evidence, remedy, critical=critical)
    ]


@pytest.mark.parametrize(("kind", "label"), [("hca", "adapter"), ("nvswitch", "NVSwitch"), ("gpu", "GPU")])
def test_a_device_nvml_does_not_name_is_named_by_its_kind_and_address(kind: str, label: str) -> None:
    device = PciDevice("0000:5e:00.0", kind, "0x15b3", "0x020700", AerCounts(0, 0, 0))
    (result,) = fabric.pcie_aer(snap(fabric=Fabric(pci=(device,))))
    assert result.summary == f"{label} 0000:5e:00.0: no uncorrectable PCIe errors, 0 correctable since boot"


# ------------------------------------------------------------------------------ adapter PCIe link

SLOT = "0000:00:01.0"
GEN5 = "32.0 GT/s PCIe"
GEN4 = "16.0 GT/s PCIe"


def judge_hca(**link: Any) -> Result:
    device = PciDevice("0000:1a:00.0", "hca", "0x15b3", "0x020700", None, bridges=(SLOT,), **link)
    (result,) = fabric.hca_pcie(snap(fabric=Fabric(pci=(device,))))
    return result


def hca_evidence(link: dict[str, Any], limited_by: str | None) -> dict[str, Any]:
    evidence = {
        "width": link.get("link_width"),
        "width_max": link.get("link_width_max"),
        "speed": link.get("link_speed"),
        "speed_max": link.get("link_speed_max"),
        "slot_width_max": link.get("upstream_width_max"),
        "slot_speed_max": link.get("upstream_speed_max"),
    }
    return evidence if limited_by is None else {**evidence, "expected_limited_by": limited_by}


FULL = {"link_width": 16, "link_width_max": 16, "link_speed": GEN5, "link_speed_max": GEN5}
FULL_SLOT = {**FULL, "upstream_width_max": 16, "upstream_speed_max": GEN5}


@pytest.mark.parametrize(
    "link",
    [
        pytest.param({"link_width": None, "link_width_max": 16}, id="no current width"),
        pytest.param({"link_width": 16, "link_width_max": None}, id="no maximum width"),
    ],
)
def test_an_adapter_link_without_both_widths_is_a_skip(link: dict[str, Any]) -> None:
    assert judge_hca(**link) == Result(
        "fabric.hca_pcie",
        Status.SKIP,
        "its PCIe link width is not in sysfs",
        "0000:1a:00.0",
        hca_evidence(link, None),
    )


@pytest.mark.parametrize(
    ("link", "status", "summary", "remedy", "limited_by"),
    [
        pytest.param(
            {**FULL_SLOT, "link_width": 8},
            Status.FAIL,
            "adapter on x8 of the x16 PCIe lanes it and its slot support: its bandwidth is capped below "
            "the network's",
            HCA_WIDTH_REMEDY,
            "the device",
            id="one lane count short of x16 fails",
        ),
        pytest.param(
            {**FULL_SLOT, "link_speed": GEN4},
            Status.WARN,
            "adapter's PCIe link at 16.0 GT/s PCIe, below the 32 GT/s it and its slot support",
            HCA_SPEED_REMEDY,
            "the device",
            id="a generation below warns",
        ),
        pytest.param(
            FULL_SLOT,
            Status.PASS,
            "adapter on x16 at 32.0 GT/s PCIe",
            None,
            "the device",
            id="a slot equal to the device does not limit it",
        ),
        pytest.param(
            {"link_width": 16, "link_width_max": 16},
            Status.PASS,
            "adapter on x16",
            None,
            "the device",
            id="no speeds in sysfs: the width alone",
        ),
        pytest.param(
            {**FULL_SLOT, "link_width": 8, "upstream_width_max": 8},
            Status.PASS,
            f"adapter on x8 at 32.0 GT/s PCIe (limited by its slot ({SLOT}), as designed)",
            None,
            f"its slot ({SLOT})",
            id="an x8 slot limits an x16 adapter by design",
        ),
        pytest.param(
            {**FULL_SLOT, "link_speed": GEN4, "upstream_speed_max": GEN4},
            Status.PASS,
            f"adapter on x16 at 16.0 GT/s PCIe (limited by its slot ({SLOT}), as designed)",
            None,
            f"its slot ({SLOT})",
            id="a Gen4 slot limits a Gen5 adapter by design",
        ),
    ],
)
def test_an_adapter_link_against_what_it_and_its_slot_support(
    link: dict[str, Any], status: Status, summary: str, remedy: str | None, limited_by: str
) -> None:
    assert judge_hca(**link) == Result(
        "fabric.hca_pcie", status, summary, "0000:1a:00.0", hca_evidence(link, limited_by), remedy
    )


# ------------------------------------------------------------------------------------------ NVLink


def judge_nvlink(gpu_links: tuple[NvLink, ...] | None, uuid: str | None = "GPU-0", **changes: Any) -> Result:
    gpu = Gpu(index=0, uuid=uuid, nvlinks=gpu_links)
    (result,) = fabric.nvlink(snap(nvml=NvmlState(True, gpus=(gpu,)), **changes))
    return result


def nvlink_evidence(active: list[int], down: list[int], counters: dict[str, int], **rest: Any) -> dict:
    return {"active": active, "down": down, "expected_links": None, "counters": counters, **rest}


def test_a_gpu_with_no_nvlink_where_the_site_expects_some_fails_critically() -> None:
    expected = {"health": {"nvlink_links_per_gpu": 12}}
    assert judge_nvlink((), expected=expected) == Result(
        "fabric.nvlink",
        Status.FAIL,
        "GPU 0: NVML reports no NVLink, 12 expected",
        "0:GPU-0",
        {"expected_links": 12},
        NVLINK_MISSING_REMEDY,
        critical=True,
    )


def test_a_pcie_card_without_nvlink_is_a_skip_named_by_its_index_without_a_uuid() -> None:
    """No link answers (a PCIe card, or an SXM card alone in a VM, as the lab's H200 SXM was): a skip
    that does not claim which; links never read are a skip that says so."""
    assert judge_nvlink((), uuid=None) == Result(
        "fabric.nvlink",
        Status.SKIP,
        "GPU 0 reports no NVLink (a PCIe card, or links this VM or container does not see)",
        "0",
    )
    assert judge_nvlink(None, uuid=None) == Result(
        "fabric.nvlink", Status.SKIP, "GPU 0: NVLink state not read", "0"
    )


def test_links_down_of_those_expected_are_named_and_drain_the_node() -> None:
    assert judge_nvlink(links(4, down=(1, 3))) == Result(
        "fabric.nvlink",
        Status.FAIL,
        "GPU 0: 2 of 4 NVLinks active (down: 1, 3); collectives over NVLink slow down or hang",
        "0:GPU-0",
        nvlink_evidence([0, 2], [1, 3], {}),
        NVLINK_DOWN_REMEDY,
        critical=True,
    )


def test_all_links_active_pass_and_count_them() -> None:
    assert judge_nvlink(links(4), uuid=None) == Result(
        "fabric.nvlink",
        Status.PASS,
        "GPU 0: all 4 NVLinks active",
        "0",
        nvlink_evidence([0, 1, 2, 3], [], {}),
    )


def test_links_none_of_which_is_connected_without_an_nvswitch_pass() -> None:
    assert judge_nvlink(links(2, down=(0, 1))) == Result(
        "fabric.nvlink",
        Status.PASS,
        "GPU 0: no NVLink connected (a PCIe card without a bridge), none expected",
        "0:GPU-0",
        nvlink_evidence([], [0, 1], {}),
    )


def test_nvlink_errors_name_each_link_counter_and_rise() -> None:
    """Levels per link in key order, then the rises since the previous audit, joined by '; '."""
    gpu_links = links(2, replay_errors=fabric.NVLINK_REPLAY_WARN, recovery_errors=3)
    counters = {"0:replay": 1000, "0:recovery": 3, "1:replay": 1000, "1:recovery": 3}
    result = judge_nvlink(gpu_links, previous={"fabric.nvlink|0:GPU-0": {"0:recovery": 2}})
    assert result == Result(
        "fabric.nvlink",
        Status.WARN,
        "GPU 0: NVLink errors: link 0 replay 1000; link 1 replay 1000; "
        "link 0 recovery +1 since the previous audit",
        "0:GPU-0",
        nvlink_evidence([0, 1], [], counters, rose={"0:recovery": 1}),
        NVLINK_ERRORS_REMEDY,
    )


# ------------------------------------------------------------------------------- Fabric Manager


def test_fabric_manager_counts_each_nvswitch_on_the_bus_once() -> None:
    result = fabric.fabric_manager(fm_node(True, "580.95.05-1", switches_on_bus=1, recorded=0))
    assert (result.status, result.summary) == (
        Status.PASS,
        "Fabric Manager running for 1 NVSwitch(es) at 580.95.05",
    )
    assert result.evidence["nvswitches"] == 1


def test_a_fabric_known_from_nvml_alone_is_one_nvswitch() -> None:
    registered = snap(
        nvml=NvmlState(True, gpus=(Gpu(index=0, fabric_state=3, fabric_status=0),)),
        fabric=Fabric(fabric_manager_running=True),
    )
    result = fabric.fabric_manager(registered)
    assert (result.status, result.summary) == (Status.PASS, "Fabric Manager running for 1 NVSwitch(es)")


def test_a_gpu_the_fabric_has_not_started_to_take_in_is_unregistered() -> None:
    gpus = (Gpu(index=0, fabric_state=3, fabric_status=0), Gpu(index=1, fabric_state=1))
    node = snap(nvml=NvmlState(True, gpus=gpus), fabric=Fabric(fabric_manager_running=True))
    result = fabric.fabric_manager(node)
    assert (result.status, result.critical) == (Status.FAIL, True)
    assert (
        result.summary
        == "GPUs not registered with the NVLink fabric (GPU 1 not started): CUDA cannot use them yet"
    )
    assert result.evidence["fabric_state"] == {"1": "not started"}


# ------------------------------------------------------------------------------ GPU-NIC topology


def pci(kind: str, host_bridge: str | None, bridges: tuple[str, ...], numa: int | None = 0) -> PciDevice:
    address = "0000:03:00.0" if kind == "gpu" else "0000:04:00.0"
    return PciDevice(
        address, kind, "0x10de", "0x030200", host_bridge=host_bridge, bridges=bridges, numa_node=numa
    )


ROOT = "0000:00:01.0"


@pytest.mark.parametrize(
    ("gpu", "nic", "level"),
    [
        pytest.param(
            pci("gpu", None, (ROOT,)), pci("hca", "pci0000:00", (ROOT,)), None, id="one host bridge unknown"
        ),
        pytest.param(
            pci("gpu", "pci0000:00", (ROOT,), numa=None),
            pci("hca", "pci0000:40", ("0000:40:01.0",), numa=0),
            None,
            id="one NUMA node unknown across host bridges",
        ),
        pytest.param(
            pci("gpu", "pci0000:00", (ROOT, "0000:01:00.0")),
            pci("hca", "pci0000:00", (ROOT,)),
            "PIX",
            id="the adapter on the root port the GPU's switch hangs off",
        ),
        pytest.param(
            pci("gpu", "pci0000:00", (ROOT, "0000:01:00.0")),
            pci("hca", "pci0000:00", (ROOT, "0000:01:01.0")),
            "PIX",
            id="two steps to the shared bridge",
        ),
        pytest.param(
            pci("gpu", "pci0000:00", (ROOT, "0000:01:00.0", "0000:02:00.0")),
            pci("hca", "pci0000:00", (ROOT, "0000:01:01.0")),
            "PXB",
            id="three steps to the shared bridge",
        ),
    ],
)
def test_link_level_at_each_boundary(gpu: PciDevice, nic: PciDevice, level: str | None) -> None:
    assert fabric.link_level(gpu, nic) == level


def test_an_adapter_without_an_rdma_name_is_named_by_its_pci_address() -> None:
    gpu = pci("gpu", "pci0000:00", (ROOT, "0000:01:00.0"))
    nic = pci("hca", "pci0000:00", (ROOT, "0000:01:01.0"))
    assert fabric.gpu_topology(snap(fabric=Fabric(pci=(gpu, nic)))) == {
        "0000:03:00.0": {"numa_node": 0, "nearest_nics": ["0000:04:00.0"], "level": "PIX"}
    }


def facts(numa: int | None, nearest: list[str], level: str | None) -> dict[str, Any]:
    return {"numa_node": numa, "nearest_nics": nearest, "level": level}


@pytest.mark.parametrize(
    ("found", "numa_wanted", "nics_wanted", "status", "summary"),
    [
        pytest.param(
            facts(0, ["mlx5_0"], "PIX"),
            0,
            "mlx5_0",
            Status.PASS,
            "NUMA node 0, nearest adapter(s) mlx5_0 (PIX)",
            id="a single name is one adapter, not its letters",
        ),
        pytest.param(
            facts(0, ["mlx5_0", "mlx5_1"], "PXB"),
            None,
            None,
            Status.PASS,
            "NUMA node 0, nearest adapter(s) mlx5_0, mlx5_1 (PXB)",
            id="ties all named",
        ),
        pytest.param(
            facts(None, [], None),
            None,
            None,
            Status.PASS,
            "NUMA node unknown, nearest adapter(s) unknown",
            id="nothing known, nothing expected",
        ),
        pytest.param(
            facts(1, ["mlx5_0"], "SYS"),
            None,
            None,
            Status.WARN,
            "reaches every RDMA adapter only across the sockets (SYS): GPUDirect RDMA crosses the CPUs",
            id="across the sockets without an expectation warns",
        ),
        pytest.param(
            facts(1, ["mlx5_0"], "SYS"),
            None,
            ["mlx5_0"],
            Status.PASS,
            "NUMA node 1, nearest adapter(s) mlx5_0 (SYS)",
            id="across the sockets as the site expects passes",
        ),
        pytest.param(
            facts(0, ["mlx5_0"], "PIX"),
            1,
            ["mlx5_2", "mlx5_1"],
            Status.FAIL,
            "on NUMA node 0, the site expects 1; nearest adapter(s) mlx5_0 (PIX), the site expects "
            "mlx5_1, mlx5_2",
            id="both expectations missed are both named",
        ),
        pytest.param(
            facts(0, ["mlx5_0", "mlx5_1"], "PIX"),
            None,
            "mlx5_0",
            Status.FAIL,
            "nearest adapter(s) mlx5_0, mlx5_1 (PIX), the site expects mlx5_0",
            id="a tie where the site expects one adapter",
        ),
        pytest.param(
            facts(0, [], None),
            None,
            "mlx5_0",
            Status.FAIL,
            "nearest adapter(s) none reached, the site expects mlx5_0",
            id="no adapter reached",
        ),
    ],
)
def test_a_gpu_s_topology_against_the_site_s_expectations(
    found: dict[str, Any], numa_wanted: object, nics_wanted: object, status: Status, summary: str
) -> None:
    assert fabric.judge_gpu_topology(found, numa_wanted, nics_wanted) == (status, summary)


def test_nvlink_errors_are_listed_in_link_order_not_string_order() -> None:
    """An HGX H100 GPU has 18 links: link 2 comes before link 10 (string order put 10 first)."""
    gpu_links = tuple(NvLink(n, True, recovery_errors=20 if n in (2, 10, 17) else 0) for n in range(18))
    result = judge_nvlink(gpu_links)
    assert result.status is Status.WARN
    assert result.summary.startswith(
        "GPU 0: NVLink errors: link 2 recovery 20; link 10 recovery 20; link 17 recovery 20"
    )
