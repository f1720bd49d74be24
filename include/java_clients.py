"""Kafka's own Java client (kafka-clients 3.9.1) for the tests and the benchmarks: its jars, and Java sources
compiled against them.

The jars come from the PyPI package ``shigawire-apache-flink-libraries`` (pinned in requirements.txt), which ships
kafka-clients 3.9.1 with the codec jars it loads (lz4-java, snappy-java, zstd-jni) and slf4j-api under
``pyflink/lib/``, and Jackson (core, databind, annotations) for the JSON the test drivers speak; nothing else of it
is used. The ``*.java`` files of one folder (tests/server/java, benchmarks/java) are compiled with the machine's
``javac`` into ``var/java/<hash of the sources>/`` (never committed), once per change of a source, whole or not
at all (built in a temporary folder, then renamed), so two processes building the same sources at once are safe.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "shigawire-apache-flink-libraries"
JARS = ("kafka-clients.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar", "slf4j-api.jar",
        "jackson-core.jar", "jackson-databind.jar", "jackson-annotations.jar")
JAVAC_TIMEOUT_S = 300


class JavaUnavailable(Exception):
    """What is missing to build or run Java sources on the client, said in a sentence."""


def tools() -> tuple[str, str]:
    """(javac, java) from PATH."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if not javac or not java:
        raise JavaUnavailable("a JDK is needed (javac and java on PATH; Debian: default-jdk-headless)")
    return javac, java


def jars() -> list[Path]:
    """kafka-clients and the jars it loads, from the installed package."""
    spec = importlib.util.find_spec("pyflink")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        found = [Path(location, "lib", name) for name in JARS]
        if all(p.is_file() for p in found):
            return found
    raise JavaUnavailable(f"the kafka-clients jars are missing: pip install the pinned {PACKAGE} "
                          f"(requirements.txt); looked in {locations or 'no pyflink package'}")


def classpath(classes: Path) -> str:
    return ":".join([str(classes), *map(str, jars())])


def build(sources: Path) -> Path:
    """The folder of the compiled classes of ``sources``'s ``*.java``, compiling them first if they changed."""
    javac, _ = tools()
    files = sorted(sources.glob("*.java"))
    if not files:
        raise FileNotFoundError(f"no .java files in {sources}")
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()[:16]
    out = REPO / "var" / "java" / digest
    if (out / ".built").exists():
        return out
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    proc = subprocess.run([javac, "-nowarn", "-d", str(tmp), "-cp", ":".join(map(str, jars())),
                           *map(str, files)], capture_output=True, text=True, timeout=JAVAC_TIMEOUT_S)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"javac of {sources} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    (tmp / ".built").touch()
    try:
        tmp.rename(out)                       # whole or not at all: a half-built folder is never used
    except OSError:                           # another process built the same sources first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / ".built").exists():
            raise
    return out


def command(sources: Path, main_class: str, *args: str) -> list[str]:
    """The ``java`` command line running ``main_class`` of ``sources`` with ``args``, compiled first if needed."""
    _, java = tools()
    return [java, "-cp", classpath(build(sources)), main_class, *args]
