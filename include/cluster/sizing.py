"""The sizing figure of the README: one ``log_retention`` run over a store of many partitions on the cluster,
first with one Celery worker serving every queue (the baseline), then with the two workers of
docker-compose.yaml, each serving its storage host's queue; the same store, regenerated for each, in one
invocation.

``python -m include.cluster.sizing [--partitions 10000] [--dir var/cluster-sizing]``

Each phase: a fresh cluster dir; ``include.scale_store.generate`` writes the partitions into its two log dirs
(4 sealed segments and an active one each, records over the 3 days before the last 5-minute mark, retention one
day, so the run deletes 3 of every 5 segments); ``make cluster``'s processes start on free ports; one run is
the scheduled run the scheduler creates when the DAG is unpaused (as of the end of the latest interval); its wall time (start to end), task instances per worker and the run
report's totals are read from the REST API; everything is stopped and deleted. Prints both phases and the
ratio of the baseline's wall time to the two workers', as JSON.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from include import scale_store
from include.broker_launcher import free_ports
from include.cluster.run import Cluster, session_members
from include.cluster.topology import REPO, Ports

FIVE_MIN_MS = 300_000


def _free_ports() -> Ports:
    return Ports(*free_ports(len(Ports.__dataclass_fields__)))


def _api(cluster: Cluster, path: str, token: str | None = None, method: str = "GET", body: object = None) -> Any:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(f"http://127.0.0.1:{cluster.ports.airflow}{path}", method=method, headers=headers,
                                 data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read() or b"null")


def _rss_mib(cluster: Cluster) -> dict[str, float]:
    """Resident memory of each service now: every process of its session (task processes, spark-submit, executors
    included), in MiB."""
    out = {}
    for name, entry in cluster.state["processes"].items():
        total = 0
        for pid in session_members(entry["pid"]):
            try:
                with open(f"/proc/{pid}/statm") as f:
                    total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except OSError:
                continue
        out[name] = round(total / 2**20, 1)
    return out


def _one_worker(cluster: Cluster) -> None:
    """Stop the second worker; the first serves every queue (and no host check)."""
    import signal

    workers = cluster.workers()
    from storage_engine import load_config

    queues = ",".join([*load_config(cluster.dir / "storage.yaml").hosts, "default"])
    for name in workers:
        os.killpg(cluster.state["processes"][name]["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(cluster.pid(n) for n in workers):
        time.sleep(0.5)
    svc = cluster.services[workers[0]]
    command = list(svc.command)
    command[command.index("--queues") + 1] = queues
    env = {k: v for k, v in svc.environment.items() if k != "STORAGE_MAINTENANCE_HOST"}
    cluster._spawn(workers[0], command, env)
    expected = f"celery@{cluster._celery_hostname(workers[0])}"
    cluster._wait(workers[0], lambda: cluster.celery_nodes() == [expected], 180)


def phase(cdir: Path, partitions: int, now_ms: int, workers: int, timeout: float) -> dict:
    cluster = Cluster(cdir, _free_ports(), base_env=dict(os.environ),
                      broker_overrides={"log.segment.bytes": 2048, "log.retention.ms": scale_store.DAY_MS,
                                        "log.index.size.max.bytes": 4096, "log.segment.delete.delay.ms": 60_000})
    cluster.delete_data()
    t0 = time.monotonic()
    generated = scale_store.generate(cdir / "storage", partitions, 4, now_ms)
    try:
        cluster.up()
        if workers == 1:
            _one_worker(cluster)
        token = _api(cluster, "/auth/token", method="POST",
                     body={"username": "admin", "password": cluster.password()})["access_token"]
        dag = "log_retention"
        _api(cluster, f"/api/v2/dags/{dag}", token, "PATCH", {"is_paused": False})
        # Unpausing makes the scheduler create the run of the latest interval (catchup is off): that run is measured,
        # not a later interval's run, which finds nothing left to delete.
        deadline = time.monotonic() + timeout
        start_rss = _rss_mib(cluster)
        peak_rss = dict(start_rss)
        while True:
            peak_rss = {k: max(v, peak_rss.get(k, 0)) for k, v in _rss_mib(cluster).items()}
            runs = _api(cluster, f"/api/v2/dags/{dag}/dagRuns?run_type=scheduled&order_by=run_after&limit=1",
                        token)["dag_runs"]
            if runs and runs[0]["state"] in ("success", "failed"):
                run = runs[0]
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"no scheduled {dag} run finished within {timeout:.0f} s")
            time.sleep(2)
        _api(cluster, f"/api/v2/dags/{dag}", token, "PATCH", {"is_paused": True})
        run_id = urllib.parse.quote(run["dag_run_id"])
        tis = _api(cluster, f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances?limit=1000", token)["task_instances"]
        report = _api(cluster, f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances/run_report/xcomEntries/"
                               "return_value", token)["value"]
        start = datetime.datetime.fromisoformat(run["start_date"])
        end = datetime.datetime.fromisoformat(run["end_date"])
        return {"workers": workers, "state": run["state"], "wall_s": round((end - start).total_seconds(), 1),
                "task_instances": len(tis), "per_worker": dict(Counter(ti["hostname"] for ti in tis)),
                "as_of": report.get("as_of"),
                "totals": {k: v for k, v in report["totals"].items() if k != "task_states"},
                "store": generated, "phase_s": round(time.monotonic() - t0, 1),
                "loadavg_after_run": list(os.getloadavg()), "rss_mib_at_start": start_rss, "rss_mib_peak": peak_rss}
    finally:
        cluster.down()
        cluster.delete_data()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m include.cluster.sizing", description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=10_000)
    p.add_argument("--dir", type=Path, default=REPO / "var" / "cluster-sizing")
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args(argv)
    now_ms = int(time.time() * 1000) // FIVE_MIN_MS * FIVE_MIN_MS
    one = phase(args.dir.resolve(), args.partitions, now_ms, 1, args.timeout)
    two = phase(args.dir.resolve(), args.partitions, now_ms, 2, args.timeout)
    out = {"partitions": args.partitions, "loadavg": list(os.getloadavg()), "one_worker": one, "two_workers": two,
           "speedup_two_over_one": round(one["wall_s"] / two["wall_s"], 2) if two["wall_s"] else None}
    print(json.dumps(out, indent=1))
    same_work = one["totals"]["segments"] == two["totals"]["segments"] > 0
    if not same_work:
        print("the two runs did not delete the same segments: the figures compare different work", file=sys.stderr)
    return 0 if one["state"] == two["state"] == "success" and same_work else 1


if __name__ == "__main__":
    sys.exit(main())
