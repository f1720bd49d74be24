"""``python -m benchmarks [--quick] [--only NAME ...] [--large [KEYS]] [--out PATH] [--profile-broker DIR]``: run,
print tables, write results.json."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from . import idle_connections

from . import append, codec, compaction, fetch, fetch_sessions, harness, keymap, load, metadata, scale, tiering, tiering_scale, wire

BENCHMARKS = {module.NAME: module for module in (codec, append, fetch, load, compaction, keymap, scale, wire,
                                                           metadata, tiering, tiering_scale, fetch_sessions)}
REPEATS_FULL = 5
REPEATS_QUICK = 2
BENCHMARKS[idle_connections.NAME] = idle_connections


def _names(values: list[str] | None) -> list[str]:
    if not values:
        return list(BENCHMARKS)
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    return [n for n in BENCHMARKS if n in names]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, 2 rounds (about 30 s to 2 min: keymap runs one spark-submit)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help=f"run only these benchmarks (repeatable or comma-separated): {', '.join(BENCHMARKS)}")
    parser.add_argument("--large", nargs="?", type=int, const=keymap.LARGE_KEYS_DEFAULT, default=None,
                        metavar="KEYS", help="keymap: one run at KEYS distinct keys (default %(const)s) instead of "
                                             "the standard sizes; `make bench-large`")
    parser.add_argument("--out", type=Path, default=harness.DEFAULT_RESULTS_PATH,
                        help="where to write the JSON results (default: %(default)s)")
    parser.add_argument("--profile-broker", type=Path, default=None, metavar="DIR",
                        help="wire: run the broker processes under cProfile (every thread) and write their stats "
                             "into DIR (wire-produce.pstats, wire-fetch.pstats); the figures are then slower")
    args = parser.parse_args(argv)
    wire.PROFILE_DIR = args.profile_broker
    names = _names(args.only)
    repeats = REPEATS_QUICK if args.quick else REPEATS_FULL
    ctx = harness.Context(quick=args.quick, repeats=repeats, tmp_root=harness.TMP_ROOT, large_keys=args.large)

    meta = harness.machine_info()
    meta.update({"argv": argv, "quick": args.quick, "repeats": repeats, "benchmarks": names,
                 "large_keys": args.large})
    print(harness.format_meta(meta, argv, args.quick, repeats), flush=True)
    sections = []
    for name in names:
        print(flush=True)
        section = BENCHMARKS[name].run(ctx)
        sections.append(section)
        print(harness.format_section(section), flush=True)
    meta["loadavg_at_end"] = list(os.getloadavg())
    print(f"\nload average at end (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in meta['loadavg_at_end'])}")
    harness.write_results(args.out, meta, sections)
    try:
        ctx.tmp_root.rmdir()  # only if every benchmark cleaned up after itself
    except OSError:
        pass
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
