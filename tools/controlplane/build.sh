#!/usr/bin/env bash
# `make controlplane`: a real local Kubernetes control plane for the tests, built from pinned Go modules.
#
# Puts into $TPU_SLICING_CONTROLPLANE (default ~/.cache/tpu-slicing/controlplane, outside the repository):
#   bin/kube-apiserver, bin/kube-controller-manager, bin/kube-scheduler, bin/kubectl
#                                           k8s.io/kubernetes (pin: kubernetes/go.mod), the minor GKE runs
#                                           for the program's cluster versions (1.36.x); kubectl is what
#                                           the inference-CRD Command runs (a kubectl already on PATH at
#                                           exactly this version is linked instead of built)
#   bin/etcd                                go.etcd.io/etcd/server/v3 (pin: etcd/go.mod), the version that
#                                           Kubernetes tag is tested with (its build/dependencies.yaml)
#   bin/kwok                                sigs.k8s.io/kwok (pin: kwok/go.mod): simulated nodes and pods
#   share/kwok-stages/*.yaml                kwok's own "fast" Stages (node init, heartbeat with lease,
#                                           pod ready/complete/delete), copied from its module download;
#                                           kwok v0.6+ does nothing to nodes or pods without Stages
#   bin/cyclonus                            github.com/mattfenwick/cyclonus (pin: cyclonus/go.mod): an
#                                           offline NetworkPolicy matcher that judges the program's policies
#   bin/kueue, bin/jobset, bin/lws          sigs.k8s.io/kueue, sigs.k8s.io/jobset, sigs.k8s.io/lws (pins:
#                                           kueue/, jobset/, lws/ go.mod), the controllers the program
#                                           installs; their tags must equal settings/model.py Versions
#                                           (the chart versions are the module tags), checked here
# The tests read everything else they need of these controllers (their charts, Kueue's CRDs) from the
# same module downloads in the Go module cache (tests/charts.py), as test data.
# Idempotent: a binary whose recorded pin matches is kept.
#
# Only the pins (go.mod, go.sum) and this script are committed; the module downloads live in the
# Go module cache, the build tree and binaries in the cache folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${TPU_SLICING_CONTROLPLANE:-$HOME/.cache/tpu-slicing/controlplane}"
bin="$cache/bin"
mkdir -p "$bin" "$cache/stamps" "$cache/src" "$cache/share"
export GOFLAGS="${GOFLAGS:--mod=mod}"
export GOTOOLCHAIN=local
# The compiler and linker collect garbage only near 3 GiB of heap: the same binaries (cmp) from
# about a third less CPU (sigs.k8s.io/jobset from an empty build cache: 221 s user at the default
# GOGC=100, 153 s with GOGC off). Without the limit one compile of the engine grew to 5.4 GiB.
export GOGC=off GOMEMLIMIT=3GiB

say() { printf 'controlplane: %s\n' "$*" >&2; }
module_version() { (cd "$here/$1" && go list -m -f '{{.Version}}' "$2"); }
# `go mod download` (not `go list -m`) so that an empty module cache is filled first.
module_dir() {
    (cd "$here/$1" && go mod download -json "$2" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
}
stamp_ok() { [ -x "$bin/$1" ] && [ -f "$cache/stamps/$1" ] && [ "$(cat "$cache/stamps/$1")" = "$2" ]; }
built=()

started=$(date +%s)

# --- kube-apiserver, kube-controller-manager and kube-scheduler --------------------------------
k8s="$(module_version kubernetes k8s.io/kubernetes)"
# The version the binaries report (/version, `--version`): hack/lib/version.sh sets these through
# -X on k8s.io/component-base/version; without them the apiserver says v0.0.0-master, which
# clients that compare versions refuse. gitCommit is the commit of the tag (kubernetes/kubernetes).
k8s_major="${k8s#v}" && k8s_major="${k8s_major%%.*}"
k8s_minor="${k8s#v*.}" && k8s_minor="${k8s_minor%%.*}"
k8s_pkg=k8s.io/component-base/version
k8s_ldflags="-s -w -X $k8s_pkg.gitVersion=$k8s -X $k8s_pkg.gitMajor=$k8s_major -X $k8s_pkg.gitMinor=$k8s_minor"
k8s_ldflags+=" -X $k8s_pkg.gitTreeState=clean -X $k8s_pkg.buildDate=1970-01-01T00:00:00Z"
stale=()
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    if stamp_ok "$cmd" "$k8s stripped"; then
        say "$cmd $k8s is in place"
        continue
    fi
    on_path="$(command -v "$cmd" || true)"
    if [ -n "$on_path" ] && [ "$on_path" != "$bin/$cmd" ] \
        && "$on_path" version --client -o json 2>/dev/null | grep -q "\"gitVersion\": \"$k8s\""; then
        say "$cmd $k8s found at $on_path"
        ln -sf "$on_path" "$bin/$cmd" && echo "$k8s stripped" > "$cache/stamps/$cmd"
        continue
    fi
    stale+=("$cmd")
done
if [ "${#stale[@]}" -gt 0 ]; then
    # One `go build` for all of them: it loads and checks the shared package graph once and links
    # the binaries side by side, where one build per command did both four times, one link at a time.
    say "building ${stale[*]} $k8s"
    t=$(date +%s)
    out="$cache/src/kubernetes-bin"
    rm -rf "$out" && mkdir -p "$out"
    (cd "$here/kubernetes" && go build -trimpath -ldflags "$k8s_ldflags" -o "$out/" "${stale[@]/#/k8s.io/kubernetes/cmd/}")
    for cmd in "${stale[@]}"; do
        mv -f "$out/$cmd" "$bin/$cmd" && echo "$k8s stripped" > "$cache/stamps/$cmd"
    done
    built+=("${stale[*]} $k8s in $(($(date +%s) - t)) s")
fi

# --- etcd --------------------------------------------------------------------------------------
etcd="$(module_version etcd go.etcd.io/etcd/server/v3)"
if stamp_ok etcd "$etcd stripped"; then
    say "etcd $etcd is in place"
else
    say "building etcd $etcd"
    t=$(date +%s)
    work="$cache/src/etcd"
    rm -rf "$work" && mkdir -p "$work"
    cp "$here/etcd/go.mod" "$here/etcd/go.sum" "$work/"
    # The root module's main.go (go.etcd.io/etcd/v3, not served by the proxy) is this call.
    cat > "$work/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    sed -i 's#^module .*#module tpu-slicing.local/controlplane/etcd-build#' "$work/go.mod"
    (cd "$work" && go build -trimpath \
        -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=tpu-slicing-$etcd" \
        -o "$bin/etcd" .)
    echo "$etcd stripped" > "$cache/stamps/etcd"
    built+=("etcd $etcd in $(($(date +%s) - t)) s")
fi

# --- kwok --------------------------------------------------------------------------------------
kwok="$(module_version kwok sigs.k8s.io/kwok)"
kwok_dir="$(module_dir kwok sigs.k8s.io/kwok)"
[ -d "$kwok_dir" ] || { say "could not download the kwok module"; exit 1; }
if stamp_ok kwok "$kwok stripped"; then
    say "kwok $kwok is in place"
else
    say "building kwok $kwok"
    t=$(date +%s)
    # hack/releases.sh sets consts.Version (and KubeVersion, the Kubernetes it is released against).
    (cd "$here/kwok" && go build -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${k8s#v}" \
        -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok)
    echo "$kwok stripped" > "$cache/stamps/kwok"
    built+=("kwok $kwok in $(($(date +%s) - t)) s")
fi
# kwok's "fast" Stage set (kustomize/stage/fast/kustomization.yaml lists these three folders).
stages="$cache/share/kwok-stages"
if [ "$(cat "$cache/stamps/kwok-stages" 2>/dev/null)" != "$kwok" ]; then
    rm -rf "$stages" && mkdir -p "$stages"
    for file in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
        pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
        install -m 0644 "$kwok_dir/kustomize/stage/$file" "$stages/$(basename "$file")"
    done
    echo "$kwok" > "$cache/stamps/kwok-stages"
fi

# --- Kueue, JobSet and LWS -----------------------------------------------------------------------
# One place for their versions: settings/model.py Versions (the program's Helm charts). The wrapper
# modules pin the same tags; a mismatch stops the build instead of testing other controllers.
settings_version() {
    sed -n "s/^ *$1: ChartVersion = \"v\{0,1\}\([^\"]*\)\".*/v\1/p" "$here/../../settings/model.py"
}
controllers=""
for spec in kueue:sigs.k8s.io/kueue:sigs.k8s.io/kueue/cmd/kueue \
    jobset:sigs.k8s.io/jobset:sigs.k8s.io/jobset lws:sigs.k8s.io/lws:sigs.k8s.io/lws/cmd; do
    IFS=: read -r name module main <<< "$spec"
    version="$(module_version "$name" "$module")"
    wanted="$(settings_version "$name")"
    if [ "$version" != "$wanted" ]; then
        say "$name: tools/controlplane/$name/go.mod pins $module $version, settings/model.py Versions.$name is $wanted;" \
            "update the wrapper module (cd tools/controlplane/$name && go get $main@$wanted && go mod tidy)"
        exit 1
    fi
    controllers+=" $name $version,"
    if stamp_ok "$name" "$version stripped"; then
        say "$name $version is in place"
        continue
    fi
    say "building $name $version"
    t=$(date +%s)
    # Each release's Makefile sets its pkg/version.GitVersion through -X (the controller logs it).
    (cd "$here/$name" && go build -trimpath \
        -ldflags "-s -w -X $module/pkg/version.GitVersion=$version" -o "$bin/$name" "$main")
    echo "$version stripped" > "$cache/stamps/$name"
    built+=("$name $version in $(($(date +%s) - t)) s")
done
# --- cyclonus ------------------------------------------------------------------------------------
# An upstream NetworkPolicy matcher that evaluates traffic offline (`analyze --mode query-traffic`):
# tests/test_network_flows.py judges the program's policies with it. sigs.k8s.io/network-policy-api's
# policy-assistant, its successor, is not served by the module proxy; cyclonus v0.5.6 is.
cyclonus="$(module_version cyclonus github.com/mattfenwick/cyclonus)"
if stamp_ok cyclonus "$cyclonus stripped"; then
    say "cyclonus $cyclonus is in place"
else
    say "building cyclonus $cyclonus"
    t=$(date +%s)
    # Its Makefile's release build sets pkg/cli.version (pkg/cli/version.go).
    (cd "$here/cyclonus" && go build -trimpath \
        -ldflags "-s -w -X github.com/mattfenwick/cyclonus/pkg/cli.version=$cyclonus" \
        -o "$bin/cyclonus" github.com/mattfenwick/cyclonus/cmd/cyclonus)
    echo "$cyclonus stripped" > "$cache/stamps/cyclonus"
    built+=("cyclonus $cyclonus in $(($(date +%s) - t)) s")
fi
for line in "${built[@]+"${built[@]}"}"; do say "built $line"; done
say "ready in $(($(date +%s) - started)) s: kube-apiserver/kube-controller-manager/kube-scheduler/kubectl $k8s, etcd $etcd, kwok $kwok,${controllers%,}, cyclonus $cyclonus in $bin"
# Disk only after a build: measuring the shared Go caches takes seconds.
if [ "${#built[@]}" -gt 0 ]; then
    say "disk: binaries $(du -sh "$bin" | cut -f1); Go module cache $(du -sh "$(go env GOMODCACHE)" | cut -f1)," \
        "Go build cache $(du -sh "$(go env GOCACHE)" | cut -f1) (both shared with every Go build on this machine)"
fi
