#!/usr/bin/env bash
# Write constraints.txt: every package the container image installs (Dockerfile), at
# the version a fresh venv resolves today, and the setuptools that builds runstate
# ([build-system] in pyproject.toml). The Dockerfile installs with it, so that an
# image built next month holds what was tested. Run after changing the dependencies
# in pyproject.toml (`make constraints`), with the Python the Dockerfile's image has
# (same minor version); tests/integration/test_container.py checks the file pins
# exactly what the install needs.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The project as the Dockerfile copies it, so no build/ of a working tree goes in.
mkdir "$work/project"
cp -r pyproject.toml README.md src "$work/project/"
"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check --quiet)
"${pip[@]}" install "$work/project"
build="$("$python" -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"])')"
"${pip[@]}" install --target "$work/build" $build

{
  echo "# What the container image installs, pinned (scripts/constraints.sh wrote it;"
  echo "# run \`make constraints\` after changing pyproject.toml's dependencies)."
  echo "# Python $("$work/venv/bin/python" -c 'import platform; print(platform.python_version())')"
  "$work/venv/bin/python" -m pip freeze --exclude runstate
  echo "# Building runstate (pyproject.toml's [build-system]): the Dockerfile sets"
  echo "# PIP_CONSTRAINT, which pip's build environment reads too."
  "$work/venv/bin/python" -m pip freeze --all --path "$work/build"
} > constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) packages pinned"
