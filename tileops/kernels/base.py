"""KernelDef: what dispatch and the tuner need to know about one kernel."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from pydantic import ValidationError

from tileops.callspec import CallSpec
from tileops.kernels.code_hash import kept_code_hash
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
    - ``modules`` are the modules that register and build the kernel; with every kernel module
      they import they make its code, whose hash (``code_hash``) marks rows of the tuning
      database made with other code as stale.
    - ``plan(config, spec)``, where given, says in words how the config runs the call (what
      ``dispatch.explain`` prints).
    """

    name: str
    family: str
    archs: frozenset[str]
    config_model: type[KernelConfig]
    build: Callable[[KernelConfig, CallSpec], Launcher]
    refuse: Callable[[CallSpec], Optional[str]]
    default: Callable[[CallSpec], KernelConfig]
    modules: tuple[str, ...] = field(default=())
    plan: Optional[Callable[[KernelConfig, CallSpec], str]] = None

    @functools.cached_property
    def source_hash(self) -> str:
        """The hash of the kernel's name, its config space (each knob's values and default) and its
        code as parsed (``code_hash``): the same on every Python and pydantic version, so rows
        tuned on one machine are fresh on another."""
        space = [(name, values, self.config_model.model_fields[name].default)
                 for name, values in self.config_model.choices().items()]
        return kept_code_hash(self.modules, self.name, repr(space))

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
