"""The metadata operations of the server torture (:mod:`torture.server`): topics created, extended and deleted
through the admin API (:mod:`torture.topic_admin`) while the broker is killed, at random moments and at every named
step of those operations (``topic.*`` in :mod:`storage_engine.crashpoints`).

Checks, after the trial (the broker stopped clean), on the store's folders (:func:`check_topics`):

* no topic-change record is left (:mod:`storage_engine.log.topic_changes`);
* every topic of the admin is whole: its partition folders are ``0 .. k-1`` for a count ``k`` it asked for (the
  create's, or an extension's), or it is absent (a create killed before its record, never acknowledged);
* an acknowledged create or extension is durable: the topic has at least that many partitions, unless the admin
  deleted it afterwards; an acknowledged delete is durable: the topic is absent;
* no topic the admin never asked for;
* the admin's Metadata polls never saw a topic short of partitions (``BAD`` lines), and every operation got a
  definitive answer (no ``GIVEUP``).
"""
from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

# Named steps of the topic changes a broker start may be armed to die at (weights add to torture.server.DEATHS).
TOPIC_DEATHS: dict[str, int] = {
    "topic.create.intent": 3, "topic.create.configs": 2, "topic.create.partition": 4, "topic.create.done": 3,
    "topic.extend.intent": 3, "topic.extend.partition": 3, "topic.extend.done": 3,
    "topic.delete.intent": 3, "topic.delete.partition": 3, "topic.delete.configs": 2, "topic.delete.done": 3,
    "topic.resolve.partial": 4,
}
RECORD_DIR = ".engine+topic-changes"     # storage_engine.layout.TOPIC_CHANGES_DIR


def nth_for(step: str, first_start: bool, partitions: int, rng_value: int) -> int:
    """The hit of ``step`` to die at. The first start creates the producers' topic (one create of
    ``partitions`` partitions) before any admin operation: its hits are skipped."""
    if first_start and step.startswith("topic.create."):
        return rng_value + (partitions if step == "topic.create.partition" else 1)
    return rng_value


def parse_admin(lines: Iterable[str]) -> dict:
    """The admin's output: tries, acknowledged operations, BAD and GIVEUP lines, its END line."""
    out: dict = {"allowed": defaultdict(set), "ops": [], "bad": [], "giveup": [], "end": None}
    for line in lines:
        parts = line.split()
        if parts[:1] == ["TRY"] and len(parts) == 4:
            if parts[1] != "delete":
                out["allowed"][parts[2]].add(int(parts[3]))
            out["ops"].append(("TRY", parts[1], parts[2], int(parts[3])))
        elif parts[:1] in (["ACK"], ["DONE"]) and len(parts) == 4:
            out["ops"].append((parts[0], parts[1], parts[2], int(parts[3])))
        elif parts[:1] == ["BAD"]:
            out["bad"].append(line)
        elif parts[:1] == ["GIVEUP"]:
            out["giveup"].append(line)
        elif parts[:1] == ["END"]:
            out["end"] = line
    return out


def store_topics(log_dirs: Iterable[Path], prefix: str) -> dict[str, list[int]]:
    """{topic: sorted partitions} of the partition folders whose topic starts with ``prefix``."""
    found: dict[str, set[int]] = defaultdict(set)
    for d in log_dirs:
        for name in os.listdir(d):
            if not name.startswith(prefix) or not os.path.isdir(d / name):
                continue
            topic, _, part = name.rpartition("-")
            if part.isdigit():
                found[topic].add(int(part))
    return {t: sorted(p) for t, p in found.items()}


def check_topics(log_dirs: list[Path], prefix: str, admin: dict) -> list[str]:
    """The violations of the store's topics against the admin's operations (see the module docstring)."""
    out: list[str] = []
    left = sorted(os.listdir(log_dirs[0] / RECORD_DIR)) if (log_dirs[0] / RECORD_DIR).is_dir() else []
    if left:
        out.append(f"topic-change records left after a clean stop: {left}")
    if admin["bad"]:
        out.append(f"Metadata showed {len(admin['bad'])} topic(s) not whole, e.g. {admin['bad'][:3]}")
    if admin["giveup"]:
        out.append(f"{len(admin['giveup'])} topic operation(s) without a definitive answer: {admin['giveup'][:3]}")
    found = store_topics(log_dirs, prefix)
    allowed = admin["allowed"]
    for topic, parts in found.items():
        if topic not in allowed:
            out.append(f"topic {topic} in the store, never asked for ({len(parts)} partitions)")
        elif parts != list(range(len(parts))) or len(parts) not in allowed[topic]:
            out.append(f"topic {topic} is not whole: partitions {parts}, asked for counts {sorted(allowed[topic])}")
    # the last definitive answer per topic, and whether a later operation may have changed it
    final: dict[str, tuple[str, int]] = {}
    tried_after: dict[str, str] = {}
    for kind, op, topic, count in admin["ops"]:
        if kind == "TRY":
            tried_after[topic] = op
        else:
            final[topic] = (op, count)
            tried_after.pop(topic, None)
    for topic, (op, count) in final.items():
        if tried_after.get(topic) == "delete":
            continue    # a delete in flight at the end may or may not have happened (it has: check it is whole)
        have = len(found.get(topic, []))
        if op == "delete" and have:
            out.append(f"topic {topic}: its delete was acknowledged, yet it has {have} partitions")
        elif op != "delete" and have < count:
            out.append(f"topic {topic}: {op} to {count} partitions acknowledged, the store has {have}")
    return out
