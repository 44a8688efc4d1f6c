"""Staging (`dltune stage`): copy a dataset (a directory, a tar archive, or a single file such as an
HDF5 file, an LMDB or a WebDataset shard) onto node-local scratch, fast, verified, resumable and atomic.

- Into ``DIR/.<name>.partial``, renamed to ``DIR/<name>`` only when complete (and verified when asked):
  a path without the dot is always complete.
- A file is complete only when its size and mtime equal the source's, and its mtime is set last. In
  a partial tree this run created, files are written under their own names; on a resume, each is
  written under a temporary name (``.<file>.dltune-tmp``) and renamed over its final name, so a
  staged file's permissions (0444) never block it.
- Resumable: a rerun after a kill keeps the files already complete (same size and mtime).
- Fast: parallel streams (LOCAL_WORKERS from a local disk, NETWORK_WORKERS from anything else, where
  each open and stat is a round trip), small files in the source's inode order, large files in
  direct-I/O chunks several at a time; ``bwlimit`` (MB/s) caps what the process reads.
- A source file that changes while it is copied (size or mtime before and after) is copied again, and
  after three tries refused; it is never stamped complete.
- A record beside the dataset, ``DIR/.<name>.dltune-source.json`` (never inside it, where a data
  loader would see it), says what was staged: source path, kind, files, bytes, newest mtime. A
  same-name stage from another source, or from a source that changed since, is refused unless
  ``replace=True`` (``--replace``).
- One stager per destination: a second invocation for the same DIR/<name> waits on a lock.
- Preflight: the blocks the files will allocate (sizes rounded up to the destination's block size,
  one block per directory), inodes, and RAM on a tmpfs, against what is still to copy; refuses before
  copying anything. An ENOSPC during the copy is a clean error that keeps the partial tree.
- Archives (tar, tar.gz/bz2/xz, tar.zst) are read once, extracted with tarfile's ``data`` filter (no
  absolute paths, no ``..``, no links leaving the tree, no devices) and verified during that read: the
  stream is read to its end, so the compressor's own check (gzip/bzip2 CRC, xz check, zstd checksum)
  runs, and a truncated or corrupt archive is an error. ``checksum`` digests each member as it is
  extracted and then re-reads the staged files (local) against those digests.
- Zip archives are refused with a message: extract them into a directory, or repack as tar.

Modules, in the order a stage runs: ``scan`` (list the source), ``room`` and ``plan`` (preflight,
``--plan``), ``destination`` (where it lands, the lock), ``copy`` (the engine) or ``archive`` (one
read of a tar), ``record`` (what was staged, from where), ``stage`` (the command, which joins them),
``broadcast`` (``--broadcast``: every node of a job, one read of the shared filesystem). ``model``
holds what they pass around. The names below are the package's interface to the CLI, the bench and
the tests.
"""

from __future__ import annotations

from dltune.staging.archive import require_data_filter
from dltune.staging.copy import CHUNK, LARGE_FILE, sha256_file, verify_tree
from dltune.staging.destination import Destination, check_name, destination_lock
from dltune.staging.model import (
    ARCHIVE_SUFFIXES,
    Entry,
    StageError,
    Summary,
    Throttle,
    is_archive,
    staged_name,
)
from dltune.staging.plan import allocated, check_bwlimit, plan_advice, preflight
from dltune.staging.record import (
    describe_source,
    partial_record_path,
    read_record,
    record_path,
    same_source,
    write_record,
)
from dltune.staging.room import Space, space_at
from dltune.staging.scan import LOCAL_WORKERS, NETWORK_WORKERS, default_workers, scan_tree
from dltune.staging.stage import already_staged, os_error_line, stage

__all__ = [
    "ARCHIVE_SUFFIXES",
    "CHUNK",
    "LARGE_FILE",
    "LOCAL_WORKERS",
    "NETWORK_WORKERS",
    "Destination",
    "Entry",
    "Space",
    "StageError",
    "Summary",
    "Throttle",
    "allocated",
    "already_staged",
    "check_bwlimit",
    "check_name",
    "default_workers",
    "describe_source",
    "destination_lock",
    "is_archive",
    "os_error_line",
    "partial_record_path",
    "plan_advice",
    "preflight",
    "read_record",
    "record_path",
    "require_data_filter",
    "same_source",
    "scan_tree",
    "sha256_file",
    "space_at",
    "stage",
    "staged_name",
    "verify_tree",
    "write_record",
]
