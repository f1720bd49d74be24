"""Fixtures shared by the engine tests."""
from __future__ import annotations

import pytest

from storage_engine.config import LogConfig
from storage_engine.log.log import Log

from .helpers import PARTITION, TOPIC, open_log

T0 = 1_700_000_000_000  # a fixed "now" (ms) for tests that need one


@pytest.fixture
def logs(log_dir):
    """A factory opening logs in ``log_dir`` (a full, exclusive load; the folder is created) and closing, at the
    end of the test, every one still open: ``logs(cfg, topic=..., partition=..., now_ms=..., **open_log kwargs)``."""
    opened: list[Log] = []

    def open_(cfg: LogConfig | None = None, *, topic: str = TOPIC, partition: int = PARTITION, now_ms: int = T0,
              **kw) -> Log:
        log, _ = open_log(log_dir, cfg, topic=topic, partition=partition, now_ms=now_ms, **kw)
        opened.append(log)
        return log

    yield open_
    for log in opened:
        if log.lock.is_open:
            log.close(clean=False)
