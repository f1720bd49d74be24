"""Build and run the Java workers of this folder on Kafka's own client (include/java_clients.py: the jars of the
pinned package, the sources compiled with the machine's ``javac`` into ``var/java/<hash of the sources>/``, never
committed), once per change of a source: ``python -m tests.server.java.build`` (``make java-clients``) or the first
test that needs them.
"""
from __future__ import annotations

import sys
from pathlib import Path

from include import java_clients
from include.java_clients import JavaUnavailable, classpath, jars, tools

HERE = Path(__file__).resolve().parent

__all__ = ["HERE", "JavaUnavailable", "build", "classpath", "command", "jars", "tools"]


def build() -> Path:
    """The folder of the compiled classes, compiling the sources first if they changed."""
    return java_clients.build(HERE)


def command(main_class: str, *args: str) -> list[str]:
    """The ``java`` command line running ``main_class`` with ``args``, the sources compiled if needed."""
    return java_clients.command(HERE, main_class, *args)


if __name__ == "__main__":
    try:
        print(build())
    except JavaUnavailable as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
