"""tl.gdn_decode without a GPU: its config space, its refusals, and programs compiled for sm_90a/sm_80."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.gdn.decode import KERNEL
from tileops.kernels.plans.decode_tile import DecodeConfig
from tileops.kernels.plans.decode_tile import thread_tile
from tileops.kernels.registry import get_kernel
from tests.kernels.resources import assert_fits_an_sm, launch_smem, needs_nvcc, runtime_dims


def spec_for(*, batch=64, heads=16, value_heads=32, dim=128, dtype=torch.bfloat16, arch="sm90",
             mode="decode", v_first=False, **flags) -> CallSpec:
    flags = {**dict(scale=dim ** -0.5, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                    allow_neg_eigval=False, state_v_first=v_first, use_gate_in_kernel=True), **flags}
    device = torch.device("cpu") if arch == "cpu" else torch.device("cuda", 0)
    return CallSpec(op="gdn", entry="GDNFwdOp", mode=mode, dtype=dtype, device=device, arch=arch,
                    device_name="NVIDIA H200", batch=batch, tokens=1, heads=heads, value_heads=value_heads,
                    dim_k=dim, dim_v=dim, flags=make_flags(**flags))


def test_registered():
    kernel = get_kernel("tl.gdn_decode")
    assert kernel is KERNEL and kernel.family == "gdn" and "sm90" in kernel.archs
    assert kernel.config_model is DecodeConfig


@pytest.mark.parametrize("change,words", [
    (dict(arch="cpu"), "CUDA"),
    (dict(arch="sm75"), "sm80"),
    (dict(mode="prefill"), "decode"),
    (dict(dtype=torch.float32), "float16 or bfloat16"),
    (dict(dim=96), "64- or 128-wide"),
    (dict(value_heads=24), "multiple of H"),
])
def test_refusals_say_why(change, words):
    reason = KERNEL.refuse(spec_for(**change))
    assert reason and words in reason


@pytest.mark.parametrize("arch", ["sm80", "sm89", "sm90"])
def test_serves_decode_from_sm80(arch):
    assert KERNEL.refuse(spec_for(arch=arch)) is None


@pytest.mark.parametrize("batch", [1, 8, 64, 256])
@pytest.mark.parametrize("dim,v_first", [(64, False), (64, True), (128, False), (128, True)])
def test_default_is_valid(batch, dim, v_first):
    spec = spec_for(batch=batch, dim=dim, v_first=v_first)
    KERNEL.validate_config(KERNEL.default(spec), spec)


@pytest.mark.parametrize("batch,dim,v_first,block_v,threads", [
    (16, 128, False, 32, 64),  # 1024 64-wide tiles: under 8 an SM, the 32-wide tiles stay
    (17, 128, False, 64, 128),  # 1088: 8 an SM, 64-wide tiles of 128 threads (64 cells each)
    (256, 128, False, 64, 128),
    (256, 128, True, 32, 128),  # value-major keeps 32-wide tiles, 32 cells a thread
    (256, 64, False, 32, 32),  # a 64-wide state keeps 32-wide tiles
])
def test_default_widens_the_tiles_of_a_128_wide_key_major_state_once_they_fill_the_sms(batch, dim, v_first, block_v,
                                                                                      threads):
    config = KERNEL.default(spec_for(batch=batch, dim=dim, v_first=v_first))
    assert (config.block_v, config.threads) == (block_v, threads)


@pytest.mark.parametrize("config,words", [
    (dict(block_v=64, threads=32), "state cells"),
    (dict(block_v=128), "block_v"),
    (dict(threads=256), "threads"),
    (dict(min_blocks=2), "min_blocks"),
])
def test_invalid_configs_say_why(config, words):
    with pytest.raises(ValueError, match=words):
        KERNEL.validate_config(config, spec_for(dim=64, v_first=True))


def test_config_without_a_call_checks_only_the_literals():
    assert KERNEL.validate_config({"block_v": 64, "threads": 32}) == DecodeConfig(block_v=64, threads=32)
    with pytest.raises(ValueError):
        KERNEL.validate_config({"block_v": 48})


@needs_nvcc
def test_default_compiles_for_sm90a_with_symbolic_batch():
    spec = spec_for()
    (program,) = KERNEL.build(KERNEL.default(spec), spec).programs.values()
    assert str(program.target.attrs["arch"]) == "sm_90a"
    # The batch size is a run-time value: another batch reuses the compiled program.
    assert runtime_dims(program)
    (again,) = KERNEL.build(KERNEL.default(spec), replace(spec, batch=7)).programs.values()
    assert again is program
    assert_fits_an_sm(program, launch_smem(program))


@needs_nvcc
@pytest.mark.parametrize("dim,v_first,config,flags", [
    (64, True, DecodeConfig(block_v=32, threads=32), dict(has_initial_state=False)),
    (128, False, DecodeConfig(block_v=64, threads=128),
     dict(use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, allow_neg_eigval=True)),
])
def test_other_configs_compile(dim, v_first, config, flags):
    spec = spec_for(dim=dim, v_first=v_first, dtype=torch.float16, **flags)
    (program,) = KERNEL.build(KERNEL.validate_config(config, spec), spec).programs.values()
    func = program.prim_func
    assert runtime_dims(program)
    assert {str(func.buffer_map[p].dtype) for p in func.params[:3]} == {"float16"}  # q, k, v in the call's dtype


@needs_nvcc
def test_compiles_for_sm80():
    spec = replace(spec_for(), arch="sm80")
    (program,) = KERNEL.build(KERNEL.default(spec), spec).programs.values()
    assert str(program.target.attrs["arch"]) == "sm_80" and runtime_dims(program)


@pytest.mark.parametrize("args,words", [
    ((64, 16, 256, True), "do not tile 16 value rows"),
    ((64, 32, 36, False), "not a multiple"),
    ((96, 32, 512, False), "do not tile K=96"),
])
def test_a_split_that_does_not_tile_says_why(args, words):
    with pytest.raises(ValueError, match=words):
        thread_tile(*args)
