"""`scontrol show node` as real clusters printed it (tests/fixtures/real/scontrol_show_node: Slurm
14.11 to 25.11, one-line and multi-line forms, drained, down and not-responding nodes, fields after
Reason=, reasons with spaces, '|', '?' and non-ASCII text; maintenance, reservations, power saving,
cloud and reboots): every node's name, state and reason, and the stamp Slurm put on the reason, read
as the sample's EXPECT line says, and what slurm_health concludes from them (drained, registered,
drained by dltune, and EXPECT's "-> may drain" or "-> left as it is: <why>": whether dltune may touch
the node; test_slurm_states_real runs the decision on each)."""

from __future__ import annotations

import re

import pytest

from dltune.fleet.slurm_health import parse_nodes
from tests.real_corpus import Sample, samples

SAMPLES = samples("scontrol_show_node")
_ENTRY = re.compile(
    r'(?:^|; )([^=;\s]+)=(\S+?)(?: "(.*?)" \[([^\]]*)\])? -> (may drain|left as it is: [^;]+)(?=; |$)'
)


def expected(sample: Sample) -> dict[str, tuple[str, str, str, str]]:
    """name -> (state, reason, stamp, verdict) for each node of EXPECT, which they must spell whole."""
    found = list(_ENTRY.finditer(sample.expect))
    assert "; ".join(m.group(0).removeprefix("; ") for m in found) == sample.expect, sample
    return {m.group(1): (m.group(2), m.group(3) or "", m.group(4) or "", m.group(5)) for m in found}


def test_the_corpus_has_one_line_and_multi_line_samples_with_drains() -> None:
    assert len(SAMPLES) >= 8
    assert sum("-o" in s.header["COMMAND"] for s in SAMPLES) >= 3
    assert sum("DRAIN" in s.expect for s in SAMPLES) >= 6


@pytest.mark.parametrize("sample", SAMPLES, ids=str)
def test_each_node_is_read_as_published(sample: Sample) -> None:
    want = expected(sample)
    assert want, f"{sample}: EXPECT names no node"
    nodes = parse_nodes(sample.body)
    assert set(nodes) == set(want), sample
    for name, (state, reason, stamp, verdict) in want.items():
        node = nodes[name]
        assert (node.state, node.reason) == (state, reason.strip()), (sample.name, name)
        assert node.reason_time == stamp.partition("@")[2], (sample.name, name, node.reason_time)
        assert node.drained is ("DRAIN" in state)
        # Nobody's reason in these samples is dltune's: each node dltune may not touch is someone
        # else's (drained, down, or in a state dltune never judges: maintenance, power saving, reboot).
        assert not node.drained_by_dltune
        assert node.touchable is (verdict == "may drain"), (sample.name, name, verdict)
        assert node.held_by_someone_else is (verdict != "may drain"), (sample.name, name)
        assert node.registered is not ("*" in state or "NOT_RESPONDING" in state)


def test_partitions_are_read_where_the_version_prints_them() -> None:
    (exporter,) = [s for s in SAMPLES if s.name.startswith("exporter_")]
    nodes = parse_nodes(exporter.body)
    assert all(n.partitions for n in nodes.values()), {k: n.partitions for k, n in nodes.items()}
