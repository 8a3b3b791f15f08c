"""tl.deltanet_chunk_fwd without a GPU: registration, refusals, the default, and its programs (the
WY solve keeping its inverse, the chain storing boundary states, w and u) compiled for sm_90a."""

from __future__ import annotations

import pytest
import torch

from tileops import dispatch
from tileops.kernels.deltanet.chunk_fwd import KERNEL, ChunkFwdConfig
from tests.kernels.deltanet.training_calls import REFUSED, training_spec
from tests.kernels.resources import assert_fits_an_sm, launch_smem, needs_nvcc, runtime_dims


def spec(**changes):
    return training_spec("DeltaNetChunkFwdOp", "chunk_fwd", **changes)


@pytest.mark.parametrize("changes, words", REFUSED)
def test_refuses_in_words(changes, words):
    assert words in KERNEL.refuse(spec(**changes))


def test_dispatch_serves_the_chunked_forward_in_tree():
    explanation = dispatch.explain_spec("DeltaNetChunkFwdOp", None, spec())
    assert explanation.kernel == "tl.deltanet_chunk_fwd"
    assert "boundary" in explanation.plan


@pytest.mark.parametrize("call", [spec(), spec(batch=1, heads=2, tokens=640, dim=64), spec(batch=16)])
def test_the_default_is_valid(call):
    KERNEL.validate_config(KERNEL.default(call), call)


def test_a_64_wide_state_of_few_walks_halves_its_tiles():
    """64-column tiles of a 64-wide state at B4 H16 would fill half the SMs: the tune's winner,
    32-column tiles on lean CTAs with prefetch, is the default; the 128-wide state keeps its 64."""
    assert KERNEL.default(spec(batch=4, heads=16, dim=64)) == ChunkFwdConfig(block_v=32, threads=128, num_stages=2)
    assert KERNEL.default(spec(batch=4, heads=16, dim=128)) == ChunkFwdConfig(block_v=64, threads=256, num_stages=2)


def test_configs_that_cannot_hold_the_state_are_refused_in_words():
    with pytest.raises(ValueError, match="state cells"):
        KERNEL.validate_config(ChunkFwdConfig(block_v=128, threads=128), spec())


@needs_nvcc
@pytest.mark.parametrize("call", [spec(), spec(batch=1, heads=2, tokens=640, dim=64, dtype=torch.float16)],
                         ids=["bf16-k128", "fp16-k64"])
def test_programs_compile_for_sm90a(call):
    launcher = KERNEL.build(KERNEL.default(call), call)
    for program in (launcher.prep, launcher.chain, launcher.wy):
        assert runtime_dims(program)  # lengths and counts are run-time values
        assert assert_fits_an_sm(program, launch_smem(program)).spilled == 0
    assert "hs" in launcher.chain.get_kernel_source() and "a_inv" in launcher.prep.get_kernel_source()
