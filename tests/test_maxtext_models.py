"""The MaxText table: names by engine image tag and the start-up KV cache (domain/maxtext_models.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain import maxtext_models
from domain.topology import CATALOG, GIB
from plan import engine
from settings.loader import ConfigError, load
from settings.model import StackConfig
from tests.conftest import merged

JETSTREAM = engine.read_stack_config(engine.stack_file("jetstream-v5e"))


def test_llama2_70b_holds_320_kib_of_cache_per_token() -> None:
    # 80 layers x key and value x 8 KV heads x 128 x bfloat16 (MaxText configs/models/llama2-70b.yml)
    model = maxtext_models.models_for("us-docker.pkg.dev/cloud-tpu-images/inference/maxengine-server:v0.2.2")
    assert model is not None
    assert model["llama2-70b"].kv_bytes_per_token() == 327_680


@pytest.mark.parametrize(
    "image", ["example.com/maxengine-server:v0.3.0", "example.com/maxengine-server", "host:5000/x"]
)
def test_an_engine_tag_outside_the_table_is_not_judged(image: str) -> None:
    assert maxtext_models.models_for(image) is None


def _load_jetstream(**jetstream: object) -> None:
    raw, secrets = JETSTREAM
    raw = merged({"serving": {"jetstream": jetstream}}, raw)
    load(raw, stack="jetstream-v5e", project=raw.get("gcp:project"), secret_keys=secrets)


@given(st.integers(1, 64), st.sampled_from([2048, 4096, 8192]))
def test_a_batch_is_refused_exactly_when_its_cache_and_the_weights_exceed_the_slice(batch: int, length: int) -> None:
    v5e = CATALOG["v5e"]
    shape = v5e.allowed_shape("4x8")  # jetstream-v5e: two 4x8 slices, llama2-70b at 2 bytes per parameter
    cache = batch * v5e.devices(shape) * length * 327_680
    fits = 70e9 * 2 + cache <= v5e.hbm_bytes(shape)
    try:
        _load_jetstream(perDeviceBatchSize=batch, maxTargetLength=length)
    except ConfigError as err:
        assert not fits, str(err)
        assert "perDeviceBatchSize" in str(err) and f"{cache / GIB:.0f} GiB" in str(err)
    else:
        assert fits, f"{batch} x {length}: {cache / GIB:.0f} GiB of cache accepted"


def _jetstream_config(**jetstream: object) -> StackConfig:
    raw, secrets = JETSTREAM
    raw = merged({"serving": {"jetstream": jetstream}}, raw)
    return load(raw, stack="jetstream-v5e", project=raw.get("gcp:project"), secret_keys=secrets)


def test_tensor_parallelism_above_the_kv_heads_is_refused_naming_both() -> None:
    # llama2-70b has 8 KV heads (MaxText configs/models/llama2-70b.yml); a 4x8 v5e slice has 32 devices.
    with pytest.raises(ConfigError) as refused:
        _jetstream_config(tensorParallelism=32)
    message = str(refused.value)
    assert "serving.jetstream.tensorParallelism 32" in message
    assert "8 KV heads" in message and "llama2-70b" in message
    assert "allowed: 1, 2, 4, 8" in message


def test_the_committed_jetstream_stack_shards_over_no_more_devices_than_kv_heads() -> None:
    plan = engine.run_stack("jetstream-v5e")
    (lws,) = plan.of_type("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
    leader = lws.inputs["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    (engine_container,) = [c for c in leader["containers"] if c["name"] == "jax-tpu"]
    # As GKE's JetStream + Pathways tutorial: tensor parallelism at the KV heads, autoregressive the rest.
    assert "ici_tensor_parallelism=8" in engine_container["args"]
    assert "ici_autoregressive_parallelism=-1" in engine_container["args"]
