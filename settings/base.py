"""The base of every configuration block and the field types several blocks share."""

from __future__ import annotations

import difflib
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    SecretStr,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from domain import topology
from settings import names


def _shape(value: str) -> str:
    topology.Topology.parse(value)
    return value


Shape = Annotated[str, AfterValidator(_shape)]


class OwnCharacters:
    """A field's marker (`Annotated[str, ..., OWN_CHARACTERS]`): its own rule refuses whitespace, control
    and invisible characters in its own words, and speaks first; settings/names.py's check runs after it."""


OWN_CHARACTERS = OwnCharacters()


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

    @field_validator("*", mode="wrap")
    @classmethod
    def _visible(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        """Every string of the stack, and every string in a list of them, holds only characters a reader
        can see and tell apart (settings/names.py); secrets are not read here."""
        if not isinstance(value, str | list | tuple):
            return handler(value)
        field = cls.model_fields[info.field_name] if info.field_name else None
        if field is None or SecretStr in getattr(field.annotation, "__args__", (field.annotation,)):
            return handler(value)
        too_long = names.length_problem(value)  # first: a long string is not escaped into the message whole
        if too_long:
            raise ValueError(too_long)
        if any(isinstance(m, OwnCharacters) for m in field.metadata):
            return cls._own_characters_first(value, handler)
        problem = names.text_problem(value)
        if problem:
            raise ValueError(problem)
        return handler(value)

    @classmethod
    def _own_characters_first(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """The field's own rule speaks first; when it refuses a value without naming the character a
        reader cannot see, the message names it too."""
        try:
            result = handler(value)
        except ValidationError as err:
            found = names.first_problem(value)
            errors = err.errors()
            if found is None or len(errors) != 1 or errors[0]["type"] != "value_error":
                raise
            message = str(errors[0]["msg"]).removeprefix("Value error, ")
            if names.codepoint(found.char) in message:
                raise
            said, sep, allowed = message.partition("; allowed")  # the character before what is allowed
            raise ValueError(f"{said} (it holds {found.problem}){sep}{allowed}") from None
        problem = names.text_problem(value)
        if problem:
            raise ValueError(problem)
        return result
