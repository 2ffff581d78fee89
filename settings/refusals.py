"""Every class of stack configuration the program refuses, with the rule that refuses it and one example.

`REFUSED_CLASSES` is the list; `CLASS_COUNT` is computed from it, never written by hand. Each example
is a change to a committed stack file (`stack`); the settings loader, the offline plan and, where
the rule has a twin in the policy pack (`pack`, the policy's name), the pack on the plan's resource
inputs all refuse it with a message naming `key` and containing `allowed` (tests/test_verdicts.py).
The pack runs the settings' own function where one exists (settings/pins.py, settings/exposure.py).

`PACK_ONLY` lists what the pack refuses while the settings accept it, on purpose, with the reason.

An example is applied as tests/conftest.py `merged` applies overrides: a bare key is the project's
(`tpu-slicing:`), a mapping is merged into the stack's, None removes a key; `stack_lines` are
appended to the file's `config:` mapping verbatim (for what only the stack-file reader sees).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from settings import (
    credentials,
    exposure,
    loader,
    machines,
    model,
    oci_registry,
    pins,
    serving_model,
    stack_file,
    storage_names,
    vllm,
)
from settings.model import (
    ClusterConfig,
    HttpExposure,
    MaintenanceExclusion,
    ModelConfig,
    NetworkConfig,
    Priorities,
    ReservationConfig,
    SliceConfig,
    StackConfig,
    StrictModel,
    TpuConfig,
)


@dataclass(frozen=True)
class RefusedClass:
    name: str
    rule: object  # the function or validator that refuses the class, or the FieldInfo whose constraint does
    example: Mapping[str, Any]
    key: str  # the key the message names
    allowed: str  # a fragment of what the message says is allowed
    stack: str = "dev"
    pack: str | None = None  # the policy of policy/guardrails.py that refuses it at preview time
    stack_lines: str = ""


def _levels(*levels: str) -> dict[str, Any]:
    return {"kueue": {"topologyLevels": list(levels)}}


_D = model.DEFAULT_TOPOLOGY_LEVELS
_EXTERNAL = {"type": "external", "sourceRanges": ["10.0.0.0/8"]}

REFUSED_CLASSES: tuple[RefusedClass, ...] = (
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
        stack_file.config_keys,
        {},
        "tpu-slicng:zone",
        "allowed: tpu-slicing:zone",
        stack_lines="  tpu-slicng:zone: us-central1-ai1a\n",
    ),
    RefusedClass(
        "namespace with a look-alike letter",
        stack_file.config_keys,
        {},
        "tpu-slіcing:zone",  # Cyrillic і (U+0456)
        "allowed: tpu-slicing:zone",
        stack_lines="  tpu-slіcing:zone: us-central1-ai1a\n",
    ),
    RefusedClass(
        "namespace with a Unicode hyphen",
        stack_file.config_keys,
        {},
        "tpu\u2011slicing:zone",
        "allowed: tpu-slicing:zone",
        stack_lines="  tpu\u2011slicing:zone: us-central1-ai1a\n",
    ),
    RefusedClass(
        "namespace in another case",
        stack_file.config_keys,
        {},
        "TPU-Slicing:zone",
        "allowed: tpu-slicing:zone",
        stack_lines="  TPU-Slicing:zone: us-central1-ai1a\n",
    ),
    RefusedClass(
        "namespace with surrounding whitespace",
        stack_file.config_keys,
        {},
        "tpu-slicing :zone",
        "allowed: tpu-slicing:zone",
        stack_lines='  "tpu-slicing :zone": us-central1-ai1a\n',
    ),
    RefusedClass(
        "namespace the program never reads",
        stack_file.config_keys,
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
    RefusedClass("unknown key", StrictModel._unknown_keys, {"netwrok": {}}, "netwrok", "did you mean 'network'"),
    # --- network
    RefusedClass(
        "mtu out of range", NetworkConfig.model_fields["mtu"], {"network": {"mtu": 9000}}, "network.mtu", "8896"
    ),
    RefusedClass(
        "public range", NetworkConfig._private, {"network": {"nodeCidr": "8.8.0.0/18"}}, "network.nodeCidr", "RFC 1918"
    ),
    RefusedClass(
        "link-local or other special range for pods",
        NetworkConfig._private,
        {"network": {"podCidr": "169.254.0.0/16"}},
        "network.podCidr",
        "RFC 1918",
    ),
    RefusedClass(
        "proxy subnet too small",
        NetworkConfig._proxy_size,
        {"network": {"proxyCidr": "172.16.0.0/28"}},
        "network.proxyCidr",
        "/26",
    ),
    RefusedClass(
        "overlapping ranges",
        NetworkConfig._disjoint,
        {"network": {"proxyCidr": "10.10.0.0/26"}},
        "nodeCidr",
        "disjoint",
    ),
    RefusedClass(
        "pod range too small for the nodes",
        StackConfig._check_network_capacity,
        {"network": {"podCidr": "10.16.0.0/20"}},
        "network.podCidr",
        "a pod range of /18 or wider",
    ),
    # --- names and location
    RefusedClass("namePrefix not RFC 1035", model._rfc1035, {"namePrefix": "Dev_1"}, "namePrefix", "lowercase"),
    RefusedClass(
        "namePrefix too long",
        StackConfig.model_fields["name_prefix"],
        {"namePrefix": "a" * 21},
        "namePrefix",
        "20",
    ),
    RefusedClass(
        "region without the zone", StackConfig._check_region, {"region": "europe-west4"}, "region", "us-central1"
    ),
    # --- cluster
    RefusedClass(
        "zone without the generation's TPUs",
        StackConfig._check_region,
        {"zone": "us-central1-b"},
        "zone",
        "allowed: the zone of your reservation",
    ),
    RefusedClass(
        "versionPrefix the pinned version contradicts",
        ClusterConfig._prefix_agrees,
        {"cluster": {"version": "1.36.1-gke.1000000", "versionPrefix": "1.35."}},
        "cluster.versionPrefix",
        "a prefix of the pinned version",
    ),
    RefusedClass(
        "GKE version below the features' floor",
        StackConfig._check_versions_for_features,
        {"cluster": {"version": "1.35.2-gke.1842000"}},
        "cluster.version",
        model.SUBSLICING_MIN_GKE,
    ),
    RefusedClass(
        "malformed GKE version", ClusterConfig._version, {"cluster": {"version": "1.36"}}, "cluster.version", "GKE"
    ),
    RefusedClass(
        "release channel without dynamic slicing",
        StackConfig._check_versions_for_features,
        {"cluster": {"releaseChannel": "STABLE"}},
        "cluster.releaseChannel",
        "RAPID",
    ),
    RefusedClass(
        "maintenance exclusion too long",
        MaintenanceExclusion._window,
        {
            "cluster": {
                "maintenanceExclusion": {
                    "scope": "NO_UPGRADES",
                    "end": "2027-02-01T00:00:00Z",
                    "untilEndOfSupport": None,
                }
            }
        },
        "cluster.maintenanceExclusion",
        "30 days",
    ),
    RefusedClass(
        "TPU node upgrades left to GKE's cadence unstated",
        StackConfig._check_upgrade_policy,
        {"cluster": {"maintenanceExclusion": None}},
        "cluster.maintenanceExclusion",
        "cluster.allowTpuNodeUpgrades: true",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "system machine smaller than the largest CPU pod",
        machines.system_machine_problem,
        {"cluster": {"systemMachineType": "e2-standard-4"}},
        "cluster.systemMachineType",
        "allowed: a machine type with at least 4 vCPU and 8 GiB allocatable, e.g. e2-standard-8",
    ),
    RefusedClass(
        "system machine of an unknown family or size",
        machines.machine,
        {"cluster": {"systemMachineType": "t2d-standard-8"}},
        "cluster.systemMachineType",
        "known: e2-standard-N",
    ),
    # --- reservation and cubes
    RefusedClass(
        "TPU7x without a reservation block",
        StackConfig._check_backend_platform,
        {"reservation": None},
        "reservation.block",
        "required",
        pack="tpu-pool-specific-reservation",
    ),
    RefusedClass(
        "sub-blocks not one per cube",
        StackConfig._check_sub_blocks,
        {"reservation": {"subBlocks": ["sb-0"]}},
        "reservation.subBlocks",
        "one sub-block per cube",
    ),
    RefusedClass(
        "sub-block listed twice",
        ReservationConfig._unique,
        {"reservation": {"subBlocks": ["sb-0", "sb-0"]}},
        "reservation.subBlocks",
        "twice",
    ),
    RefusedClass(
        "unknown TPU machine type",
        TpuConfig._machine,
        {"tpu": {"machineType": "tpu7x-standard-8t"}},
        "tpu.machineType",
        "tpu7x-standard-4t",
    ),
    RefusedClass("cube topology of another shape", TpuConfig._cube, {"tpu": {"cubeTopology": "4x4x8"}}, "tpu", "4x4x4"),
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
        model.Versions._controller_floors,
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
        "alerts that tell no one",
        StackConfig._check_alerts,
        {"observability": {"alerts": {"enabled": True}}},
        "observability.alerts.notificationChannels",
        "at least one projects/<project>/notificationChannels/<id>",
    ),
    RefusedClass(
        "alerts on metrics nothing scrapes",
        StackConfig._check_alerts,
        {
            "observability": {
                "podMonitoring": False,
                "alerts": {
                    "enabled": True,
                    "notificationChannels": ["projects/example-tpu-project/notificationChannels/1"],
                },
            }
        },
        "observability.alerts",
        "podMonitoring true",
    ),
    RefusedClass(
        "reservation block on a slice backend",
        StackConfig._check_backend_platform,
        {"reservation": {"name": "v5e-reservation", "block": "block-0"}},
        "reservation.block",
        "remove it",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "cube serving keys with nothing served",
        StackConfig._check_backend_platform,
        {"serving": {"vllm": {"maxNumSeqs": 8}}},
        "serving.vllm",
        "remove it",
        stack="dev-b",
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
        StackConfig._check_controllers,
        {"controllers": {"install": False, "chartRegistry": "oci://us-docker.pkg.dev/example-tpu-project/k8s-mirror"}},
        "controllers.chartRegistry",
        "remove it, or set controllers.install true",
    ),
    # --- Kueue
    RefusedClass(
        "priorities not rising", Priorities._ordered, {"kueue": {"priorities": {"low": 5000}}}, "kueue.priorities", "<"
    ),
    RefusedClass(
        "topology levels reversed",
        model.topology_levels_problem,
        _levels(*reversed(_D)),
        "kueue.topologyLevels",
        "allowed, widest first",
    ),
    RefusedClass(
        "topology level misspelled",
        model.topology_levels_problem,
        _levels(*(level.replace("block", "blok") for level in _D)),
        "kueue.topologyLevels",
        "did you mean 'cloud.google.com/gce-topology-block'",
    ),
    RefusedClass(
        "topology level listed twice",
        model.topology_levels_problem,
        _levels(*_D[:2], *_D[1:]),
        "kueue.topologyLevels",
        "twice",
    ),
    RefusedClass(
        "topology levels without a level the stack's shapes use",
        model.topology_levels_problem,
        _levels(*(level for level in _D if "2x2x2" not in level)),
        "kueue.topologyLevels",
        "which serving.prefill.topology 2x2x2 needs",
    ),
    RefusedClass(
        "topology levels without the node level",
        model.topology_levels_problem,
        _levels(*_D[:-1]),
        "kueue.topologyLevels",
        "required here",
    ),
    # --- checks
    RefusedClass(
        "sub-slices that do not fit the cubes",
        StackConfig._check_slices,
        {"checks": {"subslicing": {"enabled": True, "replicas": 17}}},
        "checks.subslicing.replicas",
        "at most 16",
    ),
    RefusedClass(
        "super-slice larger than the cubes",
        StackConfig._check_slices,
        {"checks": {"superslicing": {"enabled": True, "topology": "4x8x8"}}},
        "checks.superslicing.topology",
        "tpu.cubes",
    ),
    # --- serving
    RefusedClass(
        "serving namespace the cluster owns",
        model._own_namespace,
        {"serving": {"namespace": "kube-system"}},
        "serving.namespace",
        "any other DNS label",
    ),
    RefusedClass(
        "keys the backend never reads",
        StackConfig._check_backend_platform,
        {"serving": {"slices": 3}},
        "serving.slices",
        "remove it",
    ),
    RefusedClass(
        "kueue on a slice backend",
        StackConfig._check_backend_platform,
        {"kueue": {"priorities": {"low": 10}}},
        "kueue",
        "remove it",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "serving without its weights bucket",
        StackConfig._check_serving_model,
        {"serving": {"model": {"weightsBucket": None}}},
        "serving.model.weightsBucket",
        "required",
    ),
    RefusedClass(
        "model path not inside the bucket",
        ModelConfig._object_path,
        {"serving": {"model": {"path": "gs://b/models/x"}}},
        "serving.model.path",
        "without a leading '/' or gs://",
    ),
    RefusedClass(
        "model name that is no label value",
        ModelConfig._labelled,
        {"serving": {"model": {"name": "org/-bad-"}}},
        "serving.model.name",
        "Kubernetes label value",
    ),
    RefusedClass(
        "prefill and decode that do not pack into the cubes",
        StackConfig._check_serving,
        {"serving": {"prefill": {"replicas": 9}, "decode": {"replicas": 8}}},
        "serving.prefill",
        "128 chips",
    ),
    RefusedClass(
        "model larger than a serving sub-slice",
        StackConfig._check_serving,
        {"serving": {"model": {"parametersBillions": 2000}}},
        "serving.prefill.topology",
        "smallest shape",
    ),
    RefusedClass(
        "model larger than a serving slice",
        StackConfig._check_slice_model,
        {"serving": {"model": {"parametersBillions": 300}}},
        "serving.slice.topology",
        "the smallest v5e topology that fits",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "tensor parallelism that does not divide the devices",
        model.check_tensor_parallel,
        {"serving": {"vllm": {"tensorParallelSize": 5}}},
        "serving.vllm.tensorParallelSize",
        "allowed: 8, 16",
    ),
    RefusedClass(
        "tensor parallelism above the slice's devices",
        model.check_tensor_parallel,
        {"serving": {"vllm": {"tensorParallelSize": 32}}},
        "serving.vllm.tensorParallelSize",
        "exceeds the 16 devices",
    ),
    RefusedClass(
        "tensor parallelism that overfills a device's HBM",
        model.check_tensor_parallel,
        {"serving": {"vllm": {"tensorParallelSize": 1}}},
        "serving.vllm.tensorParallelSize",
        "holds 96 GiB HBM; allowed for the 16 devices of a 2x2x2 prefill slice",
    ),
    RefusedClass(
        "tensor parallelism that does not divide the attention heads",
        vllm.check_engine,
        {"serving": {"prefill": {"topology": "2x4x4", "replicas": 1}, "decode": {"topology": "2x4x4", "replicas": 1}}},
        "serving.vllm.tensorParallelSize",
        "verify_with_parallel_config); allowed: ",
    ),
    RefusedClass(
        "batched tokens below the sequences of a step",
        vllm.check_engine,
        {"serving": {"vllm": {"maxNumSeqs": 1024, "maxNumBatchedTokens": 512}}},
        "serving.vllm.maxNumBatchedTokens",
        "maxNumBatchedTokens >= maxNumSeqs",
    ),
    RefusedClass(
        "maxModelLen above the model's context",
        vllm.check_engine,
        {"serving": {"vllm": {"maxModelLen": 524288}}},
        "serving.vllm.maxModelLen",
        "allowed: 256 to 262144",
    ),
    RefusedClass(
        "a model vLLM's checks cannot be run for",
        vllm.check_engine,
        {"serving": {"model": {"name": "acme/house-model-70b"}}},
        "serving.model.attentionHeads",
        "num_attention_heads and max_position_embeddings",
    ),
    RefusedClass(
        "bucket name Cloud Storage refuses",
        serving_model._bucket,
        {"serving": {"model": {"weightsBucket": "my-google-weights"}}},
        "serving.model.weightsBucket",
        storage_names.BUCKET_ALLOWED,
    ),
    RefusedClass(
        "object path no reader resolves",
        ModelConfig._object_path,
        {"serving": {"model": {"path": "models/../other"}}},
        "serving.model.path",
        storage_names.OBJECT_ALLOWED,
    ),
    RefusedClass(
        "Saxml checkpoint in a bucket the servers are never granted",
        StackConfig._check_serving_model,
        {
            "serving": {
                "model": {"weightsBucket": "example-weights"},
                "saxml": {
                    "modelPath": "saxml.server.pax.lm.params.lm_cloud.LLaMA70BFP16TPUv5e32",
                    "checkpoint": "gs://other-ckpt/c",
                },
            }
        },
        "serving.saxml.checkpoint",
        "a checkpoint inside serving.model.weightsBucket",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "Saxml servable whose mesh is not the slice's devices",
        StackConfig._check_servable,
        {"serving": {"saxml": {"modelPath": "saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B64Test"}}},
        "serving.saxml.modelPath",
        "allowed: LmCloudSpmd175B32Test",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "test-mode Saxml servable given a checkpoint",
        StackConfig._check_servable,
        {"serving": {"model": {"weightsBucket": "example-weights"}, "saxml": {"checkpoint": "gs://example-weights/c"}}},
        "serving.saxml.checkpoint",
        "checkpoint None for it",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "derived Saxml bucket name Cloud Storage refuses",
        StackConfig._check_serving_model,
        {"namePrefix": "my-google"},
        "namePrefix",
        storage_names.BUCKET_ALLOWED,
        stack="saxml-v5e",
    ),
    RefusedClass(
        "routing sidecar from another llm-d release than the picker",
        model.Versions._one_llm_d_release,
        {"versions": {"routingSidecarImage": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.8.0"}},
        "versions.routingSidecarImage",
        "allowed: ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0",
    ),
    RefusedClass(
        "prefill and decode slices of different shapes",
        StackConfig._check_serving,
        {"serving": {"decode": {"topology": "2x2x4"}}},
        "serving.decode.topology",
        "allowed: one topology for both",
    ),
    RefusedClass(
        "smoke-test deadline shorter than the servers' own startup",
        model._smoke_deadline,
        {"serving": {"smokeTest": {"deadlineSeconds": 3600}}},
        "serving.smokeTest.deadlineSeconds",
        "allowed are 18600 to 28800 s",
    ),
    RefusedClass(
        "malformed smoke-test run id",
        model._run_id,
        {"serving": {"smokeTest": {"runId": "Run_1"}}},
        "serving.smokeTest.runId",
        "1 to 32 lowercase letters, digits and '-'",
    ),
    RefusedClass(
        "slice shape on a machine type that cannot build it",
        SliceConfig._shape,
        {"serving": {"slice": {"machineType": "ct5lp-hightpu-8t", "topology": "4x8"}}},
        "serving.slice",
        "set machineType 'ct5lp-hightpu-4t'",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "MaxText model name the engine image does not know",
        StackConfig._check_maxtext,
        {"serving": {"jetstream": {"maxtextModel": "llama-2-70b"}}},
        "serving.jetstream.maxtextModel",
        "llama2-70b, llama2-7b",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "MaxText tensor parallelism above the model's KV heads",
        StackConfig._check_tensor_parallelism,
        {"serving": {"jetstream": {"tensorParallelism": 32}}},
        "serving.jetstream.tensorParallelism",
        "allowed: 1, 2, 4, 8",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "MaxText KV cache larger than the slice's HBM at start-up",
        StackConfig._check_maxtext,
        {"serving": {"jetstream": {"perDeviceBatchSize": 64}}},
        "serving.jetstream.perDeviceBatchSize",
        "perDeviceBatchSize at most 19",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "Saxml on a generation it has no chip name for",
        StackConfig._check_backend_platform,
        {"zone": "us-east5-b", "serving": {"slice": {"machineType": "ct6e-standard-4t", "topology": "4x4"}}},
        "serving.slice.machineType",
        "use a v5e slice",
        stack="saxml-v5e",
    ),
    # --- exposure (settings/exposure.py, shared with the pack's no-public-load-balancer)
    RefusedClass(
        "external service without source ranges",
        HttpExposure._restricted,
        {"serving": {"http": {"type": "external"}}},
        "serving.http",
        "needs sourceRanges",
        stack="saxml-v5e",
        pack="no-public-load-balancer",
    ),
    RefusedClass(
        "source ranges on an internal service",
        HttpExposure._restricted,
        {"serving": {"http": {"sourceRanges": ["10.0.0.0/8"]}}},
        "serving.http",
        "use type external",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "source ranges whose union is wider than a /8",
        exposure.widest_union,
        {"serving": {"http": {**_EXTERNAL, "sourceRanges": ["0.0.0.0/1", "128.0.0.0/1"]}}},
        "serving.http",
        exposure.SOURCE_RANGES_ALLOWED,
        stack="saxml-v5e",
        pack="no-public-load-balancer",
    ),
    RefusedClass(
        "source ranges that together hold more than a /8 of the internet",
        exposure.too_wide,
        {"serving": {"http": {**_EXTERNAL, "sourceRanges": [f"{n}.0.0.0/9" for n in range(20, 60, 2)]}}},
        "serving.http",
        exposure.SOURCE_RANGES_ALLOWED,
        stack="saxml-v5e",
        pack="no-public-load-balancer",
    ),
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
        {"serving": {"http": _EXTERNAL}},
        "an external service is a deliberate choice in two places: the stack (serving.http.type external) "
        "and the pack's configuration (allowExternalServices)",
        stack="saxml-v5e",
        waiver={"allowExternalServices": True},
    ),
)
