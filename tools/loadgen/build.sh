#!/usr/bin/env bash
# `make loadgen`: the serving benchmark's load generator, inference-perf, from PyPI at the release the
# Job's image pins (versions.benchmarkImage), in its own virtualenv outside the repository:
#   $TPU_SLICING_LOADGEN (default ~/.cache/tpu-slicing/loadgen)/venv/bin/inference-perf
# inference-perf requires Python 3.12 or later (its pyproject.toml requires-python); the project's
# Python is 3.11, so the venv is made from the first python3.12 or python3.13 found on PATH or under
# pyenv. Idempotent: the venv is kept while its stamp matches requirements.txt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${TPU_SLICING_LOADGEN:-$HOME/.cache/tpu-slicing/loadgen}"
mkdir -p "$cache"
# One build at a time: `make test` starts one beside the Go builds and `make unit` asks again.
exec 9>"$cache/.lock"
flock 9
stamp="$cache/venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [ -x "$cache/venv/bin/inference-perf" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
python=""
# A pyenv shim is on PATH for every installed version but runs only the selected one: each candidate
# must start, not only exist.
for candidate in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 "$HOME"/.pyenv/versions/3.13*/bin/python3.13 python3.12 python3.13; do
  if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
    python="$(command -v "$candidate")"
    break
  fi
done
if [ -z "$python" ]; then
  echo "loadgen: inference-perf needs Python 3.12 or 3.13 (requires-python >=3.12); none on PATH or under ~/.pyenv/versions" >&2
  exit 1
fi
rm -rf "$cache/venv"
"$python" -m venv "$cache/venv"
"$cache/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$here/requirements.txt"
"$cache/venv/bin/python" -m pip check >&2
echo "$want" > "$stamp"
echo "loadgen: inference-perf in $cache/venv ($("$cache/venv/bin/python" --version))" >&2
