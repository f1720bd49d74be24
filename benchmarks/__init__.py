"""Benchmarks of the storage engine, each against a baseline measured in the same run.

Run ``python -m benchmarks [--quick] [--only NAME]`` (or ``make bench``); see ``benchmarks/README.md``.
One module per area - :mod:`.codec`, :mod:`.append`, :mod:`.fetch`, :mod:`.load`, :mod:`.compaction`,
:mod:`.keymap`, :mod:`.scale`, :mod:`.wire` (the Kafka listener over loopback; :mod:`.wire_fetch` its bare fetch
client) - each exposing ``NAME`` and ``run(ctx) -> Section``; :mod:`.harness` holds the timing rules,
the table and the generated data.
Nothing here asserts on wall-clock time: targets are printed, never enforced.
"""
