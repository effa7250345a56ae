"""`python -m sparkmirror_dev.dashboard_picture`: the Grafana dashboard's queries, run by a real Prometheus
scraping a running mirror, plotted to `charts/sparkmirror/dashboards/sparkmirror.png`.

1. builds Prometheus from its Go module (cached like helm, `install.prometheus()`);
2. starts two local Kafka clusters and writes records to two topics at a steady rate, with a burst part way;
3. mirrors them with the local runner (`LocalRun`, the driver `sparkmirror run` uses) serving its metrics on a
   loopback port, restarts that driver half way (the `_total` counters carry on: they live in the progress
   topic), and has Prometheus scrape it every 2 s;
4. runs every query of `dashboards/sparkmirror.json` through Prometheus' HTTP API (`query_range`), with Grafana's
   variables expanded to "all", and plots one panel per dashboard panel.
The operator does not run here: its panel shows what the operator's metrics give in a cluster, so it stays empty.
Needs matplotlib (a dependency of sparkmirror-dev, installed by `make setup`); not part of `make test`.
"""
from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from . import install

DASHBOARDS = Path(__file__).resolve().parents[2] / "charts" / "sparkmirror" / "dashboards"
TOPICS = {"orders": 3, "clicks": 2}
SCRAPE_S = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _produce(bootstrap: str, stop: threading.Event, rate: dict) -> None:
    """Records at `rate["per_s"]` per topic until stopped (the rate can change while it runs)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    i = 0
    while not stop.is_set():
        t0 = time.monotonic()
        n = max(int(rate["per_s"] / 10), 1)
        for _ in range(n):
            for topic in TOPICS:
                p.produce(topic, key=str(i).encode(), value=b"x" * 512)
            i += 1
        p.poll(0)
        stop.wait(max(0.1 - (time.monotonic() - t0), 0))
    p.flush(30)


def _prometheus(binary: Path, home: Path, target: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    (home / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
        "scrape_configs": [{"job_name": "sparkmirror-drivers", "honor_labels": True,
                            "static_configs": [{"targets": [target],
                                                "labels": {"flow_group": "demo-east", "pod": "local-driver"}}]}]}))
    proc = subprocess.Popen([str(binary), f"--config.file={home / 'prometheus.yml'}",
                             f"--storage.tsdb.path={home / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=(home / "prometheus.log").open("w"), stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def _query_range(api: str, expr: str, start: float, end: float) -> list[dict]:
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": SCRAPE_S})
    body = json.loads(urllib.request.urlopen(f"{api}/api/v1/query_range?{q}", timeout=30).read())
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def _expand(expr: str) -> str:
    for k, v in {"$__rate_interval": f"{SCRAPE_S * 4}s", "$namespace": ".*", "$flow_group": ".*",
                 "$mirror": ".*"}.items():
        expr = expr.replace(k, v)
    return expr


def _legend(fmt: str, labels: dict) -> str:
    for k, v in labels.items():
        fmt = fmt.replace("{{" + k + "}}", v)
    return " ".join(w for w in fmt.split() if not w.startswith("{{"))


def plot(api: str, start: float, end: float, out: Path, note: str) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dash = json.loads((DASHBOARDS / "sparkmirror.json").read_text())
    panels = [p for p in dash["panels"] if p.get("type") == "timeseries"]
    cols = 2
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(15, 3.2 * rows), squeeze=False)
    series = 0
    for ax, panel in zip(axes.flat, panels):
        for t in panel["targets"]:
            for r in _query_range(api, _expand(t["expr"]), start, end):
                xs = [float(v[0]) - start for v in r["values"]]
                ys = [float(v[1]) for v in r["values"]]
                ax.plot(xs, ys, label=_legend(t.get("legendFormat", ""), r["metric"])[:60])
                series += 1
        unit = panel["fieldConfig"]["defaults"].get("unit", "")
        ax.set_title(f"{panel['title']}" + (f" ({unit})" if unit and unit != "short" else ""), fontsize=10)
        ax.set_xlim(0, end - start)
        ax.tick_params(labelsize=8)
        if ax.lines:
            ax.legend(fontsize=7, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no data here (the operator does not run locally)", ha="center", va="center",
                    transform=ax.transAxes, fontsize=9, color="grey")
        ax.set_xlabel("seconds", fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"sparkmirror dashboard queries, Prometheus scraping a local mirror: {note}", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    return series


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dashboard_picture", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=240, help="how long to mirror (default 240)")
    parser.add_argument("--rate", type=int, default=400, help="records/s per topic (default 400)")
    parser.add_argument("--out", type=Path, default=DASHBOARDS / "sparkmirror.png")
    args = parser.parse_args(argv)

    from sparkmirror.runner.local import LocalRun
    from sparkmirror.runner.resources import load

    from .env import start_all
    from .kafka import KafkaCluster
    from .testing import create_topic

    binary = install.prometheus()
    home = Path(tempfile.mkdtemp(prefix="sparkmirror-dashboard-"))
    east, central = KafkaCluster("east", home / "east"), KafkaCluster("central", home / "central")
    start_all([east, central])
    stop, rate = threading.Event(), {"per_s": args.rate}
    runs: list[LocalRun] = []
    prom = None
    try:
        for topic, parts in TOPICS.items():
            create_topic(east.bootstrap, topic, parts)
        producer = threading.Thread(target=_produce, args=(east.bootstrap, stop, rate), daemon=True)
        producer.start()
        (home / "mirror.yaml").write_text(yaml.safe_dump({
            "apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "demo", "namespace": "local"},
            "spec": {"target": {"alias": "central", "bootstrapServers": central.bootstrap},
                     "mirrors": [{"source": {"alias": "east", "bootstrapServers": east.bootstrap},
                                  "topicsPattern": "|".join(TOPICS)}],
                     "spark": {"parallelism": 2, "epochSeconds": 10}}}))
        port = _free_port()
        configs = [c.model_copy(update={"metricsPort": port}) for c in load([str(home / "mirror.yaml")]).configs]
        prom, api = _prometheus(binary, home, f"127.0.0.1:{port}")
        start = time.time()
        runs.append(LocalRun(configs).start())
        time.sleep(args.seconds * 0.3)
        rate["per_s"] = args.rate * 4  # a burst: lag rises, then falls
        time.sleep(args.seconds * 0.15)
        rate["per_s"] = args.rate
        time.sleep(args.seconds * 0.05)
        runs.pop().stop()  # a driver restart: the counters carry on from the progress topic
        restarted = time.time() - start
        runs.append(LocalRun(configs).start())
        time.sleep(max(args.seconds - (time.time() - start), 10))
        end = time.time()
        series = plot(api, start, end, args.out, f"{args.rate}/s per topic, a 4x burst at "
                      f"{args.seconds * 0.3:.0f}-{args.seconds * 0.45:.0f} s, driver restarted at {restarted:.0f} s")
        print(f"{args.out}: {series} series over {end - start:.0f} s")
        return 0
    finally:
        stop.set()
        for r in runs:
            r.stop()
        if prom is not None:
            prom.terminate()
            prom.wait(30)
        for c in (east, central):
            c.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
