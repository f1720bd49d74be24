"""``python -m include.cluster up|down|status``: see :mod:`include.cluster.run`."""
from __future__ import annotations

import argparse
import os
import sys

from include.cluster.run import Cluster, cluster_dir, read_state
from include.cluster.topology import LOOPBACK, Ports


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m include.cluster",
                                description="docker-compose.yaml's deployment as processes on this machine")
    sub = p.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start everything, wait until it is up, print the URLs and the login")
    up.add_argument("--host", default=os.environ.get("AIRFLOW_HOST") or LOOPBACK,
                    help="address of the api-server (default: $AIRFLOW_HOST or 127.0.0.1); every other port "
                         "stays on 127.0.0.1")
    up.add_argument("--timeout", type=float, default=300, help="seconds each service may take to come up")
    down = sub.add_parser("down", help="stop every process the last `up` started")
    down.add_argument("--delete-data", action="store_true",
                      help="also delete the metadata DB, the log dirs, the alerts and the process output")
    sub.add_parser("status", help="what runs")
    args = p.parse_args(argv)
    cdir = cluster_dir()
    if args.action == "up":
        cluster = Cluster(cdir, Ports.from_env(), host=args.host)
        try:
            cluster.up(args.timeout)
        except (RuntimeError, SystemExit) as exc:
            print(f"make cluster failed: {exc}", file=sys.stderr)
            stopped = cluster.down()
            if stopped:
                print(f"stopped what had started: {', '.join(stopped)}", file=sys.stderr)
            return 1
        print(cluster.summary(), flush=True)
        return 0
    state = read_state(cdir)
    ports = Ports(**state["ports"]) if state.get("ports") else Ports.from_env()
    cluster = Cluster(cdir, ports, host=state.get("host", LOOPBACK))
    if args.action == "down":
        stopped = cluster.down()
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        if args.delete_data:
            cluster.delete_data()
            print(f"deleted {cdir} and the metadata DB")
        return 0
    for name, entry in cluster.state["processes"].items():
        print(f"{name:<24} pid {entry['pid']:<8} {'running' if cluster.pid(name) else 'exited'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
