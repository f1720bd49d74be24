"""The README's "Operator walkthrough", run as written: each step's commands are read from the README's code blocks
and run in order against real parts (``make airflow``'s api-server, scheduler, dag-processor and triggerer on a
temporary AIRFLOW_HOME and its SQLite metadata DB, the SMTP sink, the CLI, Debian's chromium for the Storage view),
and each step's output must show the text block written under it. A step that does not fails with its name, the
command run, the expected line it did not find and the output.

How a step is written (``### N. Title``, then blocks, in order):

* a ``sh`` block: one shell script, run by bash from the repository's root; a command ending in ``&`` keeps running
  in the background (the test stops it at the end, as Ctrl-C would);
* a ``url`` block: an address the operator opens in the browser (one session for the walkthrough: the first one
  leads to Airflow's login page, where the test signs in as ``admin`` with the password ``make airflow`` printed);
  the page's text, every frame of it, is the output;
* a ``text`` block after one of those: what it shows. Every line must match a line of the output, in order (lines
  between are allowed); ``<name>`` stands for one value (no spaces), ``...`` for any text, whitespace runs match
  any whitespace. ``text until``: what it shows once the scheduler has done its part: the block before it is run
  again until it does (the operator's "run it again until it shows"), up to a bound.

What the test changes, and only that (:func:`for_this_run`; an operator's defaults would collide with other tests
and with ``var/``): ``.venv/bin/python`` is this venv's interpreter, ``make`` gets ``BIN``/``STAMP=`` (the recipe
without ``make venv``'s install step, as tests/airflow/test_airflow_cli.py runs it), ``make airflow`` and
``make airflow-cli`` get ``--home`` (a temporary AIRFLOW_HOME), the ports 8080, 1025 and 8025 are free ports
(``AIRFLOW_PORT`` names the first, as an operator moves it), ``var/`` paths are under the test's folder, and
``STORAGE_ENGINE_CONFIG`` names the test's storage config. ``make demo`` (minutes, and it resets ``var/``) is the one
command not run: :func:`sample_store` writes the same generator's sample logs, smaller, and
:func:`demo_metadata_db` the metadata DB with the DAGs, as its stand-in. A step's script runs with ``bash -e -o
pipefail``: a command that fails stops it, as the operator would stop.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from include.broker_launcher import free_port

from .browser import chromium
from .conftest import REPO

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.kills]   # its background processes stop by signal

README = REPO / "README.md"
SECTION = "## Operator walkthrough"
# The commands of the walkthrough the test does not run, each with its stand-in (see the module's docstring).
STAND_INS = {"make demo": "sample_store"}
# How long a step may take: a background process to print its lines, a "text until" block to show.
BACKGROUND_TIMEOUT_S = 300
UNTIL_TIMEOUT_S = 300
COMMAND_TIMEOUT_S = 300
RETRY_INTERVAL_S = 3


# -- the README's steps ----------------------------------------------------------------------------------------------

@dataclass
class Block:
    kind: str            # "sh", "url", "text"
    body: str
    until: bool = False  # a "text until" block


@dataclass
class Step:
    number: int
    title: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.number}. {self.title}"


STEP_HEADING = re.compile(r"^### (\d+)\. (.+)$", re.MULTILINE)
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def walkthrough_section(readme: str) -> str:
    start = readme.find("\n" + SECTION + "\n")
    assert start >= 0, f"README.md has no {SECTION!r} section"
    end = readme.find("\n## ", start + len(SECTION) + 2)
    return readme[start:] if end < 0 else readme[start:end]


def parse_steps(section: str) -> list[Step]:
    headings = list(STEP_HEADING.finditer(section))
    steps = []
    for i, heading in enumerate(headings):
        body = section[heading.end():headings[i + 1].start() if i + 1 < len(headings) else len(section)]
        step = Step(int(heading.group(1)), heading.group(2).strip())
        for fence in FENCE.finditer(body):
            info = fence.group(1).split()
            kind = info[0] if info else ""
            assert kind in ("sh", "url", "text"), f"step {step.name}: a ```{fence.group(1)} block (sh, url or text)"
            step.blocks.append(Block(kind, fence.group(2), until=kind == "text" and "until" in info[1:]))
        steps.append(step)
    return steps


def readme_steps() -> list[Step]:
    return parse_steps(walkthrough_section(README.read_text()))


# -- what "shows" means ----------------------------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"<[^<>\s][^<>]*>")
WILDCARD = re.compile(r"\s*\.\.\.\s*")


def line_pattern(expected: str) -> re.Pattern:
    """An expected line as a regex over a whole output line: ``<x>`` one value, ``...`` anything, spaces any."""
    parts = []
    for i, piece in enumerate(WILDCARD.split(expected.strip())):
        if i:
            parts.append(".*")
        last = 0
        for m in PLACEHOLDER.finditer(piece):
            parts.append(_literal(piece[last:m.start()]))
            parts.append(r"\S+")
            last = m.end()
        parts.append(_literal(piece[last:]))
    return re.compile("".join(parts))


def _literal(text: str) -> str:
    return r"\s+".join(re.escape(word) for word in re.split(r"\s+", text))


def first_missing(expected: str, output: str) -> str | None:
    """The first line of ``expected`` not found in ``output`` (in order after the lines before it), or None."""
    lines = [line.strip() for line in output.splitlines()]
    at = 0
    for want in expected.splitlines():
        if not want.strip() or WILDCARD.fullmatch(want):
            continue
        pattern = line_pattern(want)
        while at < len(lines) and not pattern.fullmatch(lines[at]):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


# -- running them ----------------------------------------------------------------------------------------------------

class Operator:
    """The operator's shell and browser on this machine, for one walkthrough: an environment, the background
    processes started so far (stopped at the end), and the test's stand-ins for make's defaults."""

    def __init__(self, root: Path, config_path: Path):
        self.root = root
        self.home = root / "airflow"
        self.var = root / "var"
        self.var.mkdir()
        self.config_path = config_path
        self.airflow_port, self.smtp_port, self.mail_port = free_port(), free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST", "STORAGE_"))}
        env.update(STORAGE_ENGINE_CONFIG=str(config_path), AIRFLOW_PORT=str(self.airflow_port),
                   PYTHONPATH=os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p))
        self.env = env
        self.background: list[subprocess.Popen] = []
        self.outputs = 0

    def for_this_run(self, script: str) -> str:
        bin_dir = Path(sys.executable).parent
        out = script.replace(".venv/bin/python", sys.executable)
        out = re.sub(r"\bmake airflow-cli ARGS=\"", f'make BIN={bin_dir} STAMP= airflow-cli ARGS="--home {self.home} ',
                     out)
        out = re.sub(r"\bmake airflow(?=\s*(&|$))", f'make BIN={bin_dir} STAMP= airflow ARGS="--home {self.home}"',
                     out, flags=re.MULTILINE)
        out = re.sub(r"\b(localhost|127\.0\.0\.1):8080\b", rf"\1:{self.airflow_port}", out)
        out = re.sub(r"(127\.0\.0\.1:|--smtp-port )1025\b", rf"\g<1>{self.smtp_port}", out)
        out = re.sub(r"(127\.0\.0\.1:|--http-port )8025\b", rf"\g<1>{self.mail_port}", out)
        out = re.sub(r"(?<![\w/.])var/airflow/", f"{self.home}/", out)
        out = re.sub(r"(?<![\w/.])var/", f"{self.var}/", out)
        for default in ("8080", "1025", "8025"):
            assert not re.search(rf"\b{default}\b", out), f"a default port left in {out!r}"
        return out

    def expected_for_this_run(self, text: str) -> str:
        """The README's expected text with the same places moved (its ports, its var/ paths)."""
        out = re.sub(r"\b(localhost|127\.0\.0\.1):8080\b", rf"\1:{self.airflow_port}", text)
        out = re.sub(r"(127\.0\.0\.1:)1025\b", rf"\g<1>{self.smtp_port}", out)
        out = re.sub(r"(127\.0\.0\.1:)8025\b", rf"\g<1>{self.mail_port}", out)
        return re.sub(r"(?<![\w/.])var/", f"{self.var}/", out)

    def run_sh(self, script: str) -> tuple[subprocess.Popen, Path]:
        """Start ``script`` in bash; its output (stdout and stderr) goes to a file of its own."""
        self.outputs += 1
        path = self.root / f"output-{self.outputs:02d}.txt"
        with open(path, "wb") as out:
            proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=REPO, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        return proc, path

    def stop(self) -> None:
        """What Ctrl-C does to the processes the walkthrough left running: SIGTERM to each one's group (make
        airflow and the sink stop clean on it), SIGKILL to what is left after 60 s."""
        for proc in self.background:
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        for proc in self.background:
            while _group_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.5)
            _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def midnight_utc_ms() -> int:
    today = datetime.datetime.now(datetime.timezone.utc).date()
    return int(datetime.datetime(today.year, today.month, today.day, tzinfo=datetime.timezone.utc).timestamp() * 1000)


def sample_store(root: Path) -> Path:
    """``make demo``'s stand-in: its sample logs (the same generator and seed, a week ending at today's midnight
    UTC, a tenth of the records) in log dirs of the test's own, named by a copy of the project's storage config."""
    from include.sample_data import generate
    from storage_engine.config_file import load_config

    data = yaml.safe_load((REPO / "include" / "config" / "storage.yaml").read_text())
    data["broker"]["log.dirs"] = [str(root / "logs" / "dir-a"), str(root / "logs" / "dir-b")]
    config_path = root / "storage.yaml"
    config_path.write_text(yaml.safe_dump(data))
    generate(load_config(config_path), now_ms=midnight_utc_ms(), scale=0.1, reset=True)
    return config_path


def demo_metadata_db(op: Operator) -> None:
    """The rest of ``make demo``'s stand-in: what it leaves in AIRFLOW_HOME, a migrated metadata DB holding the
    project's DAGs (the demo's ``airflow dags test`` runs write them), through ``make airflow``'s environment."""
    for args in (["db", "migrate"], ["dags", "reserialize"]):
        done = subprocess.run([sys.executable, "-m", "include.airflow_cli", "--home", str(op.home), *args], cwd=REPO,
                              env=op.env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        assert done.returncode == 0, f"airflow {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def operator(tmp_path_factory):
    root = tmp_path_factory.mktemp("walkthrough")
    op = Operator(root, sample_store(root))
    demo_metadata_db(op)
    try:
        yield op
    finally:
        op.stop()


class BrowserSession:
    """The operator's browser: one chromium context for the whole walkthrough, so one login."""

    def __init__(self, context: Any):
        self.context = context
        self.signed_in = False


@pytest.fixture(scope="module")
def browser_session(browser):
    session = BrowserSession(browser.new_context(viewport={"width": 1280, "height": 900}))
    try:
        yield session
    finally:
        session.context.close()


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def _fail(step: Step, what: str, command: str, missing: str | None, output: str) -> None:
    pytest.fail(f"README walkthrough, step {step.name!r}: {what}\n  command: {command}\n"
                f"  expected line not shown: {missing!r}\n  output (last 4000 characters):\n{output[-4000:]}",
                pytrace=False)


def run_sh_block(op: Operator, step: Step, block: Block, expect: Block | None) -> None:
    script = op.for_this_run(block.body)
    expected = op.expected_for_this_run(expect.body) if expect else ""
    background = bool(re.search(r"&\s*$", block.body, re.MULTILINE))
    deadline = time.monotonic() + (UNTIL_TIMEOUT_S if expect and expect.until else 0)
    while True:
        proc, path = op.run_sh(script)
        if background:
            op.background.append(proc)
        try:
            code = proc.wait(COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            _fail(step, f"did not finish within {COMMAND_TIMEOUT_S} s", script, None, path.read_text())
        if code != 0:
            _fail(step, f"exited with {code}", script, None, path.read_text())
        if not background:
            missing = first_missing(expected, path.read_text())
            if missing is None:
                return
            if time.monotonic() >= deadline:
                _fail(step, "its output differs from the README's block"
                      + (f" (run again for {UNTIL_TIMEOUT_S} s)" if expect and expect.until else ""),
                      script, missing, path.read_text())
            time.sleep(RETRY_INTERVAL_S)
            continue
        # a command left running: its lines come as it starts up
        wait_until = time.monotonic() + BACKGROUND_TIMEOUT_S
        while True:
            missing = first_missing(expected, path.read_text())
            if missing is None:
                return
            if time.monotonic() >= wait_until:
                _fail(step, f"the background command did not show its lines within {BACKGROUND_TIMEOUT_S} s",
                      script, missing, path.read_text())
            time.sleep(1)


def run_url_block(op: Operator, browser: BrowserSession, step: Step, block: Block, expect: Block | None) -> None:
    """The block's address in the operator's browser (one chromium context for the whole walkthrough, so one
    login): the first time on Airflow's login page it leads to, signing in as ``admin`` with the password ``make
    airflow`` printed, as the operator types them; the output is the text of every frame of the page."""
    (url,) = [line.strip() for line in block.body.splitlines() if line.strip()]
    url = op.expected_for_this_run(url)
    page = browser.context.new_page()
    try:
        page.goto(url, wait_until="domcontentloaded", timeout=120_000)
        if not browser.signed_in:
            password = json.loads((op.home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
            page.get_by_label("Username").fill("admin", timeout=120_000)
            page.get_by_label("Password").fill(password)
            page.get_by_role("button", name="Sign in").click()
            browser.signed_in = True
        expected = op.expected_for_this_run(expect.body) if expect else ""
        deadline = time.monotonic() + 120
        while True:
            text = "\n".join(_frame_text(frame) for frame in page.frames)
            missing = first_missing(expected, text)
            if missing is None:
                return
            if time.monotonic() >= deadline:
                _fail(step, "the page does not show the README's text within 120 s", url, missing,
                      f"(at {page.url})\n{text}")
            time.sleep(1)
    finally:
        page.close()


def _frame_text(frame) -> str:
    try:
        return frame.inner_text("body", timeout=2000)
    except Exception:   # noqa: BLE001 - a frame still loading or gone between the listing and the read
        return ""


STEPS = readme_steps()
_failed: list[str] = []


@pytest.mark.parametrize("step", STEPS, ids=[s.name for s in STEPS])
def test_the_readme_walkthrough_step(step: Step, operator: Operator, request) -> None:
    if _failed:
        pytest.fail(f"README walkthrough: step {step.name!r} not run: step {_failed[0]!r} failed before it",
                    pytrace=False)
    _failed.append(step.name)            # removed below when the step passes
    blocks = step.blocks
    for i, block in enumerate(blocks):
        if block.kind == "text":
            continue
        expect = blocks[i + 1] if i + 1 < len(blocks) and blocks[i + 1].kind == "text" else None
        command = block.body.strip()
        if command in STAND_INS:
            assert expect is None, f"step {step.name}: a stand-in's output cannot be checked"
            continue                      # done by the operator fixture (sample_store)
        if block.kind == "sh":
            run_sh_block(operator, step, block, expect)
        else:
            run_url_block(operator, request.getfixturevalue("browser_session"), step, block, expect)
    _failed.remove(step.name)


# -- the parser and the matcher see what they look for ---------------------------------------------------------------

def test_the_walkthrough_has_its_steps_each_run_or_stood_in_for():
    names = [s.name for s in STEPS]
    assert [s.number for s in STEPS] == list(range(1, len(STEPS) + 1)), names
    for step in STEPS:
        actions = [b for b in step.blocks if b.kind != "text"]
        assert actions, f"step {step.name} has no sh or url block"
        for i, block in enumerate(step.blocks):
            if block.kind == "text":
                assert i > 0 and step.blocks[i - 1].kind != "text", f"step {step.name}: a text block after no command"
    commands = [b.body.strip() for s in STEPS for b in s.blocks if b.kind == "sh"]
    assert "make demo" in commands
    assert any("backfill create" in c for c in commands) and any("mail_sink" in c for c in commands)


def test_the_matcher_finds_lines_in_order_with_values_and_wildcards():
    output = "noise\nDirtiest compacted partitions (5 of 5):\nuser-emails-0  dir-a   100.0%  30.0%\nend\n"
    assert first_missing("Dirtiest compacted partitions (<shown> of <all>):\nuser-emails-<n> dir-<x> <r>% 30.0%",
                         output) is None
    assert first_missing("user-emails-<n> ...\nDirtiest compacted partitions (<a> of <b>):", output) == \
        "Dirtiest compacted partitions (<a> of <b>):"                  # out of order
    assert first_missing("user-emails-<n> dir-<x> <r>% 50.0%", output) == "user-emails-<n> dir-<x> <r>% 50.0%"
    assert first_missing("user-sessions-<n> ...", output) == "user-sessions-<n> ..."
    assert first_missing('"Snippet": "run failed. ... did you mean \'dry_run\'? ...',
                         '"Snippet": "run failed.\\r\\nError: did you mean \'dry_run\'? (x)"') is None
    assert first_missing("<a> <b>", "one") == "<a> <b>"              # a value is never empty, spaces are needed


def test_the_steps_are_read_from_headings_and_fenced_blocks():
    section = ("## Operator walkthrough\n\nintro\n\n### 1. First\n\n```sh\necho hi\n```\n\n```text\nhi\n```\n\n"
               "### 2. Second\n\n```url\nhttp://localhost:8080/x\n```\n\n```text until\nX\n```\n")
    steps = parse_steps(walkthrough_section("# T\n" + section + "\n## Next\n"))
    assert [(s.name, [(b.kind, b.body, b.until) for b in s.blocks]) for s in steps] == [
        ("1. First", [("sh", "echo hi\n", False), ("text", "hi\n", False)]),
        ("2. Second", [("url", "http://localhost:8080/x\n", False), ("text", "X\n", True)])]


def test_the_commands_are_moved_off_the_operators_defaults(tmp_path):
    op = Operator(tmp_path, tmp_path / "storage.yaml")
    script = op.for_this_run('.venv/bin/python -m include.cluster.mail_sink --dir var/mail --smtp-port 1025 '
                             '--http-port 8025 &\nX=1 make airflow &\nmake airflow-cli ARGS="variables list"\n'
                             'curl -s http://127.0.0.1:8025/api && cat var/airflow/p.json')
    assert shlex.split(script.splitlines()[0])[:2] == [sys.executable, "-m"]
    assert f"--dir {op.var}/mail --smtp-port {op.smtp_port} --http-port {op.mail_port} &" in script
    assert f'airflow ARGS="--home {op.home}" &' in script
    assert f'airflow-cli ARGS="--home {op.home} variables list"' in script
    assert f"http://127.0.0.1:{op.mail_port}/api" in script and f"cat {op.home}/p.json" in script
    with pytest.raises(AssertionError):
        op.for_this_run("curl http://example.test:8080/")


def test_a_step_whose_output_differs_fails_naming_the_step_and_the_line(tmp_path):
    op = Operator(tmp_path, tmp_path / "storage.yaml")
    step = Step(3, "Say hello", [Block("sh", "echo 'hello from here'\n"), Block("text", "hello from <who>\nbye\n")])
    with pytest.raises(pytest.fail.Exception) as failed:
        run_sh_block(op, step, step.blocks[0], step.blocks[1])
    assert "step '3. Say hello'" in str(failed.value) and "expected line not shown: 'bye'" in str(failed.value)
    stopped = Step(4, "Stops at a failing command", [Block("sh", "false\necho after\n")])
    with pytest.raises(pytest.fail.Exception) as failed:
        run_sh_block(op, stopped, stopped.blocks[0], None)
    assert "step '4. Stops at a failing command': exited with 1" in str(failed.value)
