"""tl.gla_prefill without a GPU: registration, refusals, dispatch's choice for GLAFwdOp's prefill,
and both passes compiled for sm_90a without the delta rule (registers, spills, shared memory)."""

from __future__ import annotations

import re

import pytest
import torch

from tileops import dispatch
from tileops.callspec import CallSpec, make_flags
from tileops.cases import Case
from tileops.kernels.channel_prefill_kernel import ChannelPrefillConfig
from tileops.kernels.gla.prefill import KERNEL
from tileops.tuner.plan import plan
from tileops.tuner.study import valid_points
from tests.kernels.resources import assert_fits_an_sm, launch_smem, needs_nvcc, runtime_dims


def spec(mode: str = "prefill", dtype: torch.dtype = torch.bfloat16, heads: int = 16, dim: int = 128,
         batch: int = 4, tokens: int = 8192, arch: str = "sm90", **flags) -> CallSpec:
    flags.setdefault("scale", dim ** -0.5)
    return CallSpec(op="gla", entry="GLAFwdOp", mode=mode, dtype=dtype, device=torch.device("cuda"), arch=arch,
                    device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=heads, value_heads=heads,
                    dim_k=dim, dim_v=dim, flags=make_flags(**flags))


@pytest.mark.parametrize("call, words", [
    (spec(arch="sm80"), "sm90"),
    (spec(mode="decode"), "decode"),
    (spec(dtype=torch.float32), "float16 or bfloat16"),
    (spec(dim=96), "64- or 128-wide"),
])
def test_refuses_in_words(call, words):
    assert words in KERNEL.refuse(call)


@pytest.mark.parametrize("mode", ["prefill", "varlen"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dispatch_serves_the_prefill_in_tree(mode, dim, dtype):
    call = spec(mode=mode, dim=dim, dtype=dtype, batch=1 if mode == "varlen" else 2, has_initial_state=True)
    explanation = dispatch.explain_spec("GLAFwdOp", None, call)
    assert explanation.kernel == "tl.gla_prefill", explanation
    assert "WY" not in explanation.plan
    KERNEL.validate_config(KERNEL.default(call), call)


@needs_nvcc
def test_both_passes_compile_for_sm90a_without_the_delta_rule():
    from tileops.kernels.launch.chunked_channel import ChannelPrefillLauncher

    call = spec(mode="varlen", batch=1, dim=64, heads=2, dtype=torch.float16)
    launcher = ChannelPrefillLauncher(KERNEL.validate_config(ChannelPrefillConfig(), call), call,
                                      delta=False)
    for program in (launcher.prep, launcher.chain):
        assert "tokens" in runtime_dims(program)
        assert_fits_an_sm(program, launch_smem(program))
    prep, chain = launcher.prep.get_kernel_source(), launcher.chain.get_kernel_source()
    assert "qo" in prep and "kx" not in prep and "tp" not in prep  # no K_x, no solve
    assert "ku" in chain and "tp" not in chain


@needs_nvcc
def test_few_long_sequences_compile_their_cut_as_packed_sequences():
    from tileops.kernels.launch.chunked_channel import ChannelPrefillLauncher

    cpu = torch.device("cpu")
    long_one = ChannelPrefillLauncher(ChannelPrefillConfig(), spec(batch=1, tokens=32768), delta=False)
    assert long_one.cut_plan((32768,), cpu).count == 8 and long_one.cut_plan((8192,) * 4, cpu) is None
    for program in (long_one.cut_prep, long_one.cut_chain, long_one.cut_finals):
        assert "cu_seqlens" in program.get_kernel_source()
        assert_fits_an_sm(program, launch_smem(program))
    # The walk from zero, for a piece's final state alone, reads K_s and V, neither Q_o nor M, and writes no output.
    finals = long_one.cut_finals.get_kernel_source()
    assert {name for name in ("q", "ku", "v", "m", "o") if re.search(rf"__restrict__ {name}\b", finals)} == {"ku", "v"}
    # The entries: a thread's row of a 32-column tile in registers, no shared memory, no spills.
    usage = assert_fits_an_sm(long_one.cut_entries)
    assert usage.registers <= 96 and {"pieces", "seqs"} <= runtime_dims(long_one.cut_entries)
    # Built for four sequences, or for packed ones, the launcher still cuts a long one that comes later.
    for built_for in (spec(), spec(mode="varlen", batch=1)):
        assert ChannelPrefillLauncher(ChannelPrefillConfig(), built_for, delta=False).cut_plan((32768,), cpu).count == 8
    assert ChannelPrefillLauncher(ChannelPrefillConfig(), spec(heads=128), delta=False).cut_chain is None


@pytest.mark.parametrize("case", [Case("gla", 4, 700, 2, 2, 128, "bfloat16"), Case("kda", 4, 700, 2, 2, 64, "float16"),
                                  Case("gla", 4, 640, 2, 2, 64, "bfloat16", entry="train_fwd")],
                         ids=["gla-prefill", "kda-prefill", "gla-chunk-fwd"])
def test_the_space_is_the_chains_pipeline_depth(case):
    """What the tuner searches for the per-channel two passes: both depths of the chain's pipeline."""
    [(_, task, _)] = plan(case.on("cuda"), "sm90", "NVIDIA H200")
    assert sorted(p["num_stages"] for p in valid_points(task.kernel, task.spec)) == [1, 2]
