"""The Java latency client of the wire benchmark (benchmarks/java_latency.py, benchmarks/java/ProduceLatency.java):
what it refuses, and that a command the Java client cannot run comes back as an error naming the client's own
complaint. Its measuring runs against a broker are in the tiny wire run (test_wire_bench.py)."""
from __future__ import annotations

import pytest

from benchmarks import java_latency


@pytest.mark.unit
@pytest.mark.parametrize("settings", [{"linger.ms": "1 2"}, {"": "1"}, {"batch size": "1"}])
def test_producer_settings_with_spaces_or_no_key_are_refused_by_name(settings):
    with pytest.raises(ValueError, match="KEY=VALUE without spaces"):
        java_latency._words(settings)
    assert java_latency._words({"linger.ms": "1", "batch.size": "131072"}) == " linger.ms=1 batch.size=131072"


@pytest.mark.unit
def test_the_command_line_refuses_a_setting_without_its_value(capsys):
    assert java_latency.parser().parse_args(["--set", "linger.ms=1", "--set", "a=b=c"]).set == [("linger.ms", "1"),
                                                                                            ("a", "b=c")]
    with pytest.raises(SystemExit) as exit_:
        java_latency.parser().parse_args(["--set", "linger.ms"])
    assert exit_.value.code == 2
    assert "argument --set: a producer setting is KEY=VALUE, got 'linger.ms'" in capsys.readouterr().err


@pytest.mark.slow       # one JVM (~1-2 s); no broker: the client refuses before it connects
def test_a_setting_the_java_client_refuses_is_an_error_naming_it_and_the_jvm_serves_on(tmp_path):
    with java_latency.JavaProducer("127.0.0.1:1", tmp_path / "java.log") as java:
        with pytest.raises(RuntimeError, match=r"failed 'peak t all 10 1024 batch\.size=-5': .*ConfigException: "
                                               r"Invalid value -5 for configuration batch\.size"):
            java.peak("t", "all", 10, 1024, {"batch.size": "-5"})
        with pytest.raises(RuntimeError, match=r"failed 'paced t 2 100\.0 0\.1 1024': .*Invalid value 2 for "
                                               r"configuration acks"):
            java.paced("t", "2", 100.0, 0.1, 1024)
        assert java.proc.poll() is None        # each command is answered; the JVM keeps serving
        assert java_latency.process_cpu_s(java.proc.pid) > 0
    assert java.proc.returncode == 0           # "exit" ends it cleanly
