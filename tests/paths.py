"""Paths the tests share: the repository root and the real-Kafka reference segments beside it."""
from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
REAL_KAFKA_FIXTURES = SHARED / "fixtures" / "real-kafka"
