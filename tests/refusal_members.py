"""Members of the refused classes (settings/refusals.py), generated: each class is a space, not an example.

`MEMBERS` maps a class name to a hypothesis strategy of examples in the table's own form (conftest's
`merged` rules). tests/test_verdicts.py runs drawn members through the settings loader and, where
the class has a pack twin, through the pack, expecting the class's key and allowed text each time.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from domain import model_catalog, tpu_zones
from domain.autoscaling import SCALE_OUT
from settings import pins
from settings.rules_recovery import PODS_READY_MIN_SECONDS

_VLLM_IMAGE = "docker.io/vllm/vllm-tpu"
_QWEN = model_catalog.architecture("Qwen/Qwen3.5-397B-A17B")
_HOUSE_MODEL = {
    "name": "acme/house-model",
    "path": f"models--acme--house-model/snapshots/{'0' * 40}",
    "contextLength": 262_144,
}
assert _QWEN is not None


def _vllm_image(tag: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    return tag.map(lambda t: {"versions": {"vllmImage": f"{_VLLM_IMAGE}:{t}"}})


_VERSION = st.tuples(st.integers(0, 20), st.integers(0, 40), st.integers(0, 20)).map(lambda v: f"v{v[0]}.{v[1]}.{v[2]}")
_WHITESPACE = st.sampled_from([" ", "\t", "\n", "\r", "\x00", "\x1b", "\x7f", "\u00a0", "\u2003"])


@st.composite
def _spoiled_image(draw: st.DrawFn) -> dict[str, Any]:
    image = f"{_VLLM_IMAGE}:{draw(_VERSION)}"
    where = draw(st.integers(0, len(image)))
    return {"versions": {"vllmImage": image[:where] + draw(_WHITESPACE) + image[where:]}}


_CHANNEL_TAG = st.tuples(
    _VERSION,
    st.sampled_from(["-", ".", "_"]),
    st.sampled_from(sorted(pins._CHANNEL_SUFFIXES - {"preview-latest"})),
    st.sampled_from([str.lower, str.upper, str.title]),
).map(lambda t: f"{t[0]}{t[1]}{t[3](t[2])}")
_OS_TAG = st.tuples(
    st.sampled_from(["ubuntu", "debian", "alpine", "rockylinux", "ubi", "bookworm", "jammy", "noble"]),
    st.sampled_from(["", "-", "_", "."]),
    st.tuples(st.integers(3, 24), st.integers(0, 12), st.integers(0, 9)),
).map(lambda t: f"{t[0]}{t[1]}{t[2][0]}.{t[2][1]}.{t[2][2]}")

# Public /8s (not RFC 1918, 100.64/10, loopback, multicast): blocks inside them are internet addresses.
_PUBLIC_FIRST = [n for n in range(1, 224) if n not in (10, 100, 127, 172, 192)]


@st.composite
def _wide_sources(draw: st.DrawFn) -> dict[str, Any]:
    prefix = draw(st.integers(9, 13))
    count = draw(st.integers(2 ** (prefix - 8) + 1, min(64, 2 ** (prefix - 8) + 8)))
    firsts = draw(st.lists(st.sampled_from(_PUBLIC_FIRST), min_size=count, max_size=count, unique=True))
    blocks = [
        f"{first}.{(draw(st.integers(0, 2 ** (prefix - 8) - 1)) << (16 - prefix))}.0.0/{prefix}" for first in firsts
    ]
    return {"serving": {"http": {"type": "external", "sourceRanges": blocks}}}


_LOWER = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)
_BAD_BUCKETS = st.one_of(
    st.tuples(*[st.integers(0, 255)] * 4).map(lambda o: ".".join(map(str, o))),  # an IP address
    _LOWER.map(lambda s: f"goog{s}"),
    st.tuples(_LOWER, st.sampled_from(["google", "g00gle", "go0g1e", "googl3"]), _LOWER).map("-".join),
    st.tuples(_LOWER, _LOWER).map(lambda p: f"{p[0]}..{p[1]}"),
    st.integers(64, 80).map(lambda n: "b" * n),
    st.tuples(_LOWER, st.sampled_from(["A", "!", " ", "/", "~"]), _LOWER).map("".join),
    _LOWER.map(lambda s: f"-{s}x"),
)
_SEGMENT = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=10)


@st.composite
def _bad_path(draw: st.DrawFn) -> dict[str, Any]:
    parts = draw(st.lists(_SEGMENT, min_size=1, max_size=4))
    spoil = draw(st.sampled_from([".", "..", "", "control"]))
    where = draw(st.integers(0, len(parts)))
    if spoil == "control":
        parts[where - 1 if where else 0] += draw(st.sampled_from(["\x00", "\x01", "\x1f", "\x7f", "\x85"]))
    elif spoil:
        parts.insert(where, spoil)
    else:  # an empty segment between two others ('a//b'): a trailing '/' is only a prefix's end
        parts = parts if len(parts) > 1 else [*parts, "z"]
        parts.insert(draw(st.integers(1, len(parts) - 1)), "")
    return {"serving": {"model": {"path": "/".join(parts)}}}


_REGIONS = ["us-central1", "us-east1", "us-east5", "us-west4", "europe-west4", "asia-northeast1", "us-south1"]
_TPU7X_ZONES = (
    st.tuples(st.sampled_from(_REGIONS), st.sampled_from(["a", "b", "c", "d", "f", "ai1b", "ai2a"]))
    .map("-".join)
    .filter(lambda z: z not in tpu_zones.ZONES["tpu7x"].zones)
)

# Blocks Python calls private that no VPC range may use: link-local, loopback, benchmarking, IETF, reserved.
_SPECIAL = st.tuples(
    st.sampled_from(["169.254.0.0/16", "127.0.0.0/8", "198.18.0.0/15", "192.0.0.0/24", "240.0.0.0/4", "0.0.0.0/8"]),
    st.integers(0, 8),
).map(lambda b: str(next(ipaddress.IPv4Network(b[0]).subnets(prefixlen_diff=min(b[1], 32 - 24 - 0)))))

# controllers.chartRegistry (settings/oci_registry.py): registries Helm pulls from, and each way to spoil one.
_ALNUM = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=6)
_DNS_LABEL = st.tuples(
    st.sampled_from("abcdefghijklmnopqrstuvwxyz"), st.text("abcdefghijklmnopqrstuvwxyz0123456789-", max_size=8), _ALNUM
).map("".join)
_REGISTRY_HOST = st.one_of(
    st.sampled_from(["registry.k8s.io", "us-docker.pkg.dev", "europe-west4-docker.pkg.dev", "ghcr.io", "localhost"]),
    st.lists(_DNS_LABEL, min_size=1, max_size=4).map(".".join),
    st.ip_addresses(v=4).map(str),
)
_REPOSITORY_COMPONENT = st.tuples(
    _ALNUM, st.lists(st.tuples(st.sampled_from([".", "_", "__", "-", "---"]), _ALNUM).map("".join), max_size=3)
).map(lambda c: c[0] + "".join(c[1]))
# What the OCI distribution spec and Helm accept: oci://<host>[:<port>][/<component>...].
REGISTRIES = st.tuples(
    _REGISTRY_HOST,
    st.one_of(st.just(""), st.integers(1, 65535).map(lambda p: f":{p}")),
    st.lists(_REPOSITORY_COMPONENT, max_size=3).map(lambda parts: "".join(f"/{p}" for p in parts)),
).map(lambda r: f"oci://{r[0]}{r[1]}{r[2]}")


def _chart_registry(value: str) -> dict[str, Any]:
    return {"controllers": {"chartRegistry": value}}


_NOT_OCI = st.tuples(
    st.sampled_from(["http://", "https://", "HTTPS://", "OCI://", "Oci://", "ftp://", "gs://", ""]), REGISTRIES
).map(lambda t: t[0] + t[1].removeprefix("oci://"))


@st.composite
def _spoiled_registry(draw: st.DrawFn) -> str:
    registry = draw(REGISTRIES)
    rest = registry.removeprefix("oci://")
    spoil = draw(
        # Credentials in the reference are the credential class's (settings/credentials.py refuses them first).
        st.sampled_from(["slash", "query", "tag", "digest", "space", "upper", "empty", "port", "host"])
    )
    if spoil == "space":
        where = draw(st.integers(0, len(registry)))
        return registry[:where] + draw(_WHITESPACE) + registry[where:]
    host_end = rest.find("/") if "/" in rest else len(rest)
    return {
        "slash": registry + "/",
        "query": registry + draw(st.sampled_from(["?tag=1", "#charts", "?"])),
        "tag": f"{registry}/kueue:{draw(_VERSION)}",
        "digest": f"{registry}/kueue@sha256:{'0' * 64}",
        "upper": f"{registry}/{draw(_ALNUM).upper()}X",
        "empty": f"{registry}//{draw(_ALNUM)}",
        "port": f"oci://{rest[:host_end].partition(':')[0]}:{draw(st.sampled_from(['0', '65536', 'http', '']))}"
        + rest[host_end:],
        "host": "oci://"
        + draw(st.sampled_from(["bad_host", "-lead", "trail-", "999.0.0.1", "[::1]", ""]))
        + rest[host_end:],
    }[spoil]


# A token of one or two distinct letters ("000...0", "xxxx") is a placeholder, no credential
# (settings/credentials.py `_is_reference`): hypothesis draws such strings first, so they are left out.
_TOKEN_CHARS = st.text(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", min_size=34, max_size=40
).filter(lambda t: len(set(t.lower())) > 2)
_CREDENTIALS = st.one_of(
    _TOKEN_CHARS.map(lambda t: f"hf_{t}"),
    _TOKEN_CHARS.map(lambda t: f"ya29.{t}"),
    _TOKEN_CHARS.map(lambda t: f"AIza{(t * 2)[:35]}"),
    _TOKEN_CHARS.map(lambda t: '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n' + t + '"}'),
    _TOKEN_CHARS.map(lambda t: f"apiVersion: v1\nusers:\n- name: u\n  user:\n    token: {t}\n"),
    # detect-secrets' shapes (AWS, GitHub), the project's own newer ones, and any kind by where it sits:
    # userinfo, a secret-named query parameter or assignment; then encoded (settings/credentials.py).
    _TOKEN_CHARS.map(lambda t: "AKIA" + t.upper()[:16]),
    _TOKEN_CHARS.map(lambda t: "ghp_" + (t * 2)[:36]),
    _TOKEN_CHARS.map(lambda t: "github_pat_" + (t * 3)[:82]),
    _TOKEN_CHARS.map(lambda t: "sk-ant-api03-" + t),
    _TOKEN_CHARS.map(lambda t: f"https://user:{t}@example.com/org/repo"),
    _TOKEN_CHARS.map(lambda t: f"https://example.com/weights?access_token={t}"),
    _TOKEN_CHARS.map(lambda t: f"password={t}"),
    _TOKEN_CHARS.map(lambda t: base64.b64encode(f"hf_{t}".encode()).decode()),
    _TOKEN_CHARS.map(lambda t: quote(f"https://user:{t}@example.com/", safe="")),
)
MEMBERS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    # Every kind, in the table's key (tests/test_credentials.py varies the key).
    "credential in an ordinary setting": _CREDENTIALS.map(lambda v: {"serving": {"model": {"path": f"models/{v}"}}}),
    "link-local or other special range for pods": _SPECIAL.map(lambda r: {"network": {"podCidr": r}}),
    "image with whitespace or control characters": _spoiled_image(),
    "image tag with a channel word after its version": _vllm_image(_CHANNEL_TAG),
    "image tag whose only version is its base OS's": _vllm_image(_OS_TAG),
    "source ranges that together hold more than a /8 of the internet": _wide_sources(),
    "bucket name Cloud Storage refuses": _BAD_BUCKETS.map(lambda b: {"serving": {"model": {"weightsBucket": b}}}),
    "object path no reader resolves": _bad_path(),
    "zone without the generation's TPUs": _TPU7X_ZONES.map(lambda z: {"zone": z, "region": None}),
    # Heads the default TP (a 2x2x2 slice's 16 devices) does not divide, or larger slices whose default
    # TP (their devices) exceeds the catalogued model's 32 heads.
    "tensor parallelism that does not divide the attention heads": st.one_of(
        # A model outside the catalog (a catalogued model's heads are its own, settings/serving_model.py).
        st.integers(1, 4096)
        .filter(lambda h: h % 16)
        .map(lambda h: {"serving": {"model": {**_HOUSE_MODEL, "attentionHeads": h}}}),
        st.sampled_from(["2x4x4", "4x4x4"]).map(
            lambda t: {"serving": {"prefill": {"topology": t, "replicas": 1}, "decode": {"topology": t, "replicas": 1}}}
        ),
    ),
    "batched tokens below the sequences of a step": st.integers(257, 65_536).flatmap(
        lambda seqs: st.integers(256, seqs - 1).map(
            lambda batched: {"serving": {"vllm": {"maxNumSeqs": seqs, "maxNumBatchedTokens": batched}}}
        )
    ),
    "chart registry over http(s) instead of OCI": _NOT_OCI.map(_chart_registry),
    "chart registry that is no OCI registry and repository path": _spoiled_registry().map(_chart_registry),
    # Revisions that are no full lowercase commit (a branch, a short or upper-case hash), or another model's folder.
    "model path that is no Hugging Face snapshot of the named model": st.one_of(
        st.text("0123456789abcdefABCDEF-main", min_size=1, max_size=64)
        .filter(lambda c: re.fullmatch("[0-9a-f]{40}", c) is None)
        .map(lambda c: {"serving": {"model": {"path": f"models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/{c}"}}}),
        st.sampled_from(["Qwen3.5-397B-A17B", "Qwen3.5-397B-A17B-Int4", "Qwen3-235B-A22B-Instruct-2507-FP8"]).map(
            lambda n: {"serving": {"model": {"path": f"models--Qwen--{n}/snapshots/{'0' * 40}"}}}
        ),
    ),
    # Any other parameter count, alone or beside another contradicted figure (all are named at once).
    "model figure that contradicts the catalog": st.tuples(
        st.floats(0.5, 100_000).filter(lambda b: b != 397),
        st.one_of(st.just({}), st.integers(1, 4096).filter(lambda h: h != 32).map(lambda h: {"attentionHeads": h})),
    ).map(lambda pair: {"serving": {"model": {"parametersBillions": pair[0], **pair[1]}}}),
    "maxModelLen above the model's context": st.integers(_QWEN.context_length + 1, 1_048_576).map(
        lambda n: {"serving": {"vllm": {"maxModelLen": n}}}
    ),
    # A no-go window's start written as a compact date or Unix seconds, a number or a string of digits
    # (settings/rules_reservation.py `instant`): pydantic would read either as seconds since 1970.
    "maintenance no-go window written as a number (read as Unix seconds)": st.one_of(
        st.integers(19_700_101, 20_991_231), st.integers(0, 4_102_444_800).map(str)
    ).map(lambda n: {"reservation": {"maintenanceNoGo": [{"start": n, "end": "2026-12-20T00:00:00Z"}]}}),
    # Any timeout short of the startup budget (settings/rules_recovery.py), Kueue's 30-minute default included.
    "Kueue's PodsReady timeout below the startup budget": st.integers(0, PODS_READY_MIN_SECONDS - 1).map(
        lambda n: {"kueue": {"recovery": {"podsReadyTimeoutSeconds": n}}}
    ),
    "Kueue's recovery timeout below the startup budget": st.integers(0, PODS_READY_MIN_SECONDS - 1).map(
        lambda n: {"kueue": {"recovery": {"recoveryTimeoutSeconds": n}}}
    ),
    "Kueue's requeuing backoff capped below its base": st.integers(2, 3600)
    .flatmap(lambda base: st.tuples(st.just(base), st.integers(1, base - 1)))
    .map(lambda b: {"kueue": {"recovery": {"backoffBaseSeconds": b[0], "backoffMaxSeconds": b[1]}}}),
    # Autoscaled roles (settings/rules_autoscaling.py): any min above any max.
    "An autoscaler whose min is above its max": st.integers(2, 1000)
    .flatmap(lambda low: st.tuples(st.just(low), st.integers(1, low - 1)))
    .map(lambda b: _autoscaled("decode", min=b[0], max=b[1])),
    # The KV cache's use as a percentage: any value above 1.
    "An autoscaler on the KV cache's use given as a percentage": st.integers(2, 100).map(
        lambda n: _autoscaled("decode", metric="vllm:kv_cache_usage_perc", target=n)
    ),
    # Any window shorter than a new group's way to its first answer.
    "An autoscaler that may remove a group before it serves": st.integers(0, SCALE_OUT.seconds - 1).map(
        lambda n: _autoscaled("decode", scaleDownStabilizationSeconds=n)
    ),
}


def _autoscaled(role: str, **fields: Any) -> dict[str, Any]:
    scaling = {"min": 1, "max": 4, "metric": "vllm:num_requests_waiting", "target": 8, **fields}
    return {"serving": {role: {"autoscaling": scaling}}}
