#!/usr/bin/env bash
# `prefetch.sh`: fills the Go module cache with every module the Go builds need, all at once, so
# that the downloads (network-bound) overlap the compiles (CPU-bound) instead of preceding each one.
#
# `make test` starts it in the background before the builds; each build's own `go build` then
# finds its modules in the cache, or waits on the cache's lock for one still coming (the go
# command locks each module while it extracts it). `go list -e -deps` downloads exactly the modules
# that provide the packages a binary is built from (Go 1.17+ module graph pruning); nothing is
# compiled. The wrapper modules' committed go.sum files hold every sum it needs (Helm's command's
# too), so it writes nothing outside the module cache. Harmless to run at any time, or twice.
#
# Keep in step with the packages tools/engine/build.sh and tools/controlplane/build.sh build
# (tests/test_ci_phases.py checks that each one is here).
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
export GOFLAGS="${GOFLAGS:--mod=mod}"
export GOTOOLCHAIN=local

# <wrapper module folder, under tools/>  <packages>
PACKAGES=(
    "engine/pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
    "engine/kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes helm.sh/helm/v3/cmd/helm"
    "registry ."
    "controlplane/kubernetes k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl"
    "controlplane/etcd go.etcd.io/etcd/server/v3/etcdmain"
    "controlplane/kwok sigs.k8s.io/kwok/cmd/kwok"
    "controlplane/kueue sigs.k8s.io/kueue/cmd/kueue"
    "controlplane/jobset sigs.k8s.io/jobset"
    "controlplane/lws sigs.k8s.io/lws/cmd"
    "controlplane/cyclonus github.com/mattfenwick/cyclonus/cmd/cyclonus"
)

started=$(date +%s)
pids=()
for entry in "${PACKAGES[@]}"; do
    read -r dir packages <<< "$entry"
    # -e: a main package whose embedded files the build generates (the provider's schema) still
    # lists its imports; the build itself reports real errors.
    # shellcheck disable=SC2086
    (cd "$here/$dir" && go list -e -deps $packages > /dev/null) &
    pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
    wait "$pid" || failed=$((failed + 1))
done
echo "prefetch: modules for ${#PACKAGES[@]} wrapper modules in $(($(date +%s) - started)) s ($failed failed: the builds will say why)" >&2
exit 0
