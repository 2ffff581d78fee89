"""The endpoint picker configuration each stack's program generates, and the loader verdict recorded for it.

The text is taken from what the program registers (plan/engine.py runs `__main__.py` under mocks for
every committed `Pulumi.<stack>.yaml`): the ConfigMap data key the picker's `--config-file` names, the
picker container's image and arguments. Stacks that generate the same (text, image tag, arguments)
share one entry. tools/epp_loader/verify.sh builds the router's own loader at the image's tag and
runs it on each entry; `record` writes tools/epp_loader/verdict.json from those runs, `check` compares.

    python -m tests.epp_loader_config render --out DIR      # DIR/<n>.yaml + DIR/manifest.json
    python -m tests.epp_loader_config pinned-tag            # the picker image tag the stacks pin
    python -m tests.epp_loader_config check                 # recorded verdict vs. generated text
    python -m tests.epp_loader_config record|verify --loader BIN --tag T --commit C --source S
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VERDICT_FILE = ROOT / "tools" / "epp_loader" / "verdict.json"
VERIFY_SCRIPT = "tools/epp_loader/verify.sh"
ROUTER_MODULE = "github.com/llm-d/llm-d-router"
PICKER_IMAGE_REPOSITORY = "ghcr.io/llm-d/llm-d-router-endpoint-picker"
# The router comes from the Go module proxy (which refuses llm-d-router v0.9.0 today: then build the
# same overlay against a source tree of the tag by hand, and say so in the commit).
REVERIFY_COMMAND = f"{VERIFY_SCRIPT} --record (needs the proxy to serve {ROUTER_MODULE} at the pinned tag)"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"


@dataclass(frozen=True)
class Generated:
    """One endpoint-picker configuration as the program generates it."""

    stacks: tuple[str, ...]
    config_map: str  # namespace/name
    key: str
    image: str
    epp_args: tuple[str, ...]
    text: str

    @property
    def sha256(self) -> str:
        return sha256(self.text)

    @property
    def tag(self) -> str:
        return image_tag(self.image)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def image_tag(image: str) -> str:
    reference = image.split("@", 1)[0]
    name, _, tag = reference.rpartition(":")
    return tag if name and "/" not in tag else ""


def stack_names(root: Path = ROOT) -> list[str]:
    """The committed stacks (git's index), not a stack file a test writes for a moment."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--", "Pulumi.*.yaml"], capture_output=True, text=True, check=False
    )
    files = listed.stdout.split() if listed.returncode == 0 else [p.name for p in root.glob("Pulumi.*.yaml")]
    return sorted(name[len("Pulumi.") : -len(".yaml")] for name in files)


def config_file_arg(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--config-file" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--config-file="):
            return arg.split("=", 1)[1]
    return None


def stack_configs(stack: str) -> list[Generated]:
    """Every endpoint-picker config one stack's program registers: a Deployment whose container
    reads `--config-file` from a mounted ConfigMap, and that ConfigMap's text."""
    from plan import engine

    result = engine.run_stack(stack)
    maps = {
        (r.get("metadata.namespace"), r.get("metadata.name")): r.get("data") or {} for r in result.of_type(CONFIGMAP)
    }
    found = []
    for deployment in result.of_type(DEPLOYMENT):
        pod = engine.unwrap(deployment.inputs)["spec"]["template"]["spec"]
        namespace = deployment.get("metadata.namespace")
        volumes = {v["name"]: v["configMap"]["name"] for v in pod.get("volumes") or [] if v.get("configMap")}
        for container in pod.get("containers") or []:
            args = [str(a) for a in container.get("args") or []]
            path = config_file_arg(args)
            if path is None:
                continue
            for mount in container.get("volumeMounts") or []:
                directory = mount["mountPath"].rstrip("/") + "/"
                if mount["name"] in volumes and path.startswith(directory):
                    key = path[len(directory) :]
                    data = maps.get((namespace, volumes[mount["name"]]), {})
                    if key not in data:
                        raise LookupError(f"{stack}: {deployment.name} reads {path}, ConfigMap has no key {key!r}")
                    found.append(
                        Generated(
                            stacks=(stack,),
                            config_map=f"{namespace}/{volumes[mount['name']]}",
                            key=key,
                            image=str(container["image"]),
                            epp_args=tuple(args),
                            text=str(data[key]),
                        )
                    )
    return found


def generated_configs(stacks: Sequence[str] | None = None) -> list[Generated]:
    """The distinct configs across stacks (same text, image and arguments: one entry, stacks merged)."""
    merged: dict[tuple[str, str, tuple[str, ...]], Generated] = {}
    for stack in stacks if stacks is not None else stack_names():
        for config in stack_configs(stack):
            key = (config.text, config.image, config.epp_args)
            if key in merged:
                old = merged[key]
                merged[key] = Generated(
                    (*old.stacks, stack), old.config_map, old.key, old.image, old.epp_args, old.text
                )
            else:
                merged[key] = config
    return sorted(merged.values(), key=lambda g: (g.stacks, g.sha256))


def pinned_default_tag() -> str:
    from settings.model import Versions

    return image_tag(Versions().endpoint_picker_image)


def load_verdict(path: Path = VERDICT_FILE) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def check_recorded(recorded: Mapping[str, Any], configs: Sequence[Generated]) -> list[str]:
    """Why the recorded verdict does not cover exactly these generated configs ([] when it does)."""
    problems = []
    entries = list(recorded.get("configs") or [])
    by_sha = {e.get("sha256"): e for e in entries}
    for config in configs:
        where = f"stacks {', '.join(config.stacks)} ({config.config_map} key {config.key})"
        entry = by_sha.get(config.sha256)
        if entry is None:
            problems.append(
                f"{where}: the generated endpoint-picker config has sha256 {config.sha256}, which no recorded "
                f"verdict covers (recorded: {', '.join(sorted(str(s) for s in by_sha)) or 'none'})"
            )
            continue
        if entry.get("module") != ROUTER_MODULE:
            problems.append(f"{where}: recorded module {entry.get('module')!r}, expected {ROUTER_MODULE!r}")
        if entry.get("tag") != config.tag:
            problems.append(
                f"{where}: recorded with the loader at {entry.get('tag')!r}, the picker image pins {config.tag!r}"
            )
        if entry.get("image") != config.image:
            problems.append(f"{where}: recorded image {entry.get('image')!r}, generated {config.image!r}")
        if list(entry.get("eppArgs") or []) != list(config.epp_args):
            problems.append(f"{where}: the picker's arguments differ from the recorded ones")
        if not str(entry.get("verdict", "")).startswith(f"ACCEPTED by llm-d-router {config.tag} "):
            problems.append(
                f"{where}: the recorded verdict is not an acceptance at {config.tag}: {entry.get('verdict')!r}"
            )
        if sorted(entry.get("stacks") or []) != sorted(config.stacks):
            problems.append(f"{where}: recorded for stacks {entry.get('stacks')}, generated by {list(config.stacks)}")
    generated = {c.sha256 for c in configs}
    for entry in entries:
        if entry.get("sha256") not in generated:
            problems.append(f"recorded verdict for sha256 {entry.get('sha256')} matches no generated config")
    if problems:
        problems.append(f"re-verify with the pinned loader: {REVERIFY_COMMAND}")
    return problems


# --- running the built loader ----------------------------------------------------------------------


def render(out: Path, configs: Sequence[Generated]) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    manifest = []
    for index, config in enumerate(configs):
        path = out / f"{index}-{config.key}"
        path.write_bytes(config.text.encode())
        manifest.append(
            {
                "file": str(path),
                "stacks": list(config.stacks),
                "configMap": config.config_map,
                "key": config.key,
                "image": config.image,
                "tag": config.tag,
                "sha256": config.sha256,
                "eppArgs": list(config.epp_args),
            }
        )
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def run_loader(loader: Path, path: Path, epp_args: Sequence[str]) -> tuple[int, str]:
    done = subprocess.run(
        [str(loader), "--quiet", "--config", str(path), "--", *epp_args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()
    return done.returncode, line


def _verify_all(args: argparse.Namespace, *, write: bool) -> int:
    import tempfile

    configs = generated_configs()
    if not configs:
        print("no stack generates an endpoint-picker config", file=sys.stderr)
        return 1
    tags = sorted({c.tag for c in configs})
    if tags != [args.tag]:
        print(
            f"the stacks pin picker tag(s) {tags}; this loader was built at {args.tag}: run verify.sh with "
            f"--tag for each (one recorded tag per run is all this script writes)",
            file=sys.stderr,
        )
        return 2
    entries = []
    refused = 0
    with tempfile.TemporaryDirectory(prefix="epp-loader-") as tmp:
        for item in render(Path(tmp), configs):
            code, line = run_loader(args.loader, Path(item["file"]), item["eppArgs"])
            print(f"{', '.join(item['stacks'])}: {line}")
            if code != 0:
                refused += 1
            entries.append(
                {
                    "stacks": item["stacks"],
                    "configMap": item["configMap"],
                    "key": item["key"],
                    "module": ROUTER_MODULE,
                    "tag": args.tag,
                    "commit": args.commit,
                    "image": item["image"],
                    "sha256": item["sha256"],
                    "eppArgs": item["eppArgs"],
                    "verdict": line,
                }
            )
    if refused:
        print(f"the loader refused {refused} generated config(s); {VERDICT_FILE} left as it is", file=sys.stderr)
        return 1
    if not write:
        problems = check_recorded(load_verdict(), configs)
        recorded = {e["sha256"]: e.get("verdict") for e in load_verdict().get("configs") or []}
        for entry in entries:
            if recorded.get(entry["sha256"]) != entry["verdict"]:
                problems.append(f"sha256 {entry['sha256']}: the loader now says {entry['verdict']!r}")
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    document = {
        "about": (
            "The llm-d-router endpoint picker's own loader (cmd/epp/runner, config phases one and two) "
            "accepted exactly these generated config texts; tests/test_epp_loader.py fails when the "
            "program generates any other text. Written by tools/epp_loader/verify.sh --record."
        ),
        "module": ROUTER_MODULE,
        "tag": args.tag,
        "commit": args.commit,
        "source": args.source,
        "go": args.go_version,
        "configs": entries,
    }
    VERDICT_FILE.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {VERDICT_FILE.relative_to(ROOT)}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.epp_loader_config")
    sub = parser.add_subparsers(dest="command", required=True)
    render_cmd = sub.add_parser("render", help="write every distinct generated config and a manifest")
    render_cmd.add_argument("--out", type=Path, required=True)
    sub.add_parser("pinned-tag", help="print the picker image tag the stacks pin")
    sub.add_parser("check", help="compare the recorded verdict with the generated configs")
    for name in ("record", "verify"):
        run_cmd = sub.add_parser(name, help="run a built loader on every generated config")
        run_cmd.add_argument("--loader", type=Path, required=True)
        run_cmd.add_argument("--tag", required=True)
        run_cmd.add_argument("--commit", required=True)
        run_cmd.add_argument("--source", required=True)
        run_cmd.add_argument("--go-version", default="")
    args = parser.parse_args(argv)
    if args.command == "render":
        for item in render(args.out, generated_configs()):
            print(f"{item['file']}\t{item['tag']}\t{','.join(item['stacks'])}\t{item['sha256']}")
        return 0
    if args.command == "pinned-tag":
        tags = sorted({c.tag for c in generated_configs()} or {pinned_default_tag()})
        print("\n".join(tags))
        return 0
    if args.command == "check":
        problems = check_recorded(load_verdict(), generated_configs())
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    return _verify_all(args, write=args.command == "record")


if __name__ == "__main__":
    sys.exit(main())
