"""Counting verdicts per module, recognising the listed equivalent mutants, and the table ``make mutation`` prints.

Score of a module = (killed + timeout) / (mutants - equivalent). A timeout counts as detected (the mutant made a
test run away); "suspicious", "no tests" and anything else count against the score, like a survivor.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .equivalent import EQUIVALENT, Equivalent
from .run import GroupResult, Mutant
from .survivors import KNOWN_SURVIVORS

COLUMNS = ("killed", "timeout", "survived", "suspicious", "no tests")


def matches(e: Equivalent, m: Mutant) -> bool:
    return (e.module == m.module and e.function == m.function
            and e.removed == "\n".join(m.removed) and e.added == "\n".join(m.added))


def equivalent_reason(m: Mutant) -> str | None:
    """The reason this survivor is listed as equivalent, or None. Only a mutant that survived can be."""
    if m.status != "survived":
        return None
    return next((e.reason for e in EQUIVALENT if matches(e, m)), None)


def survivor_cause(m: Mutant) -> str | None:
    """Why no test here kills this mutant (``mutation/survivors.py``), or None: it still counts against the score.
    Only a mutant that survived, or that no test of its group runs, can have one."""
    if m.status not in ("survived", "no tests"):
        return None
    return next((e.reason for e in KNOWN_SURVIVORS if matches(e, m)), None)


@dataclass
class ModuleScore:
    module: str
    counts: Counter
    equivalent: int

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def detected(self) -> int:
        return self.counts["killed"] + self.counts["timeout"]

    @property
    def score(self) -> float | None:
        judged = self.total - self.equivalent
        return 100.0 * self.detected / judged if judged else None

    @property
    def other(self) -> int:
        return self.total - sum(self.counts[c] for c in COLUMNS)


DETECTED = ("killed", "timeout")


def merged(results: list[GroupResult]) -> dict[str, list[Mutant]]:
    """Every mutant once per module, in the order the groups ran. A mutant run by two groups (pure Python and
    with the compiled kernels) counts as detected if either run detected it."""
    by_module: dict[str, dict[str, Mutant]] = {}
    for r in results:
        for path in r.group.modules:
            by_module.setdefault(path[:-len(".py")].replace("/", "."), {})
        for m in r.mutants:
            seen = by_module[m.module].get(m.name)
            if seen is None or (m.status in DETECTED and seen.status not in DETECTED):
                by_module[m.module][m.name] = m
    return {module: list(mutants.values()) for module, mutants in by_module.items()}


def scores(results: list[GroupResult]) -> list[ModuleScore]:
    return [ModuleScore(module, Counter(m.status for m in mine), sum(equivalent_reason(m) is not None for m in mine))
            for module, mine in merged(results).items()]


def table(rows: list[ModuleScore]) -> str:
    head = ["module", "mutants", *COLUMNS, "other", "equivalent", "score"]
    lines = [head]
    for r in rows:
        score = "-" if r.score is None else f"{r.score:.1f}%"
        lines.append([r.module, str(r.total), *(str(r.counts[c]) for c in COLUMNS), str(r.other),
                      str(r.equivalent), score])
    total = ModuleScore("all", sum((r.counts for r in rows), Counter()), sum(r.equivalent for r in rows))
    lines.append(["all", str(total.total), *(str(total.counts[c]) for c in COLUMNS), str(total.other),
                  str(total.equivalent), "-" if total.score is None else f"{total.score:.1f}%"])
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    rendered = []
    for i, row in enumerate(lines):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        rendered.append("| " + " | ".join(cells) + " |")
        if i == 0:
            rendered.append("|" + "|".join("-" * (w + 1) + (":" if j else "-") for j, w in enumerate(widths)) + "|")
    return "\n".join(rendered)


def undetected(results: list[GroupResult]) -> list[Mutant]:
    """Every mutant neither killed, timed out, nor listed as equivalent."""
    return [m for mine in merged(results).values() for m in mine
            if m.status not in DETECTED and equivalent_reason(m) is None]


def unused_equivalents(results: list[GroupResult], listed: tuple[Equivalent, ...] = EQUIVALENT) -> list[Equivalent]:
    """Listed entries (equivalents, or with ``KNOWN_SURVIVORS`` the explained survivors) that matched no survivor
    of the modules this run covered (stale entries)."""
    all_mutants = merged(results)
    statuses = ("survived",) if listed is EQUIVALENT else ("survived", "no tests")
    survivors = [m for mine in all_mutants.values() for m in mine if m.status in statuses]
    return [e for e in listed if e.module in all_mutants and not any(matches(e, m) for m in survivors)]


def describe(m: Mutant) -> str:
    change = " / ".join(m.removed) + "  ->  " + " / ".join(m.added)
    cause = survivor_cause(m)
    why = f"\n             known: {cause}" if cause else ""
    return f"{m.status:<10} {m.module}:{m.function}  {change}  [{m.name.rpartition('.')[2]}]{why}"


def equivalents_markdown(listed: tuple[Equivalent, ...] = EQUIVALENT) -> str:
    """Listed mutants (the equivalents, or ``KNOWN_SURVIVORS``), grouped by module, one bullet each: function,
    change, reason."""
    out: list[str] = []
    module = None
    for e in sorted(listed, key=lambda e: e.module):
        if e.module != module:
            module = e.module
            out.append(f"\n**{module}**\n")
        change = " / ".join(e.removed.splitlines()) + "` -> `" + " / ".join(e.added.splitlines())
        out.append(f"- `{e.function}`: `{change}`: {e.reason}")
    return "\n".join(out).strip() + "\n"



def results_from_json(doc: dict) -> list[GroupResult]:
    """The groups of a results JSON (``--out``) as a run returns them, to be judged against today's lists."""
    from .groups import Group
    return [GroupResult(Group(g["name"], tuple(g["modules"]), tuple(g["tests"]), functions=tuple(g["functions"]),
                              pure_python=g["pure_python"]), g["seconds"],
                        [Mutant(m["name"], m["module"], m["function"], m["status"], list(m["removed"]),
                                list(m["added"])) for m in g["mutants"]])
            for g in doc["groups"]]


def _run_header(doc: dict) -> list[str]:
    meta = doc["meta"]
    load = ", ".join(f"{x:.2f}" for x in meta["loadavg_at_start"])
    load_end = ", ".join(f"{x:.2f}" for x in meta.get("loadavg_at_end", []))
    dirty = " (with uncommitted changes to storage_engine/ or tests/)" if meta["uncommitted_engine_or_test_changes"] else ""
    out = [f"- `python -m mutation {' '.join(meta['argv'])}` at commit `{meta['commit'][:12]}`{dirty}: "
           f"mutmut {meta['mutmut']}, Python {meta['python']}, {meta['nproc']} CPUs, {meta['max_children']} mutants "
           f"at once, load average {load} at the start and {load_end} at the end, "
           f"{meta['seconds'] / 60:.1f} minutes:"]
    for g in doc["groups"]:
        mode = "pure Python" if g["pure_python"] else "compiled kernels"
        out.append(f"  - group `{g['name']}` ({mode}): {len(g['mutants'])} mutants in {g['seconds']:.0f} s")
    return out


def run_markdown(docs: list[dict]) -> str:
    """Results JSONs of one or more runs (``--out``) as a run's record in ``mutation/HISTORY.md`` (newest first;
    ``MUTATION.md`` opens with the latest table): which runs, each group's time, the table, and every mutant not
    detected with its known cause, judged against today's lists of equivalents and known survivors."""
    results = [r for doc in docs for r in results_from_json(doc)]
    out = ["Runs:", ""]
    for doc in docs:
        out += _run_header(doc)
    out += ["", f"Groups' time in all: **{sum(r.seconds for r in results) / 60:.1f} minutes**.", "",
            table(scores(results)), ""]
    missed = undetected(results)
    out += [f"### Not detected and not equivalent ({len(missed)}; "
            f"{sum(survivor_cause(m) is None for m in missed)} without a known cause)", ""]
    for m in missed:
        change = " / ".join(m.removed) + "` -> `" + " / ".join(m.added)
        out.append(f"- {m.status}: `{m.module}:{m.function}`: `{change}`: "
                   f"{survivor_cause(m) or '**no known cause**'}")
    return "\n".join(out) + "\n"
