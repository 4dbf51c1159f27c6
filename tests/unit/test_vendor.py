"""The browser libraries in ``web/static/vendor`` are exactly the npm files pinned in
its SOURCES (``scripts/vendor.sh`` fetches them), each package with its licence.
Guards against a vendored file edited by hand or left out of SOURCES."""

from __future__ import annotations

import hashlib
from pathlib import Path

VENDOR = Path(__file__).parents[2] / "src" / "runstate" / "web" / "static" / "vendor"


def pinned() -> dict[str, tuple[str, str, str]]:
    """File in the package -> (npm package, version, sha256), from SOURCES."""
    rows = {}
    for line in (VENDOR / "SOURCES").read_text().splitlines():
        if line and not line.startswith("#"):
            package, version, _source, target, digest = line.split()
            rows[target] = (package, version, digest)
    return rows


def test_every_vendored_file_is_the_pinned_npm_file() -> None:
    rows = pinned()
    on_disk = {str(path.relative_to(VENDOR)) for path in VENDOR.rglob("*") if path.is_file()} - {
        "SOURCES"
    }
    assert on_disk == set(rows)
    for target, (_, _, digest) in rows.items():
        assert hashlib.sha256((VENDOR / target).read_bytes()).hexdigest() == digest, target


def test_every_vendored_package_carries_its_licence() -> None:
    packages = {(package, version) for package, version, _ in pinned().values()}
    for package, version in packages:
        assert (VENDOR / f"{package}-{version}" / "LICENSE").is_file(), package
