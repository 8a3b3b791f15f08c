"""Every family's decode kernel without a GPU: registered for its ops, refusals in words, a
default that fits, and programs that compile for sm_90a (and sm_80) without spilling."""

from __future__ import annotations

import itertools
import shutil

import pytest
import torch

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.registry import get_kernel
from tileops.targets import BUILTIN, kernel_names
from tests.kernels.resources import assert_fits_an_sm, launch_smem

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="compiling needs nvcc")

# op family, entry, mode: the calls each decode kernel serves
SERVES = {
    "tl.deltanet_decode": [("deltanet", "DeltaNetFwdOp", "decode"), ("deltanet", "DeltaNetRecurrentFwdOp", "step")],
    "tl.gla_decode": [("gla", "GLAFwdOp", "decode"), ("gla", "GLARecurrentFwdOp", "step")],
    "tl.kda_decode": [("kda", "KDAFwdOp", "decode")],
}
KDA_FLAGS = ("use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval", "state_v_first",
             "use_gate_in_kernel")


def spec_for(op, entry, mode, *, dim=128, dtype=torch.bfloat16, heads=4, value_heads=None, arch="sm90", batch=64,
             **flags) -> CallSpec:
    device = torch.device("cpu") if arch == "cpu" else torch.device("cuda", 0)
    step = mode == "step"
    value_heads = value_heads or (heads if step or op == "gla" else 2 * heads)
    flags.setdefault("scale", 1.0 if entry == "DeltaNetRecurrentFwdOp" else dim ** -0.5)
    if step:
        flags.setdefault("state_dtype", "torch.float32")
    else:
        flags.setdefault("has_initial_state", True)
    return CallSpec(op=op, entry=entry, mode=mode, dtype=dtype, device=device, arch=arch, device_name="NVIDIA H200",
                    batch=batch, tokens=1, heads=heads, value_heads=value_heads, dim_k=dim, dim_v=dim,
                    flags=make_flags(**flags))


def launcher_of(built):
    """The shared launcher inside a family's adapter."""
    return next(c.cell_contents for c in built.__closure__ if hasattr(c.cell_contents, "programs"))


@pytest.mark.parametrize("name", sorted(SERVES))
def test_each_decode_kernel_is_the_builtin_target_of_its_ops(name):
    kernel = get_kernel(name)
    for family, entry, mode in SERVES[name]:
        assert kernel.family == family and name in kernel_names(BUILTIN, entry)
        assert kernel.refuse(spec_for(family, entry, mode)) is None


@pytest.mark.parametrize("change,words", [
    (dict(arch="cpu"), "CUDA"),
    (dict(arch="sm75"), "sm80"),
    (dict(mode="prefill"), "single-token decode"),
    (dict(dim=96), "64- or 128-wide"),
])
@pytest.mark.parametrize("name", sorted(SERVES))
def test_refusals_say_why(name, change, words):
    family, entry, mode = SERVES[name][0]
    reason = get_kernel(name).refuse(spec_for(family, entry, **{"mode": mode, **change}))
    assert reason and words in reason, reason


def test_kda_takes_half_precision_tokens_only_and_gla_and_deltanet_steps_take_fp32():
    assert "float16 or bfloat16" in get_kernel("tl.kda_decode").refuse(spec_for("kda", "KDAFwdOp", "decode",
                                                                                   dtype=torch.float32))
    for name, (family, entry, mode) in (("tl.gla_decode", SERVES["tl.gla_decode"][1]),
                                        ("tl.deltanet_decode", SERVES["tl.deltanet_decode"][1])):
        assert get_kernel(name).refuse(spec_for(family, entry, mode, dtype=torch.float32)) is None


@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("bits", [b for b in range(1 << len(KDA_FLAGS))  # allow_neg_eigval needs the sigmoid
                                  if not (b >> 2 & 1 and not b >> 1 & 1)])
def test_every_kda_flag_combination_has_a_decode_kernel(dim, bits):
    flags = {name: bool(bits >> i & 1) for i, name in enumerate(KDA_FLAGS)}
    for lower_bound in ((None, -5.0) if flags["use_gate_in_kernel"] else (None,)):
        spec = spec_for("kda", "KDAFwdOp", "decode", dim=dim, lower_bound=lower_bound, has_dt_bias=True, **flags)
        kernel = get_kernel("tl.kda_decode")
        assert kernel.refuse(spec) is None
        kernel.validate_config(kernel.default(spec), spec)


COMPILE_CASES = [
    ("tl.deltanet_decode", dict(family="deltanet", entry="DeltaNetFwdOp", mode="decode", use_qk_l2norm_in_kernel=True)),
    ("tl.deltanet_decode", dict(family="deltanet", entry="DeltaNetRecurrentFwdOp", mode="step", dtype=torch.float32)),
    ("tl.deltanet_decode", dict(family="deltanet", entry="DeltaNetRecurrentFwdOp", mode="step", dim=64,
                                state_dtype="torch.bfloat16")),
    ("tl.gla_decode", dict(family="gla", entry="GLAFwdOp", mode="decode", has_initial_state=False)),
    ("tl.gla_decode", dict(family="gla", entry="GLARecurrentFwdOp", mode="step", dtype=torch.float16, dim=64,
                           state_dtype="torch.float16")),
    ("tl.kda_decode", dict(family="kda", entry="KDAFwdOp", mode="decode")),
    ("tl.kda_decode", dict(family="kda", entry="KDAFwdOp", mode="decode", use_qk_l2norm_in_kernel=True,
                           use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, use_gate_in_kernel=True,
                           has_dt_bias=True, lower_bound=-5.0)),
    ("tl.kda_decode", dict(family="kda", entry="KDAFwdOp", mode="decode", dim=64, dtype=torch.float16,
                           state_v_first=True, use_gate_in_kernel=True, has_dt_bias=False)),
]


@needs_nvcc
@pytest.mark.parametrize("name,case", COMPILE_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(COMPILE_CASES)])
def test_default_compiles_for_sm90a(name, case):
    case = dict(case)
    family, entry, mode = case.pop("family"), case.pop("entry"), case.pop("mode")
    spec = spec_for(family, entry, mode, **case)
    kernel = get_kernel(name)
    launcher = launcher_of(kernel.build(kernel.default(spec), spec))
    assert len(launcher.programs) == 1  # the call's own variant, built ahead of its first call
    if case.get("lower_bound") is not None:  # the heaviest variant: every transform in the kernel
        (program,) = launcher.programs.values()
        assert_fits_an_sm(program, launch_smem(program))


@pytest.mark.parametrize("name,case", COMPILE_CASES[:1] + COMPILE_CASES[-2:])
def test_the_batch_size_is_a_run_time_value(name, case, monkeypatch):
    """Every tensor of the program takes a symbolic batch: a new batch size never compiles."""
    from tileops.kernels.launch import decode
    from tileops.kernels.programs.decode import decode_program

    shapes = []
    monkeypatch.setattr(decode, "decode_compiled", lambda shape, arch: shapes.append(shape) or decode.Program(None, None, None))
    case = dict(case)
    spec = spec_for(case.pop("family"), case.pop("entry"), case.pop("mode"), **case)
    kernel = get_kernel(name)
    kernel.build(kernel.default(spec), spec)
    func = decode_program(shapes[0])
    dims = {str(func.buffer_map[p].shape[0]) for p in func.params if len(func.buffer_map[p].shape) > 1}
    assert dims == {"batch"}


@needs_nvcc
def test_kda_compiles_for_sm80():
    spec = spec_for("kda", "KDAFwdOp", "decode", arch="sm80")
    kernel = get_kernel("tl.kda_decode")
    assert launcher_of(kernel.build(kernel.default(spec), spec)).programs


@pytest.mark.parametrize("entry,mode,rule,args,expected", [
    ("DeltaNetFwdOp", "decode", ("none", True), ("q", "k", "v", "beta", "h0", "cu", "cu_cpu"),
     ("q", "k", "v", None, "beta", "h0", None, None)),
    ("GLAFwdOp", "decode", ("channel", False), ("q", "k", "v", "g", "h0", "cu", "cu_cpu"),
     ("q", "k", "v", "g", None, "h0", None, None)),
    ("KDAFwdOp", "decode", ("channel", True), ("q", "k", "v", "g", "beta", "h0", "cu", "cu_cpu", "A_log", "dt"),
     ("q", "k", "v", "g", "beta", "h0", "A_log", "dt")),
    ("DeltaNetRecurrentFwdOp", "step", ("none", True), ("q", "k", "v", "beta", "state"),
     ("q", "k", "v", None, "beta", "state")),
    ("GLARecurrentFwdOp", "step", ("channel", False), ("q", "k", "v", "gk", "state"),
     ("q", "k", "v", "gk", None, "state")),
])
def test_each_ops_arguments_reach_the_step_in_place(entry, mode, rule, args, expected):
    from tileops.kernels.decode_kernel import forward_order
    from tileops.kernels.plans.decode_tile import DecodeRule

    class Named:
        """A stand-in tensor: indexing with [:, None] and flattening keep its name."""

        def __init__(self, name):
            self.name = name

        def __getitem__(self, index):
            return self

        def reshape(self, *shape):
            return self

    class Recorder:
        def step(self, *received):
            self.received = tuple(None if r is None else r.name for r in received)
            return Named("o"), Named("state")

    recorder = Recorder()
    family = {"DeltaNet": "deltanet", "GLA": "gla", "KDA": "kda"}[entry.split("Fwd")[0].replace("Recurrent", "")]
    launch = forward_order(recorder, spec_for(family, entry, mode), DecodeRule(*rule))
    launch(*(Named(a) for a in args))
    assert recorder.received == expected


def _decode_calls():
    """(op, its call's tensors): a gate (per channel or per head) and beta in either dtype, a state
    in 16 bits."""
    from tileops.linear_attention import (DeltaNetFwdOp, DeltaNetRecurrentFwdOp, GDNFwdOp, GLAFwdOp,
                                          GLARecurrentFwdOp, KDAFwdOp)

    torch.manual_seed(0)
    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32

    def tokens(dtype, heads=2, dim=64, bthd=True):
        shape = (3, 1, heads, dim) if bthd else (3, heads, dim)
        return [torch.randn(*shape, dtype=dtype) for _ in range(3)]

    def gate(dtype, bthd=True):
        return -torch.rand(*((3, 1, 2, 64) if bthd else (3, 2, 64))).to(dtype)

    beta = torch.rand(3, 1, 2)
    return {
        "kda-bf16-gate": (KDAFwdOp(), (*tokens(bf16), gate(bf16), beta)),
        "kda-fp32-gate": (KDAFwdOp(), (*tokens(bf16), gate(fp32), beta)),
        "kda-bf16-gate-beta-in-kernel": (KDAFwdOp(use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True),
                                         (*tokens(bf16), gate(bf16), beta, None, None, None, torch.rand(2),
                                          torch.rand(2, 64))),
        "gla-bf16-gate": (GLAFwdOp(), (*tokens(bf16), gate(bf16))),
        "gla-step-fp16-state": (GLARecurrentFwdOp(), (*tokens(fp16, bthd=False), gate(fp32, bthd=False),
                                                      torch.randn(3, 2, 64, 64, dtype=fp16))),
        "deltanet-step-fp16-state": (DeltaNetRecurrentFwdOp(), (*tokens(fp16, bthd=False), torch.rand(3, 2),
                                                                torch.randn(3, 2, 64, 64, dtype=fp16))),
        "gdn-bf16-beta": (GDNFwdOp(), (*tokens(bf16), -torch.rand(3, 1, 2), beta.to(bf16))),
        "gdn-fp16-gate-and-beta": (GDNFwdOp(), (*tokens(fp16), -torch.rand(3, 1, 2).to(fp16), beta.to(fp16))),
        "gdn-bf16-gate-in-kernel": (GDNFwdOp(use_gate_in_kernel=True), (*tokens(bf16), torch.randn(3, 1, 2).to(bf16),
                                                                       beta, None, None, None, torch.rand(2),
                                                                       torch.rand(2))),
        "gdn-fp32-beta-initial-state": (GDNFwdOp(), (*tokens(bf16), -torch.rand(3, 1, 2), beta,
                                                     torch.randn(3, 2, 64, 64))),
        "kda-bf16-gate-bf16-beta": (KDAFwdOp(), (*tokens(bf16), gate(bf16), beta.to(bf16))),
        "deltanet-fp16-beta": (DeltaNetFwdOp(), (*tokens(fp16), beta.to(fp16))),
        "deltanet-step-bf16-beta": (DeltaNetRecurrentFwdOp(), (*tokens(bf16, bthd=False), torch.rand(3, 2).to(bf16),
                                                               torch.randn(3, 2, 64, 64))),
    }


@pytest.mark.parametrize("call", sorted(_decode_calls()))
def test_a_calls_first_step_finds_its_program_built_ahead(call, monkeypatch):
    """The program a decode kernel builds with its launcher is the variant its op's calls launch:
    g (a per-channel gate in the input dtype or fp32), beta and the state as the call passes them,
    so that the first call compiles nothing (and a CUDA graph may capture it)."""
    from dataclasses import replace

    from tileops import dispatch
    from tileops.kernels.launch import decode

    built, launched = [], []
    monkeypatch.setattr(decode, "decode_compiled",
                        lambda shape, arch: built.append(shape) or decode.Program(lambda *a: launched.append(a), None, None))
    op, args = _decode_calls()[call]
    spec, args = op.describe(*args)
    spec = replace(spec, device=torch.device("cuda", 0), arch="sm90", device_name="NVIDIA H200")
    kernel = get_kernel(dispatch.explain_spec(type(op).__name__, None, spec).kernel)
    launch = kernel.build(kernel.default(spec), spec)
    assert len(built) == 1
    launch(*args)
    assert len(built) == 1 and len(launched) == 1  # the step launched the program built ahead
