"""KernelDef: what dispatch and the tuner need to know about one kernel."""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from pydantic import ValidationError

from tileops.callspec import CallSpec
from tileops.kernels.config import KernelConfig

Launcher = Callable[..., Any]


@dataclass(frozen=True)
class KernelDef:
    """One kernel as the rest of the system sees it.

    - ``build(config, spec)`` returns a launcher: a callable taking the op's forward arguments
      positionally, in the order of the spec, and returning the op's outputs. It may compile;
      dispatch caches it on (name, config, spec.program_facts).
    - ``refuse(spec)`` says in words why this kernel cannot serve a call, or returns None.
    - ``default(spec)`` is the untuned config, always valid for a call the kernel accepts.
    - ``modules`` are the modules whose source defines the kernel: their hash marks rows of the
      tuning database made with another version as stale.
    """

    name: str
    family: str
    archs: frozenset[str]
    config_model: type[KernelConfig]
    build: Callable[[KernelConfig, CallSpec], Launcher]
    refuse: Callable[[CallSpec], Optional[str]]
    default: Callable[[CallSpec], KernelConfig]
    modules: tuple[str, ...] = field(default=())

    @functools.cached_property
    def source_hash(self) -> str:
        """sha256 (16 hex digits) of the kernel's source modules and its config schema."""
        digest = hashlib.sha256(self.name.encode())
        for module in self.modules:
            digest.update(inspect.getsource(importlib.import_module(module)).encode())
        digest.update(repr(sorted(self.config_model.model_json_schema().items())).encode())
        return digest.hexdigest()[:16]

    def validate_config(self, data: Any, spec: Optional[CallSpec] = None) -> KernelConfig:
        """A config from JSON text, a dict or a model, checked against this kernel's schema.

        Raises ``ValueError`` naming the kernel and what is wrong.
        """
        try:
            if isinstance(data, str):
                return self.config_model.model_validate_json(data, context={"spec": spec})
            if isinstance(data, KernelConfig):
                data = data.model_dump()
            return self.config_model.model_validate(data, context={"spec": spec})
        except ValidationError as err:
            raise ValueError(f"invalid config for kernel {self.name!r}: {err}") from err
