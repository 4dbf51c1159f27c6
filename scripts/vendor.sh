#!/usr/bin/env bash
# Fetch the browser libraries runstate serves (GraphiQL and the React it runs on)
# from the npm registry at the versions pinned in src/runstate/web/static/vendor/SOURCES,
# copy the listed files with their licences into the package, and check each file
# against the checksum recorded there. Run at development time only: the files are
# checked in, so running runstate never needs the network.
set -euo pipefail
cd "$(dirname "$0")/.."
vendor=src/runstate/web/static/vendor
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

grep -v '^#' "$vendor/SOURCES" | while read -r package version source target sum; do
  [ -n "$package" ] || continue
  unpacked="$work/$package-$version"
  if [ ! -d "$unpacked" ]; then
    mkdir -p "$unpacked"
    tarball="$(cd "$work" && npm pack --silent "$package@$version" | tail -1)"
    tar xzf "$work/$tarball" -C "$unpacked"
  fi
  mkdir -p "$(dirname "$vendor/$target")"
  cp "$unpacked/$source" "$vendor/$target"
  echo "$sum  $vendor/$target" | sha256sum --check --quiet
done
echo "vendored files match $vendor/SOURCES"
