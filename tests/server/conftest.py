from __future__ import annotations

import pytest

from tests.server.broker_proc import BrokerProcess


@pytest.fixture
def broker_factory(tmp_path):
    """``broker_factory(**kwargs)`` starts a :class:`BrokerProcess` (see its arguments); every one is killed at
    the end of the test if still running."""
    made: list[BrokerProcess] = []

    def make(**kwargs) -> BrokerProcess:
        sub = tmp_path / f"broker-{len(made)}"
        sub.mkdir()
        b = BrokerProcess(sub, **kwargs)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.close()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()
