"""`controllers.chartRegistry` under the real engine: every chart comes from the mirror it names.

The mirror (tests/chart_mirror.py) is a real OCI registry on loopback, filled by real Helm with the
charts as the controllers' releases package them. The first tests pull them back with Helm. The
rest run the real `pulumi` CLI, engine and Kubernetes provider (`make engine`) on a `dev` stack,
made with the README's commands, whose `controllers.chartRegistry` is the mirror.

The Kubernetes provider pulls a helm.v3.Release's chart in its Check (pulumi-kubernetes
pkg/provider/helm_release.go `Check`, when the inputs are known), but the engine calls Check only
on a configured provider: while the `gke` provider's kubeconfig and clusterIdentifier are unknown
(a brand-new stack, whose cluster does not exist yet), the plugin client returns the inputs
unchecked (pulumi sdk/v3 go/common/resource/plugin/provider_plugin.go, `Configure` leaves
`cfgknown` unset, `Check` returns early), and a brand-new stack's preview pulls nothing. So the
stack's Google Cloud half is brought up first with the GCP stand-in (tests/standins/gcp_provider.py,
whose cluster reports an endpoint on 127.0.0.1 where nothing listens), as after a user's first
`pulumi up`; the previews then configure the provider and Check each Release, pulling its chart.
Three previews: with the mirror trusted (`SSL_CERT_FILE`), untrusted, and against a mirror without LWS.
"""

from __future__ import annotations

import contextlib
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from plan import engine as offline
from settings.loader import load
from tests import charts
from tests.chart_mirror import COMPONENTS, ChartMirror, release, set_values
from tests.controllers import pinned_versions
from tests.engine import Engine, Workspace, readme_stack

# One worker runs the module, so its module-scoped mirror, stack and previews are made once.
pytestmark = pytest.mark.xdist_group("chart-mirror")

PROJECT_ID = "my-tpu-project"
TOKEN = "hf_chartMirrorTestToken0123456789"
STACK = "dev"
NAME = f"{STACK}-new"
RELEASE = "kubernetes:helm.sh/v3:Release"
NOT_GOOGLE_CLOUD = ("kubernetes:", "pulumi:providers:kubernetes", "command:")
PINNED = pinned_versions()
# What registry.k8s.io's charts hold: each release script's images (tests/chart_mirror.py `release`
# cites the lines), written out here rather than derived from it.
IMAGES: dict[str, dict[tuple[str, ...], str]] = {
    "kueue": {
        ("controllerManager", "manager", "image"): "registry.k8s.io/kueue/kueue",
        ("kueueViz", "backend", "image"): "registry.k8s.io/kueue/kueueviz-backend",
        ("kueueViz", "frontend", "image"): "registry.k8s.io/kueue/kueueviz-frontend",
    },
    "jobset": {("image",): "registry.k8s.io/jobset/jobset"},
    "lws": {("image", "manager"): "registry.k8s.io/lws/lws"},
}
# The chart versions the releases publish: Kueue and JobSet without the tag's v, LWS with it.
CHART_VERSIONS = {"kueue": "0.19.2", "jobset": "0.12.0", "lws": "v0.8.0"}
PULLS = [("kueue", "0.19.2"), ("jobset", "0.12.0"), ("lws", "v0.8.0"), ("lws", "0.8.0")]


def _tag(component: str) -> str:
    return charts.module_version(PINNED[component])


def _at(values: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        values = values[key]
    return values


def _without_images(values: dict[str, Any], component: str) -> dict[str, Any]:
    copied = json.loads(json.dumps(values))
    for path in IMAGES[component]:
        image = _at(copied, path)
        for key in ("repository", "tag", "pullPolicy"):
            image.pop(key, None)
    return copied


@pytest.fixture(scope="module")
def mirror() -> Iterator[ChartMirror]:
    with ChartMirror() as running:
        yield running


@dataclass(frozen=True)
class Pulled:
    files: dict[str, bytes]  # path inside the chart folder -> content

    def yaml(self, name: str) -> Any:
        return yaml.safe_load(self.files[name])


@pytest.fixture(scope="module")
def pulled(mirror: ChartMirror, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Pulled]:
    """`helm pull` of each chart at each version a Release may ask for, read back from the archive."""
    found = {}
    for component, version in PULLS:
        into = tmp_path_factory.mktemp(f"pull-{component}")
        mirror.helm("pull", mirror.reference(component), "--version", version,
                    "--ca-file", str(mirror.ca_file), "--destination", str(into))  # fmt: skip
        (archive,) = into.glob("*.tgz")
        files = {}
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    content = tar.extractfile(member)
                    assert content is not None
                    files[member.name.split("/", 1)[1]] = content.read()
        found[(component, version)] = Pulled(files)
    return found


def test_the_pins_are_the_releases_the_recipes_describe() -> None:
    assert PINNED == {"kueue": "0.19.2", "jobset": "0.12.0", "lws": "v0.8.0"}  # the hack/ line numbers cited


def test_the_values_edit_keeps_every_other_line() -> None:
    for component in COMPONENTS:
        original = (charts.chart_dir(component, PINNED[component]) / "values.yaml").read_text()
        edits = release(component, PINNED[component]).values
        edited = set_values(original, edits)
        before, after = original.splitlines(), edited.splitlines()
        assert len(before) == len(after)  # comments and layout kept, no line added or dropped
        changed = [b for b, a in zip(before, after, strict=True) if a != b]
        assert len(changed) <= len(edits)  # a line may already hold its value (LWS's repository)


def test_the_mirror_lists_each_chart_under_the_release_tags(mirror: ChartMirror) -> None:
    assert {c: mirror.tags_list(c) for c in COMPONENTS} == {
        "kueue": ["0.19.2"],
        "jobset": ["0.12.0"],
        "lws": ["0.8.0", "v0.8.0"],
    }


@pytest.mark.parametrize(("component", "version"), PULLS)
def test_helm_pulls_the_chart_at_the_pinned_version(pulled: dict, component: str, version: str) -> None:
    chart = pulled[(component, version)].yaml("Chart.yaml")
    assert chart["name"] == component
    assert chart["version"] == CHART_VERSIONS[component]
    assert chart["appVersion"] == _tag(component)


@pytest.mark.parametrize(("component", "version"), PULLS)
def test_the_pulled_chart_runs_the_released_images(pulled: dict, component: str, version: str) -> None:
    values = pulled[(component, version)].yaml("values.yaml")
    for path, repository in IMAGES[component].items():
        image = _at(values, path)
        assert (image["repository"], image["tag"], image["pullPolicy"]) == (
            repository,
            _tag(component),
            "IfNotPresent",
        ), ".".join(path)


@pytest.mark.parametrize("component", COMPONENTS)
def test_nothing_else_differs_from_the_module_at_the_tag(pulled: dict, component: str) -> None:
    chart = pulled[(component, CHART_VERSIONS[component])]
    source = charts.chart_dir(component, PINNED[component])
    module_values = yaml.safe_load((source / "values.yaml").read_text())
    assert _without_images(chart.yaml("values.yaml"), component) == _without_images(module_values, component)
    assert {"templates", "Chart.yaml", "values.yaml"} <= {name.split("/")[0] for name in chart.files}
    for name, content in chart.files.items():
        if name in ("Chart.yaml", "values.yaml"):
            continue  # helm package sets version and appVersion; values are compared above
        assert (source / name).read_bytes() == content, name
    # Chart.yaml: only the two fields helm package sets.
    module_chart = yaml.safe_load((source / "Chart.yaml").read_text())
    pulled_chart = chart.yaml("Chart.yaml")
    for key in ("version", "appVersion"):
        module_chart.pop(key, None)
        pulled_chart.pop(key, None)
    assert pulled_chart == module_chart


# --- the real engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.create(tmp_path_factory.mktemp("engine"))


@pytest.fixture(scope="module")
def stack(engine: Engine) -> Workspace:
    """A new dev stack made with the README's commands, its Google Cloud half up (the stand-in's)."""
    ws = readme_stack(engine, STACK, "chart-mirror", project=PROJECT_ID, token=TOKEN)
    config, secret_keys = offline.read_stack_config(ws.root / f"Pulumi.{NAME}.yaml")
    plan = offline.run(config, stack=NAME, secret_keys=secret_keys, preview=True)
    targets = [arg for r in plan.resources if not r.type.startswith(NOT_GOOGLE_CLOUD) for arg in ("--target", r.urn)]
    ws.pulumi("up", "--yes", "--skip-preview", "--stack", NAME, *targets)
    return ws


@dataclass(frozen=True)
class Preview:
    returncode: int
    output: str
    document: dict[str, Any]
    requests: list[tuple[str, str, int]]  # what the observed mirror served during the preview
    log: str  # what it logged during the preview

    def releases(self) -> dict[str, dict[str, Any]]:
        steps = [s for s in self.document.get("steps") or [] if s["urn"].split("::")[-2].endswith(RELEASE)]
        return {s["urn"].rsplit("::", 1)[1]: s for s in steps}

    def error_lines(self, component: str) -> list[str]:
        return [line for line in self.output.splitlines() if f"{RELEASE} resource '{component}':" in line]


def _preview(ws: Workspace, registry: str, env: dict[str, str], observed: ChartMirror, *, as_json: bool) -> Preview:
    ws.pulumi("config", "set", "--path", "tpu-slicing:controllers.chartRegistry", registry, "--stack", NAME)
    log_file = observed.workdir / "chart-registry.log"
    served, logged = len(observed.requests()), len(log_file.read_text(errors="replace"))
    args = ["preview", "--stack", NAME, "--diff", *(["--json"] if as_json else [])]
    done = ws.pulumi(*args, check=False, extra_env=env)
    document = {}
    if as_json:
        with contextlib.suppress(json.JSONDecodeError):
            document = json.loads(done.stdout)
    log = log_file.read_text(errors="replace")[logged:]
    return Preview(done.returncode, done.stdout + done.stderr, document, observed.requests()[served:], log)


@pytest.fixture(scope="module")
def trusted(stack: Workspace, mirror: ChartMirror) -> Preview:
    return _preview(stack, mirror.registry, mirror.env, mirror, as_json=True)


@pytest.fixture(scope="module")
def untrusted(stack: Workspace, mirror: ChartMirror, engine: Engine) -> Preview:
    # The CLI's environment is the engine's own (tests/engine.py), not this process's.
    assert "SSL_CERT_FILE" not in {**engine.env, **stack.env}
    return _preview(stack, mirror.registry, {}, mirror, as_json=False)


@pytest.fixture(scope="module")
def partial() -> Iterator[ChartMirror]:
    with ChartMirror(components=("kueue", "jobset")) as running:
        yield running


@pytest.fixture(scope="module")
def without_lws(stack: Workspace, partial: ChartMirror) -> Preview:
    return _preview(stack, partial.registry, partial.env, partial, as_json=False)


def test_the_dev_stack_installs_all_three_controllers(stack: Workspace) -> None:
    raw, secret_keys = offline.read_stack_config(stack.root / f"Pulumi.{NAME}.yaml")
    config = load(raw, stack=NAME, project=raw.get("gcp:project"), secret_keys=secret_keys)
    assert config.controllers.install  # the default, which the dev stack file keeps
    assert config.serving.backend.value == "vllm-pd"  # needs jobset, kueue and lws (backends/__init__.py)


def test_a_preview_with_the_mirror_trusted_plans_each_release_from_it(trusted: Preview, mirror: ChartMirror) -> None:
    assert trusted.returncode == 0, trusted.output[-4000:]
    releases = trusted.releases()
    assert sorted(releases) == sorted(COMPONENTS)
    for component, step in releases.items():
        inputs = step["newState"]["inputs"]
        assert step["op"] == "create"
        assert inputs["chart"] == mirror.reference(component)
        assert inputs["version"] == PINNED[component]
        # Keys only the provider's Check adds (decoding the Release and setting its defaults): the
        # Check that pulls the chart ran, rather than the engine passing the inputs through.
        assert {"verify", "lint", "dependencyUpdate"} <= set(inputs), sorted(inputs)


def test_the_trusted_preview_pulled_every_chart_from_the_mirror(trusted: Preview) -> None:
    assert trusted.returncode == 0
    for component in COMPONENTS:
        repository = f"/v2/{component}/charts/{component}"
        manifests = [
            p for m, p, s in trusted.requests if m == "GET" and s == 200 and p.startswith(f"{repository}/manifests/")
        ]
        blobs = [p for m, p, s in trusted.requests if m == "GET" and s == 200 and p.startswith(f"{repository}/blobs/")]
        assert manifests, (component, trusted.requests)
        assert {p.rsplit("/", 1)[1] for p in manifests} <= {
            CHART_VERSIONS[component],
            PINNED[component].removeprefix("v"),
        }
        assert blobs, (component, trusted.requests)  # the chart archive itself, not only its manifest


def test_a_preview_that_does_not_trust_the_mirror_fails_on_the_chart(untrusted: Preview, mirror: ChartMirror) -> None:
    assert untrusted.returncode != 0
    lines = [line for component in COMPONENTS for line in untrusted.error_lines(component)]
    assert lines, untrusted.output[-4000:]
    for line in lines:
        component = re.search(rf"{re.escape(RELEASE)} resource '([a-z]+)'", line)
        assert component is not None
        assert f"property chart value {{{mirror.reference(component[1])}}} has a problem" in line
        assert "x509: certificate signed by unknown authority" in line
    # Nothing was served: each attempt ended in the TLS handshake, which the registry logged.
    assert untrusted.requests == []
    assert "TLS handshake error" in untrusted.log


def test_a_preview_against_a_mirror_without_lws_fails_naming_lws(without_lws: Preview, partial: ChartMirror) -> None:
    assert without_lws.returncode != 0
    (line,) = without_lws.error_lines("lws")
    assert f"property chart value {{{partial.reference('lws')}}} has a problem" in line
    assert without_lws.error_lines("kueue") == without_lws.error_lines("jobset") == []
    missing = [(m, p, s) for m, p, s in without_lws.requests if p.startswith("/v2/lws/")]
    assert missing and all(s == 404 for _m, _p, s in missing), without_lws.requests
