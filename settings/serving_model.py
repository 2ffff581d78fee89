"""The model a serving backend loads: its name, where its weights are and how large it is."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from domain import model_catalog, topology
from settings import rules_waits, storage_names
from settings.base import OWN_CHARACTERS, StrictModel
from settings.names import NameRule

# A Kubernetes label value (k8s.io/apimachinery validation IsValidLabelValue): 63 characters at most.
LABEL_VALUE = NameRule(
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?",
    "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
)


def _bucket(value: str | None) -> str | None:
    problem = storage_names.bucket_problem(value) if value is not None else None
    if problem:
        raise ValueError(f"{value!r} is no Cloud Storage bucket name: it has {problem}; {storage_names.BUCKET_ALLOWED}")
    return value


def object_path(value: str) -> str:
    # Joined as gs://<weightsBucket>/<path>: a leading '/' or a whole URI makes a path that
    # does not exist, found only when the model servers fail to load an hour later.
    if value.startswith(("/", "gs://")):
        raise ValueError(
            f"{value!r} must be an object path inside serving.model.weightsBucket, without a leading '/' "
            "or gs://, e.g. models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/<40-hex commit>"
        )
    problem = storage_names.object_path_problem(value)
    if problem:
        raise ValueError(f"{value!r} has {problem}; {storage_names.OBJECT_ALLOWED}")
    return value


Bucket = Annotated[str | None, AfterValidator(_bucket)]
# settings/storage_names.py names a control or invisible character of an object path in its own words.
ObjectPath = Annotated[str, AfterValidator(object_path), OWN_CHARACTERS]


class ModelConfig(StrictModel):
    name: str = Field("Qwen/Qwen3.5-397B-A17B-FP8", min_length=1, max_length=256)
    weights_bucket: Bucket = None
    path: ObjectPath = ""
    # Unset: the catalog's (domain/model_catalog.py); a model outside it states them.
    parameters_billions: float | None = Field(None, gt=0, le=100_000)
    # Bytes, not bits; a fraction, not a percent (settings/rules_waits.py says the unit of a slip).
    bytes_per_parameter: Annotated[
        float | None, Field(gt=0, le=8), BeforeValidator(rules_waits.bytes_per_parameter)
    ] = None
    kv_cache_headroom: Annotated[float, Field(ge=0, lt=1), BeforeValidator(rules_waits.fraction)] = 0.3
    # From the model's config.json when the catalog does not know it (domain/model_catalog.py).
    attention_heads: int | None = Field(None, ge=1, le=4096)
    context_length: int | None = Field(None, ge=256, le=16_777_216)

    @field_validator("name")
    @classmethod
    def _labelled(cls, value: str) -> str:
        # The last path segment labels the model servers (llm-d.ai/model): a Kubernetes label value.
        label = value.rsplit("/", 1)[-1]
        if not LABEL_VALUE.matches(label):
            raise ValueError(
                f"{label!r} (the part after the last '/') must be a Kubernetes label value: {LABEL_VALUE.allowed}"
            )
        return value

    @model_validator(mode="after")
    def _figures(self) -> ModelConfig:
        catalog_figures(self)
        return self

    @property
    def label(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @property
    def size(self) -> tuple[float, float]:
        """(parameters in billions, bytes per parameter): the stack's, else the catalog's."""
        billions, each = _stated_or_catalogued(self)
        assert billions is not None and each is not None  # catalog_figures refuses a model without them
        return billions, each

    @property
    def weights_bytes(self) -> int:
        return topology.weights_bytes(*self.size)

    @property
    def architecture(self) -> model_catalog.Architecture | None:
        """Heads and context as vLLM reads them: the stack's, else the catalog's, else unknown."""
        known = model_catalog.architecture(self.name)
        heads = self.attention_heads or (known.attention_heads if known else None)
        context = self.context_length or (known.context_length if known else None)
        if heads is None or context is None:
            return None
        if known and (heads, context) == (known.attention_heads, known.context_length):
            return known
        return model_catalog.Architecture(heads, known.kv_heads if known else heads, context, "the stack")


def _stated_or_catalogued(model: ModelConfig) -> tuple[float | None, float | None]:
    known = model_catalog.architecture(model.name)
    billions = model.parameters_billions or (known.parameters_billions if known else None)
    return billions, model.bytes_per_parameter or model_catalog.bytes_per_parameter(model.name)


def catalog_figures(model: ModelConfig) -> None:
    """A catalogued model's figures come from its published config (domain/model_catalog.py): a stack
    value that contradicts one is refused naming both; a model the catalog does not size states its size."""
    known = model_catalog.architecture(model.name)
    catalogued = {  # key: (the stack's, the catalog's, where the catalog's comes from)
        "parametersBillions": (model.parameters_billions, known and known.parameters_billions, "the model card"),
        "bytesPerParameter": (
            model.bytes_per_parameter,
            model_catalog.bytes_per_parameter(model.name),
            "config.json quantization_config",
        ),
        "attentionHeads": (model.attention_heads, known and known.attention_heads, "config.json num_attention_heads"),
        "contextLength": (model.context_length, known and known.context_length, "config.json max_position_embeddings"),
    }
    contradictions = [
        f"serving.model.{key} {stated:g} contradicts the catalog's {catalog:g} for model {model.name!r} "
        f"({where}, domain/model_catalog.py); allowed: {catalog:g}, or leave it unset to take the catalog's"
        for key, (stated, catalog, where) in catalogued.items()
        if stated is not None and catalog is not None and stated != catalog
    ]
    if contradictions:
        raise ValueError("; ".join(contradictions))
    billions, each = _stated_or_catalogued(model)
    missing = [key for key, value in (("parametersBillions", billions), ("bytesPerParameter", each)) if value is None]
    if missing:
        raise ValueError(
            " and ".join(f"serving.model.{key}" for key in missing)
            + f" {'is' if len(missing) == 1 else 'are'} required for model {model.name!r}, whose size "
            "domain/model_catalog.py does not hold: the weights every serving slice must fit are parameters x "
            "bytes per parameter; allowed: the parameter count in billions from the model card, and the bytes "
            "each parameter takes by the checkpoint's quantization (config.json: 2 for bfloat16, 1 for fp8 or int8)"
        )
