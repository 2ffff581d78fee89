"""One row of the refused-classes table (settings/refusals.py collects them).

Each `rules_*.py` module lists the classes its rules refuse beside them (`REFUSED`), so this row type
imports nothing of the model tree: the rule modules are imported by settings/model.py itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RefusedClass:
    name: str
    rule: object  # the function or validator that refuses the class, or the FieldInfo whose constraint does
    example: Mapping[str, Any]
    key: str  # the key the message names
    allowed: str  # a fragment of what the message says is allowed
    stack: str = "dev"
    pack: str | None = None  # the policy of policy/guardrails.py that refuses it at preview time
    stack_lines: str = ""
