"""A real Prometheus over real node_exporters reading dltune textfiles. Prints one JSON document: the
alerts Prometheus fired and, for each panel of the dashboard, how many series its query returned.

    prometheus_live.py --node NAME=TEXTFILE_DIR ... --rules RULES --dashboard JSON --wait-alert NAME@NODE
    prometheus_live.py --target NAME=HOST:PORT ... --rules RULES --dashboard JSON --wait-alert NAME@NODE

--node starts a node_exporter of its own on loopback for each textfile directory: run it inside a
network namespace of its own (`unshare --net python3 prometheus_live.py ...`), where every packet
stays on that namespace's loopback. --target scrapes node_exporters that already run, as the lab
nodes' own (Ubuntu's prometheus-node-exporter, on the lab's Docker network).

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


def _firing(alert: str, node: str) -> list[dict[str, Any]]:
    alerts = _get("/api/v1/alerts")["data"]["alerts"]
    return [
        a
        for a in alerts
        if a["labels"].get("alertname") == alert
        and a["labels"].get("instance") == node
        and a["state"] == "firing"
    ]


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
    parser.add_argument("--target", action="append", default=[], help="NAME=HOST:PORT of a running exporter")
    parser.add_argument("--rules", type=Path, required=True)
    parser.add_argument("--dashboard", type=Path, required=True)
    parser.add_argument("--wait-alert", required=True, help="ALERTNAME@NODE that must fire")
    args = parser.parse_args()
    if not args.node and not args.target:
        parser.error("give at least one --node or --target")
    if args.node:
        # Only in a namespace of its own (see above): its loopback starts down.
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work = Path(tempfile.mkdtemp(prefix="dltune-prometheus-"))
    children = []
    targets = []
    try:
        for index, spec in enumerate(args.node):
            name, _, directory = spec.partition("=")
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
        alert, _, node = args.wait_alert.partition("@")
        fired = _wait(f"{alert} firing for {node}", lambda: _firing(alert, node), 60)
        # Let the recording rules see a few scrapes of every series the panels read.
        time.sleep(3)
        panels = {
            title: len(_get("/api/v1/query", query=expr)["data"]["result"])
            for title, expr in _panel_queries(json.loads(args.dashboard.read_text()))
        }
        every_alert = sorted(
            {
                (a["labels"]["alertname"], a["labels"].get("instance", ""), a["state"])
                for a in _get("/api/v1/alerts")["data"]["alerts"]
            }
        )
        json.dump({"up": bool(up), "fired": fired, "alerts": every_alert, "panels": panels}, sys.stdout)
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
