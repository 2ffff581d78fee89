"""A mirror of registry.k8s.io's controller charts on loopback: a real OCI registry, filled by real Helm.

`controllers.chartRegistry` points the program's Helm Releases at a mirror of registry.k8s.io (an
Artifact Registry remote repository in production): each chart is
`<chartRegistry>/<component>/charts/<component>` at the pinned version (k8s/controllers.py).
`ChartMirror` is such a mirror on 127.0.0.1, so a test can show that a stack pulls every chart from
where its config says:

    with ChartMirror() as mirror:
        ws.pulumi("config", "set", "--path", "tpu-slicing:controllers.chartRegistry", mirror.registry, ...)
        ws.pulumi("preview", ..., extra_env=mirror.env)

Real here: the registry is go-containerregistry's pkg/registry, an implementation of the OCI
distribution API, served over TLS by `bin/chart-registry` (tools/registry, built by `make
engine`); the charts are packaged and pushed by the Helm the Kubernetes provider links (`make
engine`), from each controller's `charts/<name>` folder at the pinned tag (tests/charts.py), with
the edits its release script makes before `helm package` (`RELEASES` below, each citing its
script), so the mirror serves the charts registry.k8s.io serves. The serving certificate is for IP
127.0.0.1, signed by a CA of the mirror's own; `env` is what the `pulumi` CLI needs to trust it
(`SSL_CERT_FILE`, which the Kubernetes provider plugin inherits: its helm.v3.Release has no CA option
for OCI charts).

What it does not show: Artifact Registry's authentication (the mirror takes anonymous pushes and
pulls; a real one needs `helm registry login` or a credential helper on the machine that runs
Pulumi) and a remote repository's caching of registry.k8s.io (upstream fetches, cache misses, an
upstream outage). The charts themselves are rebuilt from source rather than copied from
registry.k8s.io, so their archives' digests differ from the published ones; their contents are what
the release scripts produce.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from tests import charts
from tests.controllers import _certificates, pinned_versions
from tests.engine import ENGINE_DIR

COMPONENTS = ("kueue", "jobset", "lws")
START_TIMEOUT = 30.0  # seconds for chart-registry to publish its address
STOP_GRACE = 10.0
# The manifest media type `helm push` writes (Helm v3.18.6 pkg/registry/client.go Push: an OCI image
# manifest whose config is the chart's metadata).
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class ChartMirrorError(RuntimeError):
    """The mirror could not be started or filled."""


def registry_binary() -> Path:
    return ENGINE_DIR / "bin" / "chart-registry"


@dataclass(frozen=True)
class Release:
    """How a controller's release packages its chart: values set before `helm package`, the chart's
    version and appVersion, and any further tag registry.k8s.io serves the chart under."""

    values: tuple[tuple[str, str], ...]  # dotted path in values.yaml -> the value the script sets
    version: str  # helm package --version
    app_version: str  # helm package --app-version
    extra_tags: tuple[str, ...] = ()


def _image(path: str, repository: str, tag: str) -> tuple[tuple[str, str], ...]:
    return ((f"{path}.repository", repository), (f"{path}.tag", tag), (f"{path}.pullPolicy", "IfNotPresent"))


def release(component: str, pinned: str) -> Release:
    """The release script's edits for `component` at the `pinned` chart version (settings/model.py)."""
    tag = charts.module_version(pinned)  # the git tag the release is cut from: GIT_TAG
    if component == "kueue":
        # kueue hack/helm-chart-package.sh at v0.19.2: a promoted tag (line 37) sets IMAGE_REGISTRY to
        # registry.k8s.io/kueue (line 39); lines 75, 78 and 79 set the manager's and KueueViz's images;
        # line 92 packages with --version "${GIT_TAG/#v/}" (line 42) --app-version "${GIT_TAG}".
        return Release(
            values=(
                *_image("controllerManager.manager.image", "registry.k8s.io/kueue/kueue", tag),
                *_image("kueueViz.backend.image", "registry.k8s.io/kueue/kueueviz-backend", tag),
                *_image("kueueViz.frontend.image", "registry.k8s.io/kueue/kueueviz-frontend", tag),
            ),
            version=tag.removeprefix("v"),
            app_version=tag,
        )
    if component == "jobset":
        # jobset hack/helm-chart-package.sh at v0.12.0: IMAGE_REGISTRY registry.k8s.io/jobset for a
        # promoted tag (lines 37-39), the image set at line 48, packaged at line 50 with
        # --version "${GIT_TAG/#v/}" (line 42) --app-version "${GIT_TAG}".
        return Release(
            values=_image("image", "registry.k8s.io/jobset/jobset", tag),
            version=tag.removeprefix("v"),
            app_version=tag,
        )
    if component == "lws":
        # lws hack/push-chart.sh at v0.8.0: for a release tag (lines 39-43) the image is
        # registry.k8s.io/lws/lws and the chart version the tag itself, v included; the image set at
        # line 49, packaged at line 51 with --version and --app-version both "${chart_version}".
        # registry.k8s.io serves that chart under `v0.8.0` and `0.8.0` both, and the provider's Check
        # may resolve either, so the mirror tags it twice.
        return Release(
            values=_image("image.manager", "registry.k8s.io/lws/lws", tag),
            version=tag,
            app_version=tag,
            extra_tags=(tag.removeprefix("v"),),
        )
    raise ChartMirrorError(f"no release recipe for {component!r}; known: {', '.join(COMPONENTS)}")


# A `key: value` line of a block mapping: indentation, key, the value, an optional trailing comment.
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<value>[^#]*?)(?P<comment>\s+#.*)?$")


def _content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _key_line(lines: Sequence[str], path: Sequence[str]) -> int:
    """The index of the line holding `path` (keys of nested block mappings) in a values.yaml."""
    start, parent_indent = 0, -1
    found = -1
    for depth, key in enumerate(path):
        found, child_indent = -1, None
        for index in range(start, len(lines)):
            line = lines[index]
            if not _content(line):
                continue
            indent = _indent(line)
            if indent <= parent_indent:
                break  # the end of the parent's block
            child_indent = indent if child_indent is None else child_indent
            match = _KEY_LINE.match(line.rstrip("\n"))
            if indent == child_indent and match and match["key"] == key:
                found = index
                break
        if found < 0:
            raise ChartMirrorError(f"values.yaml has no key {'.'.join(path[: depth + 1])}")
        start, parent_indent = found + 1, child_indent if child_indent is not None else 0
    return found


def set_values(text: str, values: Sequence[tuple[str, str]]) -> str:
    """`text` (a chart's values.yaml) with each dotted key's scalar replaced, as the release scripts'
    `yq e '.a.b = "..."' -i` do. A line-level edit rather than a PyYAML load and dump: the published
    values.yaml keeps its comments and layout (yq preserves them, and `helm show values` prints
    them), which a dump would drop and reorder. Only existing keys with a scalar on their own line are
    replaced; the result is checked to load as the original with exactly those values set."""
    lines = text.splitlines(keepends=True)
    for dotted, value in values:
        index = _key_line(lines, dotted.split("."))
        match = _KEY_LINE.match(lines[index].rstrip("\n"))
        assert match is not None  # _key_line matched it
        if not match["value"].strip() or match["value"].strip()[0] in "|>{[&*!":
            raise ChartMirrorError(f"values.yaml {dotted} is no plain scalar: {lines[index].strip()!r}")
        # A JSON string is a YAML double-quoted scalar.
        lines[index] = f"{match['indent']}{match['key']}: {json.dumps(value)}{match['comment'] or ''}\n"
    edited = "".join(lines)
    expected = yaml.safe_load(text)
    for dotted, value in values:
        *parents, leaf = dotted.split(".")
        node = expected
        for key in parents:
            node = node[key]
        node[leaf] = value
    if yaml.safe_load(edited) != expected:
        raise ChartMirrorError(f"editing values.yaml changed more than {[d for d, _ in values]}")
    return edited


def _writable_copy(source: Path, dest: Path) -> Path:
    """A copy of a chart folder from the Go module cache, whose files and folders are read-only."""
    shutil.copytree(source, dest, copy_function=shutil.copyfile)
    for folder, _dirs, _files in os.walk(dest):
        os.chmod(folder, 0o755)
    return dest


class ChartMirror:
    """An OCI registry on 127.0.0.1 serving the controllers' charts at the pinned versions."""

    def __init__(self, components: Sequence[str] = COMPONENTS, versions: Mapping[str, str] | None = None):
        self.components = tuple(components)
        self.versions = dict(versions or pinned_versions())
        self.tags: dict[str, tuple[str, ...]] = {}  # component -> the tags its chart is served under
        self._workdir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._address = ""

    # --- what a test uses ------------------------------------------------------------------------
    @property
    def registry(self) -> str:
        """The value for `controllers.chartRegistry`."""
        return f"oci://{self.address}"

    @property
    def address(self) -> str:
        if not self._address:
            raise ChartMirrorError("the mirror is not running")
        return self._address

    @property
    def ca_file(self) -> Path:
        return self.workdir / "certs" / "ca.crt"

    @property
    def env(self) -> dict[str, str]:
        """For the `pulumi` CLI: Go's crypto/x509 on Linux reads its roots from SSL_CERT_FILE when set."""
        return {"SSL_CERT_FILE": str(self.ca_file)}

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise ChartMirrorError("the mirror is not running")
        return self._workdir

    def reference(self, component: str) -> str:
        """The chart's OCI reference as the program builds it (k8s/controllers.py chart_reference)."""
        return f"{self.registry}/{component}/charts/{component}"

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the engine's Helm with its folders inside the mirror's (never the user's home)."""
        scratch = self.workdir / "helm"
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(scratch / "cache"),
            "HELM_CONFIG_HOME": str(scratch / "config"),
            "HELM_DATA_HOME": str(scratch / "data"),
            # Helm falls back to Docker's credential store (pkg/registry/client.go NewClient): an empty one.
            "DOCKER_CONFIG": str(scratch / "docker"),
        }
        done = subprocess.run(
            [str(charts.helm()), *args], check=False, env=env, capture_output=True, text=True, timeout=120
        )
        if check and done.returncode != 0:
            raise ChartMirrorError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    # --- lifecycle --------------------------------------------------------------------------------
    def __enter__(self) -> ChartMirror:
        for binary, hint in ((registry_binary(), "make engine"), (charts.helm(), "make engine")):
            if not os.access(binary, os.X_OK):
                raise ChartMirrorError(f"{binary} is missing: run `{hint}`")
        self._workdir = Path(tempfile.mkdtemp(prefix="tpu-slicing-chart-mirror-"))
        try:
            self._start()
            for component in self.components:
                self._publish(component)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)  # chart-registry shuts down on SIGTERM
            try:
                process.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_GRACE)
        workdir, self._workdir = self._workdir, None
        self._address = ""
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def requests(self) -> list[tuple[str, str, int]]:
        """Every request the registry has served so far, in order: (method, path, status), from the
        access lines chart-registry writes (tools/registry/main.go)."""
        try:
            text = (self.workdir / "chart-registry.log").read_text(errors="replace")
        except OSError:
            return []
        found = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "access" and parts[3].isdigit():
                found.append((parts[1], parts[2], int(parts[3])))
        return found

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = (self.workdir / "chart-registry.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _start(self) -> None:
        certs, _ca = _certificates(self.workdir / "certs")  # ca.crt, and tls.crt/tls.key for IP 127.0.0.1
        addr_file = self.workdir / "addr"
        with (self.workdir / "chart-registry.log").open("wb") as log:
            self._process = subprocess.Popen(
                [str(registry_binary()), "-cert", str(certs / "tls.crt"), "-key", str(certs / "tls.key"),
                 "-addr-file", str(addr_file)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while not addr_file.is_file():
            if self._process.poll() is not None:
                raise ChartMirrorError(f"chart-registry exited {self._process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ChartMirrorError(f"chart-registry wrote no address in {START_TIMEOUT:.0f} s:\n{self.log_tail()}")
            time.sleep(0.05)
        # Written to a temporary name and renamed (tools/registry/main.go): complete once it exists.
        self._address = addr_file.read_text().strip()
        if not self._address.startswith("127.0.0.1:"):
            raise ChartMirrorError(f"chart-registry listens on {self._address!r}, not on loopback")

    def publish(self, component: str, version: str) -> None:
        """Serve another release of the component's chart as well (its module at that tag)."""
        self._publish(component, version)

    def _publish(self, component: str, version: str | None = None) -> None:
        """Package the chart as its release does, push it, and add the release's further tags."""
        version = version or self.versions[component]
        recipe = release(component, version)
        source = charts.chart_dir(component, version)
        chart = _writable_copy(source, self.workdir / "src" / f"{component}-{version}")
        values = chart / "values.yaml"
        values.write_text(set_values(values.read_text(), recipe.values))
        packages = self.workdir / "packages"
        self.helm("package", str(chart), "--version", recipe.version, "--app-version", recipe.app_version,
                  "--destination", str(packages))  # fmt: skip
        archive = packages / f"{component}-{recipe.version}.tgz"
        self.helm("push", str(archive), f"{self.registry}/{component}/charts", "--ca-file", str(self.ca_file))
        for tag in recipe.extra_tags:
            self._tag(f"{component}/charts/{component}", recipe.version, tag)
        self.tags[component] = (*self.tags.get(component, ()), recipe.version, *recipe.extra_tags)

    def _request(self, method: str, path: str, body: bytes | None = None, **headers: str) -> tuple[bytes, Any]:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(f"https://{self.address}{path}", data=body, method=method, headers=headers)
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.read(), response.headers

    def _tag(self, repository: str, existing: str, tag: str) -> None:
        """Serve `repository:existing` under `tag` as well: the same manifest PUT under a second tag
        (OCI distribution spec, "Pushing Manifests")."""
        manifest, headers = self._request("GET", f"/v2/{repository}/manifests/{existing}", Accept=OCI_MANIFEST)
        media_type = headers.get("Content-Type") or OCI_MANIFEST
        self._request("PUT", f"/v2/{repository}/manifests/{tag}", manifest, **{"Content-Type": media_type})

    def tags_list(self, component: str) -> list[str]:
        """The tags the registry lists for the component's chart (GET /v2/<name>/tags/list)."""
        body, _headers = self._request("GET", f"/v2/{component}/charts/{component}/tags/list")
        return sorted(json.loads(body).get("tags") or [])
