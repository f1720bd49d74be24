"""include/broker_launcher.py, the one way the tests, benchmarks, torture trials and the demo start ``serve``: a
restarted broker keeps its port, a start that fails says why, and free ports are distinct and free."""
from __future__ import annotations

import socket

import pytest
import yaml

from include.broker_launcher import BrokerLauncher, free_port, free_ports, parse_serving


@pytest.mark.unit
def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(8)
    assert len(set(ports)) == 8
    socks = [socket.socket() for _ in ports]
    try:
        for s, port in zip(socks, ports):
            s.bind(("127.0.0.1", port))
    finally:
        for s in socks:
            s.close()
    assert 0 < free_port() < 65536


@pytest.mark.unit
def test_the_serving_line_is_parsed_in_order():
    assert parse_serving("serving PLAINTEXT://127.0.0.1:9092, SASL_PLAINTEXT://127.0.0.1:9093\n") == {
        "PLAINTEXT": "127.0.0.1:9092", "SASL_PLAINTEXT": "127.0.0.1:9093"}
    assert parse_serving("loading logs\n") is None


def _config(tmp_path, listeners: str):
    path = tmp_path / "storage.yaml"
    path.write_text(yaml.safe_dump({"broker": {"log.dirs": [str(tmp_path / "logs")], "listeners": listeners}}))
    return path


@pytest.mark.e2e
@pytest.mark.kills
def test_a_restart_after_a_kill_keeps_the_port_and_the_log_keeps_every_start(tmp_path):
    broker = BrokerLauncher(_config(tmp_path, "PLAINTEXT://127.0.0.1:0"), tmp_path / "broker.log")
    try:
        broker.spawn(banner="--- first")
        assert broker.wait_ready()
        first = broker.bootstrap
        assert not first.endswith(":0")
        assert broker.kill9() is False                # it was serving when killed
        assert broker.proc is not None and broker.proc.returncode == -9
        broker.spawn(banner="--- second")
        assert broker.wait_ready()
        assert broker.bootstrap == first                # clients keep their bootstrap address
        assert broker.listeners == f"PLAINTEXT://{first}"
        assert broker.stop() == 0                       # SIGTERM: a clean stop
        log = broker.log_text()
        assert log.index("--- first") < log.index("--- second")
        assert broker.starts == 2
    finally:
        broker.close()


@pytest.mark.e2e
@pytest.mark.kills
def test_a_start_that_fails_raises_with_the_brokers_error(tmp_path):
    broker = BrokerLauncher(_config(tmp_path, "PLAINTEXT://127.0.0.1:notaport"), tmp_path / "broker.log")
    with pytest.raises(RuntimeError, match="did not start") as raised:
        broker.start()
    assert "port 'notaport'" in str(raised.value) and str(tmp_path / "broker.log") in str(raised.value)
    assert broker.proc is not None and broker.proc.returncode == 2


@pytest.mark.e2e
def test_a_broker_process_serves_without_importing_hypothesis(tmp_path):
    """kio imports hypothesis (when installed) only to register test strategies for its types; the command line
    (storage_engine/__main__.py) keeps it out of the broker's start-up, half of the protocol modules' import CPU.
    ``-X importtime`` lists every module the broker imported up to its ``serving`` line."""
    import sys

    broker = BrokerLauncher(_config(tmp_path, "PLAINTEXT://127.0.0.1:0"), tmp_path / "broker.log",
                            command=[sys.executable, "-X", "importtime", "-m", "storage_engine"])
    try:
        broker.start()
        imported = [line.rsplit("|", 1)[-1].strip() for line in broker.log_text().splitlines()
                    if line.startswith("import time:")]
        assert "kio.static.primitive" in imported, "the broker imported the protocol's types"
        # kio's ``import hypothesis.strategies`` is still tried (and listed: it fails at once); the package is not.
        assert not {"hypothesis", "hypothesis.core"} & set(imported)
        assert broker.stop() == 0
    finally:
        broker.close()
