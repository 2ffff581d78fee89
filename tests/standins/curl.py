"""Stand-in `curl` for the inference-CRD Command: raw.githubusercontent.com, served from the shared CRDs.

The Command (k8s/inference_crds.py) downloads the Gateway API Inference Extension CRD files the
program owns at a pinned commit with `curl -fsSL --retry 5 URL -o FILE`, checks the sha256 it
knows, and applies them with kubectl. GitHub cannot be reached here. This stand-in answers only
such URLs: the commit names the release (domain/inference_releases.py), and the file is read from
$TPU_SLICING_CRDS/gateway-api-inference-extension/<release>/ when that folder has it, so the
Command's own checksum check runs on the upstream file. A file of the release that the folder
lacks (the x-k8s InferenceObjective and InferenceModelRewrite CRDs, which carry no checksum and
of which the program creates no object) is answered with a minimal CRD of that name and kind
that keeps any field. Any other URL or option fails as an unreachable host does (exit 6).

What it cannot show: that the commit and paths exist upstream, and the x-k8s CRDs' real schemas.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

from domain.inference_releases import RELEASES, REPOSITORY

# The kinds of the CRD files a release lists without a shared copy (plural.group -> kind).
KINDS = {
    "inferenceobjectives.inference.networking.x-k8s.io": "InferenceObjective",
    "inferencemodelrewrites.inference.networking.x-k8s.io": "InferenceModelRewrite",
}
UNREACHABLE = 6  # curl's "could not resolve host"


def _minimal_crd(name: str) -> str:
    plural, group = name.split(".", 1)
    kind = KINDS[name]
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return yaml.safe_dump(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                "versions": [
                    {
                        "name": "v1alpha2",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": open_object}}},
                    }
                ],
            },
        }
    )


def body(url: str) -> str | None:
    for release in RELEASES.values():
        for crd_file in release.files:
            if url != f"{REPOSITORY}/{release.commit}/{crd_file.path}":
                continue
            crds = Path(os.environ.get("TPU_SLICING_CRDS", Path(__file__).resolve().parents[3] / "shared" / "crds"))
            shared = crds / "gateway-api-inference-extension" / release.version / Path(crd_file.path).name
            if shared.exists():
                return shared.read_text()
            return _minimal_crd(crd_file.crd) if crd_file.crd in KINDS else None
    return None


def main(argv: list[str]) -> int:
    url, out, args = None, None, iter(argv)
    for arg in args:
        if arg == "-o":
            out = next(args)
        elif arg == "--retry":
            next(args)
        elif arg.startswith("-"):
            if arg != "-fsSL":
                print(f"curl stand-in: option {arg} is not supported", file=sys.stderr)
                return 2
        else:
            url = arg
    text = body(url) if url else None
    if text is None or out is None:
        print(f"curl: (6) Could not resolve host (stand-in serves only the pinned CRD files): {url}", file=sys.stderr)
        return UNREACHABLE
    Path(out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
