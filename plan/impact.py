"""What a change costs: TPU use, admission, time to serving, policy verdicts, from two plan documents.

`facts` is what one plan document carries under `impact` (computed where the plan is built, by
the code of that revision): chips, VMs and HBM in use, the admission prediction per workload
(domain/admission.py), the time-to-serving estimate (plan/timing.py) and the policy pack's
verdicts run offline (plan/policies.py). `compare` turns the facts of two documents, and their
resources, into the impact report of a diff; `markdown` renders it. A document written by code
older than `impact` has no facts: the report then says what it cannot compare.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Mapping
from typing import Any

from domain import admission
from plan import cost as priced_plan
from plan import policies, render, scaling, timing
from plan.changes import field_changes
from plan.engine import PlanResult
from settings import capacity
from settings.model import StackConfig

NODE_POOL = "gcp:container/nodePool:NodePool"
RESOURCE_POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
PRIORITY_CLASS = "kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass"
TPU_MACHINE_PREFIXES = ("tpu", "ct")  # tpu7x-, ct6e-, ct5lp-, ...: Cloud TPU machine families
HIGH = "high"
NOT_COMPARED = "n/a"
HEADLINE_REASONS = 6  # the rest are in the JSON's tpuCost.reasons


# ---------------------------------------------------------------- one plan's facts


def facts(result: PlanResult, config: StackConfig, address: Callable[[str], str]) -> dict[str, Any]:
    """The impact facts of one plan (JSON-safe)."""
    cap = capacity.capacity(config)
    work = capacity.workloads(config)
    priorities = dict(config.kueue.priorities.items())
    kueue = config.serving.dynamic_slicing
    prediction = None
    names = {value: level for level, value in priorities.items()}
    if kueue and work:
        prediction = admission.predict(
            admission.requests_from_workloads(work, priorities), config.tpu.cubes, config.tpu.generation
        )
    workloads: list[dict[str, Any]] = []
    owner = {r.name: r.lws or r.name for r in prediction.requests} if prediction is not None else {}
    for w in work:
        if prediction is not None:
            # An LWS is one Kueue Workload per group (domain/admission.py A1): admitted when all are.
            members = {r.name for r in prediction.members(w.name)}
            running, total = prediction.groups(w.name)
            verdict = "admitted" if running == total else "pending"
            waits = "; ".join(sorted({prediction.reasons[m] for m in members if prediction.final[m] != "admitted"}))
            if running == total:
                reason = prediction.where(w.name)
            elif running:
                reason = f"{running} of {total} groups admitted ({prediction.where(w.name)}); the rest: {waits}"
            else:
                reason = waits
            cubes = sorted({p.cube for p in prediction.placements if p.workload in members})
            preempted_by = sorted(  # by workload: an LWS, not which of its groups
                {owner[e.by] for e in prediction.events if e.workload in members and e.action == "preempted"}
            )
        else:
            verdict, reason, cubes, preempted_by = "admitted", "its own node pool(s), no Kueue", [], []
        workloads.append(
            {
                "name": w.name,
                "kind": w.kind,
                "priority": w.priority,
                "priorityValue": priorities.get(w.priority, 0),
                "shape": w.shape,
                "slices": w.slices,
                "chips": w.chips,
                "vms": w.slices * w.vms_per_slice,
                "hbmGib": w.slices * w.hbm_gib_per_slice,
                "verdict": verdict,
                "cubes": cubes,
                "reason": reason,
                "preemptedBy": preempted_by,
            }
        )
    admitted = [w for w in workloads if w["verdict"] == "admitted"]
    chips_in_use = prediction.chips_in_use if prediction is not None else sum(w["chips"] for w in admitted)
    t = timing.timeline(result)
    return {
        "kueue": kueue,
        "usage": {
            "chips": {"inUse": min(chips_in_use, cap.chips), "total": cap.chips},
            "vms": {"inUse": min(sum(w["vms"] for w in admitted), cap.vms), "total": cap.vms},
            "hbmGib": {"inUse": min(sum(w["hbmGib"] for w in admitted), cap.hbm_gib), "total": cap.hbm_gib},
        },
        "workloads": workloads,
        "admission": admission.narrative(prediction, names) if prediction is not None else [],
        "admissionMap": admission.render_map(prediction, priority_names=names) if prediction is not None else [],
        "timeToServing": {
            "criticalSeconds": t.critical_seconds,
            "sequentialSeconds": t.sequential_seconds,
            "target": address(t.target.urn),
        },
        "policy": policies.run(result, address),
        # Only a stack with an autoscaled role has it, so a fixed stack's document is as it was.
        **({"atMax": at_max} if (at_max := scaling.facts(config)) is not None else {}),
        **({"cost": priced} if (priced := priced_plan.facts(config)) is not None else {}),
    }


def empty() -> dict[str, Any]:
    """The facts of a stack that does not exist: no TPU, no workloads, no policy verdicts."""
    nothing = {"inUse": 0, "total": 0}
    return {
        "kueue": False,
        "usage": {"chips": dict(nothing), "vms": dict(nothing), "hbmGib": dict(nothing)},
        "workloads": [],
        "admission": [],
        "admissionMap": [],
        "timeToServing": {"criticalSeconds": None, "sequentialSeconds": None, "target": None},
        "policy": {"ran": True, "pack": policies.PACK, "violations": []},
    }


# ---------------------------------------------------------------- comparing two plans


def _machine(res: Mapping[str, Any]) -> str:
    machine = ((res.get("inputs") or {}).get("nodeConfig") or {}).get("machineType")
    return machine if isinstance(machine, str) else ""


def _is_tpu_pool(res: Mapping[str, Any] | None) -> bool:
    return res is not None and res.get("type") == NODE_POOL and _machine(res).startswith(TPU_MACHINE_PREFIXES)


def _is_tpu_workload(res: Mapping[str, Any] | None) -> bool:
    if not res:
        return False
    return res.get("type") in render.WORKLOAD_REPLICAS or '"google.com/tpu"' in json.dumps(res.get("inputs"))


def _priority(w: Mapping[str, Any]) -> str:
    return "none" if w["priority"] == "-" else str(w["priority"])


def _size(w: Mapping[str, Any]) -> str:
    return w["shape"] if w["slices"] == 1 else f"{w['slices']} x {w['shape']}"


def _state(w: Mapping[str, Any] | None, kueue: bool) -> str:
    if w is None:
        return "-"
    if w["verdict"] == "admitted":
        return f"admitted, {admission.cube_span(w['cubes'])}" if kueue and w["cubes"] else "admitted"
    if w["preemptedBy"]:
        return f"pending (preempted by {', '.join(w['preemptedBy'])})"
    return "pending"


def _workload_change(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str:
    if before is None:
        return "added" if after and after["verdict"] == "admitted" else "added, pending"
    if after is None:
        return "removed"
    if before["verdict"] == "admitted" and after["verdict"] != "admitted":
        return "preempted" if after["preemptedBy"] else "pending"
    if before["verdict"] != "admitted" and after["verdict"] == "admitted":
        return "admitted"
    if before["verdict"] == "admitted" and before["cubes"] != after["cubes"]:
        return "moved"
    reshaped = (before["shape"], before["slices"]) != (after["shape"], after["slices"])
    reprioritised = (before["priority"], before["priorityValue"]) != (after["priority"], after["priorityValue"])
    return "changed" if reshaped or reprioritised else "unchanged"


def _violation_key(v: Mapping[str, Any]) -> tuple[str, str, str]:
    return (v["policy"], v.get("resource") or "", v["message"])


def _policy_report(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any]:
    if not old or not new:
        return {"ran": False, "note": "no policy verdicts in one of the plans", "appeared": [], "disappeared": []}
    if not (old.get("ran") and new.get("ran")):
        reason = next(p.get("reason") for p in (old, new) if not p.get("ran"))
        return {"ran": False, "note": reason, "appeared": [], "disappeared": []}
    before = {_violation_key(v): v for v in old.get("violations", [])}
    after = {_violation_key(v): v for v in new.get("violations", [])}
    return {
        "ran": True,
        "note": None,
        "appeared": [after[k] for k in sorted(after.keys() - before.keys())],
        "disappeared": [before[k] for k in sorted(before.keys() - after.keys())],
        "unchanged": len(after.keys() & before.keys()),
    }


def _changed_paths(old: Any, new: Any) -> list[str]:
    return [path.removeprefix("inputs.") for path, _, _ in field_changes(old, new)]


def _paths(cap: Mapping[str, Any]) -> list[str | None]:
    """The capacity's reservation paths: a list, or the tuple's text that documents hold."""
    paths = cap.get("reservation_paths") or []
    if isinstance(paths, str):
        try:
            paths = ast.literal_eval(paths)
        except (ValueError, SyntaxError):
            return [paths]
    return list(paths)


_NO_POOL = "(no pool)"


def _path(path: str | None) -> str:
    if path is None:
        return "on demand"
    return path if path == _NO_POOL else f"`{path}`"


def _name(key: str) -> str:
    return key.rsplit("::", 1)[-1]


def _tpu_cost(
    old: Mapping[str, Any], new: Mapping[str, Any], workloads: list[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """What in the change costs TPU time (a TPU pool, a reservation path, a slice shape, a priority),
    and which TPU workloads only restart."""
    old_res, new_res = old.get("resources", {}), new.get("resources", {})
    reasons: list[str] = []
    named: set[str] = set()
    for key in sorted(old_res.keys() | new_res.keys()):
        before, after = old_res.get(key), new_res.get(key)
        if before == after:
            continue
        if (
            _is_tpu_pool(before)
            or _is_tpu_pool(after)
            or RESOURCE_POLICY
            in (
                (before or {}).get("type"),
                (after or {}).get("type"),
            )
        ):
            what = "TPU pool" if _is_tpu_pool(before) or _is_tpu_pool(after) else "TPU placement policy"
            if before is None:
                reasons.append(f"{what} `{_name(key)}` added")
            elif after is None:
                reasons.append(f"{what} `{_name(key)}` removed")
            else:
                paths = _changed_paths(before, after)
                shown = ", ".join(f"`{p}`" for p in paths[:3]) + (", ..." if len(paths) > 3 else "")
                reasons.append(f"{what} `{_name(key)}` changes {shown}")
            named.add(key)
        elif PRIORITY_CLASS in ((before or {}).get("type"), (after or {}).get("type")):
            if before and after:
                was, now = before["inputs"].get("value"), after["inputs"].get("value")
                reasons.append(f"priority class `{_name(key)}` {was} → {now}")
            else:
                reasons.append(f"priority class `{_name(key)}` {'added' if after else 'removed'}")
            named.add(key)
    old_cap, new_cap = old.get("capacity") or {}, new.get("capacity") or {}
    was_paths, now_paths = _paths(old_cap), _paths(new_cap)
    if was_paths != now_paths:
        moves = []
        for index in range(max(len(was_paths), len(now_paths))):
            before_path = was_paths[index] if index < len(was_paths) else _NO_POOL
            after_path = now_paths[index] if index < len(now_paths) else _NO_POOL
            if before_path != after_path:
                moves.append(f"pool {index + 1}: {_path(before_path)} → {_path(after_path)}")
        reasons.append(f"reservation paths change ({'; '.join(moves)})")
    for field, label in (("pool_topology", "pool shape"), ("generation", "TPU generation")):
        if old_cap and new_cap and old_cap.get(field) != new_cap.get(field):
            reasons.append(f"{label} {old_cap.get(field)} → {new_cap.get(field)}")
    for w in workloads:
        before, after = w["before"], w["after"]
        if before is None:
            reasons.append(f"TPU workload `{w['name']}` added ({_size(after)}, priority {_priority(after)})")
        elif after is None:
            reasons.append(f"TPU workload `{w['name']}` removed ({_size(before)}, priority {_priority(before)})")
        else:
            if (before["shape"], before["slices"]) != (after["shape"], after["slices"]):
                reasons.append(f"TPU workload `{w['name']}` slices {_size(before)} → {_size(after)}")
            if (before["priority"], before["priorityValue"]) != (after["priority"], after["priorityValue"]):
                reasons.append(
                    f"TPU workload `{w['name']}` priority {_priority(before)} ({before['priorityValue']}) → "
                    f"{_priority(after)} ({after['priorityValue']})"
                )
    restarts = []
    for key in sorted(old_res.keys() & new_res.keys()):
        before, after = old_res[key], new_res[key]
        if (
            before.get("inputs") != after.get("inputs")
            and key not in named
            and (_is_tpu_workload(before) or _is_tpu_workload(after))
        ):
            name = (after.get("inputs") or {}).get("metadata", {}).get("name") or _name(key)
            if not any(f"`{name}`" in r for r in reasons):
                restarts.append(name)
    return reasons, restarts


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The impact report of going from plan document `old` to `new` (JSON-safe)."""
    was, now = old.get("impact"), new.get("impact")
    missing = [side for side, doc in (("base", was), ("head", now)) if not doc]
    was, now = was or {}, now or {}
    usage: dict[str, Any] = {}
    for field in ("chips", "vms", "hbmGib"):
        before, after = (was.get("usage") or {}).get(field), (now.get("usage") or {}).get(field)
        usage[field] = {
            "before": before["inUse"] if before else None,
            "after": after["inUse"] if after else None,
            "totalBefore": before["total"] if before else None,
            "totalAfter": after["total"] if after else None,
        }
    before_w = {w["name"]: w for w in was.get("workloads", [])}
    after_w = {w["name"]: w for w in now.get("workloads", [])}
    order = [w["name"] for w in now.get("workloads", [])] + [n for n in before_w if n not in after_w]
    workloads = []
    for name in order:
        b, a = before_w.get(name), after_w.get(name)
        unknown = ("base" in missing and b is None) or ("head" in missing and a is None)
        change = NOT_COMPARED if unknown else _workload_change(b, a)
        ref = a or b or {}
        workloads.append(
            {
                "name": name,
                "priority": ref.get("priority"),
                "before": b,
                "after": a,
                "beforeState": _state(b, bool(was.get("kueue"))),
                "afterState": _state(a, bool(now.get("kueue"))),
                "change": change,
            }
        )
    high_pending = [
        w["name"]
        for w in workloads
        if w["after"]
        and w["after"]["priority"] == HIGH
        and w["after"]["verdict"] != "admitted"
        and not (w["before"] and w["before"]["verdict"] != "admitted")  # unknown before: flagged too
    ]
    times = {side: (doc.get("timeToServing") or {}) for side, doc in (("before", was), ("after", now))}
    old_out, new_out = old.get("outputs", {}), new.get("outputs", {})
    reasons, restarts = _tpu_cost(old, new, [w for w in workloads if w["change"] != NOT_COMPARED])
    warnings = [f"high-priority workload `{name}` becomes pending: {after_w[name]['reason']}" for name in high_pending]
    was_max, now_max = was.get("atMax"), now.get("atMax")
    said_before = set((was_max or {}).get("warnings", []))
    warnings += [w for w in (now_max or {}).get("warnings", []) if w not in said_before]
    return {
        "complete": not missing,
        "missing": missing,
        "tpuCost": {"touched": bool(reasons), "reasons": reasons, "restarts": restarts},
        "usage": usage,
        "workloads": workloads,
        "highPriorityPending": high_pending,
        "warnings": warnings,
        "timeToServing": {
            "beforeSeconds": times["before"].get("criticalSeconds"),
            "afterSeconds": times["after"].get("criticalSeconds"),
            "beforeTarget": times["before"].get("target"),
            "afterTarget": times["after"].get("target"),
        },
        "policy": _policy_report(was.get("policy"), now.get("policy")),
        "outputs": {
            "added": sorted(new_out.keys() - old_out.keys()),
            "removed": sorted(old_out.keys() - new_out.keys()),
            "changed": sorted(k for k in old_out.keys() & new_out.keys() if old_out[k] != new_out[k]),
        },
        "admission": {"before": was.get("admission", []), "after": now.get("admission", [])},
        "admissionMap": {"before": was.get("admissionMap", []), "after": now.get("admissionMap", [])},
        "atMax": {"before": was_max, "after": now_max},
        "cost": {"before": was.get("cost"), "after": now.get("cost")},
    }


# ---------------------------------------------------------------- Markdown


def _minutes(seconds: int | None) -> str:
    return NOT_COMPARED if seconds is None else f"~{seconds / 60:.0f} min"


def _of(value: int | None, total: int | None, unit: str = "") -> str:
    if value is None:
        return NOT_COMPARED
    return f"{value}{unit} of {total}{unit}"


def headline(report: Mapping[str, Any]) -> list[str]:
    """The lines on top: whether TPU time is touched, and the warnings."""
    cost = report["tpuCost"]
    if cost["touched"]:
        shown = cost["reasons"][:HEADLINE_REASONS]
        more = len(cost["reasons"]) - len(shown)
        line = "**TPU cost: touched**: " + "; ".join(shown) + (f"; and {more} more" if more else "") + "."
    else:
        line = "**TPU cost: not touched** (no TPU pool, reservation path, slice shape or priority changes)"
        if cost["restarts"]:
            names = ", ".join(f"`{n}`" for n in cost["restarts"])
            line += f"; TPU workloads restart because their spec changes: {names}"
        line += "."
    if report["missing"]:
        line += f" (Not compared: the {' and '.join(report['missing'])} plan carries no impact data.)"
    priced = report.get("cost") or {}
    money_line = priced_plan.headline(priced.get("before"), priced.get("after"))
    return [line, *([money_line] if money_line else []), *(f"> **Warning:** {w}." for w in report["warnings"])]


def markdown(report: Mapping[str, Any]) -> list[str]:
    """The impact section of a diff (after the headline)."""
    lines = ["#### Impact", "", "| | before | after |", "|---|---|---|"]
    usage = report["usage"]
    for field, label, unit in (
        ("chips", "TPU chips in use", ""),
        ("vms", "TPU VMs in use", ""),
        ("hbmGib", "HBM in use", " GiB"),
    ):
        u = usage[field]
        lines.append(
            f"| {label} | {_of(u['before'], u['totalBefore'], unit)} | {_of(u['after'], u['totalAfter'], unit)} |"
        )
    t = report["timeToServing"]
    lines.append(
        f"| time to serving (plan/timing.py) | {_minutes(t['beforeSeconds'])} | {_minutes(t['afterSeconds'])} |"
    )
    lines.append("")
    if report["workloads"]:
        lines += [
            "Admission per TPU workload (the Kueue model of domain/admission.py, replayed from an empty block in "
            "creation order):",
            "",
            "| workload | priority | slices | before | after | change |",
            "|---|---|---|---|---|---|",
        ]
        for w in report["workloads"]:
            ref = w["after"] or w["before"]
            change = f"**{w['change']}**" if w["change"] not in ("unchanged", NOT_COMPARED) else w["change"]
            cells = [f"`{w['name']}`", _priority(ref), _size(ref), w["beforeState"], w["afterState"], change]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        lines.append("")
        if any(w["change"] == "moved" for w in report["workloads"]):
            lines += [
                "*moved*: a fresh `pulumi up` places the workload elsewhere; on a running cluster Kueue does not "
                "move an admitted workload, it comes there when it is next admitted.",
                "",
            ]
        adm, amap = report["admission"], report["admissionMap"]
        if adm["after"] and (adm["before"] != adm["after"] or amap["before"] != amap["after"]):
            lines += ["<details><summary>Admission after the change</summary>", "", "```text"]
            lines += [*adm["after"], "", *amap["after"], "```", "", "</details>", ""]
    else:
        lines += ["No TPU workloads before or after.", ""]
    lines += _ceiling_lines(report.get("atMax") or {})
    policy = report["policy"]
    label = "Policy verdicts (policy/guardrails.py run offline on the plan, default pack config)"
    if not policy["ran"]:
        lines.append(f"{label}: not run: {policy['note']}.")
    elif not (policy["appeared"] or policy["disappeared"]):
        kept = policy.get("unchanged", 0)
        lines.append(
            f"{label}: none appear or disappear" + (f" ({kept} unchanged)." if kept else "; none before or after.")
        )
    else:
        lines.append(f"{label}:")
        for sign, key in (("+ new", "appeared"), ("- gone", "disappeared")):
            for v in policy[key]:
                where = f" on `{v['resource']}`" if v.get("resource") else ""
                lines.append(f"- {sign}: `{v['policy']}` ({v['enforcement']}){where}: {v['message']}")
    outputs = report["outputs"]
    parts = [f"new {', '.join(f'`{o}`' for o in outputs['added'])}" if outputs["added"] else ""]
    parts.append(f"removed {', '.join(f'`{o}`' for o in outputs['removed'])}" if outputs["removed"] else "")
    shown = "; ".join(p for p in parts if p) or "none added or removed"
    lines += ["", f"Stack outputs: {shown}.", ""]
    return lines


def _ceiling_lines(at_max: Mapping[str, Any]) -> list[str]:
    """Autoscaling before and after: each role's bounds, chips at min and max, and what reaching max
    preempts or leaves pending (plan/scaling.py)."""
    before, after = at_max.get("before"), at_max.get("after")
    if not before and not after:
        return []

    def bounds(side: Mapping[str, Any] | None) -> str:
        if not side:
            return "fixed"
        return "; ".join(f"`{lws}` {b['min']}-{b['max']}" for lws, b in side["bounds"].items())

    def chips(side: Mapping[str, Any] | None, key: str) -> str:
        return f"{side['chips'][key]} of {side['chips']['total']}" if side else NOT_COMPARED

    def evicts(side: Mapping[str, Any] | None) -> str:
        if not side:
            return NOT_COMPARED
        found = [f"{p['priority']} `{p['workload']}`" for p in side["preempted"]]
        return ", ".join(found) or "nothing"

    def minutes(side: Mapping[str, Any] | None) -> str:
        return _minutes(side.get("scaleOutSeconds")) if side else NOT_COMPARED

    def waits(side: Mapping[str, Any] | None) -> str:
        return NOT_COMPARED if not side else (", ".join(f"`{g}`" for g in side["pendingHigh"]) or "none")

    lines = [
        "Autoscaling (plan/scaling.py: Kueue's admission replayed with every autoscaled role at its max):",
        "",
        "| | before | after |",
        "|---|---|---|",
        f"| autoscaled groups (min-max) | {bounds(before)} | {bounds(after)} |",
        f"| TPU chips in use at min | {chips(before, 'atMin')} | {chips(after, 'atMin')} |",
        f"| TPU chips in use at max | {chips(before, 'atMax')} | {chips(after, 'atMax')} |",
        f"| reaching max preempts | {evicts(before)} | {evicts(after)} |",
        f"| high-priority groups pending at max | {waits(before)} | {waits(after)} |",
        f"| a group added serves after (domain/autoscaling.py) | {minutes(before)} | {minutes(after)} |",
        "",
    ]
    if after:
        lines += ["<details><summary>Admission at max, after the change</summary>", "", "```text"]
        lines += [*after["admission"], "", *after["admissionMap"], "```", "", "</details>", ""]
    return lines
