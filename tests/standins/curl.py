"""Stand-in `curl` for the inference-CRD Command: raw.githubusercontent.com, served from the Go module cache.

The Command (k8s/inference_crds.py) downloads the Gateway API Inference Extension CRD files the
program owns at a pinned commit with `curl -fsSL --retry 5 URL -o FILE`, checks the sha256 it
knows, and applies them with kubectl. GitHub cannot be reached here, but the Go module proxy
serves the release as the module `sigs.k8s.io/gateway-api-inference-extension` at its tag, whose
zip holds the repository's files byte for byte. This stand-in answers only such URLs: the commit
names the release (domain/inference_releases.py), the module must come from that very commit (its
`.info` Origin.Hash), and the file is the module's, so the Command's own checksum check runs on the
upstream file. Any other URL or option fails as an unreachable host does (exit 6).

What it cannot show: GitHub's own availability and rate limits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

from domain.inference_releases import RELEASES, REPOSITORY, InferenceExtensionRelease

MODULE = "sigs.k8s.io/gateway-api-inference-extension"
UNREACHABLE = 6  # curl's "could not resolve host"


class ModuleError(Exception):
    pass


@cache
def release_dir(release: InferenceExtensionRelease) -> Path:
    """The release's module in the Go module cache (downloaded once), checked to be its commit."""
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{release.version}"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    info = json.loads(done.stdout or "{}")
    if done.returncode != 0 or "Dir" not in info:
        raise ModuleError(f"go mod download {MODULE}@{release.version}: {info.get('Error') or done.stderr.strip()}")
    origin = json.loads(Path(info["Info"]).read_text()).get("Origin") or {}
    if origin.get("Hash") != release.commit:
        raise ModuleError(f"{MODULE}@{release.version} is commit {origin.get('Hash')}, pinned {release.commit}")
    return Path(info["Dir"])


def body(url: str) -> bytes | None:
    for release in RELEASES.values():
        for crd_file in release.files:
            if url == f"{REPOSITORY}/{release.commit}/{crd_file.path}":
                return (release_dir(release) / crd_file.path).read_bytes()
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
    try:
        text = body(url) if url else None
    except ModuleError as err:
        print(f"curl stand-in: {err}", file=sys.stderr)
        return UNREACHABLE
    if text is None or out is None:
        print(f"curl: (6) Could not resolve host (stand-in serves only the pinned CRD files): {url}", file=sys.stderr)
        return UNREACHABLE
    Path(out).write_bytes(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
