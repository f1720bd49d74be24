"""A real SeaweedFS for the tiered-storage tests: one ``weed server -s3`` per test process (started on first use,
stopped at the end of the session), and a fresh bucket per test, so tests never see each other's objects.

Tests that kill or stop the object store start their own :class:`~include.seaweedfs.WeedServer` (``weed_factory``)
instead of the shared one.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from include.seaweedfs import WeedServer

_buckets = itertools.count()


@pytest.fixture(scope="session")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeedServer]:
    server = WeedServer(tmp_path_factory.mktemp("weed")).start()
    yield server
    server.kill9()      # its folder is thrown away: a graceful stop only costs time (25 s)


@pytest.fixture
def weed_factory(tmp_path: Path) -> Iterator[Callable[[], WeedServer]]:
    """``weed_factory()`` starts a private :class:`WeedServer` (for tests that stop or kill it); every one is
    stopped at the end of the test."""
    made: list[WeedServer] = []

    def make() -> WeedServer:
        server = WeedServer(tmp_path / f"weed-{len(made)}").start()
        made.append(server)
        return server

    yield make
    for server in made:
        server.kill9()


def s3_client(server: WeedServer) -> Any:
    """A plain boto3 S3 client of ``server`` (for tests that look at the bucket behind the store's back)."""
    return boto3.client("s3", endpoint_url=server.endpoint_url, aws_access_key_id=server.access_key,
                        aws_secret_access_key=server.secret_key, region_name="us-east-1")


@pytest.fixture
def bucket(weed: WeedServer, request: pytest.FixtureRequest) -> str:
    """A new, empty bucket of the shared ``weed``, named after the test."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"t{next(_buckets)}-{stem}"[:63].rstrip("-")
    s3_client(weed).create_bucket(Bucket=name)
    return name
