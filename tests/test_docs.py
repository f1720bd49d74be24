"""Citations stay inside the repository: code and documents cite ARCHITECTURE.md by its numbered sections, and
every section cited exists; no tracked file cites a design page outside the repository or an issue by number
(a reader of the project cannot follow those). Public references to other projects' trackers (librdkafka's issue
numbers, Kafka's JIRA keys) stay, as they can be followed."""
from __future__ import annotations

import re
import subprocess

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.unit

ARCHITECTURE = REPO / "ARCHITECTURE.md"
# The design page the project's own ARCHITECTURE.md replaced; spelled in two parts so this file does not name it.
OUTSIDE_DESIGN_PAGE = "DESIGN" + ".md"

HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.?\s+\S", re.MULTILINE)
NUMBER = r"\d+(?:\.\d+)?"
SEPARATOR = r"(?:\s*,\s*|\s+and\s+|\s+or\s+)"
CITATION = re.compile(rf"ARCHITECTURE\.md`*\)?[\s(,]*sections?\s+({NUMBER}(?:{SEPARATOR}{NUMBER})*)")
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
# A line that names another project's tracker cites a public reference, which a reader can follow.
EXTERNAL = re.compile(r"librdkafka|confluentinc/|github\.com/|KAFKA-\d+|KIP-\d+")
REPO_PATH = re.compile(r"`((?:storage_engine|plugins|dags|spark_jobs|include|tests|benchmarks|torture|mutation)"
                       r"/[^`\s]*)`")


def tracked_text_files() -> list[tuple[str, str]]:
    """(path, text) of every file git tracks that reads as UTF-8 text."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    files = []
    for rel in out.stdout.decode().split("\0"):
        path = REPO / rel
        if not rel or not path.is_file():
            continue
        try:
            files.append((rel, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue
    return files


def sections(text: str) -> list[str]:
    """The numbers of ARCHITECTURE.md's sections and subsections, in order ("1", "2", ..., "4.1", ...)."""
    return HEADING.findall(text)


def cited_sections(text: str) -> list[tuple[int, str]]:
    """(line, section number) of every "ARCHITECTURE.md section N" (also "sections 4 and 6", "sections 4, 5")."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for match in CITATION.finditer(line):
            found += [(lineno, number) for number in re.findall(NUMBER, match.group(1))]
    return found


def outside_citations(rel: str, text: str) -> list[str]:
    """Lines of ``text`` that cite something outside the repository: the old design page, or an issue by number."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if OUTSIDE_DESIGN_PAGE in line or (ISSUE.search(line) and not EXTERNAL.search(line)):
            found.append(f"{rel}:{lineno}: {line.strip()}")
    return found


def test_architecture_sections_are_numbered_in_order():
    """Sections 1..N, each subsection N.1, N.2, ... under its section: a citation's number is stable to read."""
    numbers = sections(ARCHITECTURE.read_text())
    top = [n for n in numbers if "." not in n]
    assert top == [str(i) for i in range(1, len(top) + 1)], top
    for n in numbers:
        if "." in n:
            major = n.split(".")[0]
            siblings = [m for m in numbers if m.startswith(major + ".")]
            assert siblings == [f"{major}.{i}" for i in range(1, len(siblings) + 1)], siblings
            assert major in top, n


def test_every_cited_architecture_section_exists():
    existing = set(sections(ARCHITECTURE.read_text()))
    missing = [f"{rel}:{line}: section {number}" for rel, text in tracked_text_files()
               for line, number in cited_sections(text) if number not in existing]
    assert not missing, ("citations of ARCHITECTURE.md sections it does not have (its sections: "
                         f"{', '.join(sorted(existing, key=lambda n: [int(p) for p in n.split('.')]))}):\n"
                         + "\n".join(missing))


def test_the_code_cites_architecture_md():
    """The rules' modules point at the page: the citation check above has something to check."""
    cited = {rel for rel, text in tracked_text_files() if cited_sections(text)}
    assert {"storage_engine/log/intent.py", "storage_engine/server/broker.py", "RELIABILITY.md"} <= cited


def test_no_tracked_file_cites_outside_the_repository():
    found = [line for rel, text in tracked_text_files() for line in outside_citations(rel, text)]
    assert not found, ("citations a reader of the repository cannot follow; cite ARCHITECTURE.md's section (or a "
                       "RELIABILITY.md section) or say what the rule is:\n" + "\n".join(found))


def test_paths_architecture_md_names_exist():
    """The module map and the rules name real files and folders; a split or a rename updates the page."""
    missing = [path for path in REPO_PATH.findall(ARCHITECTURE.read_text()) if not (REPO / path).exists()]
    assert not missing, "ARCHITECTURE.md names paths that do not exist: " + ", ".join(missing)


def test_the_readme_points_at_architecture_md():
    assert "ARCHITECTURE.md" in (REPO / "README.md").read_text()


def test_the_checks_see_what_they_look_for():
    """The scanners above catch each spelling of a citation, and let public references through."""
    # The samples are built, not spelled out, so that this file's own lines cite nothing.
    page, word, absent = "ARCHITECTURE.md", "issue", 12
    text = f"""see {page} section 4.5
({page} sections 5 and 9)
``{page}`` section {absent}
{page}, sections 4, 6 or 7"""
    assert [n for _, n in cited_sections(text)] == ["4.5", "5", "9", "12", "4", "6", "7"]
    assert sections("# Title\n## 1. One\n### 1.1 Sub\n## 2. Two\n") == ["1", "1.1", "2"]
    bad = f"""rules of {OUTSIDE_DESIGN_PAGE} section 4
({word} 27 item 3)
{word.title()} 27: reproducer
{word}s #12 and #13"""
    assert len(outside_citations("x", bad)) == 4
    public = f"""librdkafka {word}s #5511 and #5456
(KAFKA-6264): {word} 1 of the upstream fix
an {word} with function pointers
{page} section 6"""
    assert outside_citations("x", public) == []
