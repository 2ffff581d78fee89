"""The Kubernetes objects a plan would apply, rebuilt from what the program registered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from plan import outputs
from plan.engine import PlanResult, Resource, mask, unwrap

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def is_kubernetes_object(resource: Resource) -> bool:
    return resource.custom and resource.type.startswith("kubernetes:") and resource.type != HELM_RELEASE


def body(resource: Resource, *, masked: bool = True) -> dict[str, Any]:
    """The object as the API server would receive it; secrets masked unless asked otherwise."""
    inputs = mask(resource.inputs) if masked else unwrap(resource.inputs)
    return {key: value for key, value in inputs.items() if value is not None and key != "status"}


def objects(result: PlanResult, *, masked: bool = True) -> list[tuple[Resource, dict[str, Any]]]:
    return [(r, body(r, masked=masked)) for r in result.resources if is_kubernetes_object(r)]


def file_name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "cluster"
    return f"{namespace}--{obj['kind'].lower()}--{meta.get('name', 'unnamed')}.yaml"


# Lists what the plan wrote into a folder: the folder is the plan's, and only those files are
# ever removed by a later plan.
MARKER = ".tpu-slicing-plan"


class NotOwnedError(ValueError):
    pass


def claim(directory: Path, names: list[str], owned: bool = False, force: bool = False) -> None:
    """Make `directory` the plan's output folder, removing only what an earlier plan wrote there.

    `owned`: the program's own folder (build/plan/<stack>), whose YAML files are all plan output.
    `names`: the files about to be written; one that is there and no plan wrote is refused unless `force`.
    """
    if any((directory / f"Pulumi{ext}").exists() for ext in (".yaml", ".yml", ".json")):
        raise NotOwnedError(f"{directory} holds a Pulumi project: choose an empty folder for --out")
    marker = directory / MARKER
    if owned and directory.exists() and not marker.exists():
        marker.write_text("".join(f"{path.name}\n" for path in sorted(directory.glob("*.yaml"))))
    if directory.exists() and any(directory.iterdir()) and not marker.exists() and not force:
        raise NotOwnedError(
            f"{directory} is not empty and was not written by a plan: choose an empty folder for --out, "
            "or --force to write beside what is there"
        )
    earlier = set(marker.read_text().splitlines()) if marker.exists() else set()
    if not force:
        for name in names:
            if name not in earlier and (directory / name).exists():
                raise NotOwnedError(
                    f"{directory / name} exists and no plan wrote it; allowed: another --out folder, "
                    f"or --force to overwrite {name}"
                )
    directory.mkdir(parents=True, exist_ok=True)
    for name in earlier:
        # Never a Pulumi project or stack file, whatever a (hand-edited) list says.
        if name and "/" not in name and not outputs.PULUMI_FILE.fullmatch(name) and (directory / name).is_file():
            (directory / name).unlink()
    marker.write_text("")


def integral(value: Any) -> Any:
    """`value` with every integral float an int again.

    Recorded inputs crossed the wire as a protobuf Struct, whose only number is a double
    (google/protobuf/struct.proto, read back by pulumi/runtime/rpc.py), so the program's
    `port: 9100` comes back as 9100.0. The program sets no integral float on purpose (no float
    literal in its objects; quantities are strings), and a Kubernetes number field takes 9100 as
    well, so this restores what it wrote. 0.5 stays 0.5."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [integral(item) for item in value]
    return value


def write(result: PlanResult, directory: Path, owned: bool = False, force: bool = False) -> list[Path]:
    """Write each object (and each Helm release's chart, version and values) as a YAML file,
    integers as integers (`integral`); `force` overwrites files no plan wrote (`claim`)."""
    texts: dict[Path, str] = {}
    for _, obj in objects(result):
        texts[outputs.inside(directory, file_name(obj))] = yaml.safe_dump(integral(obj), sort_keys=False)
    for release in result.of_type(HELM_RELEASE):
        inputs = mask(release.inputs)
        doc = {key: inputs.get(key) for key in ("name", "chart", "version", "namespace", "values")}
        path = outputs.inside(directory, f"{inputs.get('namespace')}--helm-release--{inputs.get('name')}.yaml")
        texts[path] = yaml.safe_dump(integral(doc), sort_keys=False)
    claim(directory, [path.name for path in texts], owned, force)
    for path, text in texts.items():
        path.write_text(text)
    (directory / MARKER).write_text("".join(f"{path.name}\n" for path in sorted(texts)))
    return sorted(texts)
