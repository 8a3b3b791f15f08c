"""tl.gla_chunk_bwd without a GPU: registration, refusals, dispatch's choice, the default, and its
programs (the forward's first pass, the backward state walk, the per-chunk gradients) compiled for
sm_90a."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tileops import dispatch
from tileops.callspec import CallSpec
from tileops.kernels.gla.chunk_bwd import KERNEL, ChannelChunkBwdConfig
from tests.kernels.deltanet.training_calls import REFUSED
from tests.kernels.gla.test_gla_chunk_fwd_compile import spec as forward_spec
from tests.kernels.resources import assert_fits_an_sm, block_threads, launch_smem, needs_nvcc, runtime_dims


def spec(**changes) -> CallSpec:
    """A GLAChunkBwdOp call as the op describes it: the chunked forward's call (B×T×H, K = V)."""
    return replace(forward_spec(**changes), entry="GLAChunkBwdOp", mode="chunk_bwd")


@pytest.mark.parametrize("changes, words", REFUSED)
def test_refuses_in_words(changes, words):
    assert words in KERNEL.refuse(spec(**changes))


def test_dispatch_serves_the_backward_in_tree_and_a_cut_chunk_from_the_reference():
    explanation = dispatch.explain_spec("GLAChunkBwdOp", None, spec(has_initial_state=True))
    assert explanation.kernel == "tl.gla_chunk_bwd"
    assert "backward state walk" in explanation.plan
    assert dispatch.explain_spec("GLAChunkBwdOp", None, spec(tokens=300)).kernel == "reference.gla_chunk_bwd"


@pytest.mark.parametrize("call, block_v", [(spec(), 64), (spec(batch=1, heads=2, tokens=640, dim=64), 32)])
def test_the_default_is_valid_and_feeds_the_walk(call, block_v):
    config = KERNEL.default(call)
    KERNEL.validate_config(config, call)
    assert config.block_v == block_v


@needs_nvcc
@pytest.mark.parametrize("call, config", [
    (spec(), ChannelChunkBwdConfig()),
    (spec(batch=1, heads=2, tokens=640, dim=64, dtype=torch.float16, has_initial_state=True),
     ChannelChunkBwdConfig(block_v=32)),
], ids=["bf16-k128", "fp16-k64-initial-state"])
def test_programs_compile_for_sm90a(call, config):
    launcher = KERNEL.build(config, call)
    for program in (launcher.prep, launcher.walk, launcher.grads):
        assert "tokens" in runtime_dims(program)
        assert_fits_an_sm(program, launch_smem(program))  # no spills, the gradients' pass on four warpgroups too
    assert block_threads(launcher.prep) == 256
    assert block_threads(launcher.grads) == 4 * call.dim_k  # a thread per key channel and 16-row block
    assert "has_dht" in launcher.walk.get_kernel_source() and "has_init" in launcher.grads.get_kernel_source()
