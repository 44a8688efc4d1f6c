"""Which Slurm node states dltune may drain or resume, over Slurm's whole vocabulary (STATE_WORDS):
every base state `scontrol show node` prints from 21.08 on, with every combination of up to three of
its flags, against the rule written out here on its own; the 20.02/20.11 spellings (one word with a
symbol, "+POWER"); and words no Slurm release prints yet. Each case runs the decision itself
(``decide``, and ``apply`` against a fake slurmctld): a node dltune must not touch gets no
`scontrol update`, and the decision names why and the state."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from dltune.fleet.slurm_health import STATE_WORDS, History, NodeState, Policy, Touch, decide
from tests.unit.test_slurm_health import ECC_FAIL, HEALTHY, FakeSlurm, health

NOW = 1.9e9
ADMIN = "hw ticket 4711"
OURS = "dltune: gpu.ecc"

# node_states[] of src/common/slurm_protocol_defs.c (21.08 to 26.05, unchanged), and the name
# node_state_base_string() gives any other base value.
BASES = ("DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN", "INVALID")
# node_state_flags[] of the same file, every release from 21.08 to 26.05 together, in its print order
# (a newer flag is listed where its release put it), and "?" for a bit the table lacks.
FLAGS = (
    "BLOCKED",  # 24.05+
    "CLOUD",
    "COMPLETING",
    "DRAIN",
    "DYNAMIC",  # 21.08 only (renamed DYNAMIC_FUTURE)
    "DYNAMIC_FUTURE",  # 22.05+
    "DYNAMIC_NORM",  # 22.05+
    "EXTERNAL",  # 25.05+
    "INVALID_REG",
    "FAIL",
    "MAINTENANCE",
    "POWER_DOWN",
    "POWER_UP",
    "PERFCTRS",  # 21.08 to 23.11
    "POWERED_DOWN",
    "REBOOT_REQUESTED",
    "REBOOT_ISSUED",
    "RESERVED",
    "RESUME",
    "NOT_RESPONDING",
    "PLANNED",
    "POWERING_UP",
    "POWERING_DOWN",
    "?",  # UNDRAIN, REBOOT_CANCEL, POWER_DRAIN: bits scontrol has no name for
)

# The rule, independent of dltune's table: dltune judges a node only when its base is one of these...
IN_SERVICE_BASES = {"IDLE", "ALLOCATED", "MIXED"}
# ...and every flag is one of these (a reservation alone is not maintenance; a cloud node without a
# power flag is powered up; DYNAMIC_NORM is a registered dynamic node; PERFCTRS a node in use)...
IN_SERVICE_FLAGS = {"CLOUD", "COMPLETING", "RESERVED", "DYNAMIC_NORM", "PERFCTRS"}
# ...or the node is drained or down, which dltune touches only when the reason is its own.
TAKEN_OUT_BASES = {"DOWN"}
TAKEN_OUT_FLAGS = {"DRAIN"}


def _judged(base: str, flags: tuple[str, ...]) -> bool:
    """Not left alone by its state: dltune may judge it (the reason decides for drained/down)."""
    return base in IN_SERVICE_BASES | TAKEN_OUT_BASES and set(flags) <= IN_SERVICE_FLAGS | TAKEN_OUT_FLAGS


def _taken_out(base: str, flags: tuple[str, ...]) -> bool:
    return base in TAKEN_OUT_BASES or bool(TAKEN_OUT_FLAGS & set(flags))


def _node(state: str, reason: str) -> NodeState:
    return NodeState(state, reason, "gpu7", ("gpu",), "")


def _decide(state: str, reason: str, healthy: bool) -> tuple[str, str]:
    node = _node(state, reason)
    decision = decide(node, HEALTHY if healthy else ECC_FAIL, {"gpu7": node}, Policy(), History(), NOW)
    return decision.action, decision.said


def _combinations() -> list[tuple[str, ...]]:
    return [combo for k in range(4) for combo in itertools.combinations(FLAGS, k)]


def test_the_table_names_every_state_word_slurm_prints() -> None:
    """Every base and flag of every release, 20.x scontrol's own words and sinfo's, has its one entry
    (no word falls to 'unknown'), and each word dltune never touches says why."""
    words_20 = {"MAINT", "REBOOT", "POWER", "CANCEL_REBOOT"}  # node_state_string, "+POWER" (20.02, 20.11)
    words_sinfo = {"DRAINED", "DRAINING", "FAILING", "INVAL"}
    missing = (set(BASES) | set(FLAGS) | words_20 | words_sinfo) - set(STATE_WORDS)
    assert missing == set()
    for word, cls in STATE_WORDS.items():
        assert (cls.touch is Touch.NEVER) is bool(cls.why), word


@pytest.mark.parametrize("word", sorted(STATE_WORDS))
def test_each_word_of_the_table_decides_as_its_class_says(word: str) -> None:
    """The word on its own (a base) and after IDLE (a flag), with an admin's reason and a failing
    check: drained only for a word in service; a drained/down word is the admin's; any other is left
    with its own why."""
    cls = STATE_WORDS[word]
    for state in (word, f"IDLE+{word}"):
        action, said = _decide(state, ADMIN, healthy=False)
        if cls.touch is Touch.NEVER:
            assert said.startswith(f"gpu7 left as it is: {cls.why} ({state}, {ADMIN})"), said
        elif cls.touch is Touch.TAKEN_OUT:
            assert said.startswith(f"gpu7 left as it is: out of service by someone else ({state}, "), said
        elif cls.touch is Touch.FLAG_IN_SERVICE and state == word:
            assert said.startswith(f"gpu7 left as it is: no base state before {word} ({state}, "), said
        else:
            assert action == "drain", (state, said)


@pytest.mark.parametrize("base", BASES)
def test_every_base_with_up_to_three_flags_is_touched_only_when_the_rule_says(base: str) -> None:
    """Per base, every combination of 0 to 3 of the 24 flags (2325 states), in print order: with an
    admin's reason and a failing critical check, drained exactly when the rule says; otherwise left,
    naming the state. With dltune's own drain and a healthy run, resumed exactly when the rule says."""
    combos = _combinations()
    assert len(combos) == 1 + 24 + 276 + 2024
    wrong = []
    for flags in combos:
        state = "+".join((base, *flags))
        touched = _judged(base, flags) and not _taken_out(base, flags)
        action, said = _decide(state, ADMIN, healthy=False)
        if touched and action != "drain":
            wrong.append((state, "not drained", said))
        if not touched and (action != "none" or not said.startswith("gpu7 left as it is")):
            wrong.append((state, "touched", said))
        if not touched and f"({state}, {ADMIN})" not in said:
            wrong.append((state, "state not named", said))
        if "DRAIN" in flags:
            action, said = _decide(state, OURS, healthy=True)
            if _judged(base, flags) and action != "resume":
                wrong.append((state, "own drain not resumed", said))
            if not _judged(base, flags) and (action != "none" or f"({state}, {OURS})" not in said):
                wrong.append((state, "own drain resumed", said))
    assert wrong == [], f"{len(wrong)} states: {wrong[:5]}"


@pytest.mark.parametrize(
    ("state", "why"),
    [
        # The issue's own states (Slurm 22.05-23.11), and their relatives.
        ("ALLOCATED+MAINTENANCE+RESERVED", "in maintenance"),
        ("IDLE+CLOUD+MAINTENANCE+RESERVED", "in maintenance"),
        ("MIXED+DRAIN+DYNAMIC_NORM+MAINTENANCE+RESERVED", "in maintenance"),
        ("MIXED+DYNAMIC_NORM+MAINTENANCE+RESERVED+PLANNED", "in maintenance, planned for a waiting job"),
        ("IDLE+CLOUD+POWERED_DOWN", "powered down by power saving"),
        (
            "DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING",
            "powered down by power saving, not registered with slurmctld yet",
        ),
        ("IDLE+CLOUD+POWER_DOWN+POWERED_DOWN", "a power down is pending, powered down by power saving"),
        ("MIXED+CLOUD+NOT_RESPONDING+POWERING_UP", "not registered with slurmctld yet, powering up"),
        ("IDLE+CLOUD+POWERING_DOWN", "powering down"),
        ("MIXED+DRAIN+REBOOT_REQUESTED", "a reboot is pending"),
        ("DOWN+CLOUD+REBOOT_ISSUED", "rebooting"),
        ("IDLE+DRAIN+INVALID_REG", "registered with fewer resources than configured"),
        ("IDLE+PLANNED", "planned for a waiting job"),
        ("IDLE+BLOCKED", "blocked by an exclusive topology job"),
        ("IDLE+EXTERNAL", "an external node (no slurmd)"),
        ("IDLE+DYNAMIC_FUTURE", "a dynamic future node"),
        ("ALLOCATED+FAIL", "marked failing"),
        ("IDLE+?", "a state flag Slurm itself prints as ?"),
        ("ERROR", "in an error state"),
        # 20.02/20.11: node_state_string's one word (a symbol for its strongest flag), then "+" flags.
        ("MAINT", "in maintenance"),
        ("ALLOCATED$", "in maintenance"),
        ("MIXED$+DRAIN", "in maintenance"),
        ("MAINT*", "in maintenance, not registered with slurmctld yet"),
        ("REBOOT", "a reboot is pending"),
        ("MIXED@", "a reboot is pending"),
        ("IDLE#+CLOUD", "powering up"),
        ("POWER_UP", "a power up is pending"),
        ("IDLE+CLOUD+POWER", "powered down by power saving"),
        ("MIXED+CLOUD+POWERING_DOWN", "powering down"),
        ("DOWN*+CLOUD", "not registered with slurmctld yet"),
        ("ALLOCATED*+COMPLETING", "not registered with slurmctld yet"),
        ("CANCEL_REBOOT", "a reboot is being cancelled"),
        ("RESUME", "a resume is pending"),
        ("IDLE+FAIL", "marked failing"),
        ("CLOUD", "no base state before CLOUD"),
        ("?", "a state flag Slurm itself prints as ?"),
        # sinfo's symbols, in case a state is ever read from it: the same words.
        ("idle~", "powered down by power saving"),
        ("mixed-", "planned for a waiting job"),
        ("drained!", "a power down is pending"),
        # Words no release prints yet: never touched, and named.
        ("IDLE+SOMETHING_NEW", "state flag SOMETHING_NEW unknown to dltune"),
        ("MIXED+RESERVED+SOMETHING_NEW", "state flag SOMETHING_NEW unknown to dltune"),
        ("ALLOCATED+DRAIN+SOMETHING_NEW", "state flag SOMETHING_NEW unknown to dltune"),
        ("SLEEPING", "state flag SLEEPING unknown to dltune"),
        ("IDLE&", "state flag IDLE& unknown to dltune"),
    ],
)
def test_a_node_dltune_never_touches_is_left_and_said_why_with_its_state(
    state: str, why: str, tmp_path: Path
) -> None:
    """An admin's reason or dltune's own: no drain on a failing check, no resume on a healthy run, and
    the decision reads "left as it is: <why> (<state>, <reason>)"."""
    for reason, healthy in ((ADMIN, False), (OURS, True), (OURS, False), ("", False)):
        action, said = _decide(state, reason, healthy)
        assert action == "none", (state, reason, said)
        shown = f"{state}, {reason}" if reason else state
        failing = "" if healthy else "; critical failures not recorded in Slurm: gpu.ecc"
        assert said == f"gpu7 left as it is: {why} ({shown}){failing}"
    # Through apply, against slurmctld: the node's state and reason stay as they were.
    slurm = FakeSlurm({"gpu01": (state, "gpu", OURS), "gpu02": ("IDLE", "gpu", "")})
    said, added = health(slurm, "gpu01", ECC_FAIL, tmp_path)
    assert slurm.state("gpu01") == (state, OURS) and added == []
    assert [call for call in slurm.calls if call[1] == "update"] == []
    assert said.startswith(f"gpu01 left as it is: {why} ({state}, {OURS})")
    said, _ = health(slurm, "gpu01", HEALTHY, tmp_path)
    assert slurm.state("gpu01") == (state, OURS)
    assert said == f"gpu01 left as it is: {why} ({state}, {OURS})"


@pytest.mark.parametrize(
    "state",
    [
        "IDLE",
        "ALLOCATED+COMPLETING",
        "MIXED+RESERVED",  # a reservation alone is not maintenance
        "IDLE+CLOUD",  # a cloud node that is up
        "ALLOCATED+CLOUD+COMPLETING+RESERVED",
        "IDLE+DYNAMIC_NORM",
        "MIXED+PERFCTRS",
        "RESERVED",  # 20.x: an IDLE node in a reservation
        "PERFCTRS",  # 20.x: an IDLE node whose network counters are in use
        "COMPLETING+CLOUD",  # 20.x: a cloud node's jobs completing
    ],
)
def test_a_node_in_service_is_drained_on_a_critical_failure_and_resumed_by_dltune(
    state: str, tmp_path: Path
) -> None:
    slurm = FakeSlurm({"gpu01": (state, "gpu", ""), "gpu02": ("IDLE", "gpu", "")})
    said, _ = health(slurm, "gpu01", ECC_FAIL, tmp_path)
    assert said == "drained gpu01: dltune: gpu.ecc"
    assert slurm.state("gpu01") == (f"{state.split('+')[0]}+DRAIN", OURS)
    said, _ = health(slurm, "gpu01", HEALTHY, tmp_path)
    assert said == "resumed gpu01 (dltune had drained it: dltune: gpu.ecc)"
