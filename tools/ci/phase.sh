#!/usr/bin/env bash
# `phase.sh NAME COMMAND...`: runs COMMAND and, when $TPU_SLICING_PHASES names a file (`make test`
# sets it), appends one line to it: NAME, wall seconds (millisecond resolution) and exit status.
# The status is COMMAND's, so make stops where it would have stopped without the wrapper.
set -uo pipefail
name="$1"
shift
start=$(date +%s%N)
"$@"
status=$?
if [ -n "${TPU_SLICING_PHASES:-}" ]; then
    elapsed=$(($(date +%s%N) - start))
    printf '%s\t%d.%03d\t%d\n' "$name" $((elapsed / 1000000000)) $((elapsed / 1000000 % 1000)) "$status" \
        >> "$TPU_SLICING_PHASES"
fi
exit "$status"
