"""The base of every configuration block and the field types several blocks share."""

from __future__ import annotations

import difflib
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

from domain import topology


def _shape(value: str) -> str:
    topology.Topology.parse(value)
    return value


Shape = Annotated[str, AfterValidator(_shape)]


class ProblemsError(ValueError):
    """Several independent problems of one validator, each a message that names its own key;
    pydantic keeps the exception in the error's context, and the loader lists each one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class StrictModel(BaseModel):
    """Base of every config block: camelCase keys, no unknown keys, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=False,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        known = {field.alias or name for name, field in cls.model_fields.items()}
        unknown = [key for key in data if key not in known]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown key {key!r}{hint} Allowed keys: {', '.join(sorted(known))}")
        return data
