#!/usr/bin/env bash
# `phase.sh NAME COMMAND...`: runs COMMAND and, when $TPU_SLICING_PHASES names a file (`make test`
# sets it), appends one line to it: NAME, wall seconds, exit status and the start time (seconds
# since the epoch), at millisecond resolution. The start lets the table show which phases ran side
# by side (`make test` runs the builds in parallel) and take the total from the clock, not a sum.
# The status is COMMAND's, so make stops where it would have stopped without the wrapper.
set -uo pipefail
name="$1"
shift
start=$(date +%s%N)
"$@"
status=$?
if [ -n "${TPU_SLICING_PHASES:-}" ]; then
    elapsed=$(($(date +%s%N) - start))
    # One printf, one write(2) of a short line to an O_APPEND file: parallel phases do not interleave.
    printf '%s\t%d.%03d\t%d\t%d.%03d\n' "$name" $((elapsed / 1000000000)) $((elapsed / 1000000 % 1000)) "$status" \
        $((start / 1000000000)) $((start / 1000000 % 1000)) >> "$TPU_SLICING_PHASES"
fi
exit "$status"
