"""tl.gla_chunk_fwd without a GPU: registration, refusals, dispatch's choice, the default, and its
programs (the per-channel first pass, the chain storing the state at every chunk boundary)
compiled for sm_90a."""

from __future__ import annotations

import pytest
import torch

from tileops import dispatch
from tileops.callspec import CallSpec, make_flags
from tileops.kernels.channel_prefill_kernel import ChannelPrefillConfig
from tileops.kernels.gla.chunk_fwd import KERNEL
from tests.kernels.deltanet.training_calls import REFUSED
from tests.kernels.resources import assert_fits_an_sm, launch_smem, needs_nvcc, runtime_dims


def spec(batch=4, tokens=4096, heads=16, dim=128, dtype=torch.bfloat16, chunk_size=64, device="cuda", arch="sm90",
         has_initial_state=False) -> CallSpec:
    """A GLAChunkFwdOp call as the op describes it: B×T×H, K = V = ``dim``."""
    return CallSpec(op="gla", entry="GLAChunkFwdOp", mode="chunk_fwd", dtype=dtype, device=torch.device(device),
                    arch=arch, device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=heads, value_heads=heads,
                    dim_k=dim, dim_v=dim, flags=make_flags(chunk_size=chunk_size, scale=dim ** -0.5,
                                                           has_initial_state=has_initial_state))


@pytest.mark.parametrize("changes, words", REFUSED)
def test_refuses_in_words(changes, words):
    assert words in KERNEL.refuse(spec(**changes))


def test_dispatch_serves_the_chunked_forward_in_tree_and_a_cut_chunk_from_the_reference():
    explanation = dispatch.explain_spec("GLAChunkFwdOp", None, spec(has_initial_state=True))
    assert explanation.kernel == "tl.gla_chunk_fwd"
    assert "boundary" in explanation.plan
    assert dispatch.explain_spec("GLAChunkFwdOp", None, spec(tokens=300)).kernel == "reference.gla_chunk_fwd"


@pytest.mark.parametrize("call", [spec(), spec(batch=1, heads=2, tokens=640, dim=64), spec(batch=32)])
def test_the_default_is_valid(call):
    KERNEL.validate_config(KERNEL.default(call), call)


@needs_nvcc
@pytest.mark.parametrize("call, config", [
    (spec(), ChannelPrefillConfig()),
    (spec(batch=1, heads=2, tokens=640, dim=64, dtype=torch.float16, has_initial_state=True),
     ChannelPrefillConfig(num_stages=2)),
], ids=["bf16-k128", "fp16-k64-initial-state"])
def test_programs_compile_for_sm90a(call, config):
    from tileops.kernels.launch.chunked_channel import ChannelPrefillLauncher

    assert callable(KERNEL.build(config, call))
    launcher = ChannelPrefillLauncher(config, call, delta=False, boundaries=True)
    for program in (launcher.prep, launcher.chain):
        assert "tokens" in runtime_dims(program)
        assert assert_fits_an_sm(program, launch_smem(program)).spilled == 0
    assert "hs" in launcher.chain.get_kernel_source()
