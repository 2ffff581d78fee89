#!/usr/bin/env bash
# `builds.sh start|wait`: the Go builds (`make engine controlplane`) from the first second of
# `make test`, and a wait for them where the suite needs them.
#
# The virtualenvs come first in `make test` and are mostly downloads: on a cold machine they left
# one core and more idle for one and a half to three minutes before the builds began (docs/testing.md,
# CI phases and timings). `start` begins the builds beside them and returns at once; `unit.sh`
# calls `wait` where it used to build, which blocks until the builds end, prints their log and
# exits with their status.
#
# The lock: `start` takes build/builds.lock before it starts the background job, and the job keeps
# it (its inherited descriptor) until it has written build/builds.status, so `wait` can never find
# the lock free before the builds have ended, however the two are scheduled (flock(1), flock(2): a
# lock belongs to the open file description that every inheriting process shares). The builds
# themselves get the descriptor closed, so nothing they leave behind holds the lock. A second
# `start` waits for the first one's builds, as two builds in one cache must not run side by side.
#
# Environment: MAKE (the make to build with), TPU_SLICING_PHASES (passed on, tools/ci/phase.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build
lock=build/builds.lock
status=build/builds.status
log=build/builds.log
make_cmd="${MAKE:-make}"

case "${1:-}" in
start)
    exec 9> "$lock"
    flock 9
    rm -f "$status"
    # Its output goes to the log, not to make's: nothing of it holds the terminal or a CI log's
    # pipe open after `make test` has ended (a lint failure ends it before the builds).
    (
        "$make_cmd" --no-print-directory engine controlplane 9>&-
        echo "$?" > "$status"
    ) > "$log" 2>&1 < /dev/null &
    ;;
wait)
    flock "$lock" true
    echo "--- the Go builds (started with make test): $log"
    cat "$log" 2>/dev/null
    if [ ! -f "$status" ]; then
        echo "builds.sh: the Go builds left no status in $status: were they started (builds.sh start)?" >&2
        exit 1
    fi
    exit "$(cat "$status")"
    ;;
*)
    echo "usage: builds.sh start|wait" >&2
    exit 2
    ;;
esac
