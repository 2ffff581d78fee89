"""The controllers' Helm charts as their releases ship them, rendered by real Helm with the program's values.

The program installs JobSet, Kueue and LWS as `helm.v3.Release`s of their registry.k8s.io charts
with its own values (k8s/controllers.py). Each chart is the `charts/<name>` folder of the
controller's Go module at the pinned tag, which `make controlplane` has already downloaded to build
the controller; it is read from the module cache as test data, never copied into the repository.
`render()` runs `helm template` (the Helm the Kubernetes provider links, built by `make engine`)
with the release name, namespace and values the program gives the Release, so the tests can take
from the rendering what the installed controllers run with: the manager configuration, the
container's arguments, the webhook configurations and their selectors, and the RBAC.

What a release changes when it publishes a chart (image repository and tag, the chart's version
field) does not reach any of those, so the module's folder renders the same objects here.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from k8s import controllers as program
from tests.engine import ENGINE_DIR

# The Go module that ships each chart (and builds each controller: tools/controlplane/<name>/go.mod).
MODULES = {"kueue": "sigs.k8s.io/kueue", "jobset": "sigs.k8s.io/jobset", "lws": "sigs.k8s.io/lws"}
# The Kubernetes version `helm template` renders for: the local plane's (tools/controlplane/kubernetes).
KUBE_VERSION = "1.36.3"


class ChartError(RuntimeError):
    """A chart could not be found or rendered."""


def helm() -> Path:
    return ENGINE_DIR / "bin" / "helm"


def module_version(version: str) -> str:
    """Chart versions are pinned with or without the v (settings/model.py Versions); tags carry it."""
    return "v" + version.removeprefix("v")


@functools.cache
def module_dir(name: str, version: str) -> Path:
    """The controller's module at its tag, from the Go module cache (downloaded if it is not there)."""
    key = f"{MODULES[name]}@{module_version(version)}"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    # Outside any module, so no go.mod is consulted or written; the checksum database checks the zip.
    command = ["go", "mod", "download", "-json", key]
    done = subprocess.run(command, check=False, cwd="/", env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise ChartError(f"go mod download {key} failed: {done.stdout.strip()} {done.stderr.strip()}")
    return Path(json.loads(done.stdout)["Dir"])


def chart_dir(name: str, version: str) -> Path:
    path = module_dir(name, version) / "charts" / name
    if not (path / "Chart.yaml").is_file():
        raise ChartError(f"{MODULES[name]}@{module_version(version)} ships no charts/{name}")
    return path


def chart_values(name: str, version: str) -> dict[str, Any]:
    """The chart's own values.yaml: every key a Release may set."""
    loaded = yaml.safe_load((chart_dir(name, version) / "values.yaml").read_text())
    return loaded if isinstance(loaded, dict) else {}


def undefined_values(values: Mapping[str, Any], defined: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths of `values` that the chart's values.yaml does not define. Helm merges values
    into the chart's defaults and ignores a key no template reads, so a misspelt or retired key
    changes nothing and says nothing. Below a key whose default is not a mapping (a list, a string,
    an empty map meant for free-form labels) any content is the chart's to read, so it stops there."""
    found = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if key not in defined:
            found.append(path)
        elif isinstance(value, Mapping) and isinstance(defined[key], Mapping) and defined[key]:
            found += undefined_values(value, defined[key], path + ".")
    return found


@dataclass(frozen=True)
class Rendered:
    """The objects one chart renders for one release."""

    name: str
    namespace: str
    objects: tuple[dict[str, Any], ...]

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for o in self.objects if o.get("kind") in kinds]

    def one(self, kind: str, name_suffix: str) -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"].endswith(name_suffix)]
        if len(found) != 1:
            names = [o["metadata"]["name"] for o in self.of_kind(kind)]
            raise ChartError(f"{self.name}: expected one {kind} named *{name_suffix}, found {names}")
        return found[0]

    def manager_container(self) -> dict[str, Any]:
        """The controller's container in its Deployment: the one that runs /manager (named `manager`
        in Kueue's and LWS's charts, `controller` in JobSet's)."""
        deployment = self.one("Deployment", program.CHARTS[self.name].deployment.removeprefix(self.name))
        containers = deployment["spec"]["template"]["spec"]["containers"]
        managers = [c for c in containers if c.get("command") == ["/manager"]]
        if len(managers) != 1:
            raise ChartError(f"{self.name}: expected one container running /manager, found {len(managers)}")
        return copy.deepcopy(managers[0])

    def service_account(self) -> str:
        deployment = self.one("Deployment", program.CHARTS[self.name].deployment.removeprefix(self.name))
        return str(deployment["spec"]["template"]["spec"]["serviceAccountName"])

    def manager_config(self) -> dict[str, Any]:
        """The controller's Configuration, from the ConfigMap its Deployment mounts at --config."""
        container = self.manager_container()
        config_arg = next((a for a in container.get("args") or [] if a.startswith("--config=")), None)
        if config_arg is None:
            raise ChartError(f"{self.name}: the manager container has no --config argument")
        file_name = Path(config_arg.removeprefix("--config=")).name
        for configmap in self.of_kind("ConfigMap"):
            text = (configmap.get("data") or {}).get(file_name)
            if text is not None:
                loaded = yaml.safe_load(text)
                if isinstance(loaded, dict):
                    return loaded
        raise ChartError(f"{self.name}: no ConfigMap holds {file_name}")

    def webhook_configurations(self) -> list[dict[str, Any]]:
        return self.of_kind("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")

    def rbac(self) -> list[dict[str, Any]]:
        return self.of_kind("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def program_values(name: str) -> dict[str, Any]:
    return copy.deepcopy(program.VALUES.get(name, {}))


def render(name: str, version: str, values: Mapping[str, Any] | None = None) -> Rendered:
    """`helm template` of the chart as the program's Release installs it (release name, namespace and
    the program's values unless others are given)."""
    chosen = program_values(name) if values is None else dict(values)
    return _render(name, version, json.dumps(chosen, sort_keys=True))


@functools.cache
def _render(name: str, version: str, values_json: str) -> Rendered:
    if not os.access(helm(), os.X_OK):
        raise ChartError(f"{helm()} missing: run `make engine`")
    spec = program.CHARTS[name]
    with tempfile.TemporaryDirectory(prefix="tpu-slicing-chart-") as scratch:
        values_file = Path(scratch) / "values.yaml"
        values_file.write_text(values_json)  # JSON is YAML
        env = {
            **os.environ,
            # Helm's own folders in the scratch space: rendering writes nothing anywhere else.
            "HELM_CACHE_HOME": str(Path(scratch) / "cache"),
            "HELM_CONFIG_HOME": str(Path(scratch) / "config"),
            "HELM_DATA_HOME": str(Path(scratch) / "data"),
        }
        done = subprocess.run(
            [str(helm()), "template", spec.release, str(chart_dir(name, version)),
             "--namespace", spec.namespace, "--values", str(values_file), "--kube-version", KUBE_VERSION],
            check=False, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    if done.returncode != 0:
        raise ChartError(f"helm template {name} {version} failed:\n{done.stderr.strip()}")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    objects = tuple(doc for doc in yaml.load_all(done.stdout, Loader=loader) if isinstance(doc, dict))
    return Rendered(name, spec.namespace, objects)


def walk_webhooks(configurations: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for configuration in configurations:
        for webhook in configuration.get("webhooks") or []:
            yield configuration["kind"], webhook
