"""tl.deltanet_chunk_bwd without a GPU: registration, refusals, the default, and its programs (the
backward state walk, every chunk's gradients) compiled for sm_90a."""

from __future__ import annotations

import pytest
import torch

from tileops import dispatch
from tileops.kernels.deltanet.chunk_bwd import KERNEL
from tests.kernels.deltanet.training_calls import REFUSED, training_spec
from tests.kernels.resources import assert_fits_an_sm, launch_smem, needs_nvcc, runtime_dims


def spec(**changes):
    return training_spec("DeltaNetChunkBwdOp", "chunk_bwd", **changes)


@pytest.mark.parametrize("changes, words", REFUSED)
def test_refuses_in_words(changes, words):
    assert words in KERNEL.refuse(spec(**changes))


def test_dispatch_serves_the_chunked_backward_in_tree():
    explanation = dispatch.explain_spec("DeltaNetChunkBwdOp", None, spec())
    assert explanation.kernel == "tl.deltanet_chunk_bwd"
    assert "backward state walk" in explanation.plan


@pytest.mark.parametrize("call", [spec(), spec(batch=1, heads=2, tokens=640, dim=64), spec(batch=16)])
def test_the_default_is_valid(call):
    KERNEL.validate_config(KERNEL.default(call), call)


@needs_nvcc
@pytest.mark.parametrize("call", [spec(), spec(batch=1, heads=2, tokens=640, dim=64, dtype=torch.float16)],
                         ids=["bf16-k128", "fp16-k64"])
def test_programs_compile_for_sm90a(call):
    launcher = KERNEL.build(KERNEL.default(call), call)
    for program in (launcher.walk, launcher.grads):
        assert runtime_dims(program)  # lengths and counts are run-time values
        assert assert_fits_an_sm(program, launch_smem(program)).spilled == 0
