"""Data flows one way: the import contracts of ``make lint`` (pyproject.toml's
``[tool.importlinter]``) hold, checked in ``make test`` too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint_imports(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_import_contracts_hold() -> None:
    """Guards the layers (transport -> api -> resolvers -> schema -> services ->
    models and pubsub), GraphQL and HTTP kept out of everything below the
    resolvers, and the SDK apart from the server. Each contract was seen broken
    once with one import added against it."""
    result = lint_imports()
    assert result.returncode == 0, result.stdout
    assert "4 kept, 0 broken" in result.stdout


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
