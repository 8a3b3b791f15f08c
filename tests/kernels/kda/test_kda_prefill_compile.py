"""tl.kda_prefill without a GPU: registration, refusals, the default, dispatch's choice for every
flag KDAFwdOp takes, and both passes compiled for sm_90a (registers, spills, shared memory)."""

from __future__ import annotations

import itertools

import pytest
import torch

from tileops import dispatch
from tileops.callspec import CallSpec, make_flags
from tileops.kernels.channel_prefill_kernel import ChannelPrefillConfig
from tileops.kernels.kda.prefill import KERNEL
from tests.kernels.resources import assert_fits_an_sm, blocks_per_sm, launch_smem, needs_nvcc, runtime_dims


def spec(mode: str = "prefill", dtype: torch.dtype = torch.bfloat16, heads: int = 32, value_heads: int = 32,
         dim: int = 128, batch: int = 4, device: str = "cuda", arch: str = "sm90", tokens: int = 8192,
         **flags) -> CallSpec:
    flags.setdefault("scale", dim ** -0.5)
    return CallSpec(op="kda", entry="KDAFwdOp", mode=mode, dtype=dtype, device=torch.device(device), arch=arch,
                    device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=heads, value_heads=value_heads,
                    dim_k=dim, dim_v=dim, flags=make_flags(**flags))


@pytest.mark.parametrize("call, words", [
    (spec(device="cpu", arch="cpu"), "CUDA"),
    (spec(arch="sm80"), "sm90"),
    (spec(mode="decode"), "decode"),
    (spec(dtype=torch.float32), "float16 or bfloat16"),
    (spec(dim=96), "64- or 128-wide"),
    (spec(heads=3, value_heads=4), "multiple of H"),
])
def test_refuses_in_words(call, words):
    assert words in KERNEL.refuse(call)


FLAGS = [dict(zip(("use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "state_v_first", "use_gate_in_kernel"),
                  values)) for values in itertools.product((False, True), repeat=4)]


@pytest.mark.parametrize("mode", ["prefill", "varlen"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "-".join(k for k, v in f.items() if v) or "plain")
def test_dispatch_serves_every_flag_in_tree(mode, dim, flags):
    """Every flag combination of KDAFwdOp's prefill at K = V ∈ {64, 128} goes to the in-tree kernel,
    whose default fits the call."""
    extra = dict(allow_neg_eigval=True) if flags["use_beta_sigmoid_in_kernel"] else {}
    if flags["use_gate_in_kernel"]:
        extra.update(lower_bound=-5.0, has_dt_bias=True)
    call = spec(mode=mode, dim=dim, heads=4, value_heads=8, batch=1 if mode == "varlen" else 2, **flags, **extra)
    explanation = dispatch.explain_spec("KDAFwdOp", None, call)
    assert explanation.kernel == "tl.kda_prefill", explanation
    KERNEL.validate_config(KERNEL.default(call), call)


def test_the_default_prefetches_while_the_tiles_fit_one_wave():
    assert KERNEL.default(spec(batch=1)) == ChannelPrefillConfig(num_stages=2)
    assert KERNEL.default(spec(batch=4)) == ChannelPrefillConfig(num_stages=1)


@needs_nvcc
@pytest.mark.parametrize("call, config", [
    (spec(), ChannelPrefillConfig()),
    (spec(mode="varlen", batch=1, dim=64, heads=2, value_heads=4, dtype=torch.float16, use_qk_l2norm_in_kernel=True,
          use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, state_v_first=True, use_gate_in_kernel=True,
          lower_bound=-5.0), ChannelPrefillConfig(num_stages=1)),
], ids=["bf16-k128", "fp16-k64-packed-every-flag"])
def test_both_passes_compile_for_sm90a(call, config):
    launcher = KERNEL.build(config, call)
    for program in (launcher.prep, launcher.chain):
        assert "tokens" in runtime_dims(program)  # lengths and counts are run-time values
        assert_fits_an_sm(program, launch_smem(program))
    assert "decay" in launcher.prep.get_kernel_source() and "ku" in launcher.chain.get_kernel_source()


@needs_nvcc
def test_two_first_passes_share_an_sm():
    """The first pass is latency-bound: a second block on the SM hides what one block waits for.
    At K = 128 its q, k and γ tiles, the products' operands and the solve's must fit half an SM."""
    assert blocks_per_sm(KERNEL.build(ChannelPrefillConfig(), spec()).prep) >= 2

