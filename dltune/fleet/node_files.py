"""One node's output file (a dltune audit or bench envelope, or a `{"problem": ...}` file) as the fleet
reads it: validated against the envelope's schema, escaped, its staleness judged. `dltune report`
(dltune.fleet.cluster) merges many; an audit reads its own previous facts file here for the counters
that rose since (previous_counters), without loading the report's renderers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dltune import SCHEMA_VERSION
from dltune.files import safeio
from dltune.model import Status
from dltune.records import field, record
from dltune.schema import of, optional, validate
from dltune.text import visible, visible_data

# A finding's price (dltune.costs.impact): a node's file is anyone's JSON, so the figures the fleet adds up
# are bounded (a node of at most MAX_NODE_GPUS GPUs loses at most all their hours).
MAX_NODE_GPUS = 1024
IMPACT_SCHEMA = of(
    dict,
    keys={
        "basis": of(str, choices=("measured", "estimated", "unpriced")),
        "fraction": optional(int, float, minimum=0.0, maximum=1.0),
        "gpus": optional(int, minimum=0, maximum=MAX_NODE_GPUS),
        "use": optional(int, float, minimum=0.0, maximum=1.0),
        "gpu_hours_per_day": optional(int, float, minimum=0.0, maximum=MAX_NODE_GPUS * 24),
        "of": optional(str, max_length=64),
        "scope": optional(str, max_length=256),
    },
)
# What `dltune report` accepts from a node: the envelope of `dltune audit/bench --format json`.
RESULT_SCHEMA = of(
    dict,
    keys={
        "id": of(str),
        "area": of(str),
        "status": of(str, choices=tuple(s.value for s in Status)),
        "subject": optional(str, type(None)),
        "summary": of(str),
        "evidence": optional(dict),
        "remedy": optional(str, type(None)),
        "metrics": optional(dict, items=of(int, float)),
        "critical": optional(bool),
        "shared_dependency": optional(str, type(None)),
        "acknowledged": optional(dict, type(None)),
        "impact": optional(dict, type(None), keys=IMPACT_SCHEMA.keys),
    },
)
ENVELOPE_SCHEMA = of(
    dict,
    keys={
        "schema_version": of(int, minimum=1),
        "host": optional(str),
        "time": optional(str),
        "valid_until": optional(str),
        "results": of(list, items=RESULT_SCHEMA),
    },
)
PROBLEM_SCHEMA = of(dict, keys={"problem": of(str)})
SHOWN_PROBLEMS = 3


@record
class NodeReport:
    host: str
    results: list[dict[str, Any]] = field(default_factory=list)
    # "unreachable: ...", "crashed: ..." or "invalid: ..." when no usable results came back
    problem: str | None = None
    sources: list[str] = field(default_factory=list)
    stale: str | None = None  # a report past its valid_until: shown, never counted healthy

    @property
    def healthy(self) -> bool:
        return (
            self.problem is None
            and self.stale is None
            and not any(r["status"] in ("fail", "error") for r in self.results)
        )


def node_name(file: Path) -> str:
    """The node a report file belongs to: its name without .audit.json / .bench.json / .json (the name
    the inventory knows; containers and clones often share one hostname). A multi-node bench
    (<node>.multinode.bench.json) belongs to the node that led it: its results name every node."""
    for suffix in (".audit.json", ".multinode.bench.json", ".bench.json", ".json"):
        if file.name.endswith(suffix):
            return file.name[: -len(suffix)]
    return file.name


def _invalid(file: Path, problems: list[str]) -> str:
    shown = "; ".join(problems[:SHOWN_PROBLEMS])
    more = f" (and {len(problems) - SHOWN_PROBLEMS} more)" if len(problems) > SHOWN_PROBLEMS else ""
    return f"invalid: {visible(file.name)}: {visible(shown)}{more}"


def _stale(file: Path, data: dict[str, Any], now: datetime) -> str | None:
    until = data.get("valid_until")
    if until is None:
        return None
    try:
        expiry = datetime.fromisoformat(until)
    except ValueError:
        return f"{visible(file.name)}: valid_until '{visible(until)}' is not a time"
    if expiry.tzinfo is None:
        expiry = expiry.replace(tzinfo=timezone.utc)
    return f"{visible(file.name)} was valid until {visible(until)}" if expiry < now else None


def _load_json(file: Path) -> tuple[Any, str | None]:
    """A file's JSON, or why it could not be read: a file that is no report at all (a FIFO or a device,
    JSON nested too deep, NaN or Infinity) makes its node ``invalid``; one that cannot be read or
    breaks off (a node that crashed while writing) ``crashed``."""
    try:
        return safeio.load_file(file, errors="surrogateescape"), None
    except (safeio.NotRegularFileError, IsADirectoryError) as exc:
        return None, _invalid(file, [str(exc.strerror)])
    except safeio.JsonError as exc:
        return None, _invalid(file, [f"$: {exc}"])
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)  # an OSError's text would repeat the path
        return None, f"crashed: unreadable report {visible(file.name)} ({visible(why)})"


def _is_merged_report(data: Any) -> bool:
    """An earlier merged report (cluster.json) in the same directory: not a node."""
    return isinstance(data, dict) and "nodes" in data and "results" not in data


def _read(file: Path, data: Any, now: datetime) -> tuple[list[dict[str, Any]] | None, str | None, str | None]:
    """(results, problem, stale) of one node file's JSON: results None when the file gives none."""
    if not isinstance(data, dict):
        return None, _invalid(file, [f"$: an object expected, found {type(data).__name__}"]), None
    if "results" not in data and "problem" in data:
        problems = validate(data, PROBLEM_SCHEMA)
        return None, _invalid(file, problems) if problems else visible(data["problem"]), None
    version = data.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        return (
            None,
            f"unreadable: {visible(file.name)} has schema_version {version}, this dltune reads up to "
            f"{SCHEMA_VERSION}: upgrade dltune where the report is merged",
            None,
        )
    problems = validate(data, ENVELOPE_SCHEMA)
    if problems:
        return None, _invalid(file, problems), None
    # A node on an older dltune may send text its own renderers did not escape: escape it here, so the
    # merged JSON and the HTML page are valid UTF-8 whatever the nodes wrote.
    return visible_data(data["results"]), None, _stale(file, data, now)


def load(paths: Sequence[Path], now: datetime | None = None) -> list[NodeReport]:
    """Envelopes from files or directories of *.json; a node's files (<node>.audit.json and
    <node>.bench.json) merge. A file of the form {"problem": "..."} marks a node that could not be
    audited; a file that is not a valid envelope marks its node invalid, with the reason, and every
    other node is still read."""
    now = now or datetime.now(timezone.utc)
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("*.json")) if path.is_dir() else [path]
    nodes: dict[str, NodeReport] = {}
    for file in files:
        data, unreadable = _load_json(file)
        if _is_merged_report(data):
            continue
        host = visible(node_name(file))
        node = nodes.setdefault(host, NodeReport(host))
        node.sources.append(file.name)
        results, problem, stale = (None, unreadable, None) if unreadable else _read(file, data, now)
        if problem is not None:
            node.problem = "; ".join(p for p in (node.problem, problem) if p)
        if results is not None:
            node.results += results
        if stale is not None:
            node.stale = stale
    return [nodes[h] for h in sorted(nodes)]


def previous_counters(file: Path) -> tuple[dict[str, dict[str, int]], str | None]:
    """The counters an earlier audit recorded (a JSON or facts output of `dltune audit`), by
    "<check id>|<subject>", for judging what rose since; or why the file cannot be used."""
    data, problem = _load_json(file)
    if problem is not None:
        return {}, problem
    results, problem, _stale_since = _read(file, data, datetime.now(timezone.utc))
    if results is None:
        return {}, problem or f"{file.name} holds no audit results"
    found: dict[str, dict[str, int]] = {}
    for result in results:
        counters = (result.get("evidence") or {}).get("counters")
        if not isinstance(counters, dict):
            continue
        ints = {
            str(name): value
            for name, value in counters.items()
            if isinstance(value, int) and not isinstance(value, bool)
        }
        if ints:
            found[f"{result.get('id')}|{result.get('subject') or ''}"] = ints
    return found, None
