#!/usr/bin/python3
"""Host routes for storage VIPs: `VIP/32 dev IF src ADDR`, compared with `ip -j route` first.

Changes use `ip route replace` (atomic: a route is never deleted to be re-added, so traffic to a VIP
never loses its path), and `absent` deletes only the /32 routes this role describes.
"""

from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: nfs_multivip_routes
short_description: Ensure /32 host routes to storage VIPs leave by a given interface and source
options:
  vips:
    type: list
    elements: dict
    required: true
    description: Items with address (the VIP), interface and source (an address on that interface).
  state: {type: str, default: present, choices: [present, absent]}
"""


def route_differs(current: list[dict], dev: str, src: str) -> bool:
    """True unless exactly one route exists for the prefix, on dev, with preferred source src."""
    if len(current) != 1:
        return True
    route = current[0]
    return route.get("dev") != dev or route.get("prefsrc") != src


def route_change(vip: dict, state: str, current: list[dict]) -> list[str] | None:
    """The `ip route` command that brings one VIP's /32 route to `state`, or None when it is there."""
    prefix = f"{vip['address']}/32"
    if state == "present":
        if not route_differs(current, vip["interface"], vip["source"]):
            return None
        return [
            "ip",
            "route",
            "replace",
            prefix,
            "dev",
            vip["interface"],
            "src",
            vip["source"],
            "scope",
            "link",
        ]
    return ["ip", "route", "del", prefix] if current else None


def route_text(route: dict) -> str:
    """One route as `ip route` prints it: prefix, dev, src (what the diff shows)."""
    words = [str(route.get("dst", "")), "dev", str(route.get("dev", "?"))]
    if route.get("prefsrc"):
        words += ["src", str(route["prefsrc"])]
    return " ".join(words)


def routes_diff(changes: list[dict], vips: list[dict], state: str) -> dict[str, str]:
    """--diff of the host routes this run changes: each changed VIP's routes before, and its one route
    after (none after an absent)."""
    changed = {change["route"] for change in changes}
    before = [
        route_text({**route, "dst": change["route"]}) for change in changes for route in change["before"]
    ]
    after = [
        route_text({"dst": f"{vip['address']}/32", "dev": vip["interface"], "prefsrc": vip["source"]})
        for vip in vips
        if state == "present" and f"{vip['address']}/32" in changed
    ]
    return {
        "before": "".join(f"{line}\n" for line in before),
        "after": "".join(f"{line}\n" for line in after),
        "before_header": "ip route (VIP host routes)",
        "after_header": "ip route (VIP host routes)",
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "vips": {"type": "list", "elements": "dict", "required": True},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        },
        supports_check_mode=True,
    )
    changes = []
    for vip in module.params["vips"]:
        prefix = f"{vip['address']}/32"
        rc, out, err = module.run_command(["ip", "-j", "route", "show", "exact", prefix])
        if rc != 0:
            module.fail_json(msg=f"ip route show {prefix} failed: {err.strip()}")
        current = json.loads(out or "[]")
        argv = route_change(vip, module.params["state"], current)
        if argv is None:
            continue
        changes.append({"route": prefix, "before": current, "command": " ".join(argv)})
        if not module.check_mode:
            rc, _, err = module.run_command(argv)
            if rc != 0:
                module.fail_json(msg=f"{' '.join(argv)} failed: {err.strip()}", changes=changes)
    params = module.params
    diff = {"diff": routes_diff(changes, params["vips"], params["state"])} if changes and module._diff else {}
    module.exit_json(changed=bool(changes), changes=changes, **diff)


if __name__ == "__main__":
    main()
