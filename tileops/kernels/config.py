"""The base of every kernel's config space: a frozen pydantic model whose fields are the knobs."""

from __future__ import annotations

import json
import typing

from pydantic import BaseModel, ConfigDict


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


class EmptyConfig(KernelConfig):
    """The config of a kernel with nothing to tune."""
