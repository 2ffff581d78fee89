"""Every reader of a user's file refuses a bad one in one line, within bounded time and memory
(domain/bounded_input.py, issue 64 item 5): stack files, opened ESC environments, benchmark results,
drift audit inputs, reservation snapshots and plan documents, each fed a FIFO, an oversized file,
bytes that are not UTF-8, JSON nested thousands deep, a 5,000-digit integer and (YAML) an alias bomb.

One child process per reader takes every bad file in turn, through the entry point a user reaches
(the `plan` commands, or the function the program calls), and reports each refusal with the CPU
seconds it took and, at the end, its peak resident memory. CPU time, not wall time, so a loaded
machine cannot fail it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain import bounded_input
from plan.engine import ROOT

CPU_SECONDS = 5.0
PEAK_BYTES = 500 << 20

# The child: `python - READER FILE...`; prints one JSON line per file, then the peak RSS.
CHILD = r"""
import contextlib, io, json, resource, sys, time
from pathlib import Path

reader, files = sys.argv[1], sys.argv[2:]
GOOD_POLICY = Path(sys.argv[0]).parent / "x"


def call(path):
    if reader == "stack-file":
        from plan import engine
        return engine.read_stack_config(Path(path), {}) and 0
    elif reader == "esc":
        from settings import esc_environment
        return esc_environment.read_opened("tpu/fleet", Path(path)) and 0
    elif reader == "benchmark":
        from plan.__main__ import main
        return main(["benchmark", "compare", path, path])
    elif reader == "plan-document":
        from plan.__main__ import main
        return main(["diff", path, path])
    elif reader == "drift-preview":
        from plan.__main__ import main
        return main(["drift", "--stack", "dev", "--preview", path, "--preview-exit", "0",
              "--policy", "/dev/null", "--policy-exit", "0"])
    elif reader == "drift-policy":
        from plan.__main__ import main
        return main(["drift", "--stack", "dev", "--preview", path + ".preview", "--preview-exit", "0",
              "--policy", path, "--policy-exit", "0"])
    elif reader == "snapshot":
        from plan.__main__ import main
        return main(["reservation", "--stack", "dev", "--snapshot", path])
    else:
        raise SystemExit(f"unknown reader {reader}")


for path in files:
    started = time.process_time()
    err = io.StringIO()
    said, kind = "", "returned"
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = call(path)
            if code:
                said, kind = "", "exit"
        except SystemExit as stop:
            said, kind = str(stop.code), "exit"
        except Exception as caught:  # a refusal the program turns into one line, or a defect
            said, kind = f"{type(caught).__name__}: {caught}", type(caught).__name__
    print(json.dumps({"file": path, "kind": kind, "said": said, "stderr": err.getvalue(),
                      "cpu": time.process_time() - started}))
print(json.dumps({"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

DEEP = "[" * 5000 + "]" * 5000
HUGE_INT = '{"n": ' + "9" * 5000 + "}"
# Nine levels of ten aliases each: 10^9 nodes once expanded ("billion laughs"), 500 bytes as written.
ALIAS_BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)


def _bad_files(folder: Path, yaml_reader: bool) -> dict[str, Path]:
    folder.mkdir()
    files = {
        "fifo": folder / "fifo",
        "oversized": folder / "oversized",
        "not-utf8": folder / "not-utf8",
        "deep": folder / "deep",
        "huge-int": folder / "huge-int",
    }
    os.mkfifo(files["fifo"])
    files["oversized"].write_bytes(b" " * (20 << 20))
    files["not-utf8"].write_bytes(b'{"a": "\xff\xfe"}')
    files["deep"].write_text(DEEP if not yaml_reader else "config:\n  k: " + DEEP + "\n")
    files["huge-int"].write_text(HUGE_INT if not yaml_reader else "config:\n  k: " + "9" * 5000 + "\n")
    if yaml_reader:
        files["alias-bomb"] = folder / "alias-bomb"
        files["alias-bomb"].write_text("config:\n  " + ALIAS_BOMB.replace("\n", "\n  "))
    for path in files.values():  # the preview the drift-policy reader reads first: a good one
        (folder / f"{path.name}.preview").write_text('{"steps": [{"op": "same", "urn": "u"}]}')
    return files


READERS = ["stack-file", "esc", "benchmark", "plan-document", "drift-preview", "drift-policy", "snapshot"]


@pytest.mark.parametrize("reader", READERS)
def test_each_bad_file_is_refused_in_one_line_within_bounds(reader: str, tmp_path: Path) -> None:
    files = _bad_files(tmp_path / "bad", yaml_reader=reader == "stack-file")
    if reader == "stack-file":
        files.pop("huge-int")  # YAML reads integers itself: a long one is a valid, if odd, value
    done = subprocess.run(
        [sys.executable, "-c", CHILD, reader, *map(str, files.values())],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    *results, peak = [json.loads(line) for line in done.stdout.splitlines()]
    by_file = {Path(r["file"]).name: r for r in results}
    for name, path in files.items():
        result = by_file[path.name]
        message = result["said"] or result["stderr"]
        assert result["kind"] not in ("returned", "RecursionError", "ValueError", "MemoryError"), (name, result)
        assert "Traceback" not in message + result["stderr"], (name, result)
        assert message.strip() and len(message.strip().splitlines()) == 1, (name, result)
        assert result["cpu"] < CPU_SECONDS, (name, result)
    assert peak["peak"] < PEAK_BYTES, peak


def test_the_alias_bomb_is_refused_before_any_alias_is_built() -> None:
    with pytest.raises(bounded_input.InputError, match=r"a YAML alias \(\*a\)"):
        bounded_input.check_yaml(ALIAS_BOMB)


@given(
    st.recursive(
        st.none() | st.integers(-(10**18), 10**18) | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    )
)
def test_the_depth_scan_agrees_with_the_json_it_measures(value: object) -> None:
    text = json.dumps(value)

    def depth(v: object) -> int:
        if isinstance(v, list):
            return 1 + max(map(depth, v), default=0)
        if isinstance(v, dict):
            return 1 + max(map(depth, v.values()), default=0)
        return 0

    assert bounded_input.json_depth(text) == depth(value)
    assert bounded_input.load_json(text) == value
