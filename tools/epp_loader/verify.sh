#!/usr/bin/env bash
# Loads an endpoint picker config with the llm-d router's own loader, at the pinned tag.
#
#   tools/epp_loader/verify.sh [--tag TAG] --config FILE [-- EPP ARGS...]
#   tools/epp_loader/verify.sh [--tag TAG] --record    # every stack's generated config -> verdict.json
#   tools/epp_loader/verify.sh [--tag TAG] --check     # the same, compared with verdict.json
#
# The router comes from the Go module proxy: `go mod download -json github.com/llm-d/llm-d-router@TAG`
# and its Dir, only read (the two Go files beside this script are added for one `go build -overlay`).
# It exits 3 "router module not served" while the proxy refuses the module (it does, for v0.9.0).
# TAG defaults to the tag of the endpoint picker image the stacks pin (settings/model.py,
# `versions.endpointPickerImage`), read by `python -m tests.epp_loader_config pinned-tag`.
#
# The program built (main.go.txt, as cmd/tpu-slicing-epp-loader, and runner_verify.go.txt, added
# to cmd/epp/runner) runs what the picker's Runner.setup runs before it needs a cluster: its flag
# set on EPP ARGS, config phase one (every in-tree plugin registered, strict decoding, defaults),
# phase two (plugins built in list order, validation, scheduler, parsers, data layer) and the data
# layer's Configure. It prints one line, "ACCEPTED by llm-d-router TAG (COMMIT): sha256=...: ..." or
# "REFUSED by ...: sha256=...: <the loader's error>".
#
# Exit: 0 accepted (every config, for --record/--check), 1 refused or differs from verdict.json,
# 2 usage or build error, 3 router module not served.
# Caches (GOPATH, GOMODCACHE, GOCACHE, exported trees, binaries) live in $TPU_SLICING_EPP_LOADER,
# default ~/.cache/tpu-slicing/epp-loader, outside the repository. Idempotent: a loader already built
# for TAG at a known commit is reused.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
module="github.com/llm-d/llm-d-router"
cache="${TPU_SLICING_EPP_LOADER:-$HOME/.cache/tpu-slicing/epp-loader}"
python="${PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python="python3"

say() { printf 'epp-loader: %s\n' "$*" >&2; }
die() { say "$2"; exit "$1"; }
usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

source_dir="" tag="" config="" mode="" commit=""
epp_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --tag) tag="${2:?--tag needs a tag}"; shift 2 ;;
        --config) config="${2:?--config needs a file}"; mode=config; shift 2 ;;
        --record) mode=record; shift ;;
        --check) mode=check; shift ;;
        --) shift; epp_args=("$@"); break ;;
        -h|--help) usage ;;
        *) say "unknown argument: $1"; usage ;;
    esac
done
[ -n "$mode" ] || usage
if [ "$mode" = config ]; then
    [ -f "$config" ] || die 2 "no such config file: $config"
    config="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
fi
command -v go >/dev/null || die 2 "no go on PATH"

export GOPATH="$cache/gopath" GOMODCACHE="$cache/gopath/pkg/mod" GOCACHE="$cache/gocache"
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
mkdir -p "$cache/trees" "$cache/bin" "$cache/overlay" "$GOMODCACHE" "$GOCACHE"

if [ -z "$tag" ]; then
    tag="$(cd "$root" && "$python" -m tests.epp_loader_config pinned-tag)" || die 2 "could not read the pinned picker tag"
    [ "$(printf '%s\n' "$tag" | wc -l)" -eq 1 ] || die 2 "the stacks pin more than one picker tag ($tag): pass --tag"
    say "pinned endpoint picker tag: $tag"
fi

# --- the source tree ---------------------------------------------------------------------------
{
    say "module mode: go mod download $module@$tag"
    json="$(cd "$cache" && go mod download -json "$module@$tag" 2>&1)" || {
        printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' | sed 's/\\n/\n/g; s/\\t/  /g' >&2
        die 3 "router module not served: $module@$tag"
    }
    source_dir="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
    commit="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Hash": "\(.*\)",\{0,1\}$/\1/p' | head -n1)"
    commit="${commit:-unknown}"
    [ -d "$source_dir" ] || die 3 "router module not served: no Dir in go mod download's answer"
    origin="go mod download $module@$tag"
}

[ -f "$source_dir/go.mod" ] && [ "$(awk '$1 == "module" { print $2; exit }' "$source_dir/go.mod")" = "$module" ] ||
    die 2 "$source_dir is not a $module source tree"
runner_go="$source_dir/cmd/epp/runner/runner.go"
for symbol in 'func (r \*Runner) parseConfigurationPhaseOne(ctx context.Context, opts \*runserver.Options)' \
    'func (r \*Runner) parseConfigurationPhaseTwo(ctx context.Context, rawConfig \*configapi.EndpointPickerConfig, ds datastore.Datastore)' \
    'func (r \*Runner) registerInTreePlugins()' 'func (r \*Runner) setupMetricsCollection(opts \*runserver.Options)'; do
    grep -q "$symbol" "$runner_go" 2>/dev/null ||
        die 2 "$runner_go at $tag has no '${symbol//\\/}': the runner changed shape; adapt $here/runner_verify.go.txt"
done

# --- build (the tree is only read: the added files come through -overlay) ----------------------
main_target="$source_dir/cmd/tpu-slicing-epp-loader/main.go"
runner_target="$source_dir/cmd/epp/runner/zz_tpu_slicing_epp_loader.go"
for target in "$main_target" "$runner_target"; do
    [ ! -e "$target" ] || die 2 "$target already exists in the source tree; refusing to shadow it"
done
key="$(cat "$here/main.go.txt" "$here/runner_verify.go.txt" | sha256sum | cut -c1-16)"
work="$cache/overlay/$key"
mkdir -p "$work"
cp "$here/main.go.txt" "$work/main.go"
cp "$here/runner_verify.go.txt" "$work/runner_verify.go"
cat > "$work/overlay.json" <<EOF
{"Replace": {"$main_target": "$work/main.go", "$runner_target": "$work/runner_verify.go"}}
EOF
go_version="$(go version | cut -d' ' -f3)"
binary="$cache/bin/epp-loader-$tag-${commit:0:12}-$go_version-$key"
if [ "$commit" != unknown ] && [ -x "$binary" ]; then
    say "loader for $tag ($commit) already built: $binary"
else
    started=$(date +%s)
    say "building the loader from $origin"
    (cd "$source_dir" && go build -overlay "$work/overlay.json" -trimpath \
        -ldflags "-X $module/version.BuildRef=$tag -X $module/version.CommitSHA=$commit" \
        -o "$binary.tmp" ./cmd/tpu-slicing-epp-loader) || die 2 "the loader did not build"
    mv "$binary.tmp" "$binary"
    say "built $binary in $(( $(date +%s) - started ))s ($go_version)"
fi

# --- load --------------------------------------------------------------------------------------
case "$mode" in
    config)
        exec "$binary" --config "$config" -- "${epp_args[@]}"
        ;;
    record|check)
        [ "$mode" = record ] && sub=record || sub=verify
        cd "$root"
        exec "$python" -m tests.epp_loader_config "$sub" --loader "$binary" --tag "$tag" --commit "$commit" \
            --source "$origin" --go-version "$go_version"
        ;;
esac
