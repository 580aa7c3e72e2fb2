"""A new user's first ten minutes with ``memlane`` (#12), each problem tested as the class it belongs to.

Missing extras, read-only databases, reads of a mistyped --db, a taken port,
--version and help, tables at 80 columns, the demo script, and error messages
in command-line words rather than Python ones. Everything runs the real CLI:
typer's CliRunner, or the console script in a subprocess.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

import memlane
from memlane import cli
from memlane.values import operations

ROOT = Path(__file__).resolve().parents[1]
MEMLANE = Path(sys.executable).with_name("memlane")


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMLANE_DB", raising=False)
    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")


def run(*args: str, columns: int = 200, input: str | None = None) -> Result:
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(cli.app, list(args), input=input)


def ok(*args: str, columns: int = 200) -> Result:
    result = run(*args, columns=columns)
    assert result.exit_code == 0, (args, result.stdout, result.stderr)
    return result


def one_line_error(result: Result | subprocess.CompletedProcess[str], code: int | None = None) -> str:
    """The single ``Error: ...`` line a failed command printed (and nothing else, no traceback)."""
    rc = result.exit_code if isinstance(result, Result) else result.returncode
    assert rc != 0 if code is None else rc == code, (rc, result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


def memlane_script(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "MEMLANE_EMBEDDER": "fake"}
    env.pop("MEMLANE_DB", None)
    return subprocess.run(
        [*prefix, str(MEMLANE), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def every_command() -> Iterator[tuple[str, Any]]:
    """``(name as typed after memlane, click command)`` for every command the app registers, groups walked."""

    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
        # click's own listing: a group that makes its commands when asked (memlane op) lists them too
        names = cmd.list_commands(None) if hasattr(cmd, "list_commands") else []
        if path and not names:
            yield " ".join(path), cmd
        for name in names:
            yield from walk(cmd.get_command(None, name), [*path, name])

    yield from walk(typer.main.get_command(cli.app), [])


def every_group() -> Iterator[tuple[str, Any]]:
    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
        subcommands = getattr(cmd, "commands", {})
        if subcommands:
            yield " ".join(path), cmd
        for name, sub in subcommands.items():
            yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(cli.app), [])


# -- 1. a missing extra is one line naming the pip install ---------------------------------

# Imports ``memlane.cli`` with the named modules made unimportable (as when an extra is not installed).
WITHOUT = (
    "import sys\n"
    "for name in sys.argv.pop(1).split(','):\n"
    "    sys.modules[name] = None  # `import name` now raises ModuleNotFoundError\n"
    "sys.argv[0] = 'memlane'\n"
    "from memlane.cli import main\n"
    "main()\n"
)


def without(modules: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMLANE_EMBEDDER": "fake", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, modules, *args], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize(
    ("missing", "command", "extra"),
    [
        ("uvicorn", ["serve"], "server"),
        ("fastapi", ["serve"], "server"),
        ("mcp", ["mcp"], "server"),
        ("anyio", ["mcp"], "server"),
        ("numpy", ["set", "user/1", "k", "v", "--embedder", "minilm"], "vectors"),
        ("numpy", ["search", "cats", "--embedder", "minilm"], "vectors"),
    ],
)
def test_a_missing_extra_is_one_line_naming_the_pip_install(
    tmp_path: Path, missing: str, command: list[str], extra: str
) -> None:
    db = tmp_path / "m.db"
    if command[0] == "search":
        with memlane.open(str(db), embedder=None) as mem:
            mem.put("user/1", "k", "cats")
    done = without(missing, *command, "--db", str(db))
    line = one_line_error(done, 1)
    assert f"the module '{missing}' is not installed" in line
    assert line.rstrip().endswith(f"pip install 'memlane[{extra}]'")
    assert "serving" not in done.stderr
    if command[0] == "set":  # the embedder is refused when chosen, before anything is written
        assert not db.exists()


def test_every_module_the_cli_maps_names_a_real_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, extra in cli.EXTRAS.items():
        assert extra in extras, (module, extra)
    # the modules that serve and mcp import at their top are all mapped
    for module in ("memlane/server/app.py", "memlane/mcp.py", "memlane/values/vectors.py"):
        tree = ast.parse((ROOT / "src" / module).read_text())
        top = {
            (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
            for n in tree.body
            if isinstance(n, ast.Import | ast.ImportFrom) and (not isinstance(n, ast.ImportFrom) or not n.level)
            for a in n.names
        }
        third_party = top - set(sys.stdlib_module_names) - {"memlane", "__future__"}
        assert third_party <= set(cli.EXTRAS), (module, third_party - set(cli.EXTRAS))


@pytest.mark.parametrize(
    ("module", "extra"),
    [("psycopg", "postgres"), ("psycopg_pool", "postgres"), ("psycopg_binary", "postgres"), ("numpy", "vectors"),
     ("onnxruntime", "vectors"), ("uvicorn", "server"), ("mcp", "server")],
)  # fmt: skip
def test_each_optional_module_names_its_extra(module: str, extra: str) -> None:
    said = cli.base._missing_extra(ImportError(f"No module named {module!r}", name=f"{module}.sub"))
    assert said is not None and said.endswith(f"pip install 'memlane[{extra}]'"), said
    assert cli.base._missing_extra(ImportError("No module named 'leftpad'", name="leftpad")) is None


def test_an_import_error_of_memlane_itself_is_not_called_a_missing_extra(tmp_path: Path) -> None:
    done = without("memlane.server", "serve", "--db", str(tmp_path / "m.db"))
    assert done.returncode != 0 and "pip install" not in done.stderr  # a real bug keeps its traceback


# -- 2. read-only databases ----------------------------------------------------------------


def test_the_read_only_option_reads_and_refuses_every_write(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with memlane.open(str(db), embedder=None) as mem:
        mem.put("user/1", "k", "v")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with memlane.open(str(db), embedder=None, read_only=True) as mem:
        assert mem.get("user/1", "k").value == "v"
        assert [i.key for i in mem.list("user").items] == ["k"]
        assert mem.query("SELECT count(*) AS n FROM items").rows == [[1]]
        for write in (
            lambda: mem.put("user/1", "k", "w"),
            lambda: mem.delete("user/1", "k"),
            lambda: mem.clear("user"),
            lambda: mem.add_entity("user/1", "Kim"),
        ):
            with pytest.raises(memlane.StoreError) as refused:
                write()
            assert (
                str(refused.value)
                == f"cannot write to {str(db)!r}: the database is read-only (it was opened read-only); reads still work"
            )
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    with memlane.open(str(db), embedder=None) as mem:
        assert mem.get("user/1", "k").value == "v"

    with pytest.raises(memlane.StoreError, match="does not exist"):
        memlane.open(str(tmp_path / "absent.db"), read_only=True)
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(memlane.StoreError, match="in-memory"):
        memlane.open(":memory:", read_only=True)


def test_a_read_only_store_with_pending_migrations_says_so(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    memlane.open(str(db), embedder=None).close()
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM _memlane_migrations WHERE name = (SELECT max(name) FROM _memlane_migrations)")
    with pytest.raises(memlane.StoreError, match="needs schema migrations .* but is read-only"):
        memlane.open(str(db), read_only=True)


@pytest.fixture
def unprivileged(tmp_path: Path) -> tuple[str, ...]:
    """A command prefix under which file permissions bind. Root ignores them, so as root the
    command runs without the capabilities that let it (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv: chmod cannot make a file read-only for this test")
    caps = "-dac_override,-dac_read_search"
    prefix = (setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}")
    probe = tmp_path / "probe"
    probe.write_text("")
    probe.chmod(0o444)
    tried = subprocess.run([*prefix, sys.executable, "-c", f"open({str(probe)!r}, 'a')"], capture_output=True)
    probe.unlink()
    if tried.returncode == 0:
        pytest.skip("root, and setpriv could not drop the capabilities that bypass file permissions")
    return prefix


def test_a_read_only_file_reads_refuses_writes_in_one_line_and_recovers(
    tmp_path: Path, unprivileged: tuple[str, ...]
) -> None:
    db = tmp_path / "m.db"
    assert memlane_script("set", "user/1", "k", "v1", "--db", str(db)).returncode == 0
    db.chmod(0o444)
    try:
        got = memlane_script("get", "user/1", "k", "--value", "--db", str(db), prefix=unprivileged)
        assert (got.returncode, got.stdout, got.stderr) == (0, '"v1"\n', "")
        for read in (["list"], ["search", "v1"], ["query", "SELECT count(*) FROM items"], ["stats"]):
            done = memlane_script(*read, "--db", str(db), prefix=unprivileged)
            assert done.returncode == 0, (read, done.stderr)
        refused = memlane_script("set", "user/1", "k", "v2", "--db", str(db), prefix=unprivileged)
        assert one_line_error(refused, 1) == (
            f"Error: cannot write to {str(db)!r}: the database is read-only (the file is not writable); "
            "reads still work\n"
        )
        # the read-only opens left -wal and -shm behind, read-only like the file was
        stale = [tmp_path / "m.db-wal", tmp_path / "m.db-shm"]
        assert all(p.exists() and not p.stat().st_mode & stat.S_IWUSR for p in stale)
    finally:
        db.chmod(0o644)
    # writable again: the stale files do not keep writes failing
    again = memlane_script("set", "user/1", "k", "v2", "--db", str(db), prefix=unprivileged)
    assert again.returncode == 0, again.stderr
    assert memlane_script("get", "user/1", "k", "--value", "--db", str(db), prefix=unprivileged).stdout == '"v2"\n'


def test_a_database_in_a_read_only_directory_reads_and_refuses_writes(
    tmp_path: Path, unprivileged: tuple[str, ...]
) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "m.db"
    assert memlane_script("set", "user/1", "k", "v1", "--db", str(db)).returncode == 0
    assert os.listdir(folder) == ["m.db"]
    folder.chmod(0o555)
    try:
        got = memlane_script("get", "user/1", "k", "--value", "--db", str(db), prefix=unprivileged)
        assert (got.returncode, got.stdout) == (0, '"v1"\n'), got.stderr
        queried = memlane_script("query", "SELECT key FROM items", "--csv", "--db", str(db), prefix=unprivileged)
        assert queried.stdout == "key\nk\n", queried.stderr
        refused = memlane_script("delete", "user/1", "k", "--db", str(db), prefix=unprivileged)
        assert "the database is read-only (its directory is not writable)" in one_line_error(refused, 1)
        assert os.listdir(folder) == ["m.db"]  # nothing was created beside it
    finally:
        folder.chmod(0o755)
    assert memlane_script("set", "user/1", "k", "v2", "--db", str(db), prefix=unprivileged).returncode == 0


# -- 3. a read of a path that does not exist creates nothing ----------------------------------

# a value for each required argument of a read command
PLACEHOLDERS = {
    "namespace": "user/1",
    "key": "k",
    "query": "q",
    "ids": "ent_" + "0" * 32,
    "entity_ids": "ent_" + "0" * 32,
    "chunk_id": "chunk_" + "0" * 32,
    "name": "x",
    "sql": "SELECT 1",
    "addresses": '[["user/1", "k"]]',
    "text": "words",
    "item_id": "0" * 32,
}
# memlane op takes a list parameter as JSON
OP_PLACEHOLDERS = PLACEHOLDERS | {
    "ids": f'["{PLACEHOLDERS["ids"]}"]',
    "entity_ids": f'["{PLACEHOLDERS["entity_ids"]}"]',
}


def test_every_command_is_classified_as_a_read_or_a_write() -> None:
    names = {name for name, _ in every_command()}
    assert not cli.READ_COMMANDS & cli.WRITE_COMMANDS
    assert names - (cli.READ_COMMANDS | cli.WRITE_COMMANDS) == set(), "add the new command to READ or WRITE_COMMANDS"
    assert (cli.READ_COMMANDS | cli.WRITE_COMMANDS) - names == set(), "a classified command no longer exists"


@pytest.mark.parametrize("command", sorted(cli.READ_COMMANDS))
def test_a_read_of_a_missing_database_says_so_and_creates_nothing(tmp_path: Path, command: str) -> None:
    click_command = dict(every_command())[command]
    placeholders = OP_PLACEHOLDERS if command.startswith("op ") else PLACEHOLDERS
    args = [
        placeholders[p.name]  # a new required argument needs a placeholder here
        for p in click_command.params
        if p.param_type_name == "argument" and (p.required or p.name in placeholders)
    ]
    typo = tmp_path / "memry.db"
    line = one_line_error(run(*command.split(), *args, "--db", str(typo)), 1)
    assert line.startswith(f"Error: no database at {str(typo)!r}: the file does not exist")
    assert f"memlane put NAMESPACE KEY VALUE --db {typo}" in line
    assert list(tmp_path.iterdir()) == []


def test_the_default_path_and_migrate_status_are_reads_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert "no database at 'memlane.db'" in one_line_error(run("list"), 1)
    monkeypatch.setenv("MEMLANE_DB", str(tmp_path / "env.db"))
    assert "env.db" in one_line_error(run("stats"), 1)
    assert "no database at" in one_line_error(run("migrate", "--status"), 1)
    assert list(tmp_path.iterdir()) == []
    ok("migrate")  # applying migrations is a write: it creates the file
    assert (tmp_path / "env.db").exists()


def test_a_write_still_creates_the_database(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    ok("set", "user/1", "k", "v", "--db", str(db))
    assert db.exists()
    assert json.loads(ok("get", "user/1", "k", "--json", "--db", str(db)).stdout)["value"] == "v"


# -- 4. a taken port -------------------------------------------------------------------------


def test_serve_on_a_taken_port_says_so_before_anything_else(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = memlane_script("serve", "--db", str(db), "--port", str(port))
    line = one_line_error(done, 1)
    assert f"port {port} on 127.0.0.1 is taken" in line and "--port" in line
    assert "serving" not in done.stderr and "token" not in done.stderr
    assert not db.exists()  # nothing was created, no admin token was made and lost


def test_a_taken_last_port_suggests_a_port_that_exists(tmp_path: Path) -> None:
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", 65535))
        except OSError:
            pytest.skip("port 65535 is in use on this machine")
        taken.listen(1)
        done = memlane_script("serve", "--db", str(tmp_path / "m.db"), "--port", "65535")
    line = one_line_error(done, 1)
    assert "is taken" in line and "e.g. --port 8420" in line and "65536" not in line


@contextlib.contextmanager
def _serving(tmp_path: Path, *options: str) -> Iterator[str]:
    """``memlane serve`` with ``options`` (words only), yielding the line it says it is serving on; stopped after."""
    env = {**os.environ, "MEMLANE_EMBEDDER": "none"}
    server = subprocess.Popen(
        [str(MEMLANE), "serve", "--db", str(tmp_path / "m.db"), *options],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert server.stderr is not None
        for line in server.stderr:
            if "serving" in line:
                break
        else:
            pytest.fail(f"memlane serve {' '.join(options)} ended without saying it was serving")
        yield line
    finally:
        server.terminate()
        server.wait(timeout=60)


def _health(port: int) -> bytes:
    # at once, no retry: the connection must not be refused
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_serve_accepts_a_request_the_moment_it_says_serving(tmp_path: Path) -> None:
    """ "serving at" is a promise: a request sent as soon as the line appears is answered, not refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with _serving(tmp_path, "--port", str(port)):
        answer = _health(port)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


# -- 5. --version, help, tables, the demo --------------------------------------------------------


def test_version() -> None:
    assert ok("--version").stdout == f"memlane {memlane.__version__}\n"
    done = memlane_script("--version")
    assert (done.returncode, done.stdout) == (0, f"memlane {memlane.__version__}\n")


def test_room_list(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    ok("room", "create", "eng", "--db", db)
    ok("agent", "create", "planner", "--db", db)
    ok("room", "add", "eng", "planner", "--db", db)
    ok("room", "create", "ops", "--db", db)
    assert json.loads(ok("room", "list", "--json", "--db", db).stdout) == [
        {"name": "eng", "members": ["planner"]},
        {"name": "ops", "members": []},
    ]
    shown = ok("room", "list", "--db", db).stdout
    assert re.search(r"eng\s+planner", shown) and "ops" in shown


def test_no_help_shows_a_value_after_a_flag() -> None:
    pages = [(name, cmd) for name, cmd in every_command()] + list(every_group())
    assert len(pages) > 60
    for name, cmd in pages:
        shown = run(*name.split(), "--help").stdout
        assert "<bool>" not in shown, name
        flags = [o for p in cmd.params if p.param_type_name == "option" and p.is_flag for o in p.opts]
        for flag in [*flags, "--help"]:
            assert not re.search(rf"{re.escape(flag)}\s+<", shown), (name, flag)


def populate(db: str, keys: list[str]) -> None:
    for key in keys:
        ok("set", "demo/user/42", key, f"a value for {key} that is long enough to need squeezing", "--db", db)


def whole(key: str, out: str) -> bool:
    return re.search(rf"(^|\s){re.escape(key)}(\s|$)", out, re.M) is not None


@pytest.mark.parametrize(
    ("columns", "keys"),
    [
        (80, ["preferences.ui.font-size", "preferences.editor", "session-digest", "version"]),  # the demo's
        (100, ["preferences.editor.keybindings", "preferences.ui.font-size", "session-digest", "version"]),
    ],
)
def test_tables_keep_keys_and_namespaces_whole_at_terminal_widths(
    tmp_path: Path, columns: int, keys: list[str]
) -> None:
    db = str(tmp_path / "m.db")
    populate(db, keys)
    for args, shown in (
        (["list", "demo"], keys),
        (["fetch", "session-digest"], ["session-digest"]),
        (["search", "value long", "--limit", "4"], keys),
        (["recall", "--key", "version"], ["version"]),
    ):
        out = ok(*args, "--db", db, columns=columns).stdout
        assert max(len(line) for line in out.splitlines()) <= columns, args
        assert all(whole(key, out) for key in shown), (args, out)
        assert whole("demo/user/42", out), (args, out)


def test_names_fold_rather_than_lose_characters_when_nothing_else_can_give(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    populate(db, ["preferences.editor.keybindings"])
    lines = ok("list", "demo", "--db", db, columns=40).stdout.splitlines()
    assert max(len(line) for line in lines) <= 40
    header = next(line for line in lines if " key " in line and " type " in line)
    start, end = header.index(" key ") + 1, header.index(" type ")
    below = lines[lines.index(header) + 2 :]  # past the rule under the header
    assert "".join(line[start:end].strip() for line in below) == "preferences.editor.keybindings"


def test_a_table_too_narrow_for_its_ids_folds_them_and_loses_no_column(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    ids = [json.loads(ok("entity", "add", "demo/facts/run-1796222146", "Ravi", "--kind", "person", "--profile",
                         profile, "--json", "--db", db).stdout)["id"] for profile in ("billing", "design")]  # fmt: skip
    out = ok("entity", "resolve", "Ravi", "--db", db, columns=80).stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    for word in ("Ravi", "person", "billing", "design"):
        assert word in out  # the other columns keep their place
    cells = re.findall(r"^\s+(\S+)", out, re.M)
    joined = "".join(cells)
    assert all(i in joined for i in ids)  # folded over lines, every character still there


def test_the_demo_echoes_commands_that_paste_back_and_keeps_keys_whole(tmp_path: Path) -> None:
    # a `memlane` first on PATH that records each argv, then runs the real one
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.jsonl"
    recorder = bin_dir / "memlane"
    recorder.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"os.execv({str(MEMLANE)!r}, [{str(MEMLANE)!r}, *sys.argv[1:]])\n"
    )
    recorder.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "80"}
    env |= {"MEMLANE_DB": str(tmp_path / "demo.db"), "MEMLANE_EMBEDDER": "fake"}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr
    ran = [json.loads(line) for line in log.read_text().splitlines()]
    assert max(len(line) for line in done.stdout.splitlines()) <= 80  # an 80-column log
    lines = done.stdout.replace(" \\\n  ", " ").splitlines()  # a long command is folded with a backslash
    shown = [shlex.split(line[2:]) for line in lines if line.startswith("$ ")]
    assert len(shown) > 10
    assert any(len(argv) > 3 and " " in argv[2] for argv in shown)  # a quoted argument survived
    for argv in shown:
        if argv[0] == "memlane":
            assert argv[1:] in ran, argv  # pasted back, it runs exactly what the demo ran
        else:
            assert argv[:2] == ["bash", "-c"] and shlex.split(argv[2])[0] == "memlane"
    listing = done.stdout[done.stdout.index("$ memlane list") :]
    for key in ("preferences.ui.font-size", "preferences.ui.theme"):
        assert re.search(rf"\s{re.escape(key)}\s", listing), key


# -- 6. error messages in command-line words -------------------------------------------------------

PYTHON_WORDS = re.compile(r"[A-Za-z_]\w*\(\)|\(Python|Python:|\('|=None|Memory\.|\(dict\)|, not (list|int|str|dict)\b")


def cli_words(line: str, *, allow: str = "") -> str:
    """``line`` after checking that it names no Python call, tuple or argument."""
    checked = line.replace(allow, "") if allow else line
    assert not PYTHON_WORDS.search(checked), line
    assert not re.search(r"(?<![\w-])[a-z]+(?:_[a-z]+)+\b", checked.split(": ", 1)[1]), line  # no keep_days
    return line


@pytest.fixture
def store(tmp_path: Path) -> str:
    db = str(tmp_path / "m.db")
    ok("set", "user/1", "k", "v", "--db", db)
    return db


def test_namespace_and_cursor_errors_speak_cli(store: str) -> None:
    assert "e.g. user/123" in cli_words(one_line_error(run("set", "", "k", "v", "--db", store), 2))
    line = cli_words(one_line_error(run("list", "--cursor", "nope", "--db", store), 2))
    assert "`memlane list`" in line and "--cursor" in line


def test_argument_names_become_the_command_options(store: str) -> None:
    assert cli_words(one_line_error(run("search", "q", "--candidate-k", "0", "--db", store), 2)).startswith(
        "Error: --candidate-k: "
    )
    assert cli_words(one_line_error(run("search", "q", "--prefix", "a//b", "--db", store), 2)).startswith(
        "Error: --prefix: "
    )
    line = cli_words(one_line_error(run("retention", "set", "user", "--db", store), 2))
    assert "--keep-versions, --keep-days" in line and "`memlane retention clear`" in line


def test_json_type_names_not_python_ones(store: str) -> None:
    line = cli_words(one_line_error(run("set", "user/1", "k", "v", "--metadata", "[1]", "--db", store), 2))
    assert line == "Error: metadata: must be a JSON object, not a list\n"
    added = run("claim", "add-many", "user/1", "-", "--db", store, input='{"text": 5}\n')
    cli_words(one_line_error(added, 2))


def test_query_errors_point_at_query_commands(store: str, tmp_path: Path) -> None:
    line = one_line_error(run("query", "SELECT nosuch(1)", "--db", store), 2)
    assert "`memlane query describe`" in cli_words(line, allow="nosuch()")  # the SQL function is the user's own
    assert "`memlane query describe`" in cli_words(
        one_line_error(run("query", "SELECT nope FROM items", "--db", store), 2)
    )
    assert "`memlane query saved`" in cli_words(one_line_error(run("query", "run", "nosuch", "--db", store), 1))
    capped = run("query", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
                 "--timeout-ms", "50", "--db", store)  # fmt: skip
    assert "raise --timeout-ms" in cli_words(one_line_error(capped, 2))
    old = tmp_path / "old.db"
    shutil.copy(store, old)
    with sqlite3.connect(old) as conn:
        conn.execute("DROP TABLE claims")  # a schema from before the facts layer
    line = cli_words(one_line_error(run("query", "SELECT * FROM claims_live", "--db", str(old)), 2))
    assert line.endswith("run `memlane migrate`\n")


def test_embedder_errors_say_what_to_type(store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line = cli_words(one_line_error(run("search", "q", "--embedder", "openai:m", "--db", store), 1))
    assert "`memlane reindex --embedder openai:m`" in line and "leave out --embedder" in line
    odd = tmp_path / "odd.db"
    shutil.copy(store, odd)
    with sqlite3.connect(odd) as conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE name = 'embedder'", (json.dumps({"name": "gone", "dimension": 3}),)
        )
    monkeypatch.delenv("MEMLANE_EMBEDDER")  # the store's own embedder, which cannot be loaded
    line = cli_words(one_line_error(run("search", "q", "--db", str(odd)), 1))
    assert "(--embedder none)" in line


def test_every_python_word_in_a_core_message_has_a_cli_rendering() -> None:
    """Each message the core raises, run through the CLI's translation, names no Python call or tuple.

    Messages about arguments only Python can pass are listed, with why, instead.
    """
    python_only = {
        "pass dimension=None to accept the model's size",  # OpenAIEmbedder(dimension=...)
        "embedder must be None, a name",  # memlane.open(embedder=<object>)
        "open it again with memlane.open()",  # a closed Memory object
        "memlane.Client needs httpx",  # the Python client
        "read_only= opens SQLite files",  # memlane.open(read_only=True)
    }
    found = []
    for path in sorted((ROOT / "src" / "memlane").rglob("*.py")):
        if path.name == "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if not (name.endswith(("Error", "Refused")) or name == "refuse"):
                continue
            text = " ".join(
                sub.value
                for arg in node.args
                for sub in ast.walk(arg)
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str)
            )
            rendered = cli._cli_words(text)
            if re.search(r"\w\(\)|Python|\('|=None|\(dict\)", rendered) and not any(p in text for p in python_only):
                found.append(f"{path.name}:{node.lineno}: {rendered}")
    # the one SQL function name left is the user's own (the function {name}() is not allowed)
    assert [f for f in found if "is not allowed in the query space" not in f] == []


# The commands that work on the database file itself, not on a memory: the only ones without --url.
ON_THE_FILE = {"serve", "mcp", "migrate", "reindex", "index"}


def test_every_command_on_a_memory_takes_url_and_token() -> None:
    """#37: a command that reads or writes a memory can work on a running service (through memlane.Client)."""
    for name, command in every_command():
        options = {p.name for p in command.params}
        if name in ON_THE_FILE:
            assert "url" not in options, name
        else:
            assert {"url", "token"} <= options, name


def test_every_operation_command_is_made_from_the_table() -> None:
    """A command named for an operation is made from its declaration: every parameter the wire carries is an
    argument or an option of it, except those the command fills from its own (a file, --valid-at...)."""
    from memlane.cli import commands, made

    assert set(made.MADE) >= {"put", "get", "search", "recall", "entity add", "fact context", "query sql"}
    for path, op_name in made.MADE.items():
        command = dict(every_command())[path]
        offered = {p.name for p in command.params}
        spec = operations.OPERATION[op_name]
        filled = {"time", "messages", "text", "claims", "params", "key", "chooser"}  # from the command's own options
        assert {p.name for p in spec.params()} - filled <= offered, path
    assert commands.PUT.args == ("namespace", "key", "value")


def test_a_tables_header_marks_lay_out_its_columns() -> None:
    """``=`` a name column (whole, folded only when nothing else can give), ``@`` a time (at least a date wide),
    ``>`` right-justified, ``!`` not wrapped, nothing: left-justified and wrapping."""
    from memlane.cli.base import _NAME, _table

    row = ("k", "2026-01-01", "1.0", "t", "1", "x")
    columns = _table(["=key", "@updated", ">score", "!type", "!>v", "text"], [row])
    laid = {c.header: (c.justify, c.no_wrap, c.overflow, c.min_width) for c in columns.columns}
    assert laid == {
        "key": ("left", True, "fold", _NAME),
        "updated": ("left", False, "ellipsis", 10),
        "score": ("right", False, "ellipsis", None),
        "type": ("left", True, "ellipsis", None),
        "v": ("right", True, "ellipsis", None),
        "text": ("left", False, "ellipsis", None),
    }
    assert [c._cells for c in columns.columns] == [[cell] for cell in row]


def test_serve_on_port_0_says_the_port_the_system_chose_and_answers_there(tmp_path: Path) -> None:
    with _serving(tmp_path, "--port", "0", "--workers", "1") as line:
        port = int(line.split("http://127.0.0.1:")[1].split()[0])
        assert port > 0
        assert _health(port).startswith(b"HTTP/1.1 200")
