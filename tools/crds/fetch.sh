#!/usr/bin/env bash
# `make crds`: the upstream CRDs the tests use, from the Go module of the component that ships each
# one, at the version pins.tsv names, checked against its sha256 there. Lays them out as
# <component>/<version>/<file> under $TPU_SLICING_CRD_CACHE (default ~/.cache/tpu-slicing/crds),
# outside the repository, where tests/crd_schema.py crd_root() finds them.
# Idempotent: a file already in place with its pinned sha256 is kept; nothing is built.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${TPU_SLICING_CRD_CACHE:-$HOME/.cache/tpu-slicing/crds}"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
declare -A dirs=()
placed=0 kept=0
while IFS=$'\t' read -r component version module path sum; do
    case "$component" in '#'* | '') continue ;; esac
    target="$out/$component/$version/$(basename "$path")"
    if [ -f "$target" ] && [ "$(sha256sum "$target" | cut -d' ' -f1)" = "$sum" ]; then
        kept=$((kept + 1))
        continue
    fi
    key="$module@$version"
    if [ -z "${dirs[$key]:-}" ]; then
        # Outside any module: `go mod download` checks the zip against the checksum database.
        dirs[$key]="$(cd / && go mod download -json "$key" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
    fi
    source="${dirs[$key]}/$path"
    got="$(sha256sum "$source" | cut -d' ' -f1)"
    if [ "$got" != "$sum" ]; then
        echo "crds: $key $path has sha256 $got, pins.tsv says $sum" >&2
        exit 1
    fi
    mkdir -p "$(dirname "$target")"
    install -m 0644 "$source" "$target.tmp" && mv "$target.tmp" "$target"
    placed=$((placed + 1))
done < "$here/pins.tsv"
echo "crds: $placed placed, $kept already in place, in $out" >&2
