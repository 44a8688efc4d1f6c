"""nfs_multivip's input validation (plugins/filter/nfs_multivip.py) against
Ansible facts shaped like a two-NIC node's, and its route module's decision per VIP
(plugins/modules/nfs_multivip_routes.py; the routes themselves: molecule and the lab)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_role_module
from tests.real_corpus import Sample, samples

errors_of = load_role_module("plugins/filter/nfs_multivip.py").nfs_multivip_errors
FACTS = {
    "interfaces": ["lo", "em1", "em2", "eno1"],
    "em1": {"ipv4": {"address": "10.21.115.112"}},
    "em2": {"ipv4": {"address": "10.21.115.113"}, "ipv4_secondaries": [{"address": "10.21.115.114"}]},
    "eno1": {"ipv4": {"address": "192.0.2.10"}},
}
GOOD = [
    {"address": "10.21.115.6", "mount_point": "/mnt/nfs0", "interface": "em1", "source": "10.21.115.112"},
    {"address": "10.21.115.7", "mount_point": "/mnt/nfs1", "interface": "em2", "source": "10.21.115.114"},
]


def test_valid_input_passes() -> None:
    assert errors_of(GOOD, "/nfs0", FACTS, {"peer": "192.0.2.1", "dev": "eno1"}) == []


def test_each_bad_input_names_its_variable() -> None:
    bad = [
        {"address": "10.21.115", "mount_point": "mnt", "interface": "em1", "source": "10.21.115.112"},
        {"address": "10.21.115.7", "mount_point": "/mnt/nfs1", "interface": "em7", "source": "10.21.115.113"},
        {
            "address": "10.21.115.8",
            "mount_point": "/mnt/nfs1/",
            "interface": "em1",
            "source": "10.21.115.113",
        },
        {"address": "10.21.115.8", "mount_point": "/", "interface": "em2", "source": "10.21.115.113"},
    ]
    found = errors_of(bad, "nfs0", FACTS)
    assert any(e.startswith("nfs_multivip_server_path='nfs0'") for e in found)
    assert any("nfs_multivip_vips[0].address='10.21.115' is not an IPv4" in e for e in found)
    assert any("nfs_multivip_vips[0].mount_point='mnt'" in e for e in found)
    assert any("nfs_multivip_vips[1].interface='em7' is not an interface" in e for e in found)
    assert any("nfs_multivip_vips[2].mount_point=/mnt/nfs1/ is already used" in e for e in found)
    assert any("nfs_multivip_vips[2].source='10.21.115.113' is not an address on em1" in e for e in found)
    assert any("nfs_multivip_vips[3].address=10.21.115.8 is listed twice" in e for e in found)
    assert any("nfs_multivip_vips[3].mount_point='/'" in e for e in found)
    assert errors_of([], "/nfs0", FACTS) == [
        "nfs_multivip_vips is empty: give at least one {address, mount_point, interface, source}"
    ]


def test_a_route_that_would_move_the_ansible_connection_is_refused() -> None:
    """The controller sits at a VIP address reached through eno1: routing it over em1 cuts Ansible off."""
    control = {"peer": "10.21.115.6", "dev": "eno1"}
    found = errors_of(GOOD, "/nfs0", FACTS, control)
    assert len(found) == 1 and "the address Ansible connects from" in found[0] and "[0]" in found[0]
    assert errors_of(GOOD, "/nfs0", FACTS, {"peer": "10.21.115.6", "dev": "em1"}) == []


# --- module nfs_multivip_routes: which `ip route` command each VIP needs (route_change) -------------------
routes = load_role_module("plugins/modules/nfs_multivip_routes.py")
VIP = {"address": "10.21.115.200", "interface": "em2", "source": "10.21.115.113"}


@pytest.mark.parametrize("sample", samples("ip_route_get"), ids=str)
def test_a_route_printed_by_iproute2_is_kept_only_on_its_own_dev_and_source(sample: Sample) -> None:
    """Real `ip -j route` records (the same keys as `route show exact`): the one the EXPECT line names
    is kept as it is; another interface, another source or a second route replaces it."""
    record = json.loads(sample.body)[0]
    _, dev, _, src = sample.expect.split()
    assert routes.route_differs([record], dev, src) is (src == "-")
    assert routes.route_differs([record], dev + "x", src) is True
    assert routes.route_differs([record], dev, "192.0.2.1") is True
    assert routes.route_differs([record, record], dev, src) is True
    assert routes.route_differs([], dev, src) is True


def test_present_replaces_a_missing_or_wrong_route_on_link_and_keeps_a_right_one() -> None:
    right = [{"dst": "10.21.115.200", "dev": "em2", "scope": "link", "prefsrc": "10.21.115.113", "flags": []}]
    wrong = [{**right[0], "dev": "em1", "prefsrc": "10.21.115.112"}]
    replace = [
        "ip",
        "route",
        "replace",
        "10.21.115.200/32",
        "dev",
        "em2",
        "src",
        "10.21.115.113",
        "scope",
        "link",
    ]
    assert routes.route_change(VIP, "present", []) == replace
    assert routes.route_change(VIP, "present", wrong) == replace
    assert routes.route_change(VIP, "present", right) is None


def test_absent_deletes_only_a_route_that_exists() -> None:
    assert routes.route_change(VIP, "absent", [{"dst": "10.21.115.200", "dev": "em2"}]) == [
        "ip",
        "route",
        "del",
        "10.21.115.200/32",
    ]
    assert routes.route_change(VIP, "absent", []) is None
