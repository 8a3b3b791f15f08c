"""tl.deltanet_prefill without a GPU: registration on the shared prefill kernel, refusals, what
dispatch picks and says for DeltaNetFwdOp calls on an H200, and its programs compiled for sm_90a
without a gate (no g read)."""

from __future__ import annotations

import re

import pytest
import torch

from tileops import dispatch
from tileops.cases import Case
from tileops.kernels.deltanet.prefill import KERNEL
from tileops.kernels.prefill_kernel import PrefillConfig, fused_config
from tileops.kernels.registry import get_kernel
from tileops.tuner.cases import spec_for_arch
from tests.kernels.resources import assert_fits_an_sm, block_threads, launch_smem, needs_nvcc, runtime_dims


def h200(case: Case):
    return spec_for_arch(case, "sm90", "NVIDIA H200")


def test_registered_on_the_shared_prefill_kernel():
    gdn = get_kernel("tl.gdn_prefill")
    assert KERNEL.family == "deltanet" and KERNEL.archs == frozenset({"sm90"})
    assert KERNEL.config_model is PrefillConfig is gdn.config_model
    assert KERNEL.source_hash != gdn.source_hash  # rows tuned for one never serve the other


@pytest.mark.parametrize("case, words", [
    (Case("deltanet", 2, 256, 4, 4, 128, "float32"), "float16 or bfloat16"),
    (Case("deltanet", 2, 256, 4, 4, 96), "64- or 128-wide"),
    (Case("deltanet", 8, 1, 4, 4, 128), "decode kernel"),
])
def test_refuses_in_words(case, words):
    assert words in KERNEL.refuse(h200(case))


@pytest.mark.parametrize("case", [
    Case("deltanet", 4, 8192, 16, 16, 128), Case("deltanet", 1, 32768, 16, 16, 128),
    Case("deltanet", 1, 0, 4, 8, 64, "float16", seqlens=(1, 700, 64, 3000)),
    Case("deltanet", 2, 300, 4, 4, 128, flags=(("use_qk_l2norm_in_kernel", True), ("scale", 0.5))),
], ids=lambda c: c.label)
def test_dispatch_serves_deltanet_prefill_in_tree(case):
    if case.seqlens:
        case = Case(**{**case.__dict__, "tokens": sum(case.seqlens)})
    explanation = dispatch.explain_spec("DeltaNetFwdOp", None, h200(case))
    assert explanation.kernel == "tl.deltanet_prefill"
    KERNEL.validate_config(explanation.config, h200(case))


def test_few_long_sequences_are_cut_and_every_later_piece_starts_exact():
    spec = h200(Case("deltanet", 1, 32768, 16, 16, 128))
    config = KERNEL.default(spec)
    assert config.fused and config.piece_chunks
    plan = KERNEL.plan(config, spec)
    assert "Without a gate nothing is forgotten" in plan and "exact entry state" in plan
    assert "warm-up" not in plan


def test_a_float32_call_falls_back_to_the_reference_saying_why():
    explanation = dispatch.explain_spec("DeltaNetFwdOp", None, h200(Case("deltanet", 2, 256, 4, 4, 128, "float32")))
    assert explanation.kernel != "tl.deltanet_prefill"
    assert any("float16 or bfloat16" in str(note) for note in (*explanation.passed_over, *explanation.notes))


@needs_nvcc
@pytest.mark.parametrize("case", [
    Case("deltanet", 1, 32768, 16, 16, 128),
    Case("deltanet", 1, 4000, 2, 4, 64, "float16", seqlens=(3000, 1000),
         flags=(("use_qk_l2norm_in_kernel", True),)),
], ids=["bf16-k128-cut", "fp16-k64-varlen-l2norm"])
def test_programs_compile_for_sm90a_and_read_no_gate(case):
    from tileops.kernels.launch.chunked import PrefillLauncher
    from tileops.kernels.launch.chunked_programs import compile_fused

    spec = h200(case)
    config = fused_config(spec.dim_v, walk_moves="tma-output", stages=3, piece_chunks=16)
    KERNEL.validate_config(config, spec)
    launcher = PrefillLauncher(config, spec, gated=False)
    assert launcher.warm_start is None  # nothing to bound: every later piece starts exact
    for program in (launcher.fused, launcher.summary, launcher.piece_entries):
        assert runtime_dims(program)
        assert assert_fits_an_sm(program, launch_smem(program)).spilled == 0
    gate_reads = re.compile(r"\bg\[")
    assert not gate_reads.search(launcher.fused.get_kernel_source())
    for program in (launcher.summary,):
        assert not gate_reads.search(program.get_kernel_source())
    assert gate_reads.search(compile_fused(config, spec, gated=True).get_kernel_source())


@needs_nvcc
def test_the_two_pass_first_pass_reads_no_gate():
    from tileops.kernels.launch.chunked_programs import compile_prep

    spec = h200(Case("deltanet", 64, 2048, 2, 4, 64, "float16"))
    config = PrefillConfig(state_major="value", block_v=64, threads=128, num_stages=1)  # two passes
    KERNEL.validate_config(config, spec)
    assert not re.search(r"\bg\[", compile_prep(config, spec, gated=False).get_kernel_source())


@needs_nvcc
def test_summaries_that_would_leave_sms_idle_walk_half_the_value_rows_a_cta():
    from tileops.kernels.launch.chunked import PrefillLauncher

    # B4×T8192 H16 in pieces of 64: 64 summary jobs, 128 CTAs of 64 value rows on 132 SMs.
    spec = h200(Case("deltanet", 4, 8192, 16, 16, 128))
    config = KERNEL.default(spec)
    assert config.piece_chunks == 64
    split = PrefillLauncher(config, spec, gated=False).summary
    assert block_threads(split) == 256  # one state warpgroup and the first pass's
    assert assert_fits_an_sm(split, launch_smem(split)).spilled == 0
    # B1×T32768: 208 jobs already fill the SMs twice over; each CTA walks all 128 rows.
    long = h200(Case("deltanet", 1, 32768, 16, 16, 128))
    whole = PrefillLauncher(KERNEL.default(long), long, gated=False).summary
    assert block_threads(whole) == 384

def test_a_64_wide_state_takes_the_fused_kernel_and_few_long_sequences_its_pieces():
    # Measured on the H200: 1.6x (B4×T8192) and 2.6x (B1×T32768) ahead of the two-pass chain.
    for case in (Case("deltanet", 4, 8192, 16, 16, 64), Case("deltanet", 1, 32768, 16, 16, 64, "float16")):
        config = KERNEL.default(h200(case))
        assert (config.fused, config.piece_chunks, config.walk_issue, config.block_v) == (True, 32, "paired", 64)
        assert "exact entry state" in KERNEL.plan(config, h200(case))
    # Many sequences are walked uncut (2.6-3.1x ahead of the two passes on an H100, 2026-12-06).
    for case in (Case("deltanet", 16, 4096, 16, 16, 64), Case("deltanet", 8, 16384, 16, 16, 64)):
        config = KERNEL.default(h200(case))
        assert (config.fused, config.walk_issue, config.piece_chunks) == (True, "paired", 128 if case.tokens <= 8192 else 0)
    # With a gate the pieces are cut as for a 128-wide state (warm-ups reach a few chunks back).
    gated = get_kernel("tl.gdn_prefill").default(h200(Case("gdn", 1, 32768, 16, 32, 64)))
    assert (gated.fused, gated.piece_chunks, gated.walk_issue) == (True, 128, "paired")
