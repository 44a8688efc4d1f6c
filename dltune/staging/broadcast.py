"""`dltune stage --broadcast SRC`: stage a dataset onto every node of a Slurm job while reading the
shared filesystem once, not once per node. Run once in the batch script (on the job's first node):

1. The first node stages SRC locally (`dltune.staging.stage`: parallel, resumable, verified). A
   directory is then packed from that local copy into one tar on the same disk (`sbcast` sends a
   file whose size it knows); an archive or a single file is sent as it is.
2. One check task per node (`srun --ntasks-per-node=1`) reports what the node already holds and
   whether it has room for the payload beside the extracted tree (twice the space; on a tmpfs,
   twice the RAM). A node without room fails the command before anything is sent.
3. Slurm's `sbcast` sends the payload to every node in a tree (its fan-out, its credentials): no
   protocol of dltune's own moves the bytes.
4. One finish task per node extracts (or, for a single file, renames) the payload into
   `DIR/<name>` with the local stage's lock, preflight, atomic rename, data filter and resume, and
   records the dataset it came from, so a later `dltune stage SRC` on that node finds it staged.

Each node's outcome is one `DLTUNE-NODE {json}` line on the finish step's stdout; a node that fails,
or whose task was killed (no line), is named and the command fails. Run the same command again in
the same allocation: the first node's copy and pack are reused (the shared filesystem is not read
again), nodes already staged say so, and a node whose extraction was killed resumes over the files
it completed. Where `sbcast` is missing or fails, every node reads SRC itself (the per-node path),
and the command says so.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dltune.files import safeio
from dltune.files.dirfd import (
    UnsafeEntry,
    derived_name,
    expect_own,
    lstat_at,
    open_own_file,
    opened_dir_checked,
)
from dltune.model import human_size
from dltune.records import field, record
from dltune.staging.copy import sha256_file
from dltune.staging.destination import Destination, check_name
from dltune.staging.model import ARCHIVE_SUFFIXES, Entry, StageError, Summary, is_archive, staged_name
from dltune.staging.plan import allocated, preflight
from dltune.staging.record import (
    completed,
    describe_source,
    identity_of,
    read_record,
    record_path,
    same_source,
    says_complete,
    write_record,
)
from dltune.staging.room import Space, space_at
from dltune.staging.scan import NETWORK_WORKERS, scan_tree
from dltune.staging.stage import already_staged
from dltune.staging.stage import stage as stage_locally
from dltune.text import decimal

NODE_LINE = "DLTUNE-NODE "
# Tar headers, and the padding after each member's data, come in blocks of this size.
TAR_BLOCK = 512

Run = Callable[..., subprocess.CompletedProcess[str]]
Say = Callable[[str], None]


@record(frozen=True)
class Options:
    """What every node's stage is asked for, as on the command line."""

    workers: int | None = None  # None: dltune.staging.scan.default_workers of the source
    verify: bool = False
    checksum: bool = False
    replace: bool = False
    bwlimit: float | None = None

    def stage(self, src: Path, to: Path, **extra: Any) -> Summary:
        """A local stage with these options (and `extra`: name, identity, progress, bwlimit)."""
        extra.setdefault("bwlimit", self.bwlimit)
        return stage_locally(
            src,
            to,
            workers=self.workers,
            verify=self.verify,
            checksum=self.checksum,
            replace=self.replace,
            **extra,
        )

    def argv(self) -> list[str]:
        args = ["--workers", str(self.workers)] if self.workers else []
        args += ["--verify"] * self.verify + ["--checksum"] * self.checksum + ["--replace"] * self.replace
        return args + (["--bwlimit", str(self.bwlimit)] if self.bwlimit else [])


@record
class NodeOutcome:
    node: str
    ok: bool
    message: str
    files: int = 0
    copied: int = 0
    skipped: int = 0

    def line(self) -> str:
        return NODE_LINE + json.dumps(self.__dict__, sort_keys=True)


@record
class Broadcast:
    path: Path
    nodes: list[NodeOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[NodeOutcome]:
        return [n for n in self.nodes if not n.ok]


# --- where things go -----------------------------------------------------------------------------


def payload_suffix(src: Path) -> str:
    """The delivered payload keeps an archive's suffix (its decompressor is chosen by it)."""
    if src.is_dir():
        return ".tar"
    return next((s for s in ARCHIVE_SUFFIXES if src.name.endswith(s)), "")


def delivered_path(to: Path, name: str, suffix: str) -> Path:
    """Where sbcast puts the payload on every node: beside the dataset, hidden, never inside it."""
    return to / derived_name(name, f".dltune-broadcast{suffix}")


def pack_path(to: Path, name: str) -> Path:
    """The first node's tar of its staged directory: not the delivered path, which sbcast writes on
    the first node too (sending a file onto itself would truncate what it reads)."""
    return to / derived_name(name, ".dltune-pack.tar")


def pack_record_path(to: Path, name: str) -> Path:
    return to / derived_name(name, ".dltune-pack.json")


def packed_size(entries: Sequence[Entry]) -> int:
    """An upper bound of the tar `pack_tree` writes: headers per member, the data padded to 512
    bytes, the end-of-archive blocks and the last record's padding."""
    total = 2 * TAR_BLOCK + tarfile.RECORDSIZE
    for entry in entries:
        # the member's header, and a pax header (its own header and its records: the exact mtime,
        # and the path when it is long)
        total += TAR_BLOCK * (3 + (len(entry.relative) + 100) // TAR_BLOCK)
        if entry.kind == "file":
            total += allocated(entry.size, TAR_BLOCK)
    return total


# --- the first node --------------------------------------------------------------------------------


def _member(tree: Path, relative: str) -> tuple[tarfile.TarInfo, Path]:
    """A tar header built from lstat alone (no user or group name lookups: on LDAP-backed nodes
    those cost a round trip per file), with the mtime to the nanosecond as a pax record (tarfile's
    own goes through a float): every node's copy must equal the first node's, and a resume
    compares mtimes exactly."""
    path = tree / relative
    st = path.lstat()
    info = tarfile.TarInfo(relative)
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = st.st_mtime_ns // 10**9
    info.pax_headers = {"mtime": f"{st.st_mtime_ns // 10**9}.{st.st_mtime_ns % 10**9:09d}"}
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
    else:
        info.size = st.st_size
    return info, path


def pack_tree(tree: Path, entries: Sequence[Entry], archive: Path) -> int:
    """Pack the staged `tree` (local disk: read fast, and not the shared source) into `archive`,
    written as `.partial` (created exclusively, never through a link) and renamed when complete;
    returns its size."""
    partial = derived_name(archive.name, ".partial", prefix="")
    with opened_dir_checked(str(archive.parent)) as parent:
        stale = lstat_at(parent, partial)
        if stale is not None:
            expect_own(stale, str(archive.parent / partial), stat.S_IFREG)
            os.unlink(partial, dir_fd=parent)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        fd = open_own_file(parent, partial, str(archive.parent / partial), flags, 0o600)
        with (
            os.fdopen(fd, "wb") as out,
            tarfile.TarFile(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, copybufsize=8 << 20) as tar,
        ):
            for entry in sorted(entries, key=lambda e: e.relative):
                info, path = _member(tree, entry.relative)
                if info.isfile():
                    with path.open("rb") as data:
                        tar.addfile(info, data)
                else:
                    tar.addfile(info)
        os.replace(partial, archive.name, src_dir_fd=parent, dst_dir_fd=parent)
        return os.stat(archive.name, dir_fd=parent, follow_symlinks=False).st_size


def _reusable_pack(to: Path, name: str, identity: dict[str, Any]) -> int | None:
    """The size of the first node's pack when a killed or failed run left it complete for this
    source as it is now (a rerun then reads nothing from the shared filesystem)."""
    try:
        record = read_record(pack_record_path(to, name))
        st = pack_path(to, name).lstat()
    except (OSError, StageError):
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return None
    size = st.st_size
    fits = isinstance(record, dict) and record.get("identity") == identity and record.get("bytes") == size
    return size if fits else None


def _pack_digest(to: Path, name: str) -> str:
    """The pack's SHA-256, kept in its record (a rerun does not hash it again): with --checksum,
    each node compares the copy sbcast delivered with it before extracting."""
    record_file = pack_record_path(to, name)
    record = read_record(record_file) or {}
    if not record.get("sha256"):
        record["sha256"] = sha256_file(pack_path(to, name))
        write_record(record_file, record)
    return str(record["sha256"])


def _recorded_identity(to: Path, name: str) -> dict[str, Any] | None:
    """The source as the first node's stage recorded it a moment ago (no second scan of it)."""
    record = read_record(record_path(to, name))
    return identity_of(record) if record is not None and says_complete(record) else None


def _holds(to: Path, name: str, identity: dict[str, Any]) -> bool:
    """Whether `to`/`name` is this source, staged (its record says so)."""
    try:
        record = read_record(record_path(to, name))
    except StageError:
        return False
    complete = says_complete(record)
    return os.path.lexists(to / name) and complete and same_source(record or {}, identity) is None


def _drop_pack(to: Path, name: str) -> None:
    for path in (pack_path(to, name), pack_record_path(to, name)):
        remove_own_file(path)


def remove_own_file(path: Path) -> None:
    """Remove a file dltune made (absent: nothing to do), relative to its directory: a link or
    another user's entry under its name is refused, not removed."""
    try:
        with opened_dir_checked(str(path.parent)) as parent:
            st = lstat_at(parent, path.name)
            if st is not None:
                expect_own(st, str(path), stat.S_IFREG)
                os.unlink(path.name, dir_fd=parent)
    except UnsafeEntry as exc:
        raise StageError(str(exc)) from exc
    except OSError as exc:
        raise StageError(f"{path}: cannot remove it ({exc.strerror})") from exc


# --- Slurm ---------------------------------------------------------------------------------------


def allocation_nodes(env: dict[str, str], run: Run) -> list[str]:
    """The job's node names, in Slurm's order; [] when they cannot be listed."""
    key = "SLURM_JOB_NODELIST" if env.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    nodelist = env.get(key) or ""
    if nodelist.startswith("-") or " " in nodelist or not (nodelist.isascii() and nodelist.isprintable()):
        raise StageError(f"{key}={nodelist[:80]!r} is not a Slurm node list (as Slurm sets it in a job)")
    if not nodelist or not shutil.which("scontrol"):
        return []
    done = run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=False)
    return done.stdout.split() if done.returncode == 0 else []


def node_count(env: dict[str, str]) -> int:
    """The job's node count as Slurm sets it (0 when it does not); a value that is not a positive
    decimal number is refused naming the variable: taken for one node, it would stage on this node
    only and call the job done."""
    for key in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        text = env.get(key, "")
        if not text:
            continue
        value = decimal(text)
        if value is None or value < 1:
            raise StageError(
                f"{key}={text[:40]!r} is not a node count (a positive decimal number, as Slurm sets it "
                "in a job): run --broadcast in the job's batch script, with Slurm's environment"
            )
        return value
    return 0


def srun_argv(count: int, node_argv: list[str]) -> list[str]:
    """One task on each node of the job, none killed when another fails (each reports its own)."""
    return [
        "srun",
        f"--nodes={count}",
        f"--ntasks={count}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
        *node_argv,
    ]


def dltune_argv(*args: str) -> list[str]:
    """This dltune, as every node runs it (the same install path on each, as the role puts it)."""
    return [sys.executable, "-m", "dltune.cli", *args]


def parse_node_lines(stdout: str) -> list[NodeOutcome]:
    outcomes = []
    for line in stdout.splitlines():
        if line.startswith(NODE_LINE):
            try:
                data = safeio.loads(line[len(NODE_LINE) :])
                outcomes.append(NodeOutcome(**data))
            except (ValueError, TypeError):
                continue
    return outcomes


def _step(run: Run, count: int, node_argv: list[str], expected: list[str]) -> list[NodeOutcome]:
    """Run a node step and return every node's outcome; nodes that gave none are failed by name."""
    try:
        done = run(srun_argv(count, node_argv), stdout=subprocess.PIPE, text=True, check=False)
    except OSError as exc:  # srun missing or not executable on this node
        raise StageError(f"srun: cannot run it ({exc.strerror}): --broadcast needs Slurm's srun") from exc
    outcomes = parse_node_lines(done.stdout or "")
    seen = {o.node for o in outcomes}
    silent = [n for n in expected if n not in seen]
    for node in silent:
        outcomes.append(NodeOutcome(node, False, f"no answer (srun exit {done.returncode}): task killed?"))
    if not expected and len(outcomes) < count:
        outcomes.append(
            NodeOutcome(f"{count - len(outcomes)} node(s)", False, f"no answer (srun exit {done.returncode})")
        )
    return sorted(outcomes, key=lambda o: o.node)


# --- the command ---------------------------------------------------------------------------------


@record(frozen=True)
class Payload:
    """What sbcast sends: the first node's pack of a directory, or the archive or file itself."""

    path: Path
    size: int
    identity: dict[str, Any]
    sha256: str = ""


# long: the phases in order, each refusing with the node named before the next starts
def broadcast(
    src: Path,
    to: Path,
    options: Options,
    *,
    env: dict[str, str] | None = None,
    run: Run = subprocess.run,
    say: Say = lambda _line: None,
    progress: Callable[[int], Any] | None = None,
    on_total: Callable[[int], Any] | None = None,
) -> Broadcast:
    env = dict(os.environ) if env is None else env
    if not env.get("SLURM_JOB_ID"):
        raise StageError(
            "--broadcast runs inside a Slurm job (no SLURM_JOB_ID here): put it in the batch script, "
            "or stage on this node with `dltune stage SRC`"
        )
    if not src.exists():
        raise StageError(f"{src} does not exist")
    count = node_count(env)
    name = staged_name(src)
    result = Broadcast(to / name)

    def stage_here() -> Summary:
        return options.stage(src, to, progress=progress, on_total=on_total)

    if count <= 1:
        result.notes.append("one node in this job: staged here, nothing to broadcast")
        result.nodes.append(_outcome(env, stage_here()))
        return result
    names = allocation_nodes(env, run)
    why_not = None if shutil.which("sbcast") and shutil.which("srun") else "sbcast or srun is not on PATH"
    if why_not is None:
        payload = _prepare(src, to, name, options, stage_here, say, env)
        delivered = delivered_path(to, name, payload_suffix(src))
        node_args = ["--payload", str(delivered), "--identity", json.dumps(payload.identity, sort_keys=True)]
        node_args += ["--name", name, "--to", str(to)]
        node_args += ["--payload-sha256", payload.sha256] if payload.sha256 else []
        check = dltune_argv("stage-node", "check", *node_args, "--payload-bytes", str(payload.size))
        checked = _step(run, count, check, names)
        if any(not o.ok for o in checked):
            result.nodes = [o for o in checked if not o.ok]
            return result
        if all(o.message == "staged" for o in checked):
            result.notes.append("every node already holds it")
        else:
            why_not = _send(run, payload, delivered)
            if why_not is None:
                say(f"sbcast: {human_size(payload.size)} to {count} nodes")
        if why_not is None:
            finish = dltune_argv("stage-node", "finish", *node_args, *options.argv())
            result.nodes = _step(run, count, finish, names)
            if not result.failed and src.is_dir():
                _drop_pack(to, name)
            return result

    result.notes.append(f"{why_not}: every node reads {src} from the shared filesystem itself")
    say(result.notes[-1])
    direct = ["--name", name, "--to", str(to), "--source", str(src), *options.argv()]
    result.nodes = _step(run, count, dltune_argv("stage-node", "direct", *direct), names)
    return result


def _prepare(
    src: Path,
    to: Path,
    name: str,
    options: Options,
    stage_here: Callable[[], Summary],
    say: Say,
    env: dict[str, str],
) -> Payload:
    """A directory: staged here (the one read of the shared filesystem), then packed from the local
    copy, or the pack a previous run left reused. An archive or a file: sent as it is."""
    if not src.is_dir():
        kind = "archive" if is_archive(src) else "file"
        return Payload(src, src.stat().st_size, describe_source(src, kind, None))
    first = stage_here()
    say(f"{_here(env)}: {first.described()}")
    # A tree staged by an older dltune has no record: then the source is scanned for its identity.
    identity = _recorded_identity(to, name) or describe_source(
        src, "dir", scan_tree(src, options.workers or NETWORK_WORKERS)
    )
    size = _reusable_pack(to, name, identity)
    if size is None:
        entries = scan_tree(first.path, 1)  # local disk: one thread is fastest
        _check_pack_room(to, entries, env)
        size = pack_tree(first.path, entries, pack_path(to, name))
        record = {"identity": identity, "bytes": size}
        write_record(pack_record_path(to, name), record)
    else:
        say(f"{_here(env)}: reusing the pack of {name} left by the previous run")
    digest = _pack_digest(to, name) if options.checksum else ""
    return Payload(pack_path(to, name), size, identity, digest)


def _send(run: Run, payload: Payload, delivered: Path) -> str | None:
    """sbcast the payload to every node of the job (--preserve: mode and mtime); why not, if it failed."""
    try:
        sent = run(
            ["sbcast", "--force", "--preserve", str(payload.path), str(delivered)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
    except OSError as exc:
        return f"sbcast failed: {exc.strerror}"
    if sent.returncode == 0:
        return None
    return f"sbcast failed: {(sent.stdout or '').strip()[-500:]}"


def _check_pack_room(to: Path, entries: Sequence[Entry], env: dict[str, str]) -> None:
    """The first node holds its tree and needs room for two archives more: its pack, and the copy
    sbcast writes on every node, this one included."""
    size = packed_size(entries)
    here = space_at(to)
    try:
        preflight([Entry("pack", "file", size), Entry("sent", "file", size)], 0, 0, here, to)
    except StageError as exc:
        raise StageError(f"{_here(env)}: no room to pack the dataset for sbcast: {exc}") from exc


def _here(env: dict[str, str]) -> str:
    return env.get("SLURMD_NODENAME") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def _outcome(env: dict[str, str], summary: Summary) -> NodeOutcome:
    return NodeOutcome(
        _here(env),
        True,
        summary.described(),
        files=summary.files,
        copied=summary.bytes,
        skipped=summary.skipped,
    )


# --- the node steps ------------------------------------------------------------------------------


def node_check(
    to: Path,
    name: str,
    identity: dict[str, Any],
    payload_bytes: int,
    space: Callable[[Path], Space] = space_at,
    delivered: Path | None = None,
) -> NodeOutcome:
    """Is the dataset already staged here; if not, is there room for the payload and the tree? A
    link planted where the dataset or sbcast's delivery goes fails the node before anything is sent."""
    here = _here({})
    if not to.is_dir() or not os.access(to, os.W_OK | os.X_OK):
        return NodeOutcome(here, False, f"{to} is not a writable directory on this node (--to)")
    if _holds(to, name, identity):
        return NodeOutcome(here, True, "staged")
    for planted in (to / name, delivered or to / name):
        if os.path.islink(planted):
            return NodeOutcome(here, False, f"{planted} is a symbolic link; dltune never makes one there")
    tree = max(int(identity.get("bytes", 0)), payload_bytes)
    try:
        preflight(
            [Entry("payload", "file", payload_bytes), Entry("tree", "file", tree)],
            0,
            0,
            space(to),
            to,
        )
    except StageError as exc:
        return NodeOutcome(here, False, f"no room for the payload beside the dataset: {exc}")
    return NodeOutcome(here, True, "ready")


def node_finish(
    payload: Path,
    to: Path,
    name: str,
    identity: dict[str, Any],
    options: Options,
    payload_sha256: str = "",
) -> NodeOutcome:
    """Stage the delivered payload into `to`/`name` as a local stage would, then remove it."""
    here = _here({})
    dest = to / name
    try:
        if not payload.exists():
            if _holds(to, name, identity):
                return NodeOutcome(here, True, "already staged", files=int(identity.get("files", 0)))
            return NodeOutcome(here, False, f"{payload} did not arrive (sbcast)")
        if payload_sha256 and not dest.exists() and sha256_file(payload) != payload_sha256:
            return NodeOutcome(
                here, False, f"{payload} differs from the first node's pack (SHA-256): rerun to resend"
            )
        if identity.get("kind") == "file":
            summary = _finish_file(payload, to, name, identity, options)
        else:
            # The payload is on local disk: --bwlimit is for the shared filesystem, not this read.
            summary = options.stage(payload, to, name=name, identity=identity, bwlimit=None)
        remove_own_file(payload)
    except StageError as exc:
        return NodeOutcome(here, False, str(exc))
    return _outcome({}, summary)


def _finish_file(payload: Path, to: Path, name: str, identity: dict[str, Any], options: Options) -> Summary:
    """A single file arrives whole (sbcast --preserve keeps its mode and mtime): checked against the
    source's size, then renamed into place (no second local copy), its record written first."""
    check_name(name, name)
    with Destination(to, name) as place, place.lock():
        place.refuse_planted()
        staged = already_staged(place, identity, options.replace)
        if staged is not None:
            return staged
        arrived = place.lstat(payload.name)
        if arrived is None or payload.parent != to:
            raise StageError(f"{payload} did not arrive (sbcast)")
        place.expect_own(payload.name, arrived, stat.S_IFREG)
        if arrived.st_size != identity.get("bytes"):
            raise StageError(
                f"{payload}: {arrived.st_size} bytes arrived, the source has {identity.get('bytes')}; "
                "rerun to resend"
            )
        place.write(place.record, completed(identity))
        place.rename(payload.name, place.name)
        place.remove(place.aside)
    return Summary(to / name, files=1, bytes=arrived.st_size, verified=options.verify)


def node_direct(src: Path, to: Path, name: str, options: Options) -> NodeOutcome:
    """The per-node fallback: this node reads the source itself."""
    try:
        summary = options.stage(src, to, name=name)
    except StageError as exc:
        return NodeOutcome(_here({}), False, str(exc))
    return _outcome({}, summary)
