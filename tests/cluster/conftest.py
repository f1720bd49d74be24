"""The ``ctx`` fixture of tests/cluster: one cluster for the whole module, up with every maintenance DAG parsed
and unpaused; stopped, its leftovers killed and its output kept when the module ends."""
from __future__ import annotations

import dataclasses
import shutil
import time

import pytest

# Failed asserts in the helpers explain themselves as they do in the tests.
pytest.register_assert_rewrite("tests.cluster.harness", "tests.cluster.clients")

from include.cluster.run import Cluster  # noqa: E402
from include.broker_launcher import free_ports  # noqa: E402
from include.cluster.topology import Ports  # noqa: E402
from tests.cluster.clients import Kafka  # noqa: E402
from tests.cluster.harness import (  # noqa: E402
    ARTIFACTS, MAINTENANCE_DAGS, SUMMARY, Api, Ctx, MetadataDb, cluster_env, keep_artifacts,
    kill_session_leftovers, wait_for)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    cdir = tmp_path_factory.mktemp("cluster")
    shutil.rmtree(ARTIFACTS, ignore_errors=True)           # this run's only
    *ports, health = free_ports(len(dataclasses.fields(Ports)) + 1)
    cluster = Cluster(cdir, Ports(*ports), base_env=cluster_env(health))
    t0 = time.monotonic()
    db = None
    try:
        cluster.up(timeout=600)
        SUMMARY["up_s"] = round(time.monotonic() - t0, 1)
        api = Api(cluster)
        db = MetadataDb(cluster)
        c = Ctx(cluster, api, db, Kafka(cluster.ports.broker), cdir / "storage.yaml", {})

        def parsed():                       # the dag-processor parses dags/ after it starts
            try:
                return all(api.get(f"/api/v2/dags/{dag}")["dag_id"] == dag for dag in MAINTENANCE_DAGS)
            except AssertionError:          # 404 until parsed
                return False

        wait_for("every maintenance DAG parsed", parsed, 600, cluster, services=("airflow-dag-processor",),
                 interval=3)
        for dag in MAINTENANCE_DAGS:        # unpaused: runs only from this module (no schedule here)
            api.call("PATCH", f"/api/v2/dags/{dag}", {"is_paused": False})
        yield c
    finally:
        SUMMARY["module_s"] = round(time.monotonic() - t0, 1)
        if db is not None:
            db.dispose()
        sessions = [entry["pid"] for entry in cluster.state["processes"].values()]
        cluster.down()
        left = kill_session_leftovers(sessions)
        keep_artifacts(cluster)
        cluster.delete_data()
    assert not left, f"`make cluster-stop` left processes running (killed now): {left}"
