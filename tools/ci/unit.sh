#!/usr/bin/env bash
# `make unit`: the suite in two parts, so that the tests needing no Go build use what the Go builds
# leave of the two cores instead of waiting for them.
#
# A lone `go build` keeps about 1.46 of 2 cores busy (kwok from an empty build cache: 90 s of wall,
# 131 s of user time; its links and the narrow stretches of the package graph run on one core), and
# `make engine` and `make controlplane` take some 20 minutes cold (docs/testing.md, CI phases and
# timings). The tests `make check` runs (marked `not go_built` by tests/conftest.py) run beside
# them at nice 10: the compilers keep their priority (the kernel's CFS weights a nice-10 task 110
# against a nice-0 task's 1024, kernel/sched/core.c sched_prio_to_weight), and the tests still get
# about a tenth of a core when the compilers fill both, so none of them stalls for long. The tests
# that run what the builds make (`go_built`: the engine, the planes) start once both the builds and
# those tests are done, on both cores, each xdist group on one worker (tests/suite_order.py).
#
# Environment: PY (the virtualenv's python), SUITE (the pytest options both parts share, from the
# Makefile), MAKE (the make to build with), TPU_SLICING_EARLY_BUILDS (set by `make test`, which
# started the builds already: wait for them instead, tools/ci/builds.sh). Exits with the first failing part's status; the tests
# without a Go build are reported (their whole log) even when a build fails.
set -uo pipefail
: "${PY:?}" "${SUITE:?}"
make_cmd="${MAKE:-make}"
phase=(bash tools/ci/phase.sh)
mkdir -p build
log=build/tests-without-go.log

# shellcheck disable=SC2086 # SUITE is a list of options
"${phase[@]}" "tests without Go builds" nice -n 10 "$PY" -m pytest $SUITE -m "not go_built" --durations=10 \
    > "$log" 2>&1 &
free=$!
if [ -n "${TPU_SLICING_EARLY_BUILDS:-}" ]; then
    # `make test` started them with its first step (tools/ci/builds.sh).
    bash tools/ci/builds.sh wait
else
    "$make_cmd" --no-print-directory engine controlplane
fi
built=$?
# The planes wait for the tests without a Go build: measured cold, starting them at the builds' end
# instead slowed both parts more than it saved (50 min 33 s against 49 min 34 s, docs/testing.md).
wait "$free"
free_status=$?
echo "--- the tests without a Go build (run beside the builds, at nice 10): $log"
cat "$log"
if [ "$built" -ne 0 ]; then
    exit "$built"
fi
# shellcheck disable=SC2086
"${phase[@]}" pytest "$PY" -m pytest $SUITE -m go_built --durations=25
status=$?
if [ "$free_status" -ne 0 ]; then
    exit "$free_status"
fi
exit "$status"
