"""The sample store of the console's test files (the Storage view, its pages, the admin actions, the search, the
dashboard, the page speed) and the api-server over it: the demo's three topics, small, maintained by one retention
and one compaction run.

Each of those files used to build the store again (generate, then two DAG runs: ~10 s of CPU, 20-30 s on a loaded
worker) and start its own ``airflow api-server`` (~13 s of CPU, 15-25 s). A worker now builds the store once, at
one place, keeps a pristine copy of its log dirs, and puts that copy back at the same place for every next file
that uses it, before the file's first test: each file starts from the same bytes as before, at the same paths, so
the DAG runs' results in the metadata DB (which name the log dirs) still describe the store a file sees. Files run
one after another on a worker (``--dist loadfile``), and a file's module fixtures (its brokers, its browser) are
stopped before the next file's are set up, so no process writes the store while it is put back.

The api-server is started by the first file and kept for the next ones: the store it serves is at the same place
for all of them, and it reads the store and the metadata DB afresh for every request (the Storage plugin keeps
nothing of either between requests but values keyed by the task tries they were read from).
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

import yaml

from storage_engine.config_file import load_config

from .api_server import ApiServer
from .conftest import REPO, parse_dag
from .storage_fixtures import T, T_MS

# A partition of the sample marked uncleanable (as the cleaner marks a partition it cannot clean).
UNCLEANABLE = ("user-sessions", 1)


class ConsoleSample:
    """Built on the first :meth:`fresh`; each later :meth:`fresh` restores the pristine log dirs first."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.config_path = root / "storage.yaml"
        self.logs = root / "logs"
        self.pristine = root / "pristine-logs"
        self.runs: dict[str, Any] = {}
        self.uses = 0
        self.server: ApiServer | None = None

    def _build(self) -> None:
        from include.sample_data import generate
        from storage_engine.maintenance.cleaner_manager import mark_uncleanable

        for leftover in (self.logs, self.pristine):     # of a build that failed for an earlier file
            shutil.rmtree(leftover, ignore_errors=True)
        data = yaml.safe_load((REPO / "include" / "config" / "storage.yaml").read_text())
        data["broker"]["log.dirs"] = [str(self.logs / "dir-a"), str(self.logs / "dir-b")]
        self.config_path.write_text(yaml.safe_dump(data))
        generate(load_config(self.config_path), now_ms=T_MS, scale=0.5)
        retention = parse_dag("log_retention").test(logical_date=T)
        assert retention.state == "success"
        compaction = parse_dag("log_compaction").test(logical_date=T, run_conf={"map_strategy": "local"})
        assert compaction.state == "success"
        config = load_config(self.config_path)
        log_dir = next(d for d in config.log_dirs if os.path.isdir(os.path.join(d, "%s-%d" % UNCLEANABLE)))
        mark_uncleanable(log_dir, "%s-%d" % UNCLEANABLE, "CorruptRecordError: CRC mismatch (test damage)", T_MS)
        shutil.copytree(self.logs, self.pristine, symlinks=True)
        self.runs = {"retention": retention, "compaction": compaction}

    def _restore(self) -> None:
        shutil.rmtree(self.logs)
        shutil.copytree(self.pristine, self.logs, symlinks=True)

    @contextlib.contextmanager
    def fresh(self) -> Iterator[dict[str, Any]]:
        """The sample as built, named by $STORAGE_ENGINE_CONFIG for the ``with`` block (the DAGs' tasks read it):
        ``{"config_path", "config", "root", "retention", "compaction"}`` (the two runs: DagRuns of the build)."""
        old = os.environ.get("STORAGE_ENGINE_CONFIG")
        os.environ["STORAGE_ENGINE_CONFIG"] = str(self.config_path)
        try:
            if self.uses == 0:
                self._build()
            else:
                self._restore()
            self.uses += 1
            yield {"config_path": self.config_path, "config": load_config(self.config_path), "root": self.root,
                   **self.runs}
        finally:
            if old is None:
                os.environ.pop("STORAGE_ENGINE_CONFIG", None)
            else:
                os.environ["STORAGE_ENGINE_CONFIG"] = old

    def api_server(self, log_path: pathlib.Path) -> ApiServer:
        """The worker's api-server over the sample, started on the first call (again if it has exited)."""
        if self.server is None or self.server.proc is None or self.server.proc.poll() is not None:
            self.close()
            self.server = ApiServer(pathlib.Path(os.environ["AIRFLOW_HOME"]), self.config_path, log_path).start()
        return self.server

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
