"""A kernel for tuner tests (loaded through $TILEOPS_EXTRA_KERNELS, also in worker processes):
it serves GDN prefill through the reference, and its config can make it slow, wrong, crash or
hang, so the tuner's gate, crash handling, timeouts and winner rule can be observed."""

from __future__ import annotations

import os
import time
from typing import Literal

from tileops.kernels.base import KernelDef
from tileops.kernels.config import KernelConfig
from tileops.kernels.registry import get_kernel, register

NAME = "test.gdn_behaviour"


class BehaviourConfig(KernelConfig):
    delay_ms: Literal[0, 60] = 60
    behaviour: Literal["right", "wrong", "crash", "hang"] = "right"


def _build(config: BehaviourConfig, spec):
    reference = get_kernel("reference.gdn_chunk")
    inner = reference.build(reference.default(spec), spec)

    def launch(*args):
        if config.behaviour == "crash":
            os._exit(3)
        if config.behaviour == "hang":
            time.sleep(3600)
        time.sleep(config.delay_ms / 1e3)
        o, state = inner(*args)
        return (o + 1 if config.behaviour == "wrong" else o), state

    return launch


KERNEL = register(KernelDef(
    name=NAME, family="gdn", archs=frozenset({"cpu"}), config_model=BehaviourConfig, build=_build,
    refuse=lambda spec: None if spec.entry == "GDNFwdOp" and spec.mode != "decode" else "GDN prefill only",
    default=lambda spec: BehaviourConfig(), modules=(__name__,)))
