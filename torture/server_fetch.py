"""The server trials' zero-copy checks: fetches sent from verified segment bytes (``sendfile``) while the broker is
killed and another process compacts, truncates and deletes under them.

Beside the producers of a trial (:mod:`torture.server`): a compacted topic ``churned`` (16 KiB segments) that a
:mod:`torture.churn` process rewrites in a loop through its own ``LogManager`` (appends of batches of random sizes,
the cleaner's swaps, truncations (by rewrite of the segment cut), ``delete-records`` with retention and an immediate purge), and a
:mod:`torture.fetch_checker` process reading ``churned`` and the producers' topic through the broker over and over
(the stable topic's batches must keep their CRC from pass to pass), reconnecting after each death. At the end of
the trial (before the broker's clean stop) both are told to stop; a ``BAD`` line of the checker (a response that
is not whole, CRC-valid batches in offset order, or a CORRUPT_MESSAGE answer), an exit code other than 0, or a
checker that read nothing is a violation. :data:`TOTALS` adds up what they did over a run.
"""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from torture.processes import ProducerChild

CHURN_TOPIC = "churned"
CHURN_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(16 * 1024), "min.cleanable.dirty.ratio": "0.01",
                "file.delete.delay.ms": "0", "segment.ms": str(3_600_000)}
TOTALS: Counter[str] = Counter()


def fits(first_death: str | None) -> bool:
    """Whether a trial runs these checks: not when its first broker start is armed at a step of a topic
    operation (creating the churned topic would reach that step before the trial's own deaths begin)."""
    if first_death is not None and first_death.startswith("topic."):
        TOTALS["trials without (first death at a topic step)"] += 1
        return False
    TOTALS["trials with"] += 1
    return True


def create_churn_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for fut in admin.create_topics([NewTopic(CHURN_TOPIC, 1, 1, config=CHURN_CONFIG)],
                                   operation_timeout=30).values():
        fut.result(60)


class ZeroCopyChecks:
    """The churn and the fetch checker of one trial."""

    def __init__(self, work: Path, bootstrap: str, cfg_path: Path, topic: str, partitions: int,
                 env: dict[str, str], rng: random.Random, trial: int):
        self.stop_file = work / "zero-copy.stop"
        create_churn_topic(bootstrap)
        self.churn = ProducerChild(f"c{trial}", work, [
            "--config", str(cfg_path), "--topic", CHURN_TOPIC, "--stop-file", str(self.stop_file),
            "--seed", str(rng.randrange(2**31))], env, module="torture.churn", role="churn")
        self.checker = ProducerChild(f"f{trial}", work, [
            "--bootstrap", bootstrap, "--partitions", f"{topic}:{partitions}:stable", "--partitions",
            f"{CHURN_TOPIC}:1", "--stop-file", str(self.stop_file), "--seed", str(rng.randrange(2**31))],
            env, module="torture.fetch_checker", role="fetcher")

    def stop_and_check(self) -> list[str]:
        self.stop_file.touch()
        out: list[str] = []
        for child, what in ((self.churn, "the churn"), (self.checker, "the fetch checker")):
            rc = child.wait(120)
            if rc is None:
                out.append(f"{what} did not stop within 120 s")
                child.close()
            elif rc != 0:
                out.append(f"{what} exited {rc}: {child.stderr()[-2000:]}")
        bad = [line for line in self.checker.lines if line.startswith("BAD")]
        if bad:
            out.append(f"the fetch checker saw {len(bad)} bad response(s), e.g. {bad[:3]}")
        for line in self.churn.lines:
            if line.startswith("OPS "):
                appends, compactions, truncations, deletions, *killed = (int(x) for x in line.split()[1:6])
                TOTALS.update({"churn appends": appends, "compactions": compactions, "truncations": truncations,
                               "deletions": deletions, "truncations killed mid-rewrite": sum(killed)})
        read = [line for line in self.checker.lines if line.startswith("READ ")]
        if read:
            responses, batches, size, passes, reconnects = (int(x) for x in read[-1].split()[1:6])
            TOTALS.update({"responses checked": responses, "batches checked": batches, "bytes checked": size,
                           "passes": passes, "reconnects": reconnects})
            if not responses:
                out.append("the fetch checker read no records")
        elif not out:
            out.append("the fetch checker printed no totals")
        return out

    def close(self) -> None:
        self.stop_file.touch()
        self.churn.close()
        self.checker.close()


def summary() -> str:
    return "  zero-copy checks: " + (", ".join(f"{k} {v:,}" for k, v in TOTALS.items()) or "-")
