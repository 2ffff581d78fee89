#!/usr/bin/env bash
# Downloads the pinned google.golang.org/api module (pin: go.mod beside this script) into the Go
# module cache and prints its directory: the discovery documents tests/standins/gcp_schema.py reads
# (container/v1beta1/container-api.json, compute/v1/compute-api.json, ...).
# Idempotent: a module already in the cache is not downloaded again. One module only, no build.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(awk '$1 == "require" && $2 == "google.golang.org/api" { print $3 }' "$here/go.mod")"
if [ -z "$version" ]; then
    echo "fetch.sh: no google.golang.org/api pin in $here/go.mod" >&2
    exit 1
fi
cd "$here"
GOFLAGS=-mod=mod go mod download -json "google.golang.org/api@$version" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
