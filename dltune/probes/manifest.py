"""The roles' manifest fragments: ``/etc/dltune/expected.d/<role>.json``, validated when read.

A fragment that cannot be read, is not JSON, or does not fit its role's schema is never taken as
"no manifest" (that would turn drift into best-practice warnings): it is reported by role, and the
checks that judge against that role fail naming the file and the problem (DESIGN contract: a node
condition that prevents a judgement is a ``fail``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dltune.costs.ledger import ENTRY_SCHEMA, LEDGER_SUBDIR
from dltune.files import safeio
from dltune.probes.hostfs import HostFS
from dltune.schema import Field, of, optional, validate
from dltune.snapshot import MANIFEST_DIR

# A fragment is a few KiB; anything far larger is not one of ours (and must not exhaust memory).
MAX_FRAGMENT_BYTES = 1 << 20

_STRINGS = of(list, items=of(str))


def _objects(**keys: Field) -> Field:
    """A list of objects with these keys."""
    return of(list, items=of(dict, keys=keys))


_COMMON: dict[str, Field] = {
    "schema_version": of(int, choices=(1,)),
    "role": of(str),
    "tool_version": optional(str),
}
# What each role writes (roles/<role>/tasks: dltune_fragment_content) and the checks read.
ROLE_KEYS: dict[str, dict[str, Field]] = {
    "tmpfs_tmp": {
        "mount_point": of(str),
        "fstype": optional(str),
        "size": of(str, int),  # "10%", "8G"; a bare number of bytes may arrive as an integer
        "options": _STRINGS,
        "live_mount": optional(str, bool),
    },
    "data_disks": {
        "disks": _objects(
            mount_point=of(str), uuid=of(str), fstype=optional(str), options=optional(list, items=of(str))
        ),
        "system_noatime": optional(list, items=of(str)),
    },
    "nvidia_driver": {
        "branch": of(str, int),
        "pinned_branch": optional(str, int),
        "driver_package": optional(str),
        "packages": optional(list, items=of(str)),
        "held_packages": optional(list, items=of(str)),
        "gpu_count": optional(int, minimum=0, maximum=1024),
        "nvswitch_count": optional(int, minimum=0, maximum=1024),
        "fabricmanager": optional(bool),
        "persistenced": optional(bool),
    },
    "nfs_multivip": {
        "server_path": of(str),
        "state": of(str),
        "options": optional(list, items=of(str)),
        "route_persistence": optional(str),
        "vips": _objects(
            address=of(str),
            mount_point=of(str),
            interface=optional(str, type(None)),
            source=optional(str, type(None)),
        ),
    },
    "dl_env": {
        "variables": of(dict, items=of(str, int, float, bool)),
        "cache_dir": optional(str, type(None)),
        "cache_variables": optional(list, items=of(str)),
        "files": optional(dict, items=of(str)),
    },
    # Not a tuning: what the site expects of the node's hardware (the dltune role's dltune_health_*).
    "health": {
        "ib_ports": _objects(
            device=of(str),
            port=optional(int, minimum=1, maximum=255),
            rate_gbps=optional(int, float, minimum=0),
            width=optional(str),
            link_layer=optional(str, choices=("InfiniBand", "Ethernet")),
        ),
        "ipoib_interfaces": optional(list, items=of(str)),
        "gpudirect_rdma": optional(bool),
        "nvlink_links_per_gpu": optional(int, type(None), minimum=0, maximum=64),
        "gpu_count": optional(int, type(None), minimum=0, maximum=1024),
    },
    "slurm_tmpdir": {
        "base": of(str),
        "set_tmpdir": optional(bool),
        "conf": optional(str),
        "manage_conf": optional(bool),
        "hooks": optional(dict, items=of(str)),
        "site_hooks": optional(dict, items=of(str)),
        "job_env": optional(str),
        "min_free_gb": optional(int, float, minimum=0),
    },
}


def fragment_schema(role: str) -> Field:
    return of(dict, keys={**_COMMON, **ROLE_KEYS.get(role, {})})


def check_fragment(role: str, data: Any) -> list[str]:
    """Problems of one parsed fragment (empty when it fits the role's schema)."""
    problems = validate(data, fragment_schema(role))
    if not problems and data.get("role") != role:
        problems.append(f"$.role: {data.get('role')!r}, but the file is named {role}.json")
    return problems


def _read_json(fs: HostFS, where: str, limit: int, kind: str) -> tuple[Any, str | None]:
    """One small JSON file of the manifest directory, or why it cannot be used (unreadable, larger than
    ``limit``, not JSON, too deep, not finite)."""
    try:
        raw = fs.read_bytes(where, limit)
    except OSError as exc:
        return None, f"{where} cannot be read: {exc.strerror or exc}"
    if len(raw) > limit:
        return None, f"{where} is larger than {limit} bytes: not {kind}"
    try:
        return safeio.loads(raw.decode("utf-8")), None
    except ValueError as exc:  # UnicodeDecodeError, bad syntax, too deep, not finite
        return None, f"{where} is not valid JSON: {exc}"


def read_manifest(fs: HostFS) -> tuple[dict[str, Mapping[str, Any]], dict[str, str]]:
    """Valid fragments by role, and the problem by role for every fragment that cannot be used."""
    fragments: dict[str, Mapping[str, Any]] = {}
    problems: dict[str, str] = {}
    directory = fs.path(MANIFEST_DIR)
    try:
        paths = sorted(directory.glob("*.json")) if directory.is_dir() else []
    except OSError as exc:
        return {}, {"*": f"{MANIFEST_DIR}: {exc.strerror or exc}"}
    for path in paths:
        role = path.stem
        where = f"{MANIFEST_DIR}/{path.name}"
        data, problem = _read_json(fs, where, MAX_FRAGMENT_BYTES, "a manifest fragment")
        if problem:
            problems[role] = problem
            continue
        found = check_fragment(role, data)
        if found:
            problems[role] = f"{where} does not fit role {role}'s manifest: {'; '.join(found[:5])}"
            continue
        fragments[role] = data
    return fragments, problems


def read_ledger(fs: HostFS) -> tuple[tuple[Mapping[str, Any], ...], dict[str, str]]:
    """The tuning ledger's entries beside the manifests (``ledger/<role>.json``, dltune.costs.ledger), and the
    problem of each file that cannot be used; a site run between its phases (``*.before.json``) has
    none yet."""
    where_dir = f"{MANIFEST_DIR}/{LEDGER_SUBDIR}"
    directory = fs.path(where_dir)
    try:
        paths = sorted(p for p in directory.glob("*.json") if not p.name.endswith(".before.json"))
    except OSError as exc:
        return (), {where_dir: exc.strerror or str(exc)}
    entries: list[Mapping[str, Any]] = []
    problems: dict[str, str] = {}
    for path in paths:
        where = f"{where_dir}/{path.name}"
        data, problem = _read_json(fs, where, MAX_FRAGMENT_BYTES * 16, "a ledger entry")
        if problem:
            problems[where] = problem
            continue
        found = validate(data, ENTRY_SCHEMA)
        if found:
            problems[where] = f"{where} is not a ledger entry: {'; '.join(found[:3])}"
            continue
        entries.append(data)
    return tuple(entries), problems
