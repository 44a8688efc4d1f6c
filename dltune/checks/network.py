"""Area ``network``: each storage VIP leaves by the interface and source address the nfs_multivip
role routed it through, and the VIPs are spread over the NICs as its manifest says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dltune.checks import check
from dltune.model import Result, Status
from dltune.snapshot import Snapshot

REMEDY = "apply role nfs_multivip (it restores `VIP/32 dev IF src ADDR`); check `ip route get VIP`"


def expected_vips(snap: Snapshot) -> list[Mapping[str, Any]]:
    """The VIPs of the nfs_multivip manifest (shared with the nfs area)."""
    return [v for v in snap.expected.get("nfs_multivip", {}).get("vips", []) if isinstance(v, Mapping)]


@check("network.vip_routes", needs=("manifest:nfs_multivip",))
def vip_routes(snap: Snapshot) -> list[Result]:
    vips = expected_vips(snap)
    if not vips:
        return [Result("network.vip_routes", Status.SKIP, "no storage VIPs in the nfs_multivip manifest")]
    results = []
    for vip in vips:
        address = str(vip["address"])
        route = snap.vip_routes.get(address)
        expected = {"dev": vip.get("interface"), "prefsrc": vip.get("source")}
        if route is None or route.error:
            results.append(
                Result(
                    "network.vip_routes",
                    Status.FAIL,
                    f"no route to {address}: {route.error if route else 'not probed'}",
                    subject=address,
                    evidence={"expected": expected},
                    remedy=REMEDY,
                    critical=True,
                )
            )
            continue
        actual = {"dev": route.dev, "prefsrc": route.prefsrc}
        ok = actual == expected
        results.append(
            Result(
                "network.vip_routes",
                Status.PASS if ok else Status.FAIL,
                f"{address} leaves by {route.dev} from {route.prefsrc}"
                + ("" if ok else f", expected {expected['dev']} from {expected['prefsrc']}"),
                subject=address,
                evidence={"expected": expected, "actual": actual},
                remedy=None if ok else REMEDY,
            )
        )
    return results


@check("network.vip_spread", needs=("manifest:nfs_multivip",))
def vip_spread(snap: Snapshot) -> Result:
    vips = expected_vips(snap)
    if not vips:
        return Result("network.vip_spread", Status.SKIP, "no storage VIPs in the nfs_multivip manifest")
    expected: dict[str, int] = {}
    actual: dict[str, int] = {}
    for vip in vips:
        expected[str(vip.get("interface"))] = expected.get(str(vip.get("interface")), 0) + 1
        route = snap.vip_routes.get(str(vip["address"]))
        dev = route.dev if route and route.dev else "(none)"
        actual[dev] = actual.get(dev, 0) + 1
    evidence = {"expected_vips_per_nic": expected, "actual_vips_per_nic": actual}
    if actual == expected:
        return Result(
            "network.vip_spread",
            Status.PASS,
            f"{len(vips)} VIPs spread over {len(expected)} NIC(s) as planned",
            evidence=evidence,
            metrics={"nics_used": float(len(actual))},
        )
    return Result(
        "network.vip_spread",
        Status.FAIL,
        f"VIPs use {len(actual)} NIC(s) where {len(expected)} were planned: storage bandwidth is lost",
        evidence=evidence,
        metrics={"nics_used": float(len(actual))},
        remedy=REMEDY,
    )
