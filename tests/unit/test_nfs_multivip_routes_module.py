"""The nfs_multivip_routes module (plugins/modules/nfs_multivip_routes.py) run for real, as
Ansible's own unit tests run a module: its arguments in ansible.module_utils.basic._ANSIBLE_ARGS, its
JSON result read from stdout after the SystemExit.

The `ip` commands cannot change routes here (no root, no storage NICs, and a test must never touch the
host's routing table), so the lowest boundary is faked: AnsibleModule.run_command answers each argv the
module runs from a table (argv -> rc, stdout, stderr) and records it; an argv the table does not hold
fails the test. The `ip -j route show exact` answers are iproute2's JSON records, in the shape of the
real ones in tests/fixtures/real/ip_route_get (test_nfs_multivip_filters.py reads those verbatim).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import load_role_module
from tests.real_corpus import CORPUS, load

basic = pytest.importorskip("ansible.module_utils.basic")
routes = load_role_module("plugins/modules/nfs_multivip_routes.py")

Answer = tuple[int, str, str]
VIP = {"address": "10.21.115.6", "interface": "em1", "source": "10.21.115.112"}
VIP2 = {"address": "10.21.115.7", "interface": "em2", "source": "10.21.115.113"}
SHOW = ["ip", "-j", "route", "show", "exact"]
RIGHT = [{"dst": "10.21.115.6", "dev": "em1", "scope": "link", "prefsrc": "10.21.115.112", "flags": []}]
WRONG = [{"dst": "10.21.115.7", "dev": "em1", "scope": "link", "prefsrc": "10.21.115.112", "flags": []}]
REPLACE = ["ip", "route", "replace", "10.21.115.6/32", "dev", "em1", "src", "10.21.115.112", "scope", "link"]
REPLACE2 = ["ip", "route", "replace", "10.21.115.7/32", "dev", "em2", "src", "10.21.115.113", "scope", "link"]


class Node:
    """The answers of the node's `ip` to each argv, and every argv the module ran, in order."""

    def __init__(self, answers: dict[tuple[str, ...], Answer]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def answer(self, argv: list[str]) -> Answer:
        self.calls.append(list(argv))
        if tuple(argv) not in self.answers:
            raise AssertionError(f"unexpected command: {argv}")
        return self.answers[tuple(argv)]


def shown(prefix: str, records: list[dict[str, Any]] | None, rc: int = 0, err: str = "") -> Any:
    return (*SHOW, prefix), (rc, json.dumps(records) if records is not None else "", err)


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], node: Node, **args: Any
) -> dict[str, Any]:
    """The module's JSON result (without Ansible's invocation echo), its commands answered by node."""

    def run_command(module: Any, argv: list[str], *_: Any, **__: Any) -> Answer:
        return node.answer(argv)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit) as exited:
        routes.main()
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    result.pop("invocation", None)
    assert exited.value.code == (1 if result.get("failed") else 0), result
    return result


def test_a_missing_route_is_added_with_replace_and_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(dict([shown("10.21.115.6/32", []), (tuple(REPLACE), (0, "", ""))]))
    result = run(monkeypatch, capsys, node, vips=[VIP], state="present")
    assert node.calls == [[*SHOW, "10.21.115.6/32"], REPLACE]
    assert result == {
        "changed": True,
        "changes": [{"route": "10.21.115.6/32", "before": [], "command": " ".join(REPLACE)}],
    }


def test_state_defaults_to_present_and_an_empty_answer_is_no_route(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ip -j route show exact` prints nothing at all when there is no route on some iproute2 versions."""
    node = Node(dict([shown("10.21.115.6/32", None), (tuple(REPLACE), (0, "", ""))]))
    result = run(monkeypatch, capsys, node, vips=[VIP])
    assert node.calls[-1] == REPLACE
    assert result["changed"] is True and result["changes"][0]["before"] == []


def test_a_right_route_is_left_alone_and_the_next_vip_still_handled(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(
        dict([shown("10.21.115.6/32", RIGHT), shown("10.21.115.7/32", WRONG), (tuple(REPLACE2), (0, "", ""))])
    )
    result = run(monkeypatch, capsys, node, vips=[VIP, VIP2], state="present")
    assert node.calls == [[*SHOW, "10.21.115.6/32"], [*SHOW, "10.21.115.7/32"], REPLACE2]
    assert result == {
        "changed": True,
        "changes": [{"route": "10.21.115.7/32", "before": WRONG, "command": " ".join(REPLACE2)}],
    }


def test_nothing_to_change_is_not_changed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(dict([shown("10.21.115.6/32", RIGHT)]))
    assert run(monkeypatch, capsys, node, vips=[VIP], state="present") == {"changed": False, "changes": []}
    assert node.calls == [[*SHOW, "10.21.115.6/32"]]


def test_a_real_iproute2_record_on_another_device_is_replaced(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The wireguard sample's record (dev wg0, prefsrc 10.2.0.2), verbatim, as the VIP's current route."""
    body = load(CORPUS / "ip_route_get" / "wireguard_on_link.txt").body
    node = Node({(*SHOW, "10.21.115.6/32"): (0, body, ""), tuple(REPLACE): (0, "", "")})
    result = run(monkeypatch, capsys, node, vips=[VIP])
    assert result["changes"] == [
        {"route": "10.21.115.6/32", "before": json.loads(body), "command": " ".join(REPLACE)}
    ]


def test_absent_deletes_an_existing_route_and_skips_a_missing_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    delete = ("ip", "route", "del", "10.21.115.6/32")
    node = Node(dict([shown("10.21.115.6/32", RIGHT), shown("10.21.115.7/32", []), (delete, (0, "", ""))]))
    result = run(monkeypatch, capsys, node, vips=[VIP, VIP2], state="absent")
    assert node.calls == [[*SHOW, "10.21.115.6/32"], list(delete), [*SHOW, "10.21.115.7/32"]]
    assert result == {
        "changed": True,
        "changes": [{"route": "10.21.115.6/32", "before": RIGHT, "command": " ".join(delete)}],
    }


def test_check_mode_reports_the_changes_and_runs_only_the_reads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(dict([shown("10.21.115.6/32", []), shown("10.21.115.7/32", WRONG)]))
    result = run(monkeypatch, capsys, node, vips=[VIP, VIP2], _ansible_check_mode=True)
    assert node.calls == [[*SHOW, "10.21.115.6/32"], [*SHOW, "10.21.115.7/32"]]
    assert result == {
        "changed": True,
        "changes": [
            {"route": "10.21.115.6/32", "before": [], "command": " ".join(REPLACE)},
            {"route": "10.21.115.7/32", "before": WRONG, "command": " ".join(REPLACE2)},
        ],
    }


def test_a_failed_read_fails_with_ips_words_before_any_change(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(dict([shown("10.21.115.6/32", None, rc=1, err="Error: any valid prefix is expected.\n")]))
    result = run(monkeypatch, capsys, node, vips=[VIP])
    assert result["failed"] is True
    assert result["msg"] == "ip route show 10.21.115.6/32 failed: Error: any valid prefix is expected."
    assert node.calls == [[*SHOW, "10.21.115.6/32"]]


def test_a_failed_change_fails_naming_the_command_and_what_changed_before(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(
        dict(
            [
                shown("10.21.115.6/32", []),
                shown("10.21.115.7/32", []),
                (tuple(REPLACE), (0, "", "")),
                (tuple(REPLACE2), (2, "", "Error: Nexthop has invalid gateway.\n")),
            ]
        )
    )
    result = run(monkeypatch, capsys, node, vips=[VIP, VIP2])
    assert result["failed"] is True
    assert result["msg"] == f"{' '.join(REPLACE2)} failed: Error: Nexthop has invalid gateway."
    assert result["changes"] == [
        {"route": "10.21.115.6/32", "before": [], "command": " ".join(REPLACE)},
        {"route": "10.21.115.7/32", "before": [], "command": " ".join(REPLACE2)},
    ]


def test_a_read_that_exits_1_is_a_failure_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(dict([shown("10.21.115.6/32", [], rc=2, err="Cannot open netlink socket\n")]))
    result = run(monkeypatch, capsys, node, vips=[VIP])
    assert result["msg"] == "ip route show 10.21.115.6/32 failed: Cannot open netlink socket"


def test_vips_given_as_key_value_strings_are_read_as_mappings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """vips is a list of dicts: Ansible turns each `k=v, k=v` item into one (elements: dict)."""
    node = Node(dict([shown("10.21.115.6/32", RIGHT)]))
    item = "address=10.21.115.6, interface=em1, source=10.21.115.112"
    assert run(monkeypatch, capsys, node, vips=[item]) == {"changed": False, "changes": []}


def test_vips_is_required(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    node = Node({})
    result = run(monkeypatch, capsys, node, state="present")
    assert result["failed"] is True and result["msg"] == "missing required arguments: vips"
    assert node.calls == []


@pytest.mark.parametrize("state", ["gone", "Present"])
def test_state_is_present_or_absent_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], state: str
) -> None:
    node = Node({})
    result = run(monkeypatch, capsys, node, vips=[VIP], state=state)
    assert result["failed"] is True
    assert result["msg"] == f"value of state must be one of: present, absent, got: {state}"
    assert node.calls == []


def test_check_diff_shows_each_changed_vips_routes_before_and_after(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--check --diff`: a missing route and one on the wrong NIC are shown as `ip route` lines, before
    and after; a right route is not shown; without --diff no diff is returned."""
    right = [{**RIGHT[0], "dst": "10.21.115.8"}]
    vip3 = {"address": "10.21.115.8", "interface": "em1", "source": "10.21.115.112"}
    node = Node(
        dict([shown("10.21.115.6/32", []), shown("10.21.115.7/32", WRONG), shown("10.21.115.8/32", right)])
    )
    result = run(
        monkeypatch, capsys, node, vips=[VIP, VIP2, vip3], _ansible_check_mode=True, _ansible_diff=True
    )
    assert result["diff"] == {
        "before": "10.21.115.7/32 dev em1 src 10.21.115.112\n",
        "after": "10.21.115.6/32 dev em1 src 10.21.115.112\n10.21.115.7/32 dev em2 src 10.21.115.113\n",
        "before_header": "ip route (VIP host routes)",
        "after_header": "ip route (VIP host routes)",
    }
    node = Node(
        dict([shown("10.21.115.7/32", WRONG), (("ip", "route", "del", "10.21.115.7/32"), (0, "", ""))])
    )
    removed = run(monkeypatch, capsys, node, vips=[VIP2], state="absent", _ansible_diff=True)
    assert (removed["diff"]["before"], removed["diff"]["after"]) == (
        "10.21.115.7/32 dev em1 src 10.21.115.112\n",
        "",
    )
    node = Node(dict([shown("10.21.115.6/32", [])]))
    assert "diff" not in run(monkeypatch, capsys, node, vips=[VIP], _ansible_check_mode=True)
