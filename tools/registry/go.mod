// Wrapper module for bin/chart-registry (tools/engine/build.sh): go-containerregistry's in-memory
// OCI registry served over TLS on loopback, the mirror tests/chart_mirror.py pushes the controllers'
// Helm charts to. go-containerregistry's go.mod has no replace directives.
module tpu-slicing.local/registry

go 1.25.0

require github.com/google/go-containerregistry v0.22.1
