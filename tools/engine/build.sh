#!/usr/bin/env bash
# `make engine`: the real Pulumi toolchain the real-engine tests run, built from pinned Go modules.
#
# Puts into $TPU_SLICING_ENGINE (default ~/.cache/tpu-slicing/engine, outside the repository):
#   bin/pulumi                      the CLI, github.com/pulumi/pulumi/pkg/v3 (pin: pulumi/go.mod)
#   bin/pulumi-resource-kubernetes  the Kubernetes provider (pin: kubernetes/go.mod)
#   bin/helm                        Helm, helm.sh/helm/v3 at the version that provider embeds (the
#                                   tests render the controllers' charts with it, as the provider would)
#   bin/pulumi-escconfig            the CLI's ESC evaluator and config merge (pulumi/escconfig): the
#                                   oracle of the offline plan's ESC merge
#   bin/chart-registry              an in-memory OCI registry on loopback, over TLS (github.com/google/
#                                   go-containerregistry pkg/registry; pin: ../registry/go.mod): the
#                                   controllers' chart mirror of tests/chart_mirror.py
# Idempotent: a binary whose recorded pin matches is kept. A `pulumi` already on PATH is used
# instead of building one when it is at least the version the Python SDK pins.
#
# Only the pins (go.mod, go.sum) and this script are committed; the module downloads live in the
# Go module cache, the build tree and binaries in the cache folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${TPU_SLICING_ENGINE:-$HOME/.cache/tpu-slicing/engine}"
bin="$cache/bin"
mkdir -p "$bin" "$cache/stamps" "$cache/src"
export GOFLAGS="${GOFLAGS:--mod=mod}"
export GOTOOLCHAIN=local
# The compiler and linker collect garbage only near 3 GiB of heap: the same binaries (cmp) from
# about a third less CPU (sigs.k8s.io/jobset from an empty build cache: 221 s user at the default
# GOGC=100, 153 s with GOGC off). Without the limit one compile of the engine grew to 5.4 GiB.
export GOGC=off GOMEMLIMIT=3GiB

say() { printf 'engine: %s\n' "$*" >&2; }
module_version() { (cd "$here/$1" && go list -m -f '{{.Version}}' "$2"); }
stamp_ok() { [ -x "$bin/$1" ] && [ -f "$cache/stamps/$1" ] && [ "$(cat "$cache/stamps/$1")" = "$2" ]; }
# The Python SDK's pinned version is the floor for the CLI (requirements.txt).
sdk_pin="$(sed -n 's/^pulumi==\([0-9.]*\).*/\1/p' "$root/requirements.txt")"

version_at_least() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

started=$(date +%s)

# --- the pulumi CLI --------------------------------------------------------------------------
cli_version="$(module_version pulumi github.com/pulumi/pulumi/pkg/v3)"
ambient="$(command -v pulumi || true)"
if [ -n "$ambient" ] && [ "$ambient" != "$bin/pulumi" ]; then
    have="$("$ambient" version 2>/dev/null | sed 's/^v//')"
    if [ -n "$have" ] && version_at_least "$have" "$sdk_pin"; then
        say "using pulumi v$have from PATH ($ambient): at least the SDK's $sdk_pin"
        ln -sf "$ambient" "$bin/pulumi"
        echo "ambient $have" > "$cache/stamps/pulumi"
    fi
fi
if stamp_ok pulumi "$cli_version stripped" || grep -q '^ambient' "$cache/stamps/pulumi" 2>/dev/null; then
    say "pulumi $(cat "$cache/stamps/pulumi") is in place"
else
    say "building pulumi $cli_version (the SDK pins $sdk_pin; the proxy's nearest at or above it)"
    (cd "$here/pulumi" && go build -trimpath \
        -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$cli_version" \
        -o "$bin/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
    echo "$cli_version stripped" > "$cache/stamps/pulumi"
fi

# --- the Kubernetes provider -----------------------------------------------------------------
# The proxy serves the provider module at one pseudo-version only; kubernetes/RELEASE records the
# release tag of its commit (`git tag --points-at <commit>` in pulumi/pulumi-kubernetes). The
# Python SDK asks the engine for the plugin version it is (requirements.txt), so that pin must be
# this release: then the provider the tests run is the one a user's `pulumi up` downloads.
k8s_plugin_version="$(sed -n 's/^pulumi-kubernetes==\([0-9.]*\).*/\1/p' "$root/requirements.txt")"
k8s_module="$(module_version kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4)"
read -r k8s_release k8s_commit < "$here/kubernetes/RELEASE"
if [ "${k8s_module##*-}" != "${k8s_commit:0:12}" ] || [ "v$k8s_plugin_version" != "$k8s_release" ]; then
    say "the provider module $k8s_module, its release $k8s_release ($k8s_commit, tools/engine/kubernetes/RELEASE)" \
        "and requirements.txt's pulumi-kubernetes==$k8s_plugin_version must name one release"
    exit 1
fi
if stamp_ok pulumi-resource-kubernetes "$k8s_module as $k8s_plugin_version stripped"; then
    say "pulumi-resource-kubernetes $k8s_module is in place"
else
    say "building pulumi-resource-kubernetes $k8s_module (installed as plugin $k8s_plugin_version)"
    # `go mod download` (not `go list -m`) so that an empty module cache is filled first.
    moddir="$(cd "$here/kubernetes" && go mod download -json github.com/pulumi/pulumi-kubernetes/provider/v4 |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
    [ -d "$moddir" ] || { say "could not download the provider module"; exit 1; }
    work="$cache/src/kubernetes"
    rm -rf "$work" && mkdir -p "$work"
    cp "$here/kubernetes/go.mod" "$here/kubernetes/go.sum" "$work/"
    cp "$moddir/cmd/pulumi-resource-kubernetes/main.go" "$work/"
    # The provider's release build runs its generate.go first: the schema with the version set,
    # both JSON files compacted, embedded by main.go (cmd/pulumi-resource-kubernetes/generate.go).
    python3 - "$moddir/cmd/pulumi-resource-kubernetes" "$work" "$k8s_plugin_version" <<'PY'
import json, pathlib, sys
src, out, version = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
schema = json.loads((src / "schema.json").read_text())
schema["version"] = version
(out / "schema-embed.json").write_text(json.dumps(schema, separators=(",", ":")))
mapping = json.loads((src / "terraform-mapping.json").read_text())
(out / "terraform-mapping-embed.json").write_text(json.dumps(mapping, separators=(",", ":")))
PY
    sed -i 's#^module .*#module tpu-slicing.local/engine/kubernetes-build#; /^tool /d' "$work/go.mod"
    (cd "$work" && go build -trimpath \
        -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$k8s_plugin_version" \
        -o "$bin/pulumi-resource-kubernetes" .)
    echo "$k8s_module as $k8s_plugin_version stripped" > "$cache/stamps/pulumi-resource-kubernetes"
fi

# --- Helm ------------------------------------------------------------------------------------
# The Helm the provider's helm.v3.Release links (its go.mod's helm.sh/helm/v3), so the charts the
# tests render are rendered by the code that renders them on `pulumi up`. Helm's go.mod has no
# replace directives; it builds inside a copy of the provider's module graph, sharing its build cache.
helm_version="$(module_version kubernetes helm.sh/helm/v3)"
if stamp_ok helm "$helm_version stripped"; then
    say "helm $helm_version is in place"
else
    say "building helm $helm_version"
    work="$cache/src/helm"
    rm -rf "$work" && mkdir -p "$work"
    cp "$here/kubernetes/go.mod" "$here/kubernetes/go.sum" "$work/"
    sed -i 's#^module .*#module tpu-slicing.local/engine/helm-build#; /^tool /d' "$work/go.mod"
    # As helm's Makefile sets them: its version, and the Kubernetes version `helm template` assumes
    # (from the client-go it links: v0.M.N is Kubernetes 1.M).
    client_go="$(cd "$work" && go list -m -f '{{.Version}}' k8s.io/client-go)"
    minor="$(echo "$client_go" | cut -d. -f2)"
    (cd "$work" && go build -trimpath \
        -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version \
            -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor \
            -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor" \
        -o "$bin/helm" helm.sh/helm/v3/cmd/helm)
    echo "$helm_version stripped" > "$cache/stamps/helm"
fi

# --- the chart registry ----------------------------------------------------------------------
# tools/registry: a small main around go-containerregistry's registry (no replace directives in its
# go.mod), which tests/chart_mirror.py fills with the controllers' charts as their releases package them.
# Its main is committed here, not a module download, so the stamp holds a digest of its sources too.
registry_version="$(module_version ../registry github.com/google/go-containerregistry)"
registry_sources="$(cd "$here/../registry" && cat go.mod go.sum main.go | sha256sum | cut -c1-16)"
if stamp_ok chart-registry "$registry_version $registry_sources stripped"; then
    say "chart-registry (go-containerregistry $registry_version) is in place"
else
    say "building chart-registry (go-containerregistry $registry_version)"
    (cd "$here/../registry" && go build -trimpath -ldflags "-s -w" -o "$bin/chart-registry" .)
    echo "$registry_version $registry_sources stripped" > "$cache/stamps/chart-registry"
fi

# --- the ESC configuration oracle --------------------------------------------------------------
# tools/engine/pulumi/escconfig: the pinned CLI's own ESC evaluator and config merge around a main
# (tests/test_esc_environment.py judges settings/esc_environment.py by it). It shares the CLI's
# module, so its packages come out of the build cache the CLI's build filled: only its link is new.
esc_sources="$(cd "$here/pulumi" && cat go.mod go.sum escconfig/main.go | sha256sum | cut -c1-16)"
if stamp_ok pulumi-escconfig "$cli_version $esc_sources stripped"; then
    say "pulumi-escconfig (pulumi $cli_version) is in place"
else
    say "building pulumi-escconfig (pulumi $cli_version)"
    (cd "$here/pulumi" && go build -trimpath -ldflags "-s -w" -o "$bin/pulumi-escconfig" ./escconfig)
    echo "$cli_version $esc_sources stripped" > "$cache/stamps/pulumi-escconfig"
fi

say "ready in $(($(date +%s) - started)) s: $("$bin/pulumi" version) pulumi-resource-kubernetes $k8s_module and helm $helm_version in $bin ($(du -sh "$cache" | cut -f1))"
