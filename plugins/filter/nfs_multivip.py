"""Validation of nfs_multivip's inputs against the node's own interfaces (Ansible facts).

Pure functions, unit-tested in tests/unit/test_nfs_multivip_filters.py."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any


def _addresses_of(facts: Mapping[str, Any], interface: str) -> set[str]:
    data = facts.get(interface.replace("-", "_"), {}) or {}
    found = set()
    for entry in [data.get("ipv4", {}), *(data.get("ipv4_secondaries", []) or [])]:
        if isinstance(entry, Mapping) and entry.get("address"):
            found.add(str(entry["address"]))
    return found


def _is_ipv4(value: Any) -> bool:
    try:
        ipaddress.IPv4Address(str(value))
    except ValueError:
        return False
    return True


def _vip_errors(
    where: str, vip: Mapping[str, Any], seen_vips: set[str], seen_mounts: dict[str, str]
) -> list[str]:
    """The VIP's address and mount point, each once across the list (the seen sets grow here)."""
    errors = []
    address, mount_point = vip.get("address"), vip.get("mount_point")
    if not _is_ipv4(address):
        errors.append(f"{where}.address={address!r} is not an IPv4 address")
    elif str(address) in seen_vips:
        errors.append(f"{where}.address={address} is listed twice")
    else:
        seen_vips.add(str(address))
    mount_key = mount_point.rstrip("/") if isinstance(mount_point, str) else ""
    if not isinstance(mount_point, str) or not mount_point.startswith("/") or not mount_key:
        errors.append(f"{where}.mount_point={mount_point!r} must be an absolute path other than /")
    elif mount_key in seen_mounts:
        errors.append(
            f"{where}.mount_point={mount_point} is already used by {seen_mounts[mount_key]}:"
            " one mount point per VIP"
        )
    else:
        seen_mounts[mount_point.rstrip("/")] = str(address)
    return errors


def _path_errors(
    where: str,
    vip: Mapping[str, Any],
    facts: Mapping[str, Any],
    interfaces: set[str],
    control: Mapping[str, Any] | None,
) -> list[str]:
    """The VIP's interface and source address on this host, and never the route Ansible uses."""
    errors = []
    address, interface, source = vip.get("address"), str(vip.get("interface", "")), vip.get("source")
    if interface not in interfaces:
        errors.append(
            f"{where}.interface={interface!r} is not an interface of this host ({sorted(interfaces)})"
        )
    elif not _is_ipv4(source) or str(source) not in _addresses_of(facts, interface):
        errors.append(
            f"{where}.source={source!r} is not an address on {interface} "
            f"({sorted(_addresses_of(facts, interface))})"
        )
    if (
        control
        and control.get("peer")
        and str(address) == str(control["peer"])
        and str(control.get("dev")) != interface
    ):
        errors.append(
            f"{where}.address={address} is the address Ansible connects from (via "
            f"{control.get('dev')}): routing it over {interface} would cut this connection"
        )
    return errors


def nfs_multivip_errors(
    vips: Sequence[Mapping[str, Any]],
    server_path: Any,
    facts: Mapping[str, Any],
    control: Mapping[str, Any] | None = None,
) -> list[str]:
    """Every reason the inputs cannot be applied, each naming the variable; [] when they can.

    control: {"peer": the controller's address as the node sees it, "dev": the interface the node
    reaches it through now} (empty for a local connection)."""
    errors = []
    if not isinstance(server_path, str) or not server_path.startswith("/"):
        errors.append(
            f"nfs_multivip_server_path={server_path!r} must be an absolute export path such as /nfs0"
        )
    if not vips:
        errors.append(
            "nfs_multivip_vips is empty: give at least one {address, mount_point, interface, source}"
        )
    interfaces = set(facts.get("interfaces", []) or [])
    seen_mounts: dict[str, str] = {}
    seen_vips: set[str] = set()
    for index, vip in enumerate(vips):
        where = f"nfs_multivip_vips[{index}]"
        if not isinstance(vip, Mapping):
            errors.append(f"{where} must be a mapping with address, mount_point, interface, source")
            continue
        errors += _vip_errors(where, vip, seen_vips, seen_mounts)
        errors += _path_errors(where, vip, facts, interfaces, control)
    return errors


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nfs_multivip_errors": nfs_multivip_errors}
