"""Checks across every stack file of the repository: reservation claims and name collisions.

`pulumi preview` sees one stack at a time; two stacks claiming the same
sub-block, or more cubes than a block holds, fail only halfway through
creating TPU VMs. This reads all `Pulumi.<stack>.yaml` files and says which
stacks conflict, and over what, before anything is created.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from plan import engine
from settings.loader import ConfigError, load
from settings.model import StackConfig
from settings.stack_file import StackFileError, check_stack_name


@dataclass(frozen=True)
class Conflict:
    stacks: tuple[str, ...]
    message: str

    def __str__(self) -> str:
        return f"{' and '.join(sorted(self.stacks))}: {self.message}"


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


def _block_key(config: StackConfig) -> tuple[str, str, str] | None:
    reservation = config.reservation
    if reservation is None or reservation.block is None or not config.serving.dynamic_slicing:
        return None
    return (config.reservation_project, reservation.name, reservation.block)


def _claims(configs: Mapping[str, StackConfig]) -> list[Conflict]:
    conflicts = []
    by_block: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for stack, config in configs.items():
        key = _block_key(config)
        if key is not None:
            by_block[key].append(stack)
    for (project, name, block), stacks in sorted(by_block.items()):
        where = f"projects/{project}/reservations/{name}/reservationBlocks/{block}"
        owner: dict[str, str] = {}
        for stack in stacks:
            for sub in configs[stack].reservation.sub_blocks or ():  # type: ignore[union-attr]
                if sub in owner:
                    conflicts.append(Conflict((owner[sub], stack), f"both claim sub-block {sub!r} of {where}"))
                else:
                    owner[sub] = stack
        declared = {s: configs[s].reservation.block_cubes for s in stacks}  # type: ignore[union-attr]
        sizes = {v for v in declared.values() if v is not None}
        if len(sizes) > 1:
            named = tuple(s for s, v in declared.items() if v is not None)
            conflicts.append(Conflict(named, f"declare different blockCubes {sorted(sizes)} for {where}"))
        elif sizes:
            size = sizes.pop()
            used = {s: configs[s].tpu.cubes for s in stacks}
            if sum(used.values()) > size:
                detail = ", ".join(f"{s} {n}" for s, n in used.items())
                conflicts.append(
                    Conflict(
                        tuple(stacks),
                        f"claim {sum(used.values())} cubes ({detail}) of {where}, "
                        f"which holds {size} (reservation.blockCubes)",
                    )
                )
    return conflicts


def _names(configs: Mapping[str, StackConfig]) -> list[Conflict]:
    conflicts = []
    owner: dict[tuple[str, str, str], str] = {}
    for stack, config in configs.items():
        names = [*config.names.gcp_names(config.pool_keys()), config.names.sax_bucket(config.project)]
        for name in names:
            key = (config.project, config.location, name)
            if key in owner and owner[key] != stack:
                conflicts.append(
                    Conflict(
                        (owner[key], stack),
                        f"both derive the name {name!r} in {config.project}/{config.location}; "
                        "give one of them another namePrefix",
                    )
                )
            owner.setdefault(key, stack)
    return conflicts


def check(configs: Mapping[str, StackConfig]) -> list[Conflict]:
    return [*_claims(configs), *_names(configs)]


def report(root: Path = engine.ROOT) -> tuple[list[str], list[Conflict]]:
    configs, problems = load_stacks(root)
    found = check(configs)
    names = ", ".join(path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in stack_files(root).values())
    lines = [f"checked {len(configs) + len(problems)} stack file(s): {' '.join(names.split())}"]
    for key, stacks in sorted(_blocks(configs).items()):
        used = sum(configs[s].tpu.cubes for s in stacks)
        lines.append(f"  {key}: {used} cube(s) by {', '.join(f'{s} ({configs[s].tpu.cubes})' for s in stacks)}")
    lines += [f"  INVALID {p.message}" for p in problems]
    lines += [f"  CONFLICT {c}" for c in found] or ([] if problems else ["  no conflicts"])
    return lines, [*problems, *found]


def _blocks(configs: Mapping[str, StackConfig]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for stack, config in configs.items():
        key = _block_key(config)
        if key is not None:
            found["projects/{}/reservations/{}/reservationBlocks/{}".format(*key)].append(stack)
    return found
