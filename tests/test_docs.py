"""The examples in the README run as written, so one that stops working fails ``make test``.

Python blocks run in a fresh directory (the README writes ``memlane.db`` there)
and the values the comments promise are checked; shell blocks run line by line
with the installed ``memlane`` command. The first curl example of docs/http.md
runs against a live loopback service.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import memlane
from live import LiveServer
from memlane.access import Access
from memlane.server import create_app

ROOT = Path(__file__).resolve().parents[1]
MEMLANE = Path(sys.executable).with_name("memlane")


def blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def any_blocks(path: Path) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def test_the_readme_python_example_runs_and_says_what_its_comments_say(tmp_path: Path, monkeypatch: Any) -> None:
    (code,) = [b for b in blocks(ROOT / "README.md", "python") if "memlane.open" in b][:1]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    with memlane.open("memlane.db") as mem:
        assert mem.get("user/42", "preferences.ui.theme").value == "light"
        assert [v.value for v in mem.history("user/42", "preferences.ui.theme")] == ["dark"]
        assert mem.summarize("user/42", depth=2) == {"user/42": {"preferences.ui": 1, "preferences.editor": 1}}


def test_the_readme_shell_example_runs(tmp_path: Path) -> None:
    (code,) = [b for b in blocks(ROOT / "README.md", "bash") if b.startswith("memlane set")][:1]
    env = {**os.environ, "MEMLANE_DB": str(tmp_path / "shell.db"), "MEMLANE_EMBEDDER": "fake"}
    outputs = []
    for line in code.strip().splitlines():
        argv = shlex.split(line)
        assert argv[0] == "memlane"
        done = subprocess.run([str(MEMLANE), *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, (line, done.stderr)
        outputs.append(done.stdout)
    assert "dark" in outputs[1]


@pytest.fixture
def service(tmp_path: Path) -> Any:
    with memlane.open(tmp_path / "http.db", embedder="fake") as mem:
        _, token = Access(mem).create_agent("alice")
        server = LiveServer(create_app(mem))
        yield server, token, mem
        server.stop()


def test_the_first_curl_example_of_the_http_guide_works_as_written(service: Any) -> None:
    server, token, mem = service
    (example,) = [b for b in any_blocks(ROOT / "docs" / "http.md") if "curl" in b][:1]
    command = example[example.index("curl") :]
    command = command.replace("http://127.0.0.1:8420", server.url).replace("$ALICE", token)
    argv = shlex.split(command.replace("\\\n", " "))
    headers = {}
    body = None
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == "-H":
            name, _, val = value.partition(": ")
            headers[name] = val
        elif flag == "-d":
            body = value
    url = next(a for a in argv if a.startswith("http"))
    answer = httpx.post(url, content=body, headers=headers)  # what curl -d sends: these headers, this body
    assert answer.status_code == 200, answer.text
    assert mem.get("agent/alice", "preferences.ui.theme").value == "dark"
