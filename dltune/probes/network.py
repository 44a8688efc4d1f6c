"""Routes to the storage VIPs, and whether NFS mounts answer, without ever hanging on a dead server."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Mapping, Sequence

from dltune.files import safeio
from dltune.probes.runner import CommandRunner
from dltune.snapshot import Responsiveness, RouteChoice


def route_to(runner: CommandRunner, address: str) -> RouteChoice:
    done = runner.run(["ip", "-j", "route", "get", address])
    if not done.ok:
        return RouteChoice(None, None, done.stderr.strip() or f"ip route get failed (rc={done.returncode})")
    try:
        first = safeio.loads(done.stdout)[0]
    except (ValueError, IndexError, TypeError, KeyError):
        first = None
    if not isinstance(first, dict):
        return RouteChoice(None, None, f"unreadable ip -j output: {done.stdout[:80]!r}")
    dev, prefsrc = first.get("dev"), first.get("prefsrc")
    return RouteChoice(dev if isinstance(dev, str) else None, prefsrc if isinstance(prefsrc, str) else None)


def probe_responsive_many(
    paths: Sequence[str], timeout: float, argv: Mapping[str, Sequence[str]] | None = None
) -> dict[str, Responsiveness]:
    """statfs() every mount point at once, each in a child process killed after ``timeout`` seconds.

    A hard NFS mount on a dead server blocks statfs in the kernel for minutes; the audit must not.
    The children run in parallel (a dead server takes timeout, not timeout x mounts), are killed at
    the deadline and never waited for beyond a short grace (a task in uninterruptible sleep dies
    only when its RPC gives up), so the audit returns within timeout + ~0.2 s."""
    start = time.monotonic()
    children = {
        path: subprocess.Popen(
            list((argv or {}).get(path) or ["stat", "--file-system", "--format", "%b", path]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for path in paths
    }
    results: dict[str, Responsiveness] = {}
    deadline = start + timeout
    while len(results) < len(children) and time.monotonic() < deadline:
        for path, child in children.items():
            if path in results or child.poll() is None:
                continue
            seconds = time.monotonic() - start
            if child.returncode == 0:
                results[path] = Responsiveness(True, seconds, f"statfs answered in {seconds:.2f}s")
            else:
                err = (child.stderr.read() if child.stderr else b"").decode(errors="replace").strip()
                results[path] = Responsiveness(False, seconds, f"statfs failed: {err or child.returncode}")
        time.sleep(0.02)
    for path, child in children.items():
        if path not in results:
            child.kill()
            results[path] = Responsiveness(False, time.monotonic() - start, f"no answer within {timeout:g}s")
    for child in children.values():
        # A child stuck in the kernel is left behind: it goes when the RPC times out.
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=0.2)
        if child.stderr:
            child.stderr.close()
    return results
