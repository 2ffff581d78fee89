"""Entry point of the policy pack, run by the Pulumi CLI (`pulumi preview --policy-pack policy`).

The CLI executes this directory with `runpy.run_path(<pack dir>, run_name="__main__")`, which puts the
pack directory on `sys.path`, hence the top-level `guardrails` import. Constructing `PolicyPack` starts
the analyzer's gRPC server and blocks forever, so this file must never be imported by tests; tests import
`policy.guardrails` and call the policies directly.
"""

from guardrails import PACK_DESCRIPTION, PACK_NAME, POLICIES
from pulumi_policy import EnforcementLevel, PolicyPack

PolicyPack(
    name=PACK_NAME,
    policies=POLICIES,
    enforcement_level=EnforcementLevel.MANDATORY,
    description=PACK_DESCRIPTION,
)
