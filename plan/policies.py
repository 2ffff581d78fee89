"""The policy pack (policy/guardrails.py) run offline on a plan, as the mock engine recorded it.

The pack's validations read the engine's recorded inputs directly (the guardrails docstring calls
this the "recorded" form: plain dicts, secrets in their wire form); its tests run the same way.
Only the Pulumi CLI runs a pack for real, so the verdicts here are those of the pack's own code
on the desired state, with the pack's default configuration (what `preview.yml` passes), not
those of a `pulumi preview` against a live stack. Without `pulumi_policy` installed (it is a dev
dependency: `make .venv/.dev`) nothing is run and the result says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plan.engine import PlanResult

PACK = "tpu-slicing-guardrails"


def run(result: PlanResult, address: Callable[[str], str]) -> dict[str, Any]:
    """`{"ran": True, "pack", "violations": [{policy, enforcement, resource, message}]}` or why not.

    `address` turns a URN into the document's resource address (a violation names its resource
    by address, so the same violation at two revisions compares equal).
    """
    try:
        from pulumi_policy import (
            PolicyCustomTimeouts,
            PolicyResource,
            PolicyResourceOptions,
            ResourceValidationArgs,
            ResourceValidationPolicy,
            StackValidationArgs,
            StackValidationPolicy,
        )

        from policy import guardrails
    except ImportError as err:
        return {
            "ran": False,
            "pack": PACK,
            "reason": f"the policy pack cannot run offline here: {err} (pulumi-policy is a dev dependency; "
            "make .venv/.dev installs it)",
        }

    def options(urn: str) -> Any:
        res = by_urn[urn]
        return PolicyResourceOptions(
            res.protect,
            list(res.ignore_changes),
            res.delete_before_replace,
            [],
            PolicyCustomTimeouts(0, 0, 0),
            [],
            res.parent,
        )

    by_urn = result.by_urn()
    violations: list[dict[str, Any]] = []
    for policy in guardrails.POLICIES:
        # A policy without its own level takes the pack's: MANDATORY (policy/__main__.py).
        level = getattr(policy, "enforcement_level", None)
        enforcement = str(getattr(level, "value", level) or "mandatory")

        def report(
            message: str, urn: str | None = None, *, _policy: str = policy.name, _level: str = enforcement
        ) -> None:
            violations.append(
                {
                    "policy": _policy,
                    "enforcement": _level,
                    "resource": address(urn) if urn and urn in by_urn else None,
                    "message": message,
                }
            )

        if isinstance(policy, ResourceValidationPolicy):
            for res in result.resources:
                args = ResourceValidationArgs(res.type, res.inputs, res.urn, res.name, options(res.urn), None, None)

                def on_resource(message: str, urn: str | None = None, _urn: str = res.urn) -> None:
                    report(message, urn or _urn)

                policy.validate(args, on_resource)
        elif isinstance(policy, StackValidationPolicy):
            built = {
                r.urn: PolicyResource(r.type, r.inputs, r.urn, r.name, options(r.urn), None, None, [], {})
                for r in result.resources
            }
            for r in result.resources:
                built[r.urn].parent = built.get(r.parent)
                built[r.urn].dependencies = [built[d] for d in r.dependencies if d in built]
            policy.validate(StackValidationArgs(list(built.values()), None), report)
    violations.sort(key=lambda v: (v["policy"], v["resource"] or "", v["message"]))
    return {"ran": True, "pack": PACK, "violations": violations}
