"""A real Prometheus over real node_exporters reading dltune textfiles. Prints one JSON document: the
alerts Prometheus fired, for each panel of the dashboard how many series its query returned, and what
each recording rule of the rules file recorded.

    prometheus_live.py --node NAME=TEXTFILE_DIR ... --rules RULES --dashboard JSON --wait-alert NAME@NODE
    prometheus_live.py --target NAME=HOST:PORT ... --rules RULES --dashboard JSON --wait-alert NAME@NODE

--node starts a node_exporter of its own on loopback for each textfile directory: run it inside a
network namespace of its own (`unshare --net python3 prometheus_live.py ...`), where every packet
stays on that namespace's loopback. --replay NAME=DIR does the same for a node whose successive
textfiles (a node's runs, one per file, in the order of their names) are in DIR: it serves each in turn
until Prometheus has scraped it (its dltune_audit_last_run_timestamp_seconds), the replayed nodes in
step, so Prometheus sees counters rise as over a node's real runs. --target scrapes node_exporters that
already run, as the lab nodes' own (Ubuntu's prometheus-node-exporter, on the lab's Docker network).
--wait-alert (repeated: each must fire) names the node, or another label of the alert as LABEL=VALUE
(DltuneCheckFailingOnManyNodes@check=nfs.responsive).

The rules' `for:` durations are cut to 2 s (promtool's unit tests hold the real ones): what this
proves is that the rules and the dashboard work on the series dltune and node_exporter really make."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

PROMETHEUS = "127.0.0.1:9090"
FIRST_EXPORTER_PORT = 9101


def _get(path: str, **params: str) -> Any:
    url = f"http://{PROMETHEUS}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


def _wait(what: str, ready: Any, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        try:
            found = ready()
        except OSError:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise SystemExit(f"prometheus_live: {what} did not happen within {seconds:.0f} s")
        time.sleep(0.5)


def _firing(spec: str) -> list[dict[str, Any]]:
    """The firing alerts ``spec`` (ALERTNAME@NODE or ALERTNAME@LABEL=VALUE) names."""
    alert, _, where = spec.partition("@")
    label, _, value = where.rpartition("=")
    alerts = _get("/api/v1/alerts")["data"]["alerts"]
    return [
        a
        for a in alerts
        if a["labels"].get("alertname") == alert
        and a["labels"].get(label or "instance") == value
        and a["state"] == "firing"
    ]


_AUDITED_AT = re.compile(r"^dltune_audit_last_run_timestamp_seconds (\S+)$", re.M)


def _replay(replays: dict[str, list[Path]], directories: dict[str, Path]) -> None:
    """Each replayed node's textfiles in turn, in step: the next only once Prometheus scraped them all."""
    for step in range(1, max(len(files) for files in replays.values())):
        expected = {}
        for name, files in replays.items():
            if step < len(files):
                text = files[step].read_text()
                found = _AUDITED_AT.search(text)
                if found is None:
                    raise SystemExit(
                        f"prometheus_live: {files[step]} has no dltune_audit_last_run_timestamp_seconds"
                    )
                expected[name] = float(found.group(1))
                # node_exporter reads *.prom only: the new text is whole before it takes the old one's name.
                (directories[name] / "next").write_text(text)
                (directories[name] / "next").replace(directories[name] / "dltune.prom")

        def scraped(expected: dict[str, float] = expected) -> bool:
            answer = _get("/api/v1/query", query="dltune_audit_last_run_timestamp_seconds")["data"]["result"]
            seen = {r["metric"].get("instance"): float(r["value"][1]) for r in answer}
            return all(abs(seen.get(name, 0.0) - stamp) < 0.01 for name, stamp in expected.items())

        _wait(f"the textfiles of step {step} scraped", scraped, 30)


def _panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            # The dashboard's variable $instance, at "All".
            found.append((panel["title"], target["expr"].replace("$instance", ".*")))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", action="append", default=[], help="NAME=TEXTFILE_DIR")
    parser.add_argument("--replay", action="append", default=[], help="NAME=DIR of successive textfiles")
    parser.add_argument("--target", action="append", default=[], help="NAME=HOST:PORT of a running exporter")
    parser.add_argument("--rules", type=Path, required=True)
    parser.add_argument("--dashboard", type=Path, required=True)
    parser.add_argument(
        "--wait-alert", action="append", required=True, help="ALERTNAME@NODE (or @LABEL=VALUE) that must fire"
    )
    args = parser.parse_args()
    if not args.node and not args.replay and not args.target:
        parser.error("give at least one --node, --replay or --target")
    if args.node or args.replay:
        # Only in a namespace of its own (see above): its loopback starts down.
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work = Path(tempfile.mkdtemp(prefix="dltune-prometheus-"))
    children = []
    targets = []
    replays: dict[str, list[Path]] = {}
    replayed: dict[str, Path] = {}
    try:
        served = []
        for spec in args.node:
            name, _, directory = spec.partition("=")
            served.append((name, directory))
        for spec in args.replay:
            name, _, directory = spec.partition("=")
            replays[name] = sorted(Path(directory).glob("*.prom"))
            if not replays[name]:
                parser.error(f"--replay {spec}: no *.prom file there")
            replayed[name] = work / f"replay-{name}"
            replayed[name].mkdir()
            (replayed[name] / "dltune.prom").write_text(replays[name][0].read_text())
            served.append((name, str(replayed[name])))
        for index, (name, directory) in enumerate(served):
            port = FIRST_EXPORTER_PORT + index
            children.append(
                subprocess.Popen(
                    [
                        "prometheus-node-exporter",
                        f"--web.listen-address=127.0.0.1:{port}",
                        "--collector.disable-defaults",
                        "--collector.textfile",
                        f"--collector.textfile.directory={directory}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            targets.append({"targets": [f"127.0.0.1:{port}"], "labels": {"instance": name}})
        for spec in args.target:
            name, _, address = spec.partition("=")
            targets.append({"targets": [address], "labels": {"instance": name}})
        rules = work / "dltune-rules.yml"
        rules.write_text(re.sub(r"(?m)^(\s+for:) \d+m$", r"\1 2s", args.rules.read_text()))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": "node", "static_configs": targets}],
        }
        (work / "prometheus.yml").write_text(json.dumps(config))
        children.append(
            subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={work / 'prometheus.yml'}",
                    f"--storage.tsdb.path={work / 'data'}",
                    f"--web.listen-address={PROMETHEUS}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=(work / "prometheus.log").open("w"),
            )
        )
        _wait("Prometheus answering", lambda: _get("/api/v1/status/buildinfo"), 30)
        up = _wait(
            "every exporter scraped",
            lambda: len(_get("/api/v1/query", query="up == 1")["data"]["result"]) == len(targets) or None,
            30,
        )
        if replays:
            _replay(replays, replayed)
        fired = {
            spec: _wait(spec.replace("@", " firing for ", 1), lambda spec=spec: _firing(spec), 60)
            for spec in args.wait_alert
        }
        # Let the recording rules see a few scrapes of every series the panels read.
        time.sleep(3)
        panels = {
            title: len(_get("/api/v1/query", query=expr)["data"]["result"])
            for title, expr in _panel_queries(json.loads(args.dashboard.read_text()))
        }
        recorded = {
            name: [
                {"labels": r["metric"], "value": float(r["value"][1])}
                for r in _get("/api/v1/query", query=name)["data"]["result"]
            ]
            for name in re.findall(r"^\s+- record: \"?([\w:]+)\"?$", args.rules.read_text(), re.M)
        }
        every_alert = sorted(
            ({"labels": a["labels"], "state": a["state"]} for a in _get("/api/v1/alerts")["data"]["alerts"]),
            key=lambda a: sorted(a["labels"].items()),
        )
        document = {
            "up": bool(up),
            "fired": fired,
            "alerts": every_alert,
            "panels": panels,
            "recorded": recorded,
        }
        json.dump(document, sys.stdout)
        return 0
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
