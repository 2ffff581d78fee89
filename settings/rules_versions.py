"""What the program installs, pinned, and where the controllers' charts come from.

Guards `versions` (every chart and image an exact release: settings/pins.py, one rule with the policy
pack's pinned-images; an Inference Extension release domain/inference_releases.py knows; JobSet and
Kueue at or above llm-d's dynamic-slicing floors; the routing sidecar from the endpoint picker's own
llm-d release) and `controllers` (an OCI chart registry, settings/oci_registry.py, set only where
the program installs the charts).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic.alias_generators import to_camel

from domain import inference_releases
from settings import oci_registry, pins
from settings.base import ProblemsError
from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import StackConfig, Versions


def pinned_chart(value: str) -> str:
    # One rule with the policy pack's pinned-images (settings/pins.py).
    if pins.chart_problem(value):
        raise ValueError(f"{value!r} is not a pinned release: use an exact version such as 0.11.1 or v0.17.4")
    return value


def pinned_image(value: str) -> str:
    problem = pins.image_problem(value)
    if problem:
        raise ValueError(f"{value!r} has {problem}; {pins.IMAGE_ALLOWED}")
    return value


def known_inference_release(value: str) -> str:
    return inference_releases.release(value).version


# llm-d's dynamic-slicing guide: JobSet >= v0.12.0, Kueue >= v0.18.2 (dynamic-slicing.md §14.6).
CONTROLLER_FLOORS = {"jobset": "0.12.0", "kueue": "0.18.2"}


def semver_key(version: str) -> tuple[int, int, int]:
    major, minor, patch = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", version).groups()  # type: ignore[union-attr]
    return int(major), int(minor), int(patch)


def controller_floors(versions: Versions) -> None:
    # An older controller installs, then never admits or never runs a slice: the guide's floors.
    for key, floor in CONTROLLER_FLOORS.items():
        given = getattr(versions, key)
        if semver_key(given) < semver_key(floor):
            raise ValueError(
                f"versions.{to_camel(key)} {given} is below {floor}, the oldest llm-d's dynamic-slicing guide "
                f"supports (dynamic-slicing.md §14.6); allowed: {floor} or newer"
            )


PICKER_SUFFIX = "-endpoint-picker"
SIDECAR_SUFFIX = "-disagg-sidecar"


def repository_and_tag(image: str) -> tuple[str, str]:
    name = image.split("@", 1)[0]
    repository, _, tag = name.rpartition(":")
    return (repository, tag) if repository and "/" not in tag else (name, "")


def one_llm_d_release(versions: Versions) -> None:
    picker_repo, picker_tag = repository_and_tag(versions.endpoint_picker_image)
    sidecar_repo, sidecar_tag = repository_and_tag(versions.routing_sidecar_image)
    wanted = picker_repo.removesuffix(PICKER_SUFFIX) + SIDECAR_SUFFIX
    if picker_repo.endswith(PICKER_SUFFIX) and (sidecar_repo, sidecar_tag) != (wanted, picker_tag):
        raise ValueError(
            f"versions.routingSidecarImage {versions.routing_sidecar_image} is not from the endpoint picker's "
            f"llm-d release ({versions.endpoint_picker_image}); allowed: {wanted}:{picker_tag}, the sidecar "
            "llm-d-router publishes with that picker (its flags and the picker's headers change together)"
        )


# The programs the image slots run, known by the last part of an image's repository path (kept by a
# registry mirror: an Artifact Registry remote repository serves docker.io/vllm/vllm-tpu as
# <host>/<project>/<repo>/vllm/vllm-tpu). An image named after one program in another program's slot
# runs the wrong entry point or flags: the benchmark Job runs pods/benchmark_run.py, which calls the
# `inference-perf` command; the metrics adapter's container is started with the Stackdriver
# adapter's flags (k8s/metrics_adapter.py). A name not listed (a custom build) is not judged.
PROGRAMS: dict[str, str] = {
    "vllm-tpu": "vLLM's server",
    "inference-perf": "inference-perf, the load generator",
    "custom-metrics-stackdriver-adapter": "the Custom Metrics Stackdriver Adapter",
    "prometheus-adapter": "the Prometheus adapter (it serves other flags and another metrics source)",
    "kueue-slice-controller": "the TPU slice controller",
    "llm-d-router-endpoint-picker": "llm-d's endpoint picker",
    "llm-d-router-disagg-sidecar": "llm-d's P/D routing sidecar",
    "sax-admin-server": "Saxml's admin server",
    "sax-model-server": "Saxml's model server",
    "sax-http": "Saxml's HTTP server",
    "maxengine-server": "JetStream's MaxEngine server",
    "jetstream-http": "JetStream's HTTP server",
    "jetstream-pathways": "JetStream's Pathways server",
    "python": "a plain Python image (no inference-perf command)",
}
# Each slot's own programs (a slot not listed takes any image).
SLOTS: dict[str, frozenset[str]] = {
    "vllm_image": frozenset({"vllm-tpu"}),
    "benchmark_image": frozenset({"inference-perf"}),
    "metrics_adapter_image": frozenset({"custom-metrics-stackdriver-adapter"}),
    "slice_controller_image": frozenset({"kueue-slice-controller"}),
    "endpoint_picker_image": frozenset({"llm-d-router-endpoint-picker"}),
    "routing_sidecar_image": frozenset({"llm-d-router-disagg-sidecar"}),
    "sax_admin_image": frozenset({"sax-admin-server"}),
    "sax_model_image": frozenset({"sax-model-server"}),
    "sax_http_image": frozenset({"sax-http"}),
    "jetstream_maxengine_image": frozenset({"maxengine-server"}),
    "jetstream_http_image": frozenset({"jetstream-http"}),
    "jetstream_pathways_image": frozenset({"jetstream-pathways"}),
}


def program_name(image: str) -> str:
    """The last part of an image's repository path: `docker.io/vllm/vllm-tpu:v0.26.0` -> `vllm-tpu`."""
    return repository_and_tag(image)[0].rsplit("/", 1)[-1]


def check_images(config: StackConfig) -> None:
    """versions.*Image: no known program in another program's slot."""
    versions, problems = config.versions, []
    for slot, own in SLOTS.items():
        image = getattr(versions, slot)
        name = program_name(image)
        if name in PROGRAMS and name not in own:
            key = "versions." + to_camel(slot)
            wanted = " or ".join(sorted(own))
            problems.append(
                f"{key} {image!r} is {PROGRAMS[name]}, not the program this slot runs; allowed: an image named "
                f"{wanted} (any registry or mirror of it)"
            )
    if problems:
        raise ProblemsError(problems)


def chart_registry(value: str) -> str:
    problem = oci_registry.problem(value)
    if problem:
        raise ValueError(f"{oci_registry.shown(value)!r} {problem}; {oci_registry.ALLOWED}")
    return value


def check_controllers(config: StackConfig) -> None:
    controllers = config.controllers
    # Set, not only changed: with install false no chart is pulled (k8s/controllers.py), so the key is
    # ignored whatever it says.
    if not controllers.install and "chart_registry" in controllers.model_fields_set:
        raise ValueError(
            f"controllers.chartRegistry {oci_registry.shown(controllers.chart_registry)!r} does nothing with "
            "controllers.install false (no chart is pulled: the platform team's controllers run already), so it "
            "would be ignored without a word; remove it, or set controllers.install true"
        )


REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "the serving image given as the benchmark's",
        check_images,
        {"versions": {"benchmarkImage": "docker.io/vllm/vllm-tpu:v0.26.0"}},
        "versions.benchmarkImage",
        "an image named inference-perf",
    ),
    RefusedClass(
        "another metrics adapter in the Stackdriver adapter's slot",
        check_images,
        {"versions": {"metricsAdapterImage": "registry.k8s.io/prometheus-adapter/prometheus-adapter:v0.12.0"}},
        "versions.metricsAdapterImage",
        "an image named custom-metrics-stackdriver-adapter",
    ),
    # --- pins (settings/pins.py, shared with the pack's pinned-images)
    RefusedClass(
        "floating chart version",
        pins.chart_problem,
        {"versions": {"kueue": "latest"}},
        "versions.kueue",
        "exact version",
        pack="pinned-images",
    ),
    RefusedClass(
        "controller below the guide's floor",
        controller_floors,
        {"versions": {"kueue": "0.17.4"}},
        "versions.kueue",
        "allowed: 0.18.2 or newer",
    ),
    RefusedClass(
        "image on a channel tag",
        pins.image_problem,
        {"versions": {"vllmImage": "docker.io/vllm/vllm-tpu:latest"}},
        "versions.vllmImage",
        pins.IMAGE_ALLOWED,
        pack="pinned-images",
    ),
    RefusedClass(
        "image without a tag",
        pins.image_problem,
        {"versions": {"endpointPickerImage": "ghcr.io/llm-d/llm-d-router-endpoint-picker"}},
        "versions.endpointPickerImage",
        "no tag",
        pack="pinned-images",
    ),
    RefusedClass(
        "image on a major.minor line",
        pins.image_problem,
        {"versions": {"smokeTestImage": "python:3.12-slim"}},
        "versions.smokeTestImage",
        "'3.12-slim'",
        pack="pinned-images",
    ),
    RefusedClass(
        "image on a major-version line",
        pins.image_problem,
        {"versions": {"saxAdminImage": "us-docker.pkg.dev/cloud-tpu-images/inference/sax-admin-server:v1"}},
        "versions.saxAdminImage",
        "major-version line",
        stack="saxml-v5e",
        pack="pinned-images",
    ),
    RefusedClass(
        "image with whitespace or control characters",
        pins.image_problem,
        {"versions": {"vllmImage": "docker.io/vllm/vllm-tpu:v0.26.0 "}},
        "versions.vllmImage",
        "the API server refuses such a Pod",
        pack="pinned-images",
    ),
    RefusedClass(
        "image tag with a channel word after its version",
        pins.image_problem,
        {"versions": {"vllmImage": "docker.io/vllm/vllm-tpu:v0.26.0-nightly"}},
        "versions.vllmImage",
        "after the version",
        pack="pinned-images",
    ),
    RefusedClass(
        "image tag whose only version is its base OS's",
        pins.image_problem,
        {"versions": {"vllmImage": "docker.io/vllm/vllm-tpu:ubuntu-22.04.4"}},
        "versions.vllmImage",
        "the base OS's",
        pack="pinned-images",
    ),
    RefusedClass(
        "routing sidecar from another llm-d release than the picker",
        one_llm_d_release,
        {"versions": {"routingSidecarImage": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.8.0"}},
        "versions.routingSidecarImage",
        "allowed: ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0",
    ),
    # --- controllers (settings/oci_registry.py: Helm's oci:// scheme, the OCI repository name grammar)
    RefusedClass(
        "chart registry over http(s) instead of OCI",
        oci_registry.problem,
        {"controllers": {"chartRegistry": "https://us-docker.pkg.dev/example-tpu-project/k8s-mirror"}},
        "controllers.chartRegistry",
        "use oci://",
    ),
    RefusedClass(
        "chart registry that is no OCI registry and repository path",
        oci_registry.problem,
        {"controllers": {"chartRegistry": "oci://us-docker.pkg.dev/example-tpu-project/k8s-mirror/"}},
        "controllers.chartRegistry",
        oci_registry.ALLOWED,
    ),
    RefusedClass(
        "chart registry with the controllers not installed",
        check_controllers,
        {"controllers": {"install": False, "chartRegistry": "oci://us-docker.pkg.dev/example-tpu-project/k8s-mirror"}},
        "controllers.chartRegistry",
        "remove it, or set controllers.install true",
    ),
)
