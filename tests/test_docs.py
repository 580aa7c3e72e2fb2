"""The examples in README.md and docs/*.md run as tests, so a doc example that stops working fails ``make test``.

Every fenced ``python``, ``bash``, ``sh``, ``shell`` or ``console`` block runs, unless the line just before its
fence says why not: ``<!-- not run: REASON -->`` (a signature listing, a remote host, ``pip install``, a long
benchmark). A new example therefore runs by default. Each block is one test, named ``file:line`` of its fence.

- **Python**: a doc's blocks run in order in one namespace, in a fresh directory, with ``MEMLANE_EMBEDDER=fake``.
  An expression whose comment is a Python literal (``mem.get(...).value  # 'dark'``) must equal it; comment lines
  ending a block that prints are its expected output. Blocks that talk to ``http://127.0.0.1:8420`` get a live
  loopback service instead.
- **Shell**: in ``console`` blocks the lines starting with ``$`` are commands and the lines up to the next ``$``
  their expected output; in ``bash``/``sh``/``shell`` blocks every line is a command. They run through bash with
  the venv's ``memlane`` first on ``PATH`` (forked, see "the command line, forked"), in a fresh directory, with
  ``MEMLANE_DB=memlane.db`` and ``MEMLANE_EMBEDDER=fake`` unless the block sets its own. Commands of one block
  share that directory and store; what the text assumes is already there is in ``GIVEN``, what a block must
  leave behind beyond its output in ``THEN``. Expected output starting with ``Error:`` means the command fails
  with that error; otherwise it exits 0 and prints the expected lines (numbers, ids and ``...`` match anything).
  ``memlane serve`` starts the real server on a free loopback port, and later commands of the block (``curl``,
  sent with ``--fail-with-body``) talk to it with the tokens the block's commands printed (``$ALICE``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import memlane
from docrun import run_example
from live import LiveServer
from memlane.core.access import Access
from memlane.server import create_app

ROOT = Path(__file__).resolve().parents[1]
MEMLANE = Path(sys.executable).with_name("memlane")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"python", "bash", "sh", "shell", "console"}
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>\S.*?) -->$")
DOC_URL = "http://127.0.0.1:8420"  # the address the docs show for the service


@dataclass(frozen=True)
class Block:
    """One fenced example: where it is, its language, its text and, if marked, why it does not run."""

    doc: str
    line: int
    language: str
    code: str
    not_run: str | None

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with the not-run marker on the line before its fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = re.match(r"^\s*```(\S*)\s*$", lines[i])
        if opening is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if re.match(r"^\s*```\s*$", lines[j]))
        marker = NOT_RUN.match(lines[i - 1].strip()) if i > 0 else None
        code = "\n".join(lines[i + 1 : end]) + "\n"
        name = str(path.relative_to(ROOT))
        found.append(Block(name, i + 1, opening.group(1), code, marker and marker.group("reason")))
        i = end + 1
    return found


EXAMPLES = [b for doc in DOCS for b in fenced_blocks(doc) if b.language in LANGUAGES]
RUN = [b for b in EXAMPLES if b.not_run is None]
PYTHON = [b for b in RUN if b.language == "python"]
SHELL = [b for b in RUN if b.language != "python"]


def test_every_example_is_collected_and_every_not_run_marker_says_why_briefly() -> None:
    assert len(PYTHON) >= 8 and len(SHELL) >= 15, (len(PYTHON), len(SHELL))
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if "not run" in line and "<!--" in line:
                assert NOT_RUN.match(line.strip()), f"{doc.name}:{number}: write it as <!-- not run: REASON -->"
                following = lines[number] if number < len(lines) else ""
                assert following.startswith("```"), f"{doc.name}:{number}: the marker must be just before a fence"
    for block in EXAMPLES:
        assert block.not_run is None or len(block.not_run) <= 100, f"{block}: keep the reason short"


# -- expected output ---------------------------------------------------------------------------------------------

_NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
# a 32-digit id, or a number that is not part of a name (the 123 of user/123 is)
_VARYING = re.compile(rf"(?P<id>\b[0-9a-f]{{32}}\b)|(?P<number>(?<![A-Za-z/_\d]){_NUMBER})")


def line_pattern(expected: str) -> re.Pattern[str]:
    """A pattern for one expected output line: numbers, 32-digit ids and words with ``...`` match anything of
    their kind, rules of box characters any length, runs of spaces any spacing."""
    words = []
    for word in expected.split():
        if "..." in word:
            words.append(r"\S+")
        elif set(word) <= set("─━═-"):
            words.append(r"[─━═-]+")
        else:
            pattern, at = "", 0
            for m in _VARYING.finditer(word):
                pattern += re.escape(word[at : m.start()]) + ("[0-9a-f]{32}" if m.group("id") else _NUMBER)
                at = m.end()
            words.append(pattern + re.escape(word[at:]))
    return re.compile(r"\s+".join(words))


def assert_prints(expected: list[str], printed: str, what: str) -> None:
    """Every expected line (``...`` skips any lines) matches a printed line, in order."""
    actual = [" ".join(line.split()) for line in printed.splitlines()]
    at = 0
    for line in expected:
        if line.strip() in ("", "..."):
            continue
        pattern = line_pattern(line)
        hit = next((i for i in range(at, len(actual)) if pattern.fullmatch(actual[i])), None)
        assert hit is not None, f"{what}: expected a line like\n  {line}\nafter line {at} of:\n{printed}"
        at = hit + 1


def error_head(line: str) -> str:
    """What an expected ``Error: ...`` line must agree on: up to its first ': ', else its first sentence."""
    message = line.removeprefix("Error: ")
    for stop in (": ", ". ", "; "):
        if stop in message:
            return message.split(stop, 1)[0]
    return message


def test_expected_output_matches_loosely_but_not_anything() -> None:
    assert_prints(
        ["Stored user/123 key 'x' (string, version 1)", "..."], "Stored user/123 key 'x' (string, version 7)\n", "t"
    )
    assert_prints(
        ["  1   user/123    0.0164   #2 (-0.004644)   ml_NYKc...", "──────"],
        " 1 user/123 0.5 #1 (0.3) ml_Qq\n──\n",
        "t",
    )
    with pytest.raises(AssertionError):
        assert_prints(
            ["Stored user/123 key 'x' (string, version 1)"], "Stored user/124 key 'x' (string, version 1)\n", "t"
        )
    with pytest.raises(AssertionError):
        assert_prints(["b", "a"], "a\nb\n", "t")
    assert error_head("Error: ttl: must be positive, got -5.0") == "ttl"
    assert error_head("Error: no item at user/123 key 'missing.key'") == "no item at user/123 key 'missing.key'"


# -- Python blocks -----------------------------------------------------------------------------------------------


def test_a_broken_promise_or_print_fails_and_kept_ones_pass() -> None:
    run_example("x = {'a': [1, 2]}\nx  # {'a': [1, 2]}\nx['a'][0]  # 1 (the first)\nprint('hi')\n# hi\n", "t", {})
    run_example("t = 1.5\nt, None  # 9.9, None  (a time)\nlen([])  # [Thing(...)]: not a literal\n", "t", {})
    for code in ("x = 'light'\nx  # 'dark'\n", "print('hi')\n# ho\n", "x = 1\nx  # True\n"):
        with pytest.raises(AssertionError):
            run_example(code, "t", {})
    run_example("import asyncio\nasyncio.run(asyncio.sleep(0))  # None\n", "t", {})
    with pytest.raises(SyntaxError):  # as for a reader running the block as a script
        run_example("import asyncio\nawait asyncio.sleep(0)  # None\n", "t", {})


# The Python examples assume some names without defining them: ``mem`` (a Memory, as in the API reference),
# and for the Client and MCP examples ``token``, the token of the agent whose namespace the doc's examples use,
# on a live loopback service that stands in for http://127.0.0.1:8420. What that service holds beyond the
# agent is below: the MCP example reads ``plan.current``; the Client example recalls from room/eng, which
# its agent is a member of.
def _mcp_service(service: memlane.Memory) -> None:
    service.put("agent/planner", "plan.current", "ship the billing migration")


def _client_service(service: memlane.Memory) -> None:
    Access(service).create_room("eng")
    Access(service).add_member("eng", "planner")
    service.put("room/eng", "session-digest", "SESSION DIGEST: billing ships Friday")


SERVICE_STATE: dict[str, Callable[[memlane.Memory], None]] = {
    "docs/mcp.md": _mcp_service,
    "docs/python-api.md": _client_service,
}


def _mcp_call_answered(namespace: dict[str, Any]) -> None:
    result = namespace["result"]
    assert not result.is_error and result.structured_content["item"]["value"] == "ship the billing migration", result


# What a doc's Python examples must leave in their namespace beyond what their comments promise, by doc.
PYTHON_THEN: dict[str, Callable[[dict[str, Any]], None]] = {"docs/mcp.md": _mcp_call_answered}


@dataclass
class PythonDocRun:
    """All Python blocks of one doc, run once in order in one namespace: block line -> its failure, if any."""

    outcomes: dict[int, Exception | None] = field(default_factory=dict)


def run_python_doc(doc: str, workdir: Path) -> PythonDocRun:
    blocks = [b for b in PYTHON if b.doc == doc]
    code = "".join(b.code for b in blocks)
    run = PythonDocRun()
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.chdir(workdir))
        stack.enter_context(_environ(MEMLANE_EMBEDDER="fake", MEMLANE_DB=None))
        namespace: dict[str, Any] = {"memlane": memlane}
        namespace["mem"] = stack.enter_context(memlane.open("assumed.db"))
        url = DOC_URL
        if DOC_URL in code:
            url, namespace["token"] = doc_service(doc, code, workdir, stack)
        for block in blocks:
            try:
                run_example(block.code.replace(DOC_URL, url), str(block), namespace)
                if block is blocks[-1]:
                    PYTHON_THEN.get(doc, lambda namespace: None)(namespace)
            except Exception as e:  # recorded, re-raised by the block's own test
                run.outcomes[block.line] = e
            else:
                run.outcomes[block.line] = None
        for value in namespace.values():
            if isinstance(value, memlane.Memory):
                value.close()
    return run


def doc_service(doc: str, code: str, workdir: Path, stack: contextlib.ExitStack) -> tuple[str, str]:
    """The live loopback service that stands in for http://127.0.0.1:8420 in a doc's examples, holding what
    they assume; its URL and the token of the agent they use."""
    service = stack.enter_context(memlane.open(workdir / "service.db", embedder="fake"))
    agent = re.search(r"agent/(\w+)", code)
    assert agent is not None, f"{doc}: which agent's token do its Client examples use?"
    _, token = Access(service).create_agent(agent.group(1))
    SERVICE_STATE.get(doc, lambda service: None)(service)
    server = LiveServer(create_app(service))
    stack.callback(server.stop)
    return server.url, token


@contextlib.contextmanager
def _environ(**changes: str | None) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in changes}
    try:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def python_docs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], PythonDocRun]:
    runs: dict[str, PythonDocRun] = {}

    def run(doc: str) -> PythonDocRun:
        if doc not in runs:
            runs[doc] = run_python_doc(doc, tmp_path_factory.mktemp(Path(doc).stem))
        return runs[doc]

    return run


@pytest.mark.parametrize("block", PYTHON, ids=str)
def test_python_example(block: Block, python_docs: Callable[[str], PythonDocRun]) -> None:
    failure = python_docs(block.doc).outcomes[block.line]
    if failure is not None:
        raise failure


def test_the_readme_python_example_leaves_what_its_comments_say(tmp_path: Path, monkeypatch: Any) -> None:
    (code,) = [b.code for b in PYTHON if b.doc == "README.md" and "memlane.open" in b.code][:1]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")
    run_example(code, "README.md", {})
    with memlane.open("memlane.db") as mem:
        assert mem.get("user/42", "preferences.ui.theme").value == "light"
        assert [v.value for v in mem.history("user/42", "preferences.ui.theme")] == ["dark"]
        assert mem.summarize("user/42", depth=2) == {"user/42": {"preferences.ui": 1, "preferences.editor": 1}}


# -- shell blocks ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command of a shell block and the output the doc shows for it."""

    text: str
    expected: tuple[str, ...] = ()


def shell_commands(block: Block) -> list[Command]:
    """The block's commands: ``$`` lines of a console block (the lines after one are its output), every line of
    a bash/sh/shell block; a line ending in ``\\`` continues on the next."""
    commands: list[tuple[str, list[str]]] = []
    continued = False
    for line in block.code.splitlines():
        if continued:
            commands[-1] = (commands[-1][0] + "\n" + line, commands[-1][1])
        elif block.language == "console" and line.startswith("$ "):
            commands.append((line[2:], []))
        elif block.language == "console" and commands:
            commands[-1][1].append(line)
        elif block.language != "console" and line.strip() and not line.lstrip().startswith("#"):
            commands.append((line, []))
        continued = line.endswith("\\")
    return [Command(text, tuple(expected)) for text, expected in commands]


def _store(workdir: Path, *items: tuple[str, str, Any], embedder: str = "fake", db: str = "memlane.db") -> None:
    # the state a doc shows: every item already has its vector, as after `memlane set`
    with memlane.open(str(workdir / db), embedder=embedder, indexing="sync") as mem:
        for namespace, key, value in items:
            mem.put(namespace, key, value)


def _items(workdir: Path, *items: tuple[str, str, Any], embedder: str = "fake") -> dict[str, str | None]:
    """These items in the block's store, and no change to its environment."""
    _store(workdir, *items, embedder=embedder)
    return {}


def _without_uvicorn(workdir: Path) -> dict[str, str | None]:
    """A ``uvicorn`` that is not installed, as after a plain ``pip install memlane``."""
    plain = workdir / "plain-install"
    plain.mkdir()
    (plain / "uvicorn.py").write_text("raise ModuleNotFoundError(\"No module named 'uvicorn'\", name='uvicorn')\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(plain), os.environ.get("PYTHONPATH")]))}


def _search_store(workdir: Path) -> dict[str, str | None]:
    _store(
        workdir,
        ("user/123", "notes.pets", "The cat sat on the mat"),
        ("user/123", "notes.work", "Quarterly revenue grew 4%"),
        ("user/123", "preferences.ui.theme", "dark theme in every editor"),
        embedder="minilm",
    )
    return {"MEMLANE_EMBEDDER": None}  # the store's recorded embedder, minilm


def _browse_store(workdir: Path) -> dict[str, str | None]:
    _store(
        workdir,
        ("user/123", "preferences.ui.theme", "dark"),
        ("user/123", "preferences.ui.theme", "dark theme in every editor"),
        ("user/123", "preferences.ui.font", "Iosevka"),
        ("user/123", "preferences.editor", "helix"),
        ("user/123", "profile.name", "Ada"),
        ("user/456", "preferences.ui.theme", "light"),
    )
    return {}


def _query_store(workdir: Path) -> dict[str, str | None]:
    _store(
        workdir,
        ("user/1", "prefs.ui.theme", "dark"),
        ("user/1", "prefs.ui.font", "Iosevka"),
        ("room/eng", "digest", "x"),
    )
    with memlane.open(str(workdir / "memlane.db")) as mem:
        mem.add_claim("room/eng", "the billing migration slips to March", speaker="Dana")
    return {}


def _two_stores(workdir: Path) -> dict[str, str | None]:
    _store(workdir, ("user/1", "prefs.ui.theme", "dark"), ("user/1", "prefs.ui.font", "Iosevka"))
    _store(workdir, ("user/2", "prefs.ui.theme", "light"), db="old.db")
    return {}


# What a block's text assumes is already there, keyed by the block's first command: files made through the
# Python API (quicker than the CLI) and environment changes (None: unset). Every key must name a block.
GIVEN: dict[str, Callable[[Path], dict[str, str | None]]] = {
    "memlane list --db memry.db": lambda d: _items(d, ("user/123", "preferences.ui.theme", "dark")),
    "memlane serve": _without_uvicorn,
    "memlane search kitten --embedder fake": lambda d: _items(d, ("user/123", "notes.pets", "cat"), embedder="minilm"),
    'memlane put user/123 preferences.ui.theme dark --metadata \'{"source": "chat"}\'': lambda d: _items(
        d, ("user/123", "profile.name", "Ada"), ("user/123", "preferences.editor", "helix")
    ),
    "memlane get user/123 preferences.ui.theme": _browse_store,
    "memlane search kitten": _search_store,
    "memlane recall --key preferences.ui.theme --prefix user": _browse_store,
    # the store's recorded embedder, so that `reindex` without --embedder keeps minilm
    "memlane reindex --embedder minilm": lambda d: (
        _items(d, ("user/1", "a", "x"), ("user/1", "b", "y")) | {"MEMLANE_EMBEDDER": None}
    ),
    'memlane query "SELECT namespace, count(*) AS n FROM items GROUP BY namespace ORDER BY n DESC"': _query_store,
    "memlane export backup.jsonl": _two_stores,
    "memlane get user/123 missing.key": lambda d: _items(d, ("user/123", "k", "v")),
}


def _get_shows_the_value_set(workdir: Path, outputs: list[str]) -> None:
    assert "dark" in outputs[1], f"README: `memlane get` does not show the value just set:\n{outputs[1]}"


def _put_through_curl_is_stored(workdir: Path, outputs: list[str]) -> None:
    with memlane.open(str(workdir / "memlane.db")) as mem:
        assert mem.get("agent/alice", "preferences.ui.theme").value == "dark"


# What a block leaves behind beyond the output it shows, by its doc and first command: (its directory, each
# command's output).
THEN: dict[tuple[str, str], Callable[[Path, list[str]], None]] = {
    ("README.md", "memlane put user/42 preferences.ui.theme dark"): _get_shows_the_value_set,
    ("docs/http.md", "memlane serve --db memlane.db --port 8420"): _put_through_curl_is_stored,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unprivileged(workdir: Path) -> list[str]:
    """A command prefix under which file permissions bind (``chmod a-w`` in an example): as root, without the
    capabilities that bypass them; ``[]`` for anyone else, or if that cannot be arranged."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return []
    caps = "-dac_override,-dac_read_search"
    prefix = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]
    probe = workdir / ".probe"
    probe.write_text("")
    probe.chmod(0o444)
    tried = subprocess.run([*prefix, "sh", "-c", f"echo >> {shlex.quote(str(probe))}"], capture_output=True)
    probe.unlink()
    return prefix if tried.returncode != 0 else []


@dataclass
class ShellSession:
    """Runs one block's commands in its own directory and store, with the servers it starts."""

    workdir: Path
    env: dict[str, str]
    prefix: list[str]
    url: str | None = None
    outputs: list[str] = field(default_factory=list)
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def run(self, command: Command, where: str) -> None:
        text = command.text if self.url is None else command.text.replace(DOC_URL, self.url)
        words = shlex.split(text, comments=True)
        fails = bool(command.expected) and command.expected[0].startswith("Error: ")
        if words[:1] == ["export"]:
            for assignment in words[1:]:
                name, _, value = assignment.partition("=")
                self.env[name] = value
            return
        if words[:2] == ["memlane", "serve"] and not fails:
            return self.serve(text, command, where)
        if words[:2] == ["memlane", "serve"] and "taken" in command.expected[0]:
            text = self.occupied_port(text)
        if words[:1] == ["curl"]:
            if shutil.which("curl") is None:
                pytest.skip("curl is not installed (the HTTP examples send their requests with it)")
            if self.url is None:
                self.in_process_service(text)
                text = text.replace(DOC_URL, str(self.url))
            text = "curl --fail-with-body" + text[len("curl") :]
        done = subprocess.run(
            [*self.prefix, "bash", "-o", "pipefail", "-c", text],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        printed = done.stdout + done.stderr
        self.outputs.append(printed)
        self.remember_tokens(printed)
        assert "Traceback" not in done.stderr, f"{where}: `{text}` printed a traceback:\n{done.stderr}"
        if fails:
            errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
            assert done.returncode != 0 and errors, (
                f"{where}: `{text}` should fail with\n  {command.expected[0]}\n{printed}"
            )
            head = line_pattern(error_head(command.expected[0]))
            assert head.fullmatch(" ".join(error_head(errors[0]).split())), (
                f"{where}: `{text}` failed with\n  {errors[0]}\nbut the doc says\n  {command.expected[0]}"
            )
        else:
            assert done.returncode == 0, f"{where}: `{text}` exited {done.returncode}:\n{printed}"
            assert_prints(list(command.expected), printed, f"{where}: `{text}`")

    def serve(self, text: str, command: Command, where: str) -> None:
        """``memlane serve ...``: the real server, on a free loopback port, until the block ends."""
        port = _free_port()
        text = re.sub(r"--port \d+", f"--port {port}", text) if "--port" in text else f"{text} --port {port}"
        server = subprocess.Popen(
            [*self.prefix, "bash", "-c", f"exec {text}"],
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.stack.callback(_stop, server)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(server.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
        reader.start()
        deadline = time.monotonic() + 60
        while not any("serving" in line for line in lines):
            assert server.poll() is None and time.monotonic() < deadline, f"{where}: `{text}` did not serve:\n{lines}"
            time.sleep(0.05)
        # "serving" is said once the socket listens: the doc's next line (a curl) may be sent at once
        assert _accepts(port), f"{where}: `{text}` said it was serving but refused a connection:\n{lines}"
        printed = "".join(lines)
        self.outputs.append(printed)
        self.remember_tokens(printed)
        self.url = f"http://127.0.0.1:{port}"
        assert_prints(list(command.expected), printed, f"{where}: `{text}`")

    def occupied_port(self, text: str) -> str:
        """Points a ``serve`` that the doc shows failing on a taken port at a port this test holds."""
        holder = self.stack.enter_context(socket.socket())
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        return re.sub(r"--port \d+", f"--port {holder.getsockname()[1]}", text)

    def in_process_service(self, text: str) -> None:
        """A curl example without a ``memlane serve`` of its own: a live service, with a token for each $AGENT."""
        mem = self.stack.enter_context(memlane.open(self.workdir / "memlane.db", embedder="fake"))
        for name in re.findall(r"\$([A-Z][A-Z0-9_]*)", text):
            _, self.env[name] = Access(mem).create_agent(name.lower())
        server = LiveServer(create_app(mem))
        self.stack.callback(server.stop)
        self.url = server.url

    def remember_tokens(self, printed: str) -> None:
        """``Created agent 'alice'`` with its token: later commands see it as ``$ALICE``."""
        names = re.findall(r"Created agent '([\w-]+)'", printed)
        tokens = re.findall(r"\bml_[A-Za-z0-9_-]{20,}", printed)
        if len(names) == 1 and len(tokens) == 1:
            self.env[names[0].upper().replace("-", "_")] = tokens[0]


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _stop(server: subprocess.Popen[str]) -> None:
    """Ends a server this test started (its own process group), and waits for it."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def run_shell_block(
    block: Block, workdir: Path, forked: Path | None, bin_dir: Path = MEMLANE.parent, embedder: str | None = "fake"
) -> list[str]:
    """Runs a shell block as the module docstring says; returns what each command printed. ``forked`` is the
    directory of the forked ``memlane`` (see :func:`forked_memlane`); ``None`` runs the installed script in
    ``bin_dir`` (a fresh venv's, below). ``embedder``: ``$MEMLANE_EMBEDDER`` (``None``: unset, as a new user)."""
    commands = shell_commands(block)
    assert commands, f"{block}: no commands (a console block's commands start with '$ '); run it or mark it not run"
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        "MEMLANE_DB": "memlane.db",
        "MEMLANE_EMBEDDER": "fake",
        "COLUMNS": "200",  # a reader's terminal, not a pipe's 80 columns
    }
    if embedder is None:
        del env["MEMLANE_EMBEDDER"]
    given = GIVEN.get(commands[0].text, lambda d: {})(workdir)
    for name, value in given.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    prefix = _unprivileged(workdir) if "chmod" in block.code else []
    if "chmod a-w" in block.code and not prefix and os.geteuid() == 0:
        pytest.skip("root, and setpriv could not drop the capabilities that bypass file permissions")
    if forked is not None and env.get("PYTHONPATH") == os.environ.get("PYTHONPATH"):
        env["PATH"] = os.pathsep.join([str(forked), env["PATH"]])
    session = ShellSession(workdir, env, prefix)
    with session.stack:
        for command in commands:
            session.run(command, str(block))
    THEN.get((block.doc, commands[0].text), lambda d, outputs: None)(workdir, session.outputs)
    return session.outputs


@pytest.mark.parametrize("block", SHELL, ids=str)
def test_shell_example(block: Block, tmp_path: Path, forked_memlane: Path | None) -> None:
    run_shell_block(block, tmp_path, forked_memlane)


def test_every_given_state_and_check_belongs_to_a_block() -> None:
    firsts = {(b.doc, shell_commands(b)[0].text) for b in SHELL if shell_commands(b)}
    assert set(GIVEN) <= {first for _, first in firsts}, set(GIVEN) - {first for _, first in firsts}
    assert set(THEN) <= firsts, set(THEN) - firsts


def test_a_shell_example_that_fails_differently_than_shown_fails(tmp_path: Path, forked_memlane: Path | None) -> None:
    wrong = Block("t.md", 1, "console", "$ memlane get user/1 k\nError: namespace: has an empty segment\n", None)
    with pytest.raises(AssertionError, match="but the doc says"):
        run_shell_block(wrong, tmp_path, forked_memlane)
    succeeds = Block("t.md", 1, "console", "$ memlane set user/1 k v\nError: no item\n", None)
    with pytest.raises(AssertionError, match="should fail"):
        (tmp_path / "again").mkdir()
        run_shell_block(succeeds, tmp_path / "again", forked_memlane)


# -- a fresh virtual environment per extra ------------------------------------------------------------------------
#
# Each install a user may choose (plain ``pip install memlane``, or an extra) gets a fresh virtual environment with
# exactly what it installs (tests/venvs.py; built once per session, in seconds, from this environment's packages),
# and runs the examples of its docs verbatim there: the Python blocks through tests/docrun.py, the shell blocks
# with that environment's ``memlane`` script. A module a doc needs that its extra does not bring fails here.


@dataclass(frozen=True)
class Install:
    """What one install's docs are.

    ``python``: ``(doc, which, embedder)``: ``which`` Python blocks run, ``"local"`` (those without a service),
    ``"service"`` (those talking to http://127.0.0.1:8420), ``"each"`` (every block on its own, as a reader
    copies one section) or ``"with:TEXT"`` (each block containing TEXT, on its own), with ``$MEMLANE_EMBEDDER``
    set to ``embedder`` (``None``: unset, as a new user).
    ``shell``: ``(doc, word)``: the doc's shell blocks that contain ``word`` (``""``: all), with ``embedder``.
    """

    python: tuple[tuple[str, str, str | None], ...] = ()
    shell: tuple[tuple[str, str], ...] = ()
    embedder: str | None = None


INSTALLS = {
    # the library and the CLI alone: SQLite and full text; no embedder is installed, and none is set
    "": Install(
        python=(
            ("README.md", "local", None),
            ("docs/facts.md", "local", None),
            ("docs/python-api.md", "with:memlane.aio.open", None),  # the asyncio example says it runs here
            ("docs/python-api.md", "with:a base install: no vectors", None),  # what recall answers on words alone
        ),
        shell=(("README.md", ""),),
    ),
    # the default embedder: the README as written (minilm from the installed package), the API reference
    "vectors": Install(
        python=(("README.md", "local", None), ("docs/python-api.md", "local", "fake")),
        shell=(("docs/cli.md", "kitten"), ("docs/cli.md", "reindex --embedder minilm")),
        embedder="fake",
    ),
    "server": Install(
        python=(("docs/mcp.md", "service", None),),
        shell=(("docs/http.md", ""), ("docs/mcp.md", ""), ("docs/inspector.md", "")),
    ),
    "client": Install(python=(("docs/python-api.md", "service", None),)),
    "langgraph": Install(python=(("docs/langgraph.md", "each", None),)),
}


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The ``bin`` directory of a fresh venv as after ``pip install 'memlane[EXTRA]'``, built once per session."""
    import venvs

    built: dict[str, Path] = {}

    make = venvs.build_with_pip if os.environ.get("MEMLANE_FRESH_VENVS") == "pip" else venvs.build

    def get(extra: str) -> Path:
        if extra not in built:
            built[extra] = make(extra, tmp_path_factory.mktemp(f"venv-{extra or 'plain'}") / "venv")
        return built[extra]

    return get


def _python_blocks(doc: str, which: str) -> list[Block]:
    blocks = [b for b in PYTHON if b.doc == doc]
    if which == "each":
        return blocks
    if which.startswith("with:"):  # the blocks that say they run on this install, each on its own
        return [b for b in blocks if which[5:] in b.code]
    return [b for b in blocks if (DOC_URL in b.code) == (which == "service")]


def run_in_venv(bin_dir: Path, doc: str, which: str, embedder: str | None, workdir: Path) -> dict[str, str | None]:
    """Runs a doc's Python blocks with the venv's interpreter, in ``workdir``; each block's failure by name."""
    blocks = _python_blocks(doc, which)
    assert blocks, f"{doc}: no {which} Python blocks to run"
    spec: dict[str, Any] = {
        "blocks": [{"name": str(b), "code": b.code} for b in blocks],
        "independent": which == "each" or which.startswith("with:"),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "PYTHON"))}
    if embedder is not None:
        env["MEMLANE_EMBEDDER"] = embedder
    with contextlib.ExitStack() as stack:
        if which == "service":
            spec["url"], spec["token"] = doc_service(doc, "".join(b.code for b in blocks), workdir, stack)
            spec["doc_url"] = DOC_URL
        (workdir / "spec.json").write_text(json.dumps(spec))
        done = subprocess.run(
            [str(bin_dir / "python"), str(Path(__file__).with_name("docrun.py")), "spec.json"],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0 and done.stdout.strip(), f"{doc} in a fresh venv:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


FRESH_PYTHON = [(extra, *entry) for extra, install in INSTALLS.items() for entry in install.python]
FRESH_SHELL = [
    (extra, block)
    for extra, install in INSTALLS.items()
    for doc, word in install.shell
    for block in SHELL
    if block.doc == doc and word in block.code
]


@pytest.mark.parametrize(
    ("extra", "doc", "which", "embedder"), FRESH_PYTHON, ids=[f"{e or 'plain'}:{d}:{w}" for e, d, w, _ in FRESH_PYTHON]
)
def test_a_fresh_install_runs_its_docs_python_examples(
    extra: str, doc: str, which: str, embedder: str | None, fresh_venv: Callable[[str], Path], tmp_path: Path
) -> None:
    ran = run_in_venv(fresh_venv(extra), doc, which, embedder, tmp_path)
    failed = {name: why for name, why in ran.items() if why}
    assert not failed, f"pip install 'memlane[{extra}]', then {doc}:\n" + "\n".join(
        f"{name}:\n{why}" for name, why in failed.items()
    )


@pytest.mark.parametrize(("extra", "block"), FRESH_SHELL, ids=[f"{e or 'plain'}:{b}" for e, b in FRESH_SHELL])
def test_a_fresh_install_runs_its_docs_shell_examples(
    extra: str, block: Block, fresh_venv: Callable[[str], Path], tmp_path: Path
) -> None:
    run_shell_block(block, tmp_path, None, fresh_venv(extra), INSTALLS[extra].embedder)


def test_a_fresh_postgres_install_runs_the_backends_examples(
    postgres: Any, fresh_venv: Callable[[str], Path], tmp_path: Path
) -> None:
    # the examples name a server at db.internal; this one is the test session's
    url = postgres.create()
    blocks = [b for b in EXAMPLES if b.doc == "docs/backends.md" and "postgresql://" in b.code]
    assert [b.language for b in blocks] == ["python", "bash"]
    shown = re.compile(r"postgresql://[^\s\"']+")
    python = "import memlane\n" + shown.sub(url, blocks[0].code) + "mem.put('user/1', 'k', 'v')\nmem.close()\n"
    commands = [shown.sub(url, line) for line in blocks[1].code.splitlines() if line and not line.startswith("pip ")]
    bin_dir = fresh_venv("postgres")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "PYTHON"))}
    for argv in ([str(bin_dir / "python"), "-c", python], *(["bash", "-c", c] for c in commands)):
        done = subprocess.run(
            argv, cwd=tmp_path, env={**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0 and "Traceback" not in done.stderr, (argv, done.stdout, done.stderr)
    assert "active_items" in done.stdout and "1" in done.stdout


def test_the_readme_links_every_doc_page_and_names_every_extra() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in set(extras) - {"dev", "bench"}:
        assert f"| `{extra}` |" in readme, f"README.md's Install table lacks the {extra!r} extra"
    assert "pip install memlane" in readme


def test_each_extra_is_what_its_docs_need_and_nothing_more_is_assumed(fresh_venv: Callable[[str], Path]) -> None:
    """The fresh venvs are really partial: a plain install has neither numpy nor the service's packages."""
    import venvs

    plain = fresh_venv("")
    probe = (
        "import importlib.util as u; print([m for m in ('numpy', 'fastapi', 'httpx', 'langgraph') if u.find_spec(m)])"
    )
    done = subprocess.run([str(plain / "python"), "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert "numpy" in venvs.closure(["langgraph"], venvs._installed())  # its semantic search's vector channel


# -- the command line, forked --------------------------------------------------------------------------------------
#
# An interpreter start with memlane's imports costs about a second of CPU, and the docs hold some sixty commands:
# more than this whole test may take. So `memlane` in the examples is, by default, the venv's entry point
# (memlane.cli:main) run in a fresh process forked from one that has imported it already: a shim first on PATH
# sends it the command's arguments, environment, directory and standard streams, and exits with its code. Blocks
# that change PYTHONPATH, and MEMLANE_DOCS_CLI=installed, run the installed script itself (a fork keeps only the
# capabilities its shim had, so `chmod a-w` binds under setpriv as for a real process);
# a test below holds the two to the same answers. (The forking side also builds Typer's command tree once.)

_SHIM = """#!{python} -S
import json, os, socket, struct, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
conn.connect({address!r})
caps = [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff:")]
request = {{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ), "caps": caps[0] if caps else None}}
socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
answer = conn.recv(4)
sys.exit(struct.unpack("i", answer)[0] if len(answer) == 4 else 1)
"""


def _serve_forks(address: str, parent: int) -> None:
    """The forking side: import the command line (and what `serve` imports), then fork each command."""
    import typer.main
    import uvicorn  # noqa: F401

    import memlane.cli
    import memlane.server
    from memlane.domain.search.minilm import MiniLMEmbedder

    with tempfile.TemporaryDirectory() as warm, memlane.open(os.path.join(warm, "m.db"), embedder="fake") as mem:
        memlane.server.create_app(mem)  # what the first app imports and builds lazily, once for every `serve`
    with contextlib.suppress(memlane.MemlaneError):  # the minilm weights, cached per process and kept by a fork
        MiniLMEmbedder().load()
    # Typer turns the app's functions into click commands on every call (half a second: it evaluates every
    # command's annotations); build that once here. It reads nothing from the environment (no completion).
    built = typer.main.get_command(memlane.cli.app)
    build = typer.main.get_command
    typer.main.get_command = lambda app: built if app is memlane.cli.app else build(app)  # type: ignore[assignment]

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen(64)
    listener.settimeout(1)
    while os.getppid() == parent:  # a killed test run leaves nothing running behind
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close()
            conn.close()
            _run_forked(json.loads(message), fds)
        for fd in fds:
            os.close(fd)
        threading.Thread(target=_answer, args=(conn, pid), daemon=True).start()


def _run_forked(request: dict[str, Any], fds: list[int]) -> None:
    """In the fork: become `memlane ARGV` in the shim's directory, environment and streams, then exit."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    if request["caps"] is not None:
        _keep_only_capabilities(int(request["caps"], 16))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["memlane", *request["argv"]]
    code: int = 0
    try:
        from memlane.cli import main

        main()
    except SystemExit as e:
        if isinstance(e.code, int) or e.code is None:
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    with contextlib.suppress(OSError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _keep_only_capabilities(effective: int) -> None:
    """Drops the capabilities the shim did not have (``chmod a-w`` binds root only without CAP_DAC_OVERRIDE)."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    for i, word in enumerate(data):
        mask = (effective >> (32 * i)) & 0xFFFFFFFF
        word.effective &= mask
        word.permitted &= mask
        word.inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _answer(conn: socket.socket, pid: int) -> None:
    """Sends the fork's exit code to its shim; ends the fork if the shim goes away first (a stopped server)."""
    import select
    import struct

    with conn:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                with contextlib.suppress(OSError):
                    conn.send(struct.pack("i", os.waitstatus_to_exitcode(status)))
                return
            ready, _, _ = select.select([conn], [], [], 0.02)
            if ready and conn.recv(1) == b"":
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
                return


@pytest.fixture(scope="session")
def forked_memlane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """A directory holding the `memlane` shim, with its forking side running; ``None`` when
    ``MEMLANE_DOCS_CLI=installed`` asks for the installed script everywhere."""
    if os.environ.get("MEMLANE_DOCS_CLI") == "installed":
        yield None
        return
    address = os.path.join(tempfile.mkdtemp(prefix="mldocs"), "forks")  # short: a socket path has 107 bytes
    command = [sys.executable, __file__, "--serve-forks", address, str(os.getpid())]
    forks = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(address):
            assert forks.poll() is None and time.monotonic() < deadline, "the forking side did not start"
            time.sleep(0.05)
        shim_dir = tmp_path_factory.mktemp("bin")
        shim = shim_dir / "memlane"
        shim.write_text(_SHIM.format(python=sys.executable, address=address))
        shim.chmod(0o755)
        yield shim_dir
    finally:
        forks.terminate()
        forks.wait(timeout=10)
        shutil.rmtree(os.path.dirname(address), ignore_errors=True)


def test_the_forked_command_line_answers_as_the_installed_script(tmp_path: Path, forked_memlane: Path | None) -> None:
    if forked_memlane is None:
        pytest.skip("MEMLANE_DOCS_CLI=installed: every example runs the installed script")
    commands = [  # stdin in, a line on stdout, exit 0; a failure: one line on stderr, exit 1
        "printf 'from stdin\\n' | memlane set user/1 s -",
        "memlane get user/1 missing",
    ]
    answers = {}
    for name, path in (("forked", forked_memlane), ("installed", None)):
        workdir = tmp_path / name
        workdir.mkdir()
        env = {**os.environ, "MEMLANE_DB": "memlane.db", "MEMLANE_EMBEDDER": "fake"}
        env["PATH"] = os.pathsep.join([*([str(path)] if path else []), str(MEMLANE.parent), env["PATH"]])
        answers[name] = [
            subprocess.run(["bash", "-o", "pipefail", "-c", c], cwd=workdir, env=env, capture_output=True, text=True)
            for c in commands
        ]
    for command, forked, installed in zip(commands, answers["forked"], answers["installed"], strict=True):
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            installed.returncode,
            installed.stdout,
            installed.stderr,
        ), command


if __name__ == "__main__" and sys.argv[1:2] == ["--serve-forks"]:
    _serve_forks(sys.argv[2], int(sys.argv[3]))
