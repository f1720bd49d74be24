"""``make airflow-cli`` and ``make cluster-cli``: Airflow's own CLI against ``make airflow``'s or ``make cluster``'s
environment.

``python -m include.airflow_cli [--cluster] [--home DIR] [--print-env] AIRFLOW-ARGS...``

An ``airflow`` command run from a plain shell reads ``~/airflow`` and its own SQLite file: it sees none of the
project's DAGs, runs or variables. This runs the venv's ``airflow`` with the environment the servers themselves run
with, so ``variables set``, ``backfill create``, ``dags unpause``, ``tasks states-for-dag-run``... act on the
same metadata DB and DAGs:

* default (``make airflow``'s): :func:`include.airflow_standalone.airflow_env`, ``AIRFLOW_HOME=var/airflow`` and
  its SQLite DB (``--home`` names another home, as ``--home`` of ``make airflow`` does), the api-server on
  ``$AIRFLOW_HOST``:``$AIRFLOW_PORT``;
* ``--cluster`` (``make cluster``'s): the environment of the cluster's ``airflow-scheduler`` service, from
  docker-compose.yaml as :mod:`include.cluster.topology` runs it: PostgreSQL on the port the last
  ``make cluster`` used (``var/cluster/state.json``, or ``CLUSTER_DIR``), ``AIRFLOW_HOME=var/cluster/airflow``.

``--print-env`` prints that environment as ``export`` lines instead (``eval "$(make -s airflow-cli
ARGS=--print-env)"`` makes a shell's own ``airflow`` use it). The exit code is airflow's.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from include.airflow_standalone import AIRFLOW_HOME, DEFAULT_HOST, airflow_env, airflow_executable

# The variables --print-env exports: what the two environments set, not the whole inherited environment.
EXPORTED_PREFIXES = ("AIRFLOW", "STORAGE_", "SPARK_", "PYSPARK_", "PYTHONPATH", "PATH")
# The cluster service whose environment the CLI takes: the scheduler has every setting the DAGs and the DB need.
CLUSTER_SERVICE = "airflow-scheduler"


def local_environment(home: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``make airflow``'s environment, with its api-server address from AIRFLOW_HOST and AIRFLOW_PORT."""
    env = dict(os.environ if base is None else base)
    port = env.get("AIRFLOW_PORT") or "8080"
    try:
        port_number = int(port)
    except ValueError:
        raise SystemExit(f"AIRFLOW_PORT={port!r} is not a port number") from None
    return airflow_env(port=port_number, home=home, base=env, host=env.get("AIRFLOW_HOST") or DEFAULT_HOST)


def cluster_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment ``make cluster`` runs its scheduler with (ports and host of the last ``up``)."""
    from include.cluster import topology
    from include.cluster.run import cluster_dir, read_state

    env = dict(os.environ if base is None else base)
    cdir = cluster_dir(env)
    state = read_state(cdir)
    ports = topology.Ports(**state["ports"]) if state.get("ports") else topology.Ports.from_env(env)
    services = topology.services(ports, host=state.get("host", topology.LOOPBACK), cluster_dir=cdir, base=env)
    return services[CLUSTER_SERVICE].environment


def export_lines(env: dict[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items())
                   if k.startswith(EXPORTED_PREFIXES))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m include.airflow_cli", description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", action="store_true", help="make cluster's environment (default: make airflow's)")
    p.add_argument("--home", type=Path, default=AIRFLOW_HOME,
                   help="make airflow's AIRFLOW_HOME (default: var/airflow; not with --cluster)")
    p.add_argument("--print-env", action="store_true", help="print the environment as export lines and exit")
    p.add_argument("args", nargs=argparse.REMAINDER, help="airflow's arguments, e.g. variables get NAME")
    args = p.parse_args(argv)
    if args.cluster and args.home != AIRFLOW_HOME:
        p.error("--home is make airflow's; make cluster's home is var/cluster/airflow (CLUSTER_DIR moves it)")
    env = cluster_environment() if args.cluster else local_environment(args.home.resolve())
    if args.print_env:
        sys.stdout.write(export_lines(env))
        return 0
    if not args.args:
        p.error("no airflow command given: e.g. ARGS=\"variables list\" or ARGS=\"backfill create --help\"")
    executable = airflow_executable()
    # exec: airflow's own exit code, output and Ctrl-C, as if it had been run directly
    os.execve(executable if os.path.isabs(executable) else _which(executable, env), [executable, *args.args], env)
    return 127        # not reached: execve replaces this process or raises


def _which(name: str, env: dict[str, str]) -> str:
    import shutil

    found = shutil.which(name, path=env.get("PATH"))
    if found is None:
        raise SystemExit(f"no {name} executable on PATH; run `make venv` first")
    return found


if __name__ == "__main__":
    sys.exit(main())
