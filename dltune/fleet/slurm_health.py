"""`dltune audit --slurm-drain` and `dltune healthcheck`: drain this Slurm node when a check marked
critical fails, and resume it once healthy, but only a drain dltune set itself (its reason starts with
"dltune:"). `error` and `skip` never drain: a bug in dltune must not take a fleet out of service. A
node that an admin (or Slurm itself) drained or took down with a reason that is not dltune's is never
touched: its reason is not rewritten, and it is not resumed. Nor is a node whose state says it is not
dltune's to judge, whatever its reason (``STATE_WORDS``, every word Slurm prints in
State=): in maintenance, powered down or changing power, rebooting, failing, not responding or not
registered, planned, with an invalid registration, and any state word dltune does not know.

Two bounds keep one shared failure from emptying the cluster and one sick node from cycling forever:

- **The drain limit.** Before draining, Slurm is asked once (`scontrol -o show node`, with a timeout)
  how many nodes of this node's partitions dltune has drained already. At the limit (default 10% of
  those nodes, at least 2) this node is not drained: a `system.drain_limit` warning says how many are
  drained and for which checks ("a shared failure?"). Nodes that decide in the same second cannot see
  each other's drain yet, so a node that drained asks once more right after and gives its drain back
  when it is beyond the limit in the order every node sees (the drain's time in its reason, then the
  node's name): the limit holds whichever nodes are first.
- **Flap damping.** Each resume dltune makes is kept in the node's history file. A node that dltune
  resumed ``flap_count`` times within ``flap_window_s`` and fails again is drained with the reason
  "dltune: flapping: <checks>" and never resumed by dltune; the operator's resume clears the history.

The decision (`decide`) is pure; `apply` does the reading and writing around it."""

from __future__ import annotations

import enum
import math
import os
import re
import stat
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dltune.health_state import (
    DEFAULT_FLAP_COUNT,
    DEFAULT_FLAP_WINDOW_S,
    DEFAULT_RECOVERY_RUNS,
    DEFAULT_RECOVERY_WINDOW_S,
    HealthReport,
    History,
    Profile,
)
from dltune.model import DltuneError, InputError, Result, Status
from dltune.probes.runner import CommandRunner
from dltune.records import field, record, replace

REASON_PREFIX = "dltune:"
# How far a stamp may lie ahead of the clock and still count (two hosts' clocks, one NTP slew).
CLOCK_SLACK_S = 60.0
# One node's name as scontrol takes it. scontrol expands "n[1-4]" and "a,b" to several nodes, so a name
# holding brackets, commas or blanks would drain (or resume) many nodes in one run, past the limit.
NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")


def checked_node_name(name: str, source: str) -> str:
    """``name`` if it is one plain Slurm node name; InputError naming ``source`` (the option or the
    variable it came from) otherwise, before scontrol is ever run."""
    if NODE_NAME.fullmatch(name):
        return name
    raise InputError(
        f"{source}={name!a} is not one Slurm node name (letters, digits, '-', '_', '.'): a hostlist or "
        "a list would reach several nodes"
    )


FLAPPING_PREFIX = "dltune: flapping:"

# Slurm's node states as `scontrol show node` prints them in State=, and what each one lets dltune do:
# one table (STATE_WORDS), read before dltune drains or resumes a node.
#
# How scontrol spells a state (SchedMD/slurm, ``slurm_sprint_node_table`` in src/api/node_info.c and the
# ``node_state*`` functions of src/common/slurm_protocol_defs.c, at the tags slurm-20-02-7-1 to
# slurm-26-05-3-1):
#
# - 20.02 and 20.11: ``node_state_string()`` of the state less CLOUD, COMPLETING, DRAIN, FAIL, POWER_SAVE
#   and POWERING_DOWN, then "+CLOUD", "+COMPLETING", "+DRAIN" or "+FAIL", "+POWER" (powered down) or
#   "+POWERING_DOWN". That first word carries the strongest remaining flag as a symbol ("IDLE*",
#   "ALLOCATED$", "MIXED@", "DOWN#") or is a word of its own: "MAINT", "REBOOT", "RESERVED" (an IDLE node
#   in a reservation), "PERFCTRS", "POWER_UP", "CANCEL_REBOOT", "RESUME", "UNKNOWN*", "?". So a 20.11
#   node in a maintenance reservation reads "MAINT" or "ALLOCATED$", and a powered-down cloud node
#   "IDLE+CLOUD+POWER".
# - 21.08 to 26.05: ``node_state_string_complete()``: the base from ``node_states[]`` (DOWN, IDLE,
#   ALLOCATED, ERROR, MIXED, FUTURE, UNKNOWN; "INVALID" for any other value), then "+FLAG" for each flag
#   set, in the order of ``node_state_flags[]``; a flag bit that table lacks (UNDRAIN, REBOOT_CANCEL,
#   POWER_DRAIN) prints as "?". No symbols any more: "DOWN+CLOUD+NOT_RESPONDING" where 20.11 wrote
#   "DOWN*+CLOUD", "ALLOCATED+MAINTENANCE+RESERVED" where it wrote "ALLOCATED$".
#   The flags by release: 21.08 CLOUD COMPLETING DRAIN DYNAMIC INVALID_REG FAIL MAINTENANCE POWER_DOWN
#   POWER_UP PERFCTRS POWERED_DOWN REBOOT_REQUESTED REBOOT_ISSUED RESERVED RESUME NOT_RESPONDING PLANNED
#   POWERING_UP POWERING_DOWN; 22.05 renames DYNAMIC to DYNAMIC_FUTURE and adds DYNAMIC_NORM; 24.05 drops
#   PERFCTRS and adds BLOCKED; 25.05 adds EXTERNAL (the bit PERFCTRS had).
#
# A node is dltune's to drain (and to resume once dltune drained it) only when every word of its state
# is in service, or drained/down with a reason that is dltune's. Any other word, including one this
# table does not know (a newer Slurm), leaves the node as it is, and the decision names that word.


class Touch(enum.Enum):
    IN_SERVICE = "in service"  # dltune may drain it (and resume its own drain)
    FLAG_IN_SERVICE = "flag in service"  # as IN_SERVICE beside a base state; no base of its own
    TAKEN_OUT = "taken out"  # drained or down: touched only when the reason is dltune's
    NEVER = "never"  # not dltune's to judge, whatever the reason


@record(frozen=True)
class StateClass:
    touch: Touch
    why: str = ""  # for NEVER: the decision's words ("left as it is: <why> (<state>)")


class Kind:
    """The classes of STATE_WORDS; each NEVER class carries the words the decision says."""

    IN_SERVICE = StateClass(Touch.IN_SERVICE)
    FLAG_IN_SERVICE = StateClass(Touch.FLAG_IN_SERVICE)
    TAKEN_OUT = StateClass(Touch.TAKEN_OUT)
    NOT_REGISTERED = StateClass(Touch.NEVER, "not registered with slurmctld yet")
    MAINTENANCE = StateClass(Touch.NEVER, "in maintenance")
    POWERED_DOWN = StateClass(Touch.NEVER, "powered down by power saving")
    POWERING_UP = StateClass(Touch.NEVER, "powering up")
    POWERING_DOWN = StateClass(Touch.NEVER, "powering down")
    POWER_DOWN_ASKED = StateClass(Touch.NEVER, "a power down is pending")
    POWER_UP_ASKED = StateClass(Touch.NEVER, "a power up is pending")
    REBOOT_REQUESTED = StateClass(Touch.NEVER, "a reboot is pending")
    REBOOT_ISSUED = StateClass(Touch.NEVER, "rebooting")
    REBOOT_CANCEL = StateClass(Touch.NEVER, "a reboot is being cancelled")
    FAILING = StateClass(Touch.NEVER, "marked failing")
    PLANNED = StateClass(Touch.NEVER, "planned for a waiting job")
    INVALID_REG = StateClass(Touch.NEVER, "registered with fewer resources than configured")
    BLOCKED = StateClass(Touch.NEVER, "blocked by an exclusive topology job")
    EXTERNAL = StateClass(Touch.NEVER, "an external node (no slurmd)")
    DYNAMIC_FUTURE = StateClass(Touch.NEVER, "a dynamic future node")
    ERROR = StateClass(Touch.NEVER, "in an error state")
    RESUME_PENDING = StateClass(Touch.NEVER, "a resume is pending")
    UNDRAIN_PENDING = StateClass(Touch.NEVER, "an undrain is pending")
    UNNAMED = StateClass(Touch.NEVER, "a state flag Slurm itself prints as ?")


# Every word of State= (upper case, symbols spelled out), once. A word missing here is unknown: NEVER.
STATE_WORDS: dict[str, StateClass] = {
    # Base states (node_states[] from 21.08; node_state_string's first word before).
    "IDLE": Kind.IN_SERVICE,  # no job; available: an ordinary node
    "ALLOCATED": Kind.IN_SERVICE,  # running jobs: draining lets them finish (DRAINING)
    "MIXED": Kind.IN_SERVICE,  # some CPUs allocated: as ALLOCATED
    "DOWN": Kind.TAKEN_OUT,  # an admin's or slurmctld's DOWN: touched only when the reason is dltune's
    "FUTURE": Kind.NOT_REGISTERED,  # configured for later, no slurmd yet: its state says nothing
    "UNKNOWN": Kind.NOT_REGISTERED,  # slurmctld just started and has not heard from the node
    "ERROR": Kind.ERROR,  # NODE_STATE_ERROR, "UNUSED" in slurm.h (nothing sets it now); not ours to judge
    "INVALID": Kind.ERROR,  # node_state_base_string() for a base value it has no name for (21.08+)
    # Flags (node_state_flags[] from 21.08), and the 20.x words and "+" suffixes that mean the same.
    "COMPLETING": Kind.IN_SERVICE,  # jobs finishing (epilog): the node is in service; a 20.x base word too
    "RESERVED": Kind.IN_SERVICE,  # in an advance reservation: a reservation alone is not maintenance
    # (20.x prints an IDLE node in a reservation as the base word "RESERVED")
    "PERFCTRS": Kind.IN_SERVICE,  # 20.x base word and 21.08-23.11 flag: a job holds the node's Cray network
    # performance counters; the node is in use, like ALLOCATED (flag removed in 24.05)
    "CLOUD": Kind.FLAG_IN_SERVICE,  # a cloud node; powered up (no POWER* word beside it) it is an ordinary
    # node. As the only word (20.11 prints "CLOUD" for UNKNOWN+CLOUD) it has no base: never touched
    "DYNAMIC_NORM": Kind.FLAG_IN_SERVICE,  # 22.05+: a node created at run time (slurmd -Z, scontrol create
    # node; node_mgr.c) that runs jobs as any other
    "DRAIN": Kind.TAKEN_OUT,  # drained by someone: only dltune's own drain ("dltune:" reason) is resumed
    "DRAINING": Kind.TAKEN_OUT,  # sinfo's word for DRAIN on a busy node
    "DRAINED": Kind.TAKEN_OUT,  # sinfo's word for DRAIN on an idle node
    "MAINTENANCE": Kind.MAINTENANCE,  # 21.08+: in a reservation with the MAINT flag: the admin's window
    "MAINT": Kind.MAINTENANCE,  # 20.x's word for the same (and sinfo's); "$" after a base word
    "POWERED_DOWN": Kind.POWERED_DOWN,  # 21.08+: powered off by power saving; "~" in sinfo
    "POWER": Kind.POWERED_DOWN,  # 20.x's "+POWER" suffix: NODE_STATE_POWER_SAVE, the node is powered off
    "POWERING_UP": Kind.POWERING_UP,  # 21.08+: being powered up or configured; "#" after a 20.x base word
    "POWERING_DOWN": Kind.POWERING_DOWN,  # being powered down (both eras); "%" in sinfo
    "POWER_DOWN": Kind.POWER_DOWN_ASKED,  # 21.08+: a power down is requested ("!"); 20.x's node_state_string
    # word for a lone POWER_SAVE (powered off): never touched either way
    "POWER_UP": Kind.POWER_UP_ASKED,  # 21.08+: a power up is requested; 20.x: UNKNOWN+POWER_UP, powering up
    "POWER_DRAIN": Kind.POWER_DOWN_ASKED,  # "power down asap": the REST/JSON name; scontrol prints "?"
    "REBOOT_REQUESTED": Kind.REBOOT_REQUESTED,  # 21.08+: `scontrol reboot` waits for its moment ("@")
    "REBOOT": Kind.REBOOT_REQUESTED,  # 20.x's word for the same (NODE_STATE_REBOOT)
    "REBOOT_ISSUED": Kind.REBOOT_ISSUED,  # the reboot was handed to the agent ("^"): the node is going away
    "REBOOT_CANCEL": Kind.REBOOT_CANCEL,  # NODE_STATE_REBOOT_CANCEL; scontrol 21.08+ prints it as "?"
    "CANCEL_REBOOT": Kind.REBOOT_CANCEL,  # 20.x's word for a lone cancel-reboot state
    "REBOOT_CANCELED": Kind.REBOOT_CANCEL,  # the REST/JSON name of the same bit
    "FAIL": Kind.FAILING,  # an admin expects the node to fail: its own reason stays, not dltune's
    "FAILING": Kind.FAILING,  # sinfo's word for FAIL on a busy node
    "NOT_RESPONDING": Kind.NOT_REGISTERED,  # slurmd does not answer ("*"): what scontrol says about the node
    # may be stale, so it is left alone (and said as before: not registered)
    "PLANNED": Kind.PLANNED,  # 21.08+: the backfill scheduler holds it for a higher-priority job ("-")
    "INVALID_REG": Kind.INVALID_REG,  # 21.08+: slurmd registered with fewer resources than configured;
    # slurmctld keeps it out of service until a valid registration
    "INVAL": Kind.INVALID_REG,  # sinfo's word for the same
    "BLOCKED": Kind.BLOCKED,  # 24.05+: blocked by a job that holds its topology block exclusively
    "EXTERNAL": Kind.EXTERNAL,  # 25.05+: a node Slurm tracks without a slurmd of its own
    "DYNAMIC_FUTURE": Kind.DYNAMIC_FUTURE,  # 22.05+: a FUTURE node's slot taken by a dynamic slurmd (-F);
    # conservatively not dltune's to judge
    "DYNAMIC": Kind.DYNAMIC_FUTURE,  # 21.08's name for the same bit
    "RESUME": Kind.RESUME_PENDING,  # NODE_RESUME: a resume on its way (20.x word, 21.08+ flag)
    "UNDRAIN": Kind.UNDRAIN_PENDING,  # the REST/JSON name; scontrol prints "?"
    "?": Kind.UNNAMED,  # a flag bit scontrol's own table has no name for (21.08+), or 20.x's unknown state
}

# node_state_string's symbols after a base word (20.02/20.11 scontrol; sinfo in every release), as the
# flag each stands for.
STATE_SYMBOLS: dict[str, str] = {
    "*": "NOT_RESPONDING",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "~": "POWERED_DOWN",
    "!": "POWER_DOWN",
    "-": "PLANNED",
}


def state_words(state: str) -> tuple[str, ...]:
    """The words of a State= value, base first, each symbol spelled out as its flag:
    "DOWN*+DRAIN" -> ("DOWN", "NOT_RESPONDING", "DRAIN")."""
    words: list[str] = []
    for part in state.upper().split("+"):
        stem = part.rstrip("".join(STATE_SYMBOLS))
        if stem:
            words.append(stem)
        words.extend(STATE_SYMBOLS[symbol] for symbol in part[len(stem) :])
    return tuple(words)


def classify_word(word: str) -> StateClass:
    """``word``'s class; a word Slurm's vocabulary above lacks is never touched, and named."""
    return STATE_WORDS.get(word) or StateClass(Touch.NEVER, f"state flag {word} unknown to dltune")


def words_left_alone(state: str) -> tuple[str, ...]:
    """Why a node in ``state`` is never touched, whatever its reason: each word's why, in Slurm's
    order, once; () when dltune may judge it (in service, or drained/down: the reason decides)."""
    words = state_words(state)
    if not words:
        return (Kind.NOT_REGISTERED.why,)
    whys = [classify_word(word).why for word in words if classify_word(word).touch is Touch.NEVER]
    if classify_word(words[0]).touch is Touch.FLAG_IN_SERVICE:
        whys.insert(0, f"no base state before {words[0]}")
    return tuple(dict.fromkeys(whys))


def words_taken_out(state: str) -> bool:
    """Drained or down: someone's (or dltune's own) decision to keep the node out of service."""
    return any(classify_word(word).touch is Touch.TAKEN_OUT for word in state_words(state))


SCONTROL_TIMEOUT_S = 5.0
# Between this node's drain and its recheck: drains other nodes decided in the same second reach
# slurmctld meanwhile.
RECHECK_DELAY_S = 1.0
MIN_DRAIN_LIMIT = 2
_UNKNOWN_NODE = re.compile(r"\bNode \S+ not found", re.IGNORECASE)  # scontrol's words for a name it lacks
_LIMIT_TEXT = re.compile(r"([0-9]{1,6})(%?)")


class SlurmUnavailable(DltuneError):
    """Slurm did not answer (scontrol missing, failing or late): nothing was changed."""


@record(frozen=True)
class NodeState:
    state: str  # e.g. "IDLE", "IDLE+DRAIN", "MIXED", "DOWN*"
    reason: str  # "" when none
    name: str = ""
    partitions: tuple[str, ...] = ()
    reason_time: str = ""  # the [user@time] Slurm stamped on the reason: "2026-11-25T10:00:00"

    @property
    def flags(self) -> set[str]:
        """The words of State=, base included, symbols spelled out: "DOWN*" -> {"DOWN", "NOT_RESPONDING"}."""
        return set(state_words(self.state))

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.upper()

    @property
    def left_alone_because(self) -> tuple[str, ...]:
        """Why dltune never touches this node, whatever its reason (each state word's why, from
        ``STATE_WORDS``); () when its state lets dltune judge it."""
        return words_left_alone(self.state)

    @property
    def out_of_service(self) -> bool:
        """Drained or down (by someone, or by dltune), or in a state dltune never touches."""
        return words_taken_out(self.state) or bool(self.left_alone_because)

    @property
    def registered(self) -> bool:
        """slurmctld has heard from the node's slurmd: it has a state, and none that says otherwise
        (UNKNOWN, FUTURE, NOT_RESPONDING)."""
        return bool(self.flags) and not any(classify_word(word) is Kind.NOT_REGISTERED for word in self.flags)

    @property
    def drained_by_dltune(self) -> bool:
        return self.drained and self.reason.startswith(REASON_PREFIX)

    @property
    def flapping(self) -> bool:
        """Drained by dltune as flapping: only an operator resumes it."""
        return self.drained and self.reason.startswith(FLAPPING_PREFIX)

    @property
    def held_by_someone_else(self) -> bool:
        """Out of service for a reason dltune did not give: the admin's (or Slurm's) to lift."""
        return self.out_of_service and not self.reason.startswith(REASON_PREFIX)

    @property
    def touchable(self) -> bool:
        """dltune may drain it, or resume it: its state is in service, or drained/down by dltune."""
        return not self.left_alone_because and not self.held_by_someone_else


@record(frozen=True)
class DrainLimit:
    """At most this many nodes drained by dltune in a node's partitions: a count, or a share of them."""

    count: int | None = None
    percent: int | None = 10

    @classmethod
    def parse(cls, text: str, hint: str = "--drain-limit") -> DrainLimit:
        found = _LIMIT_TEXT.fullmatch(text.strip())
        if not found or (found.group(2) and not 0 < int(found.group(1)) <= 100):
            raise ValueError(f"{hint}={text!r}: give a number of nodes (e.g. 5) or a share (1% to 100%)")
        number = int(found.group(1))
        return cls(percent=number) if found.group(2) else cls(count=number, percent=None)

    def of(self, nodes: int) -> int:
        if self.count is not None:
            return self.count
        return max(MIN_DRAIN_LIMIT, math.ceil(nodes * (self.percent or 0) / 100))

    def __str__(self) -> str:
        return (
            f"{self.count} nodes"
            if self.count is not None
            else f"{self.percent}% (at least {MIN_DRAIN_LIMIT})"
        )


DEFAULT_PROFILE = Profile.DRAIN


@record(frozen=True)
class Policy:
    limit: DrainLimit = field(default_factory=DrainLimit)
    flap_count: int = DEFAULT_FLAP_COUNT
    flap_window_s: float = DEFAULT_FLAP_WINDOW_S
    profile: Profile = DEFAULT_PROFILE
    # Consecutive failing runs before a check's critical fail drains (absent: 1, at once).
    runs_needed: Mapping[str, int] = field(default_factory=dict)
    # The checks of the transient class: a drain for one of them is resumed only after the node passed
    # recovery_runs consecutive runs spanning recovery_window_s.
    transient: frozenset[str] = frozenset()
    recovery_runs: int = DEFAULT_RECOVERY_RUNS
    recovery_window_s: float = DEFAULT_RECOVERY_WINDOW_S

    def needed(self, check_id: str) -> int:
        return max(1, self.runs_needed.get(check_id, 1))


def debounce(
    classes: Mapping[str, Any], class_runs: Mapping[str, int], overrides: Mapping[str, int]
) -> tuple[dict[str, int], frozenset[str]]:
    """(runs needed per check, the transient checks) from each check's class (``classes``: check id ->
    dltune.model.FailureClass), the runs each class needs and per-check overrides."""
    runs = {check_id: class_runs.get(kind.value, 1) for check_id, kind in classes.items()}
    runs.update(overrides)
    transient = frozenset(c for c, kind in classes.items() if kind.value == "transient")
    return {c: n for c, n in runs.items() if n > 1}, transient


@record(frozen=True)
class Decision:
    action: str  # "drain" | "resume" | "none" | "need_cluster"
    said: str
    reason: str = ""
    results: tuple[Result, ...] = ()
    history: History = field(default_factory=History)
    # The history had the drain not happened (the recheck gives a drain back).
    undrained: History | None = None


def critical_failures(results: Sequence[Result]) -> list[str]:
    return sorted({r.id for r in results if r.status is Status.FAIL and r.critical})


# Slurm ends a reason with the [user@time] it stamped; fields may follow it (Comment=, Extra=,
# ReservationName=). Without a stamp, the reason runs to the next field.
_STAMPED_REASON = re.compile(r"\bReason=(.*?) \[([^\]\s@]+@[^\]\s]+)\]")
_REASON = re.compile(r"\bReason=(.*?)(?= \w+=|$)")


def parse_node(text: str) -> NodeState:
    """One node of `scontrol -o show node`: State=..., Partitions=... and Reason=<text> [user@time]."""
    line = text.strip()
    name = re.search(r"\bNodeName=(\S+)", line)
    state = re.search(r"\bState=(\S+)", line)
    partitions = re.search(r"\bPartitions=(\S+)", line)
    reason = _STAMPED_REASON.search(line) or _REASON.search(line)
    stamp = reason.group(2) if reason and reason.re is _STAMPED_REASON else ""
    return NodeState(
        state.group(1) if state else "",
        reason.group(1).strip() if reason else "",
        name.group(1) if name else "",
        tuple(p for p in partitions.group(1).split(",") if p) if partitions else (),
        stamp.partition("@")[2],
    )


def parse_nodes(text: str) -> dict[str, NodeState]:
    """Every node of `scontrol -o show node` (one line each), by name. The multi-line form (a record
    from its NodeName= line to the next, continuation lines indented) reads the same."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if line.lstrip().startswith("NodeName="):
            records.append([line.strip()])
        elif records and line.strip():
            records[-1].append(line.strip())
    nodes = (parse_node(" ".join(record)) for record in records)
    return {node.name: node for node in nodes if node.name}


def _checks_of(reason: str) -> list[str]:
    text = reason.removeprefix(FLAPPING_PREFIX).removeprefix(REASON_PREFIX)
    return [word for word in text.split() if "." in word]


def peers(node: NodeState, cluster: Mapping[str, NodeState]) -> list[NodeState]:
    """The nodes sharing a partition with ``node`` (all of them when it has none), itself included."""
    if not node.partitions:
        return list(cluster.values())
    mine = set(node.partitions)
    return [other for other in cluster.values() if mine & set(other.partitions) or other.name == node.name]


def drain_order(nodes: Sequence[NodeState]) -> list[NodeState]:
    """dltune's drains as every node sees them: by the time Slurm stamped on the reason, then by name."""
    return sorted(nodes, key=lambda n: (n.reason_time or "~", n.name))


def held_by_limit(
    node: NodeState, cluster: Mapping[str, NodeState], policy: Policy, failing: Sequence[str]
) -> Result | None:
    """The `system.drain_limit` warning when ``node`` must not be drained: dltune has drained the limit
    already among its partitions' nodes. Counted before draining (``node`` not drained) and again just
    after (then ``node`` counts too, and keeps its drain only within the first ``limit``)."""
    group = peers(node, cluster)
    limit = policy.limit.of(len(group))
    drained = drain_order([n for n in group if n.drained_by_dltune])
    others = [n for n in drained if n.name != node.name]
    if node.name in {n.name for n in drained[:limit]} or len(others) < limit:
        return None
    checks: dict[str, int] = {}
    for other in others:
        for check_id in _checks_of(other.reason):
            checks[check_id] = checks.get(check_id, 0) + 1
    named = ", ".join(f"{c} ({n})" for c, n in sorted(checks.items(), key=lambda kv: (-kv[1], kv[0])))
    where = ",".join(node.partitions) or "the cluster"
    return Result(
        "system.drain_limit",
        Status.WARN,
        f"{len(others)} nodes already drained by dltune for {named or 'their checks'}: a shared failure? "
        f"{node.name} stays in service although {' '.join(failing)} failed (limit {limit} of "
        f"{len(group)} nodes in {where})",
        evidence={
            "drained_nodes": [n.name for n in others[:50]],
            "checks": checks,
            "limit": str(policy.limit),
            "nodes_in_partitions": len(group),
            "failing_here": list(failing),
        },
        remedy="find the shared cause first (the failing checks' shared dependency: NFS server, subnet "
        "manager, time source); to drain anyway, raise --drain-limit (role: slurm_healthcheck_drain_limit)",
        metrics={"drained_nodes": float(len(others)), "drain_limit": float(limit)},
    )


def decide(
    node: NodeState,
    results: Sequence[Result],
    cluster: Mapping[str, NodeState] | None,
    policy: Policy,
    history: History,
    now: float,
) -> Decision:
    """What to do with ``node``. ``cluster`` (every node, from one scontrol call) is needed only to drain;
    call with None first, and again with it when the first answer is "need_cluster". In the observe
    profile the decision is made and said ("would drain"), and nothing is done."""
    decided = _decide(node, results, cluster, policy, history, now)
    if policy.profile is not Profile.OBSERVE or decided.action == "none":
        return decided
    # Observe: the same judgement, said as what the drain profile would do; the history keeps only
    # what was seen (the runs), not a drain or a resume that did not happen.
    name = node.name or "this node"
    would = {
        "drain": f"drain {name}: {decided.reason}",
        "need_cluster": f"drain {name} (within the drain limit)",
        "resume": f"resume {name} ({node.reason})",
    }[decided.action]
    seen = decided.undrained or decided.history
    return Decision("none", f"observe profile: would {would}; nothing done", history=seen)


def _decide(
    node: NodeState,
    results: Sequence[Result],
    cluster: Mapping[str, NodeState] | None,
    policy: Policy,
    history: History,
    now: float,
) -> Decision:
    name = node.name or "this node"
    failing = critical_failures(results)
    why = node.left_alone_because
    if why:
        # Not dltune's to judge (STATE_WORDS), whatever the reason: said with the state; its runs are
        # not counted either (what a node in maintenance or powering up shows is not its health).
        return Decision(
            "none",
            f"{name} left as it is: {', '.join(why)} ({node.state or 'no state'}"
            f"{', ' + node.reason if node.reason else ''})"
            + (f"; critical failures not recorded in Slurm: {' '.join(failing)}" if failing else ""),
            history=history,
        )
    if history.drained_reason and not node.drained:
        # dltune drained it and someone else put it back: the operator has seen it, damping starts
        # afresh (the drain's time still counts in the fleet's history).
        history = history.ended_drain(now, by_dltune=False)
    history = history.observed(failing, now)
    if node.held_by_someone_else:
        return Decision(
            "none",
            f"{name} left as it is: out of service by someone else ({node.state}"
            f"{', ' + node.reason if node.reason else ', no reason'})"
            + (f"; critical failures not recorded in Slurm: {' '.join(failing)}" if failing else ""),
            history=history,
        )
    # Judged on the clock as it reads now: a stamp ahead of it (the clock was stepped back since, or a
    # history file copied from another host) cannot be a resume that happened, so it does not count
    # as recent and is dropped, and the decision says so.
    future = [t for t in history.resumes if t > now + CLOCK_SLACK_S]
    recent = tuple(t for t in history.resumes if -CLOCK_SLACK_S <= now - t < policy.flap_window_s)
    history = replace(history, resumes=recent)
    decided = _decide_healthy_or_failing(node, failing, cluster, policy, history, now)
    if future and decided.said:
        ahead = max(future) - now
        note = (
            f" ({len(future)} resume stamp(s) up to {ahead:.0f} s ahead of the clock not counted: stepped?)"
        )
        return replace(decided, said=decided.said + note)
    return decided


def pending_drains(failing: Sequence[str], policy: Policy, history: History) -> dict[str, tuple[int, int]]:
    """The critical failures that have not failed enough consecutive runs to drain yet: check ->
    (runs failed, runs needed). ``history`` has seen this run."""
    runs = {c: history.failing_runs.get(c, 0) for c in failing}
    return {c: (runs[c], policy.needed(c)) for c in failing if runs[c] < policy.needed(c)}


def _pending_said(pending: Mapping[str, tuple[int, int]]) -> str:
    return ", ".join(f"{c} failed {runs} of {needed} runs" for c, (runs, needed) in sorted(pending.items()))


def recovery_left(node: NodeState, policy: Policy, history: History, now: float) -> tuple[int, float] | None:
    """For a node dltune drained for a transient check and healthy now: the passing runs and seconds it
    still needs before a resume (None when it may be resumed: a drain for hard checks only, or the
    window passed)."""
    if not set(_checks_of(node.reason)) & policy.transient:
        return None
    since = history.passing_since if history.passing_since is not None else now
    runs_left = max(0, policy.recovery_runs - history.passing_runs)
    seconds_left = max(0.0, policy.recovery_window_s - (now - since))
    return None if runs_left == 0 and seconds_left == 0 else (runs_left, seconds_left)


def _decide_healthy_or_failing(
    node: NodeState,
    failing: list[str],
    cluster: Mapping[str, NodeState] | None,
    policy: Policy,
    history: History,
    now: float,
) -> Decision:
    name = node.name or "this node"
    if failing:
        pending = pending_drains(failing, policy, history)
        due = [c for c in failing if c not in pending]
        if due:
            decided = _decide_failing(node, due, cluster, policy, history, now)
            return replace(decided, said=decided.said + (f" ({_pending_said(pending)})" if pending else ""))
        if node.drained_by_dltune:
            return Decision(
                "none", f"{name} stays drained ({node.reason}): {_pending_said(pending)}", history=history
            )
        return Decision("none", f"{name} not drained yet: {_pending_said(pending)}", history=history)
    if node.drained_by_dltune:
        if node.flapping:
            return Decision(
                "none",
                f"{name} stays drained ({node.reason}): healthy now, but an operator resumes a flapping node",
                history=history,
            )
        left = recovery_left(node, policy, history, now)
        if left is not None:
            return Decision(
                "none",
                f"{name} stays drained ({node.reason}): passing {history.passing_runs} of "
                f"{policy.recovery_runs} runs, {left[1] / 60:.0f} of {policy.recovery_window_s / 60:g} min "
                "left before a resume",
                history=history,
            )
        return Decision(
            "resume",
            f"resumed {name} (dltune had drained it: {node.reason})",
            history=history.ended_drain(now, by_dltune=True),
            undrained=history,
        )
    return Decision(
        "none",
        f"{name} left as it is ({node.state}{', ' + node.reason if node.reason else ''})",
        history=history,
    )


def _decide_failing(
    node: NodeState,
    due: list[str],
    cluster: Mapping[str, NodeState] | None,
    policy: Policy,
    history: History,
    now: float,
) -> Decision:
    """Critical checks fail for long enough: drain (flapping when dltune resumed it often lately),
    within the limit."""
    name = node.name or "this node"
    if node.flapping:
        return Decision(
            "none", f"{name} stays drained ({node.reason}): resume it by hand once fixed", history=history
        )
    flapping = len(history.resumes) >= policy.flap_count
    reason = f"{FLAPPING_PREFIX if flapping else REASON_PREFIX} {' '.join(due)}"
    if node.drained_by_dltune and node.reason == reason:
        return Decision(
            "none", f"{name} stays drained ({reason})", history=replace(history, drained_reason=reason)
        )
    if not node.drained_by_dltune:
        if cluster is None:
            return Decision("need_cluster", "", history=history)
        held = held_by_limit(node, cluster, policy, due)
        if held is not None:
            return Decision("none", f"{name} not drained: {held.summary}", results=(held,), history=history)
    said = f"drained {name}: {reason}" + (
        f" ({len(history.resumes)} resumes by dltune within {policy.flap_window_s / 3600:g} h: not "
        "resumed automatically again)"
        if flapping
        else ""
    )
    # A new reason on a node dltune drained already is the same drain, not one more.
    drained = (
        replace(history, drained_reason=reason)
        if node.drained_by_dltune
        else history.drained(due, reason, now)
    )
    return Decision("drain", said, reason, history=drained, undrained=history)


def _scontrol(runner: CommandRunner, argv: list[str]) -> str:
    done = runner.run(argv, timeout=SCONTROL_TIMEOUT_S)
    if not done.ok:
        said = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}")[-300:]
        raise SlurmUnavailable(f"{' '.join(argv[:4])} failed: {said}")
    return done.stdout


def apply(
    node: str,
    results: Sequence[Result],
    runner: CommandRunner,
    policy: Policy | None = None,
    history_file: str | None = None,
    now: float | None = None,
) -> tuple[str, list[Result]]:
    """Drain or resume as the results say, within the bounds; returns what was done (for the log) and
    the results the decision adds (`system.drain_limit`). Slurm not answering raises SlurmUnavailable,
    with nothing changed."""
    said, added, _report = apply_and_report(node, results, runner, policy, history_file, now)
    return said, added


def apply_and_report(
    node: str,
    results: Sequence[Result],
    runner: CommandRunner,
    policy: Policy | None = None,
    history_file: str | None = None,
    now: float | None = None,
) -> tuple[str, list[Result], HealthReport | None]:
    """As ``apply``, with what the run knows for the metrics (None when Slurm does not know the node)."""
    policy = policy or Policy()
    now = time.time() if now is None else now
    checked_node_name(node, "the Slurm node")
    history, note = load_history(history_file)
    shown = runner.run(["scontrol", "-o", "show", "node", node], timeout=SCONTROL_TIMEOUT_S)
    if not shown.ok and shown.returncode != 127 and _UNKNOWN_NODE.search(shown.stderr + shown.stdout):
        return f"{node} left as it is: Slurm does not know it ({shown.stderr.strip()[-200:]})", [], None
    if not shown.ok:
        raise SlurmUnavailable(
            f"scontrol show node {node} failed: {(shown.stderr.strip() or shown.stdout.strip())[-300:]}"
        )
    current = replace(parse_node(shown.stdout), name=node)
    decision = decide(current, results, None, policy, history, now)
    if decision.action == "need_cluster":
        cluster = parse_nodes(_scontrol(runner, ["scontrol", "-o", "show", "node"]))
        cluster[node] = replace(cluster.get(node, current), name=node)
        decision = decide(cluster[node], results, cluster, policy, history, now)
    said = decision.said
    drained = current.drained_by_dltune
    if decision.action == "drain":
        _scontrol(
            runner, ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={decision.reason}"]
        )
        said, held = _recheck(node, results, runner, policy, decision)
        if held is not None:
            kept = decision.undrained or replace(decision.history, drained_reason="")
            note += _saved(history_file, kept)
            return said + note, [held], health_report(current, results, policy, kept, False, now)
        drained = True
    elif decision.action == "resume":
        _scontrol(runner, ["scontrol", "update", f"nodename={node}", "state=resume"])
        drained = False
    note += _saved(history_file, decision.history)
    report = health_report(current, results, policy, decision.history, drained, now)
    return said + note, list(decision.results), report


def health_report(
    node: NodeState, results: Sequence[Result], policy: Policy, history: History, drained: bool, now: float
) -> HealthReport:
    """The run's state for the metrics: pending drains, a recovery under way, the counters."""
    pending = pending_drains(critical_failures(results), policy, history)
    recovery = None
    if drained and not critical_failures(results) and node.drained_by_dltune:
        left = recovery_left(node, policy, history, now)
        if left is not None:
            since = history.passing_since if history.passing_since is not None else now
            recovery = (history.passing_runs, policy.recovery_runs, now - since, policy.recovery_window_s)
    return HealthReport(policy.profile, drained, pending, recovery, history)


def _saved(path: str | None, history: History) -> str:
    """Save the history; Slurm has been changed already, so a failure is said, never raised (raising
    would report "nothing changed" about a node that was just drained or resumed)."""
    try:
        save_history(path, history)
    except (OSError, DltuneError) as exc:
        return f" (history not saved: {exc})"
    return ""


def _recheck(
    node: str, results: Sequence[Result], runner: CommandRunner, policy: Policy, decision: Decision
) -> tuple[str, Result | None]:
    """After draining: nodes that decided in the same moment could not see each other. Ask once more;
    beyond the limit in the order every node sees, give the drain back (resume)."""
    if decision.reason.startswith(FLAPPING_PREFIX):
        return decision.said, None  # a flapping node stays out whatever the others do
    time.sleep(RECHECK_DELAY_S)
    try:
        cluster = parse_nodes(_scontrol(runner, ["scontrol", "-o", "show", "node"]))
    except SlurmUnavailable:
        return decision.said, None
    me = cluster.get(node)
    if me is None or not me.drained_by_dltune:
        return decision.said, None
    held = held_by_limit(me, cluster, policy, critical_failures(results))
    if held is None:
        return decision.said, None
    _scontrol(runner, ["scontrol", "update", f"nodename={node}", "state=resume"])
    return f"{node} drained and given back at once: {held.summary}", held


def record_resume(history_file: str, now: float | None = None) -> History:
    """Keep in the node's history that dltune resumes it now (playbooks/remediate.yml, just before its
    own `scontrol update state=resume`): the next health check then counts it with dltune's own
    resumes, so a node that fails, is remediated and fails again is damped, where an operator's resume
    (not recorded) starts the history afresh."""
    now = time.time() if now is None else now
    history, _note = load_history(history_file)
    kept = tuple(t for t in history.resumes if t <= now + CLOCK_SLACK_S)
    recorded = replace(history, resumes=kept).ended_drain(now, by_dltune=True)
    save_history(history_file, recorded)
    return recorded


def load_history(path: str | None) -> tuple[History, str]:
    """The node's history, and a note for the log when it could not be used (then flap damping starts
    afresh: a broken history file must not keep a node drained or stop the health check)."""
    if path is None:
        return History(), ""
    from dltune.files import safeio

    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            # Another user's file (or link, or FIFO) where root keeps its history: not trusted.
            return History(), f" (history {path} not used: not a regular file of uid {os.geteuid()}'s)"
        return History.from_json(safeio.load_file(path, max_bytes=1 << 20)), ""
    except FileNotFoundError:
        return History(), ""
    except (OSError, ValueError) as exc:
        return History(), f" (history {path} not used: {exc})"


def save_history(path: str | None, history: History) -> None:
    """Written by rename in a directory only root (the health check's user) may write: created 0700."""
    if path is None:
        return
    import json

    from dltune.files.dirfd import write_atomically

    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise DltuneError(
            f"{directory}: not a directory of this user's that only it may write: the history file is "
            "not written there"
        )
    write_atomically(path, json.dumps(history.to_json()) + "\n", mode=0o600)
