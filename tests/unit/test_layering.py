"""Data flows one way: the import contracts of ``make lint`` (pyproject.toml's
``[tool.importlinter]``) hold, checked in ``make test`` too, and they name every
room, so an import planted against the layering in a copy of the tree fails them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint_imports(
    *arguments: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_the_import_contracts_hold() -> None:
    """Guards the rooms' layers (cli -> app -> transport -> ... -> models -> basics),
    no import circle inside any room, GraphQL and HTTP kept out of everything below
    the resolvers, and the SDK, its integrations and the demo apart from the server.
    Each contract was seen broken once with one import added against it (the
    planted violations below)."""
    result = lint_imports()
    assert result.returncode == 0, result.stdout
    assert "6 kept, 0 broken" in result.stdout


def test_a_broken_contract_is_reported(tmp_path: Path) -> None:
    """Control: a contract the code does break (the resolvers do import strawberry)
    is reported, with the import that breaks it."""
    config = tmp_path / "broken.ini"
    config.write_text(
        "[importlinter]\nroot_package = runstate\ninclude_external_packages = True\n\n"
        "[importlinter:contract:resolvers]\nname = resolvers without strawberry\n"
        "type = forbidden\nsource_modules = runstate.resolvers\nforbidden_modules = strawberry\n"
    )
    result = lint_imports("--config", str(config))
    assert result.returncode == 1
    assert "runstate.resolvers.mutations -> strawberry" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        # A services module reaching a transport room (a loose module before).
        (
            "services/domain/quota.py",
            "runstate.transport.connections",
            "Data flows one way through the server's rooms BROKEN",
        ),
        # A circle inside one room: the group commit importing the house that holds it.
        (
            "services/write/group_commit.py",
            "runstate.services.write.house",
            "Nothing imports in a circle, not even inside one room BROKEN",
        ),
        # The demo reaching the app instead of being handed a URL.
        (
            "demo/trips.py",
            "runstate.app",
            "The SDK, its integrations and the demo stand apart from the server BROKEN",
        ),
    ],
)
def test_a_planted_import_breaks_the_contracts(
    tmp_path: Path, module: str, planted: str, broken: str
) -> None:
    """The real contracts, on a copy of the tree with one import planted against
    them: ``make lint`` fails, naming the contract the import breaks."""
    shutil.copytree(ROOT / "src", tmp_path / "src")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "src" / "runstate" / module
    target.write_text(target.read_text() + f"\nimport {planted}  # noqa: E402\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    result = lint_imports(cwd=tmp_path, env=env)
    assert result.returncode == 1, result.stdout
    assert broken in result.stdout


PACKAGE = ROOT / "src" / "runstate"


def names(root: Path) -> list[str]:
    """Every module and package name under ``root`` (migrations and data aside)."""
    found = []
    for path in root.rglob("*"):
        if "migrations" in path.parts or "__pycache__" in path.parts or "static" in path.parts:
            continue
        if path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
            found.append(path.stem)
        elif path.is_dir() and (path / "__init__.py").exists():
            found.append(path.name)
    return found


def test_every_module_is_in_a_room_with_a_name_of_its_own() -> None:
    """Guards the placement: five files at the top of the package, rooms only in
    ``services``, and no module or room name used twice (``api.py`` beside
    ``client/api.py`` once made a reader open both)."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "app.py", "cli.py", "settings.py"]
    assert sorted(p.name for p in (PACKAGE / "services").glob("*.py")) == ["__init__.py"]
    every = names(PACKAGE)
    assert sorted({n for n in every if every.count(n) > 1}) == []


def test_a_repeated_name_is_found(tmp_path: Path) -> None:
    """Control: a module named as a room elsewhere is found."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "a" / "b.py").write_text("")
    every = names(tmp_path)
    assert sorted({n for n in every if every.count(n) > 1}) == ["b"]
