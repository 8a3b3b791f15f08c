"""The base of every kernel's config space: a frozen pydantic model whose fields are the knobs."""

from __future__ import annotations

import itertools
import json
import typing

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator


class KernelConfig(BaseModel):
    """A point in a kernel's config space.

    Fields declare the knobs with ``Literal`` types (the values a tuner may try); validators
    declare the constraints between them, reading the call through ``info.context["spec"]``
    when a constraint depends on the shapes (a shared-memory budget, say).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces): the form stored in databases and cache keys."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @classmethod
    def choices(cls) -> dict[str, tuple]:
        """The allowed values of every ``Literal`` field, in declaration order."""
        out = {}
        for name, field in cls.model_fields.items():
            if typing.get_origin(field.annotation) is typing.Literal:
                out[name] = typing.get_args(field.annotation)
        return out

    @classmethod
    def points(cls) -> list[dict]:
        """Every point of the declared space: one allowed value of each ``Literal`` field."""
        space = cls.choices()
        return [dict(zip(space, values)) for values in itertools.product(*space.values())]


class TiledConfig(KernelConfig):
    """A config whose fit depends on the call's shapes: validated against ``info.context["spec"]``
    where one is given, refused with the words ``problem`` returns. One validator for every
    kernel whose constraints are a function of (config, spec)."""

    def problem(self, spec) -> typing.Optional[str]:
        """Why this config cannot serve ``spec`` (a ``CallSpec``), or None."""
        raise NotImplementedError

    @model_validator(mode="after")
    def _fits(self, info: ValidationInfo) -> "TiledConfig":
        spec = (info.context or {}).get("spec")
        problem = None if spec is None else self.problem(spec)
        if problem:
            raise ValueError(problem)
        return self


class EmptyConfig(KernelConfig):
    """The config of a kernel with nothing to tune."""
