"""tl.deltanet_chunk_bwd without a GPU: registration, refusals, the default, and its programs (the
backward state walk, every chunk's gradients) compiled for sm_90a."""

from __future__ import annotations

import pytest
import torch

from tileops import dispatch
from tileops.callspec import CallSpec, make_flags
from tileops.kernels.deltanet.chunk_bwd import KERNEL, ChunkBwdConfig
from tests.kernels.resources import assert_fits_an_sm, launch_smem, needs_nvcc, runtime_dims


def spec(batch=4, tokens=4096, heads=16, dim=128, dtype=torch.bfloat16, chunk_size=64, device="cuda", arch="sm90"):
    return CallSpec(op="deltanet", entry="DeltaNetChunkBwdOp", mode="chunk_bwd", dtype=dtype,
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


def test_dispatch_serves_the_chunked_backward_in_tree():
    explanation = dispatch.explain_spec("DeltaNetChunkBwdOp", None, spec())
    assert explanation.kernel == "tl.deltanet_chunk_bwd"
    assert "backward state walk" in explanation.plan


@pytest.mark.parametrize("call", [spec(), spec(batch=1, heads=2, tokens=640, dim=64), spec(batch=16)])
def test_the_default_is_valid(call):
    KERNEL.validate_config(KERNEL.default(call), call)


@pytest.mark.parametrize("config, words", [
    (ChunkBwdConfig(block_v=128, threads=128), "state-gradient cells"),
    (ChunkBwdConfig(block_v=128, threads=256), "does not divide V=64"),
])
def test_configs_that_cannot_run_are_refused_in_words(config, words):
    with pytest.raises(ValueError, match=words):
        KERNEL.validate_config(config, spec(dim=64 if "divide" in words else 128))


@needs_nvcc
@pytest.mark.parametrize("call", [spec(), spec(batch=1, heads=2, tokens=640, dim=64, dtype=torch.float16)],
                         ids=["bf16-k128", "fp16-k64"])
def test_programs_compile_for_sm90a(call):
    launcher = KERNEL.build(KERNEL.default(call), call)
    for program in (launcher.walk, launcher.grads):
        assert runtime_dims(program)  # lengths and counts are run-time values
        assert assert_fits_an_sm(program, launch_smem(program)).spilled == 0
