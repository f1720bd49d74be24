"""``python -m mutation [--only GROUP ...] [--smoke] [--max-children N] [--fail-under PCT] [--out PATH]``: run
mutmut over the engine's decision modules group by group, print killed / survived / timeout per module and
every mutant not detected, write the details as JSON."""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from . import report
from .equivalent import EQUIVALENT
from .groups import BY_NAME, GROUPS, KERNELS_OF, SMOKE, Group
from .run import REPO, SCRATCH_ROOT, GroupResult, ToolingError, run_group, snapshot
from .survivors import KNOWN_SURVIVORS


def _groups(values: list[str] | None) -> list[Group]:
    names = [n.strip() for v in values or () for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME or n in KERNELS_OF.values()]
    if unknown:
        raise SystemExit(f"unknown group {', '.join(unknown)}; choose from {', '.join(g.name for g in GROUPS)}")
    chosen = []
    for g in GROUPS:
        if not names or g.name in names:
            chosen.append(g)
            if g.name in KERNELS_OF:
                chosen.append(BY_NAME[KERNELS_OF[g.name]])
    return chosen


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def header(argv: list[str], max_children: int) -> dict:
    dirty = _git("status", "--porcelain", "--", "storage_engine", "tests")
    return {
        "commit": _git("rev-parse", "HEAD"),
        "commit_subject": _git("log", "-1", "--format=%s"),
        "uncommitted_engine_or_test_changes": bool(dirty) and dirty != "unknown",
        "mutmut": importlib.metadata.version("mutmut"),
        "python": sys.version.split()[0],
        "nproc": os.cpu_count(),
        "max_children": max_children,
        "loadavg_at_start": list(os.getloadavg()),
        "argv": argv,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m mutation", description=__doc__)
    parser.add_argument("--only", action="append", metavar="GROUP",
                        help=f"run only these groups (repeatable or comma-separated): {', '.join(BY_NAME)}")
    parser.add_argument("--smoke", action="store_true",
                        help="the few mutants of one small function (what `make test` runs)")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2,
                        help="mutants tested at once (default: the number of CPUs, %(default)s)")
    parser.add_argument("--fail-under", type=float, default=None, metavar="PCT",
                        help="exit 1 if any module scores below PCT percent")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where to write the JSON results (default: {SCRATCH_ROOT.relative_to(REPO)}/"
                             "results.json, or smoke.json with --smoke)")
    parser.add_argument("--scratch", type=Path, default=SCRATCH_ROOT,
                        help="where the per-group copies are made (default: %(default)s)")
    parser.add_argument("--list-equivalents", action="store_true",
                        help="print the listed equivalent mutants as Markdown (for MUTATION.md) and exit")
    parser.add_argument("--list-survivors", action="store_true",
                        help="print the known survivors and their causes as Markdown (for MUTATION.md) and exit")
    parser.add_argument("--render", type=Path, nargs="+", default=None, metavar="RESULTS",
                        help="print the results JSON of one or more runs as Markdown (a run's record in mutation/HISTORY.md), "
                             "judged against today's lists, and exit")
    args = parser.parse_args(argv)
    if args.list_equivalents:
        print(report.equivalents_markdown())
        return 0
    if args.render is not None:
        print(report.run_markdown([json.loads(p.read_text()) for p in args.render]), end="")
        return 0
    if args.list_survivors:
        print(report.equivalents_markdown(KNOWN_SURVIVORS))
        return 0
    if args.smoke and args.only:
        parser.error("--smoke and --only exclude each other")
    groups = [SMOKE] if args.smoke else _groups(args.only)
    out = args.out or SCRATCH_ROOT / ("smoke.json" if args.smoke else "results.json")

    meta = header(argv, args.max_children)
    dirty = " (with uncommitted changes to storage_engine/ or tests/)" if meta["uncommitted_engine_or_test_changes"] else ""
    print(f"mutation testing at {meta['commit'][:12]} {meta['commit_subject']!r}{dirty}")
    print(f"mutmut {meta['mutmut']}, Python {meta['python']}, {meta['nproc']} CPUs, {args.max_children} mutants "
          f"at once, load average {', '.join(f'{x:.2f}' for x in meta['loadavg_at_start'])}", flush=True)

    results: list[GroupResult] = []
    start = time.monotonic()
    source = snapshot(args.scratch / "_source")
    try:
        for group in groups:
            what = ", ".join(group.functions or group.modules)
            mode = "pure Python (STORAGE_ENGINE_PURE_PYTHON=1)" if group.pure_python else "compiled kernels loaded"
            print(f"group {group.name}: {what}; {mode}", flush=True)
            result = run_group(group, args.max_children, args.scratch, progress=lambda s: print(s, flush=True),
                               source=source)
            results.append(result)
            n = len(result.mutants)
            print(f"group {group.name}: {n} mutants in {result.seconds:.0f} s "
                  f"({n / result.seconds:.2f} mutants/s)", flush=True)
    except ToolingError as exc:
        print(f"mutation testing failed: {exc}", file=sys.stderr)
        return 2
    elapsed = time.monotonic() - start

    rows = report.scores(results)
    print()
    print(report.table(rows))
    print(f"\n{sum(len(r.mutants) for r in results)} mutants in {elapsed / 60:.1f} min; "
          f"load average at end {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    missed = report.undetected(results)
    if missed:
        unexplained = sum(report.survivor_cause(m) is None for m in missed)
        print(f"\nnot detected ({len(missed)}; {unexplained} without a known cause in mutation/survivors.py):")
        for m in missed:
            print("  " + report.describe(m))
    for listed, where in ((EQUIVALENT, "equivalent.py"), (KNOWN_SURVIVORS, "survivors.py")):
        stale = report.unused_equivalents(results, listed)
        if stale and not args.smoke:
            print(f"\nlisted in mutation/{where} but not seen among the survivors ({len(stale)}; remove them):")
            for e in stale:
                print(f"  {e.module}:{e.function}  {e.removed!r} -> {e.added!r}")

    meta["seconds"] = round(elapsed, 1)
    meta["loadavg_at_end"] = list(os.getloadavg())
    doc = {
        "meta": meta,
        "modules": [{"module": r.module, "mutants": r.total, **{c: r.counts[c] for c in report.COLUMNS},
                     "other": r.other, "equivalent": r.equivalent,
                     "score": None if r.score is None else round(r.score, 2)} for r in rows],
        "groups": [{"name": r.group.name, "modules": list(r.group.modules), "tests": list(r.group.tests),
                    "functions": list(r.group.functions), "pure_python": r.group.pure_python,
                    "seconds": round(r.seconds, 1),
                    "mutants": [dict(asdict(m), equivalent=report.equivalent_reason(m),
                                      known_cause=report.survivor_cause(m)) for m in r.mutants]}
                   for r in results],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nresults: {out}")

    if args.fail_under is not None:
        low = [r for r in rows if r.score is not None and r.score < args.fail_under]
        if low:
            print(f"below {args.fail_under:g}%: {', '.join(r.module for r in low)}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
