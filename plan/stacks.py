"""Checks across every stack file of the repository: the contradictions of settings/rules_fleet.py.

`pulumi preview` sees one stack at a time; two stacks claiming the same sub-block, a block from two
zones, more cubes than a block holds, or one Workload Identity principal in one project each pass
alone and fail (or leak grants) only once both exist. This reads all `Pulumi.<stack>.yaml` files,
gives each its Workload Identity principals (`principals`, from its settings and the names the
components give their service accounts) and says which stacks contradict, over which key, before
anything is created. `check` is the one check: `make stacks`, `make fleet` (plan/fleet.py), the
rollout before its first step (operate/__main__.py) and CI's `make stacks` all run it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from plan import engine
from settings import rules_fleet
from settings.loader import ConfigError, load
from settings.model import Backend, StackConfig
from settings.rules_fleet import Principal
from settings.stack_file import StackFileError, check_stack_name

# What the fleet refuses, and each invalid stack file (one stack, no key): settings/rules_fleet.py.
Conflict = rules_fleet.Contradiction


def stack_files(root: Path = engine.ROOT) -> dict[str, Path]:
    return {
        path.name.removeprefix("Pulumi.").removesuffix(".yaml"): path for path in sorted(root.glob("Pulumi.*.yaml"))
    }


def load_stacks(root: Path = engine.ROOT) -> tuple[dict[str, StackConfig], list[Conflict]]:
    """Every stack's validated configuration; invalid stack files are reported, not raised, each
    as one line that starts with the file's name."""
    configs, problems = {}, []
    for stack, path in stack_files(root).items():
        try:
            check_stack_name(stack)
        except StackFileError as err:
            problems.append(Conflict((stack,), f"{path.name}: {err}"))
            continue
        try:
            raw, secret_keys = engine.read_stack_config(path)
            configs[stack] = load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secret_keys)
        except StackFileError as err:
            problems.append(Conflict((stack,), str(err)))
        except ConfigError as err:
            problems.append(Conflict((stack,), f"{path.name}: {'; '.join(err.problems)}"))
    return configs, problems


def principals(config: StackConfig) -> tuple[rules_fleet.Principal, ...]:
    """The Kubernetes service accounts the stack's program grants Google Cloud roles to, from its
    settings and the names the components give them (tests/test_fleet_contradictions.py holds this
    to the IAM members of each stack's offline plan)."""
    # Imported here: the components bring the Pulumi providers, which the table and checks need not load.
    from k8s import metrics_adapter

    serving, names = config.serving, config.names
    # The accounts' names derive from namePrefix (settings/naming.py): only a shared prefix in two
    # regions of a project (where no derived Google Cloud name collides) makes them one principal.
    namespace, key = serving.namespace, "namePrefix"
    if serving.backend is Backend.VLLM_PD:
        found = [Principal(namespace, names.model_server_account, key, "the vLLM model servers")]
        if serving.benchmark.enabled:
            found.append(Principal(namespace, names.benchmark_account, key, "the serving benchmark"))
        scaled = [role for role in rules_fleet.ROLES if getattr(serving, role).autoscaling is not None]
        if scaled and config.controllers.install:
            found.append(
                Principal(
                    metrics_adapter.NAMESPACE,
                    metrics_adapter.NAME,
                    f"serving.{scaled[0]}.autoscaling",
                    "the custom metrics adapter",
                    rules_fleet.ADAPTER_ALLOWED,
                )
            )
        return tuple(found)
    if serving.backend is Backend.SAXML:
        return (
            Principal(namespace, names.sax_cell_account, key, "the Saxml admin and model servers"),
            Principal(namespace, names.sax_http_account, key, "sax-http"),
        )
    if serving.backend is Backend.JETSTREAM:
        return (Principal(namespace, names.jetstream_account, key, "the JetStream servers"),)
    return ()


def fleet(configs: Mapping[str, StackConfig]) -> list[rules_fleet.FleetStack]:
    return [rules_fleet.FleetStack(name, config, principals(config)) for name, config in configs.items()]


def check(configs: Mapping[str, StackConfig]) -> list[Conflict]:
    """The one check of the fleet: `make stacks`, `make fleet` and the rollout refuse by it."""
    return rules_fleet.check(fleet(configs))


def report(root: Path = engine.ROOT) -> tuple[list[str], list[Conflict]]:
    configs, problems = load_stacks(root)
    found = check(configs)
    names = ", ".join(path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in stack_files(root).values())
    lines = [f"checked {len(configs) + len(problems)} stack file(s): {' '.join(names.split())}"]
    for where, group in rules_fleet.blocks(fleet(configs)).items():
        used = sum(rules_fleet.most_cubes(s.config) for s in group)
        by = ", ".join(f"{s.name} ({rules_fleet.most_cubes(s.config)})" for s in group)
        lines.append(f"  {where}: {used} cube(s) by {by}")
    lines += [f"  INVALID {p.message}" for p in problems]
    lines += [f"  CONFLICT {c}" for c in found] or ([] if problems else ["  no conflicts"])
    return lines, [*problems, *found]
