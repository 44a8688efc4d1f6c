"""Each Xid's recovery bucket at the edges of the rules that override NVIDIA's catalog: Xid 154 carries
the action the driver asks for, and NVLink Xids 144-150 are fatal or not by the line's own word."""

from __future__ import annotations

import pytest

from dltune.checks.gpu import UNKNOWN_XID, _bucket
from dltune.checks.xid_catalog import XID_CATALOG
from dltune.snapshot import GpuEvent


def xid(code: int | None, word: str | None = None, action: int | None = None) -> GpuEvent:
    return GpuEvent(
        "0000:3b:00", "xid", "NVRM: Xid ...", xid=code, severity_word=word, recovery_action=action
    )


@pytest.mark.parametrize(
    ("action", "bucket"),
    [
        (None, "IGNORE"),
        (0, "IGNORE"),
        (1, "RESET_GPU"),
        (2, "RESTART_BM"),
        (4, "RESET_GPU"),
        (9, "RESET_GPU"),
    ],
)
def test_xid_154_follows_the_recovery_action_and_an_unknown_one_resets_the_gpu(
    action: int | None, bucket: str
) -> None:
    assert _bucket(xid(154, action=action)) == bucket


@pytest.mark.parametrize("code", [144, 147, 150])
def test_nvlink_xids_144_to_150_reset_the_gpu_only_when_the_line_says_fatal(code: int) -> None:
    assert _bucket(xid(code, "Fatal")) == "RESET_GPU"
    assert _bucket(xid(code, "Nonfatal")) == "RESTART_APP"


@pytest.mark.parametrize("code", [143, 151])
def test_just_outside_144_to_150_the_catalog_decides_whatever_the_word(code: int) -> None:
    catalog = XID_CATALOG[code].bucket
    assert catalog not in {None, "RESTART_APP"}
    assert _bucket(xid(code, "Nonfatal")) == _bucket(xid(code, "Fatal")) != "RESTART_APP"


def test_an_xid_line_without_a_code_is_unknown_not_xid_1() -> None:
    assert XID_CATALOG[1].bucket == "CONTACT_SUPPORT"
    assert _bucket(xid(None)) == UNKNOWN_XID != _bucket(xid(1))
