"""Every class of stack configuration the program refuses, with the rule that refuses it and one example.

`REFUSED_CLASSES` is the list; `CLASS_COUNT` is computed from it, never written by hand. Each example
is a change to a committed stack file (`stack`); the settings loader, the offline plan and, where
the rule has a twin in the policy pack (`pack`, the policy's name), the pack on the plan's resource
inputs all refuse it with a message naming `key` and containing `allowed` (tests/test_verdicts.py).
The pack runs the settings' own function where one exists (settings/pins.py, settings/exposure.py).

The classes of a cross-field rule stand beside the rule, in the `REFUSED` rows of its `rules_*.py`
module (settings/model.py runs the rules); the rows here are the stack file's, the loader's and the
tree's own field constraints, which no rule module holds. Find a class by its name in settings/.

`PACK_ONLY` lists what the pack refuses while the settings accept it, on purpose, with the reason.

An example is applied as tests/conftest.py `merged` applies overrides: a bare key is the project's
(`tpu-slicing:`), a mapping is merged into the stack's, None removes a key; `stack_lines` are
appended to the file's `config:` mapping verbatim (for what only the stack-file reader sees).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from settings import credentials, loader, model, names, stack_file
from settings.base import StrictModel
from settings.benchmark import REFUSED as BENCHMARK
from settings.model import NetworkConfig, StackConfig
from settings.pricing import REFUSED as PRICING
from settings.provider_keys import REFUSED as PROVIDER_KEYS
from settings.refused import RefusedClass
from settings.rules_autoscaling import REFUSED as AUTOSCALING
from settings.rules_backends import REFUSED as BACKENDS
from settings.rules_capacity import REFUSED as CAPACITY
from settings.rules_cluster import REFUSED as CLUSTER
from settings.rules_kueue import REFUSED as KUEUE
from settings.rules_maxtext import REFUSED as MAXTEXT
from settings.rules_network import EXTERNAL
from settings.rules_network import REFUSED as NETWORK
from settings.rules_observability import REFUSED as OBSERVABILITY
from settings.rules_recovery import REFUSED as RECOVERY
from settings.rules_reservation import REFUSED as RESERVATION
from settings.rules_serving import REFUSED as SERVING
from settings.rules_storage import REFUSED as STORAGE
from settings.rules_versions import REFUSED as VERSIONS
from settings.rules_waits import REFUSED as WAITS

_READING: tuple[RefusedClass, ...] = (
    # --- the stack file as the CLI reads it (settings/stack_file.py)
    RefusedClass(
        "stack-file key given twice",
        stack_file._mapping_without_duplicates,
        {},
        "tpu-slicing:zone",
        "keep one",
        stack_lines="  tpu-slicing:zone: us-central1-ai1b\n",
    ),
    RefusedClass(
        "namespace one typo from the project's",
        stack_file.namespace_problems,
        {},
        "tpu-slicng:zone",
        "allowed: tpu-slicing:zone",
        stack_lines="  tpu-slicng:zone: us-central1-ai1a\n",
    ),
    RefusedClass(
        "namespace with a look-alike letter",
        stack_file.namespace_problems,
        {},
        "tpu-slіcing:zone",  # Cyrillic і (U+0456)
        "allowed: tpu-slicing:zone",
        stack_lines="  tpu-slіcing:zone: us-central1-ai1a\n",
    ),
    RefusedClass(
        "namespace with a Unicode hyphen",
        stack_file.namespace_problems,
        {},
        "tpu\u2011slicing:zone",
        "allowed: tpu-slicing:zone",
        stack_lines="  tpu\u2011slicing:zone: us-central1-ai1a\n",
    ),
    RefusedClass(
        "namespace in another case",
        stack_file.namespace_problems,
        {},
        "TPU-Slicing:zone",
        "allowed: tpu-slicing:zone",
        stack_lines="  TPU-Slicing:zone: us-central1-ai1a\n",
    ),
    RefusedClass(
        "namespace with surrounding whitespace",
        stack_file.namespace_problems,
        {},
        "tpu-slicing :zone",
        "allowed: tpu-slicing:zone",
        stack_lines='  "tpu-slicing :zone": us-central1-ai1a\n',
    ),
    RefusedClass(
        "namespace the program never reads",
        stack_file.namespace_problems,
        {},
        "kubernetes:context",
        "allowed namespaces: gcp, pulumi, tpu-slicing",
        stack_lines="  kubernetes:context: kind-kind\n",
    ),
    RefusedClass(
        "stack file over the size cap",
        stack_file.read_bytes,
        {},
        "Pulumi.dev.yaml",  # the file is what the message names
        f"allowed: at most {stack_file.MAX_BYTES} bytes",
        stack_lines="  # " + "x" * stack_file.MAX_BYTES + "\n",
    ),
    # --- secrets and keys of the loader (settings/loader.py)
    RefusedClass(
        "plain-text hfToken",
        loader.load,
        {"hfToken": "hf_plain"},
        "tpu-slicing:hfToken",
        "--secret",
        pack="secrets-are-secret",
    ),
    RefusedClass(
        "plain-text provider credentials",
        loader.load,
        {"gcp:credentials": '{"type": "service_account"}'},
        "gcp:credentials",
        "allowed: a Pulumi secret only",
    ),
    RefusedClass(
        "credential in an ordinary setting",
        credentials.plain_credentials,
        {"serving": {"model": {"path": "models/hf_" + "x" * 34}}},
        "tpu-slicing:serving.model.path",
        credentials.ALLOWED,
        pack="secrets-are-secret",
    ),
    RefusedClass(
        "project as a tpu-slicing key", loader.load, {"project": "other"}, "tpu-slicing:project", "gcp:project"
    ),
    # --- the tree's own keys, bounds and field types (settings/base.py, settings/model.py)
    RefusedClass("unknown key", StrictModel._unknown_keys, {"netwrok": {}}, "netwrok", "did you mean 'network'"),
    RefusedClass(
        "mtu out of range", NetworkConfig.model_fields["mtu"], {"network": {"mtu": 9000}}, "network.mtu", "8896"
    ),
    RefusedClass("namePrefix not RFC 1035", model._rfc1035, {"namePrefix": "Dev_1"}, "namePrefix", "lowercase"),
    RefusedClass(
        "namePrefix too long",
        StackConfig.model_fields["name_prefix"],
        {"namePrefix": "a" * 21},
        "namePrefix",
        "20",
    ),
    # --- characters of every string (settings/names.py, run on each field by settings/base.py)
    RefusedClass(
        "invisible character in a string",
        names.text_problem,
        {"serving": {"model": {"name": "Qwen/Qwen3.5-397B\u200b-A17B-FP8"}}},
        "serving.model.name",
        "U+200B ZERO WIDTH SPACE",
    ),
    RefusedClass(
        "look-alike character in a name",
        names.text_problem,
        {"serving": {"gateway": {"name": "inference-\uff47ateway"}}},
        "serving.gateway.name",
        "no compatibility forms that NFKC normalization changes",
    ),
    RefusedClass(
        "a string longer than a path the kernel opens (PATH_MAX)",
        names.length_problem,
        {"serving": {"jetstream": {"tokenizerPath": "assets/" + "t" * 4096}}},
        "serving.jetstream.tokenizerPath",
        "at most 4,095 bytes",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "trailing newline in a name",
        names.text_problem,
        {"serving": {"namespace": "llm-d-pd-disaggregation\n"}},
        "serving.namespace",
        "U+000A LINE FEED",
    ),
)

REFUSED_CLASSES: tuple[RefusedClass, ...] = (
    *_READING,
    *PROVIDER_KEYS,
    *NETWORK,
    *CLUSTER,
    *CAPACITY,
    *KUEUE,
    *MAXTEXT,
    *RECOVERY,
    *VERSIONS,
    *OBSERVABILITY,
    *BACKENDS,
    *SERVING,
    *STORAGE,
    *AUTOSCALING,
    *WAITS,
    *RESERVATION,
    *PRICING,
    *BENCHMARK,
)
CLASS_COUNT = len(REFUSED_CLASSES)
NAMES = tuple(c.name for c in REFUSED_CLASSES)


@dataclass(frozen=True)
class PackOnly:
    """A configuration the settings accept and the pack refuses unless its configuration waives it."""

    name: str
    policy: str
    example: Mapping[str, Any]
    reason: str
    stack: str = "dev"
    waiver: Mapping[str, Any] = field(default_factory=dict)  # the pack configuration that accepts it


PACK_ONLY: tuple[PackOnly, ...] = (
    PackOnly(
        "cluster without deletion protection",
        "cluster-deletion-protection",
        {"cluster": {"deletionProtection": False}},
        "the documented teardown sets it false and runs `pulumi up` with the pack's allowClusterDeletion",
        waiver={"allowClusterDeletion": True},
    ),
    PackOnly(
        "TPU network below jumbo frames",
        "tpu-network-jumbo-mtu",
        {"network": {"mtu": 1500}},
        "the README's contract documents network.mtu as 1300..8896 (a smaller MTU works, more slowly); the "
        "pack's rule is stricter and has no waiver. Aligning them is a contract change for the README's owner",
    ),
    PackOnly(
        "external service",
        "no-public-load-balancer",
        {"serving": {"http": EXTERNAL}},
        "an external service is a deliberate choice in two places: the stack (serving.http.type external) "
        "and the pack's configuration (allowExternalServices)",
        stack="saxml-v5e",
        waiver={"allowExternalServices": True},
    ),
)
