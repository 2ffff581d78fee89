"""Every stack's plan document is byte-for-byte the one stored in tests/golden/plans/.

The stored copies were made with `python -m plan --stack <stack> --json` before the layout of
issue 16 moved any module, so a refactor that claims "no behaviour change" is checked against
what the program did before it, not against itself. A change that is meant to change a plan
regenerates the copy in the same commit (the diff then shows what changed):

    for s in dev dev-b saxml-v5e jetstream-v5e; do
      python -m plan --stack $s --json build/golden/$s.json && cp build/golden/$s.json tests/golden/plans/
    done

(the plan writes onto no tracked file itself: plan/outputs.py).
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from plan import document, engine, stacks
from settings.loader import load

GOLDEN = Path(__file__).parent / "golden" / "plans"
STACKS = sorted(stacks.stack_files())


def test_every_stack_file_has_a_stored_plan() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == STACKS


@pytest.mark.parametrize("stack", STACKS)
def test_plan_document_is_the_stored_one(stack: str) -> None:
    # What `python -m plan --json` writes (plan/__main__.py), in this process: no CLI start-up.
    raw, secret_keys = engine.read_stack_config(engine.stack_file(stack))
    config = load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secret_keys)
    result = engine.run(raw, stack=stack, secret_keys=secret_keys)
    produced = document.dumps(document.document(result, config))
    stored = (GOLDEN / f"{stack}.json").read_text()
    if produced != stored:
        diff = difflib.unified_diff(stored.splitlines(), produced.splitlines(), "stored", "produced", lineterm="")
        pytest.fail(f"{stack}: the plan document changed\n" + "\n".join(list(diff)[:80]))
