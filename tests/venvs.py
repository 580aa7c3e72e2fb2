"""Fresh virtual environments holding exactly what ``pip install 'memlane[EXTRA]'`` installs.

Installing from the package index for every test run would cost minutes and need the network, so a fresh
environment is made from what this one already has: ``python -m venv`` (no pip, no site-packages of its own),
then memlane's requirements for the extra are resolved as pip does (``Requires-Dist`` with its markers and the
extras each requirement names, recursively) against the distributions installed here, and only those are linked
into the new environment, whole files and directories, never a module of a distribution outside the closure.
memlane itself is this checkout's ``src`` (a ``.pth``), with its metadata and a ``memlane`` script. A module an
extra's code or docs need but the extra does not declare is then missing there, as after a real ``pip install``.
``make install-check`` does the real thing (``MEMLANE_FRESH_VENVS=pip``, :func:`build_with_pip`): ``pip install``
of this checkout with each extra, from the package index, into a new venv; minutes, and the network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _installed() -> dict[str, metadata.Distribution]:
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        found.setdefault(canonicalize_name(dist.metadata["Name"]), dist)
    return found


def closure(extras: Iterable[str], installed: dict[str, metadata.Distribution]) -> set[str]:
    """The distributions ``pip install 'memlane[extras]'`` brings (memlane excluded), by canonical name."""
    wanted: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [("memlane", frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, chosen = todo.pop()
        if (name, chosen) in seen:
            continue
        seen.add((name, chosen))
        dist = installed.get(name)
        if dist is None:
            raise LookupError(f"{name} is required but not installed in this environment")
        for line in _memlane_requires() if name == "memlane" else dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not any(
                req.marker.evaluate({**default_environment(), "extra": extra}) for extra in (chosen or {""})
            ):
                continue
            dep = canonicalize_name(req.name)
            if dep != "memlane":
                wanted.add(dep)
            todo.append((dep, frozenset(req.extras) | (chosen if dep == "memlane" else frozenset())))
    return wanted


def _memlane_requires() -> list[str]:
    """memlane's ``Requires-Dist`` as this checkout's pyproject.toml declares them (the installed metadata may be
    older than the file)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra, requires in project.get("optional-dependencies", {}).items():
        for req in requires:
            spec, _, marker = req.partition(";")
            lines.append(f'{spec}; ({marker}) and extra == "{extra}"' if marker else f'{spec}; extra == "{extra}"')
    return lines


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def build(extra: str, venv: Path) -> Path:
    """A fresh venv at ``venv`` as after ``pip install 'memlane[extra]'`` (``""``: plain ``memlane``); its bin."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = _site_packages(venv)
    installed = _installed()
    keep = closure([extra] if extra else [], installed)
    here = Path(metadata.distribution("memlane").locate_file("")).resolve()
    owners: dict[tuple[str, ...], set[str]] = {}  # a path under site-packages, and who installed it
    for name, dist in installed.items():
        if name == "memlane":
            continue
        for file in dist.files or ():
            parts = Path(file).parts
            if parts and parts[0] != "..":
                for depth in range(1, len(parts) + 1):
                    owners.setdefault(parts[:depth], set()).add(name)
    _link(here, site, (), owners, keep)
    (site / "memlane-checkout.pth").write_text(str(ROOT / "src") + "\n")
    info = Path(metadata.distribution("memlane")._path)  # type: ignore[attr-defined]
    shutil.copytree(info, site / info.name)
    script = venv / "bin" / "memlane"
    # as pip writes it: `memlane serve --workers N` starts processes that import the main module again
    script.write_text(
        f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom memlane.cli import main\n"
        "if __name__ == '__main__':\n    sys.exit(main())\n"
    )
    script.chmod(0o755)
    return venv / "bin"


def build_with_pip(extra: str, venv: Path) -> Path:
    """A fresh venv at ``venv`` with ``pip install 'CHECKOUT[extra]'`` from the package index; its bin."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    target = f"{ROOT}[{extra}]" if extra else str(ROOT)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", target], check=True)
    return venv / "bin"


def _link(
    source: Path, target: Path, at: tuple[str, ...], owners: dict[tuple[str, ...], set[str]], keep: set[str]
) -> None:
    """Links the entries under ``source/at`` that only kept distributions own; splits a shared directory."""
    for entry in sorted({path[len(at)] for path in owners if len(path) > len(at) and path[: len(at)] == at}):
        path = (*at, entry)
        who = owners[path]
        if not who & keep:
            continue
        src = source.joinpath(*path)
        if who <= keep:
            if src.exists():
                os.symlink(src, target.joinpath(*path))
        elif src.is_dir():
            target.joinpath(*path).mkdir()
            _link(source, target, path, owners, keep)
