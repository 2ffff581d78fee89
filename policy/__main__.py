"""Entry point of the policy pack, run by the Pulumi CLI (`pulumi preview --policy-pack policy`).

The CLI executes this directory with `runpy.run_path(<pack dir>, run_name="__main__")`, which puts the
pack directory on `sys.path`, hence the top-level `guardrails` import. Constructing `PolicyPack` starts
the analyzer's gRPC server and blocks forever, so this file must never be imported by tests; tests import
`policy.guardrails` and call the policies directly.

The pack shares its rules with the program's settings (settings/pins.py, settings/exposure.py: standard
library only, so the pack's own virtualenv needs nothing more). The CLI runs the pack from policy/ with
only the pack directory on the path, so the repository root, this directory's parent, goes right after
it; the pack therefore runs from a checkout of the repository (`--policy-pack policy`), not published
on its own.
"""

import sys
from pathlib import Path

_REPOSITORY = Path(__file__).resolve().parent.parent
if not (_REPOSITORY / "settings" / "pins.py").is_file():
    raise ImportError(f"the tpu-slicing policy pack imports settings/ from its repository; none at {_REPOSITORY}")
if str(_REPOSITORY) not in sys.path:
    sys.path.insert(1, str(_REPOSITORY))

from guardrails import PACK_DESCRIPTION, PACK_NAME, POLICIES  # noqa: E402 - after the path is set
from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

PolicyPack(
    name=PACK_NAME,
    policies=POLICIES,
    enforcement_level=EnforcementLevel.MANDATORY,
    description=PACK_DESCRIPTION,
)
