"""Pinned Gateway API Inference Extension releases: commit and CRD files (no Pulumi)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CrdFile:
    path: str
    crd: str
    # Of the file at the release's commit; the apply script checks it before applying (the files
    # of the release's Go module are the repository's, tests/test_inference_releases.py).
    sha256: str
    # Installed and upgraded by GKE itself (InferencePool, from 1.34.0-gke.1626000 with the Gateway
    # API on: llm-d's GKE guide). The program waits for it and never applies or deletes it.
    gke_managed: bool = False


@dataclass(frozen=True)
class InferenceExtensionRelease:
    version: str
    commit: str
    files: tuple[CrdFile, ...]


REPOSITORY = "https://raw.githubusercontent.com/kubernetes-sigs/gateway-api-inference-extension"
_X_K8S = (
    CrdFile(
        "config/crd/bases/inference.networking.x-k8s.io_inferenceobjectives.yaml",
        "inferenceobjectives.inference.networking.x-k8s.io",
        "e06a3e13e91f7a3a71a9d4146fb56076a247f43ad72b6401f8039ccf9cfa3700",
    ),
    CrdFile(
        "config/crd/bases/inference.networking.x-k8s.io_inferencemodelrewrites.yaml",
        "inferencemodelrewrites.inference.networking.x-k8s.io",
        "887abbc047e7e36633f2f28ee47dc59cae5293ebef110e57cc286ab4605d8a97",
    ),
)
RELEASES = {
    "v1.5.0": InferenceExtensionRelease(
        "v1.5.0",
        "df9f8909fe06fe2dfd4a6fc0bd0c01a0acabf849",
        (
            CrdFile(
                "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml",
                "inferencepools.inference.networking.k8s.io",
                "0bc3ddd94db6f588a5cecc627c39e3d12b4343d51c48d47ffa68c50fa73c290c",
                gke_managed=True,
            ),
            *_X_K8S,
        ),
    ),
    "v1.6.0": InferenceExtensionRelease(
        "v1.6.0",
        "992e5c292afb248801ce8d9234eb5b9d28eea231",
        (
            CrdFile(
                "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml",
                "inferencepools.inference.networking.k8s.io",
                "55e0dbf39c50c4bbdd60106493a4573df4bb44479f9ce46762f1af718883e5cd",
                gke_managed=True,
            ),
        ),
    ),
}


def release(version: str) -> InferenceExtensionRelease:
    if version not in RELEASES:
        raise ValueError(f"no pinned Gateway API Inference Extension release {version!r}; known: {', '.join(RELEASES)}")
    return RELEASES[version]
