"""The serving benchmark as a Kubernetes Job that `pulumi up` waits for, after the smoke test passes.

The load generator is inference-perf (kubernetes-sigs, wg-serving): it is released both as a PyPI
package and as an image from the same tag (its publish-on-release workflow), so the tests run the
very release the Job pins (tools/loadgen), and its reports carry what a reviewer compares (TTFT,
TPOT, inter-token and end-to-end latency percentiles, request and output-token throughput per
stage). `vllm bench serve` would come with the serving image, but vLLM does not install on a
machine without accelerators, so nothing here could run it.

The pod (pods/benchmark_run.py) reads the model's tokenizer from the weights bucket through a
read-only Cloud Storage FUSE volume (the cluster's GcsFuseCsiDriver add-on, infra/cluster.py) and
writes its reports under `benchmarks/<namePrefix>/<run>/` of the same bucket, the only prefix its
identity may write (workloads/bucket_access.py): stacks that serve from one bucket keep them
apart. It only opens connections to the gateway's address and to Cloud Storage: no model server
admits it, so no NetworkPolicy allowance names it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
from pulumi_kubernetes.batch import v1 as batch
from pulumi_kubernetes.core import v1 as core
from pulumi_kubernetes.meta import v1 as meta

from contracts.addresses import http_url
from contracts.labels import COMMON_LABELS
from domain.benchmark import stage_rates
from settings.benchmark import LOADGEN_MEMORY_LIMIT_GIB, BenchmarkConfig

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "pods" / "benchmark_run.py"
RESULT_MODULE = ROOT / "domain" / "benchmark.py"  # shipped as benchmark.py beside the program
JOB_NAME = "serving-benchmark"
PROGRAM_MOUNT = "/opt/benchmark"
TOKENIZER_MOUNT = "/model"
REPORTS_MOUNT = "/reports"
HOME_MOUNT = "/home/benchmark"
# The GKE webhook injects the Cloud Storage FUSE sidecar only into pods with this annotation
# (GKE docs, "Mount Cloud Storage buckets as CSI ephemeral volumes").
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"


def load_generator_config(bench: BenchmarkConfig, served_model: str) -> dict[str, Any]:
    """inference-perf v0.7.0's configuration (inference_perf/config/config.py Config), without what only
    the pod knows (the gateway's URL, the tokenizer's folder, where reports go)."""
    lengths = {
        name: {"type": "fixed", "min": tokens, "max": tokens, "mean": tokens, "std_dev": 0}
        for name, tokens in (("input_distribution", bench.input_tokens), ("output_distribution", bench.output_tokens))
    }
    return {
        # Streaming, so time to first token and time per output token are measured.
        "api": {"type": "completion", "streaming": True},
        # ignore_eos: every answer is outputTokens long, so runs compare like with like.
        "server": {"type": "vllm", "model_name": served_model, "ignore_eos": True},
        "data": {"type": "random", **lengths},
        "load": {
            "type": "constant",
            "request_timeout": bench.request_timeout_seconds,
            "num_workers": bench.num_workers,
            "stages": [
                {"rate": rate, "duration": bench.stage_seconds} for rate in stage_rates(bench.rates, bench.repetitions)
            ],
        },
        "report": {
            "request_lifecycle": {"summary": True, "per_stage": True, "per_request": False},
            "prometheus": {"summary": False, "per_stage": False},
        },
    }


def run_name(bench: BenchmarkConfig, serving_spec: object) -> str:
    """The results' folder: the run id, else a fingerprint of what is measured (a change is a new run)."""
    if bench.run_id is not None:
        return bench.run_id
    digest = hashlib.sha256(json.dumps(serving_spec, sort_keys=True, default=str).encode()).hexdigest()
    return f"spec-{digest[:12]}"


def result_uri(bucket: str, prefix: str, run: str) -> str:
    return f"gs://{bucket}/{prefix}{run}/result.json"


@dataclass(frozen=True)
class BenchmarkJobArgs:
    provider: kubernetes.Provider
    namespace: str
    project: str
    gateway_address: pulumi.Input[str]
    served_model: str
    bucket: str
    prefix: str  # where in the bucket the stack's reports go (settings/naming.py benchmark_prefix)
    service_account: str  # the stack's own benchmark identity (settings/naming.py benchmark_account)
    model_path: str  # the model's snapshot in the bucket: its tokenizer files
    image: str
    config: BenchmarkConfig
    serving_spec: object  # what the benchmark measures: a change runs it again
    depends_on: Sequence[pulumi.Resource] = ()


class BenchmarkJob(pulumi.ComponentResource):
    job: batch.Job
    result: str  # gs:// URI of the run's result file

    def __init__(self, name: str, args: BenchmarkJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:workloads:BenchmarkJob", name, None, opts)
        bench = args.config
        run = run_name(bench, args.serving_spec)
        self.result = result_uri(args.bucket, args.prefix, run)
        base_url = pulumi.Output.from_input(args.gateway_address).apply(lambda address: http_url(str(address)))
        data = {
            "inference-perf.json": json.dumps(load_generator_config(bench, args.served_model), indent=2) + "\n",
            "benchmark_run.py": PROGRAM.read_text(),
            "benchmark.py": RESULT_MODULE.read_text(),
        }
        after = list(args.depends_on)
        script = core.ConfigMap(
            "program",
            metadata=meta.ObjectMetaArgs(name=JOB_NAME, namespace=args.namespace, labels=dict(COMMON_LABELS)),
            data=data,
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=after),
        )
        gate = bench.gate.model_dump(exclude_none=True) if bench.gate is not None else {}
        environment = {
            "BENCHMARK_CONFIG": f"{PROGRAM_MOUNT}/inference-perf.json",
            "BENCHMARK_BASE_URL": base_url,
            "BENCHMARK_TOKENIZER": TOKENIZER_MOUNT,
            "BENCHMARK_REPORTS": REPORTS_MOUNT,
            "BENCHMARK_BUCKET": args.bucket,
            "BENCHMARK_PREFIX": args.prefix,
            "BENCHMARK_RUN": run,
            "BENCHMARK_PROJECT": args.project,
            "BENCHMARK_GATE": json.dumps(gate, sort_keys=True),
            # The root file system is read-only: the tokenizer library's cache and home go to a volume.
            "HOME": HOME_MOUNT,
            "HF_HOME": f"{HOME_MOUNT}/hf",
            "HF_HUB_OFFLINE": "1",  # the tokenizer is the mounted snapshot, never a download
        }
        fingerprint = hashlib.sha256(json.dumps([args.serving_spec, data, gate], sort_keys=True).encode())
        self.job = batch.Job(
            "job",
            metadata=meta.ObjectMetaArgs(
                name=JOB_NAME,
                namespace=args.namespace,
                labels=dict(COMMON_LABELS),
                annotations={"tpu-slicing/benchmark-fingerprint": fingerprint.hexdigest()[:16]},
            ),
            spec=batch.JobSpecArgs(
                backoff_limit=0,
                active_deadline_seconds=bench.deadline_seconds,
                template=core.PodTemplateSpecArgs(
                    metadata=meta.ObjectMetaArgs(labels=dict(COMMON_LABELS), annotations={GCSFUSE_ANNOTATION: "true"}),
                    spec=core.PodSpecArgs(
                        restart_policy="Never",
                        service_account_name=args.service_account,
                        security_context=core.PodSecurityContextArgs(
                            run_as_non_root=True,
                            run_as_user=65534,
                            run_as_group=65534,
                            fs_group=65534,
                            seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
                        ),
                        containers=[
                            core.ContainerArgs(
                                name="benchmark",
                                image=args.image,
                                command=["python3", f"{PROGRAM_MOUNT}/benchmark_run.py"],
                                # A failed run's (or a missed gate's) last lines reach the failed `pulumi
                                # up` through the provider's Job await (workloads/smoke_job.py says how).
                                termination_message_policy="FallbackToLogsOnError",
                                env=[core.EnvVarArgs(name=k, value=v) for k, v in environment.items()],
                                resources=core.ResourceRequirementsArgs(
                                    requests={"cpu": str(bench.num_workers), "memory": "4Gi"},
                                    limits={"memory": f"{LOADGEN_MEMORY_LIMIT_GIB}Gi"},
                                ),
                                security_context=core.SecurityContextArgs(
                                    allow_privilege_escalation=False,
                                    read_only_root_filesystem=True,
                                    capabilities=core.CapabilitiesArgs(drop=["ALL"]),
                                ),
                                volume_mounts=[
                                    core.VolumeMountArgs(name="program", mount_path=PROGRAM_MOUNT, read_only=True),
                                    core.VolumeMountArgs(name="tokenizer", mount_path=TOKENIZER_MOUNT, read_only=True),
                                    core.VolumeMountArgs(name="reports", mount_path=REPORTS_MOUNT),
                                    core.VolumeMountArgs(name="home", mount_path=HOME_MOUNT),
                                ],
                            )
                        ],
                        volumes=[
                            core.VolumeArgs(name="program", config_map=core.ConfigMapVolumeSourceArgs(name=JOB_NAME)),
                            core.VolumeArgs(
                                name="tokenizer",
                                csi=core.CSIVolumeSourceArgs(
                                    driver=GCSFUSE_DRIVER,
                                    read_only=True,
                                    volume_attributes={
                                        "bucketName": args.bucket,
                                        "mountOptions": f"only-dir={args.model_path.strip('/')},implicit-dirs",
                                    },
                                ),
                            ),
                            core.VolumeArgs(name="reports", empty_dir=core.EmptyDirVolumeSourceArgs(size_limit="1Gi")),
                            core.VolumeArgs(name="home", empty_dir=core.EmptyDirVolumeSourceArgs(size_limit="1Gi")),
                        ],
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[*after, script],
                replace_on_changes=["*"],
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(create=f"{bench.deadline_seconds // 60 + 10}m"),
            ),
        )
        self.register_outputs({"job": self.job.metadata.name, "result": self.result})
