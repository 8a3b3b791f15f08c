"""tl.deltanet_chunk_fwd without a GPU: registration, refusals, the default, and its programs (the
WY solve keeping its inverse, the chain storing boundary states, w and u) compiled for sm_90a."""

from __future__ import annotations

import pytest
import torch

from tileops import dispatch
from tileops.callspec import CallSpec, make_flags
from tileops.kernels.deltanet.chunk_fwd import KERNEL, ChunkFwdConfig
from tests.kernels.resources import assert_fits_an_sm, launch_smem, needs_nvcc, runtime_dims


def spec(batch=4, tokens=4096, heads=16, dim=128, dtype=torch.bfloat16, chunk_size=64, device="cuda", arch="sm90"):
    return CallSpec(op="deltanet", entry="DeltaNetChunkFwdOp", mode="chunk_fwd", dtype=dtype,
                    device=torch.device(device), arch=arch, device_name="NVIDIA H200", batch=batch, tokens=tokens,
                    heads=heads, value_heads=heads, dim_k=dim, dim_v=dim, flags=make_flags(chunk_size=chunk_size))


@pytest.mark.parametrize("call, words", [
    (spec(device="cpu", arch="cpu"), "CUDA"),
    (spec(arch="sm80"), "sm90"),
    (spec(dtype=torch.float32), "float16 or bfloat16"),
    (spec(dim=96), "64- or 128-wide"),
    (spec(chunk_size=32), "chunk_size=64"),
    (spec(tokens=300), "whole number of 64-token chunks"),
])
def test_refuses_in_words(call, words):
    assert words in KERNEL.refuse(call)


def test_dispatch_serves_the_chunked_forward_in_tree():
    explanation = dispatch.explain_spec("DeltaNetChunkFwdOp", None, spec())
    assert explanation.kernel == "tl.deltanet_chunk_fwd"
    assert "boundary" in explanation.plan


@pytest.mark.parametrize("call", [spec(), spec(batch=1, heads=2, tokens=640, dim=64), spec(batch=16)])
def test_the_default_is_valid(call):
    KERNEL.validate_config(KERNEL.default(call), call)


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
