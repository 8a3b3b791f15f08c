"""Kernels for tuner tests (loaded through $TILEOPS_EXTRA_KERNELS, also in worker processes).

All serve GDN prefill through the reference. The behaviour kernel's config can make it slow,
wrong, crash or hang, so the tuner's gate, crash handling, timeouts and winner rule can be
observed; the picky kernel refuses half of its config space, as a tile constraint would; the
sparse kernel accepts a tenth of a space too large for a grid search, as GDN prefill's layout
constraints do."""

from __future__ import annotations

import os
import time
from typing import Literal

from pydantic import model_validator

from tileops.kernels.base import KernelDef
from tileops.kernels.config import KernelConfig
from tileops.kernels.registry import get_kernel, register

NAME = "test.gdn_behaviour"
PICKY = "test.gdn_picky"
SPARSE = "test.gdn_sparse"


class BehaviourConfig(KernelConfig):
    delay_ms: Literal[0, 60] = 60
    behaviour: Literal["right", "wrong", "crash", "hang"] = "right"


def _reference_launcher(spec):
    reference = get_kernel("reference.gdn_chunk")
    return reference.build(reference.default(spec), spec)


def _build(config: BehaviourConfig, spec):
    inner = _reference_launcher(spec)

    def launch(*args):
        if config.behaviour == "crash":
            os._exit(3)
        if config.behaviour == "hang":
            time.sleep(3600)
        time.sleep(config.delay_ms / 1e3)
        o, state = inner(*args)
        return (o + 1 if config.behaviour == "wrong" else o), state

    return launch


def _prefill_only(spec):
    return None if spec.entry == "GDNFwdOp" and spec.mode != "decode" else "GDN prefill only"


class PickyConfig(KernelConfig):
    block: Literal[1, 2, 3, 4, 5, 6, 7, 8] = 2

    @model_validator(mode="after")
    def _even(self) -> "PickyConfig":
        if self.block % 2:
            raise ValueError(f"block={self.block} does not tile: use an even block")
        return self


class SparseConfig(KernelConfig):
    block: Literal[16, 32, 64, 128, 256] = 32
    threads: Literal[32, 64, 128, 256, 512] = 64
    stages: Literal[1, 2, 3, 4] = 1

    @model_validator(mode="after")
    def _pairs(self) -> "SparseConfig":
        if self.threads != 2 * self.block or self.stages > 2:
            raise ValueError(f"block={self.block}, threads={self.threads}, stages={self.stages}: "
                             f"use threads = 2 * block and at most 2 stages")
        return self


KERNEL = register(KernelDef(
    name=NAME, family="gdn", archs=frozenset({"cpu"}), config_model=BehaviourConfig, build=_build,
    refuse=_prefill_only, default=lambda spec: BehaviourConfig(), modules=(__name__,)))
PICKY_KERNEL = register(KernelDef(
    name=PICKY, family="gdn", archs=frozenset({"cpu"}), config_model=PickyConfig,
    build=lambda config, spec: _reference_launcher(spec), refuse=_prefill_only,
    default=lambda spec: PickyConfig(), modules=(__name__,)))
SPARSE_KERNEL = register(KernelDef(
    name=SPARSE, family="gdn", archs=frozenset({"cpu"}), config_model=SparseConfig,
    build=lambda config, spec: _reference_launcher(spec), refuse=_prefill_only,
    default=lambda spec: SparseConfig(), modules=(__name__,)))
