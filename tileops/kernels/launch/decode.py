"""The launcher every decode kernel builds: compiled programs per call variant, one launch per call."""

from __future__ import annotations

import functools
from typing import Optional

import torch

from tileops.callspec import CallSpec
from tileops.kernels.launch.compiled import Program, compiled
from tileops.kernels.plans.decode_tile import DELTA_SCALAR, DecodeRule, DecodeShape

# (g, beta, A_log, dt_bias dtypes, whether an initial state is given): what the call's optional
# tensors change in the program. Everything else is fixed by the spec.
Variant = tuple[torch.dtype, torch.dtype, torch.dtype, torch.dtype, bool]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def stand_ins(g, beta, A_log, dt_bias, state, gate_in_kernel: bool) -> tuple:
    """g, beta, A_log and dt_bias as the program reads them (tensors, or their dtypes): where a
    family has no g or no beta the other stands in, where a call has no dt_bias A_log does, and
    without the in-kernel gate neither is read: the state stands in for both."""
    if g is None:
        g = beta
    elif beta is None:
        beta = g
    if gate_in_kernel:
        dt_bias = A_log if dt_bias is None else dt_bias
    else:
        A_log = dt_bias = state
    return g, beta, A_log, dt_bias


@functools.lru_cache(maxsize=None)
def decode_compiled(shape: DecodeShape, arch: str) -> Program:
    """The compiled program of ``shape`` for ``arch``, shared by every launcher in the process."""
    return compiled("tileops.kernels.programs.decode:decode_program", dict(s=shape), arch)


class DecodeLauncher:
    """``launch(q, k, v, g, beta, initial_state, cu_seqlens, cu_seqlens_cpu, A_log, dt_bias)``,
    the gated delta rule's call; ``step`` takes the same tensors with None for what a family
    lacks (g without a gate, beta without the delta rule).

    Returns ``(o, final_state)``: o [B, 1, HV, V] in q's dtype and a new state in the given
    layout, fp32 unless the call's ``state_dtype`` says otherwise; ``initial_state`` is only read.
    The batch size is a run-time value of the compiled program. g, beta, A_log and dt_bias may
    each come in the token dtype or fp32 and the initial state may be absent: the program for
    such a variant is compiled on its first call. The spec's own is compiled here, ahead of time:
    g in its ``gate_dtype``, beta in its ``beta_dtype``, A_log and dt_bias in fp32, the stand-ins
    as ``stand_ins`` forms them, with or without a state as the spec says.
    """

    def __init__(self, config, spec: CallSpec, rule: DecodeRule = DELTA_SCALAR, name: str = "tl.gdn_decode") -> None:
        self.spec = spec
        self.config = config
        self.rule = rule
        self.name = name
        self.value_first = bool(spec.flag("state_v_first", False))
        self.gate_in_kernel = bool(spec.flag("use_gate_in_kernel", False))
        self.state_dtype = getattr(torch, str(spec.flag("state_dtype", "torch.float32")).removeprefix("torch."))
        self.o_dims = (1, spec.value_heads, spec.dim_v)
        self.state_dims = (spec.value_heads,) + ((spec.dim_v, spec.dim_k) if self.value_first else (spec.dim_k, spec.dim_v))
        self.programs: dict[Variant, object] = {}  # the JIT kernels, for inspection
        self.entries: dict[Variant, object] = {}  # their entry points, for launching
        fp32 = torch.float32
        gate = None if rule.gate == "none" else spec.gate_dtype
        in_kernel = fp32 if self.gate_in_kernel else None
        bias = in_kernel if spec.flag("has_dt_bias", True) else None
        dtypes = stand_ins(gate, spec.beta_dtype if rule.delta else None, in_kernel, bias, self.state_dtype,
                           self.gate_in_kernel)
        self.program((*dtypes, bool(spec.flag("has_initial_state", True))))

    def program(self, variant: Variant):
        """The entry point of one variant's program, compiled now if it is new."""
        entry = self.entries.get(variant)
        if entry is None:
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    f"{self.name} would compile a program for new g/beta/A_log/dt_bias dtypes or initial-state "
                    "presence while a CUDA graph is being captured; make one call like it before capturing")
            program = self.programs[variant] = decode_compiled(self.shape(variant), self.spec.arch)
            entry = self.entries[variant] = program.entry
        return entry

    def shape(self, variant: Variant) -> DecodeShape:
        g_dtype, beta_dtype, a_log_dtype, dt_bias_dtype, has_state = variant
        spec, flag = self.spec, self.spec.flag
        scale = flag("scale")
        extra = {} if self.rule == DELTA_SCALAR else dict(
            gate=self.rule.gate, delta=self.rule.delta, state_dtype=dtype_name(self.state_dtype),
            has_dt_bias=bool(flag("has_dt_bias", True)), lower_bound=flag("lower_bound"))
        return DecodeShape(
            heads=spec.heads, value_heads=spec.value_heads, dim_k=spec.dim_k, dim_v=spec.dim_v,
            dtype=spec.dtype_name, g_dtype=dtype_name(g_dtype), beta_dtype=dtype_name(beta_dtype),
            a_log_dtype=dtype_name(a_log_dtype), dt_bias_dtype=dtype_name(dt_bias_dtype),
            block_v=self.config.block_v, threads=self.config.threads,
            state_v_first=self.value_first,
            has_state=has_state, scale=float(spec.dim_k ** -0.5 if scale is None else scale),
            l2norm=bool(flag("use_qk_l2norm_in_kernel", False)),
            beta_sigmoid=bool(flag("use_beta_sigmoid_in_kernel", False)),
            neg_eigval=bool(flag("allow_neg_eigval", False)), gate_in_kernel=self.gate_in_kernel, **extra)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                 beta: torch.Tensor, initial_state: Optional[torch.Tensor] = None,
                 cu_seqlens: Optional[torch.Tensor] = None, cu_seqlens_cpu: Optional[torch.Tensor] = None,
                 A_log: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.step(q, k, v, g, beta, initial_state, A_log, dt_bias)

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: Optional[torch.Tensor],
             beta: Optional[torch.Tensor], initial_state: Optional[torch.Tensor] = None,
             A_log: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step over [B, 1, heads, dim] tokens; the program reads a stand-in where a family
        has no g or beta, or a call no dt_bias (each of another input's shape, never read)."""
        batch = q.shape[0]
        o = torch.empty((batch,) + self.o_dims, dtype=q.dtype, device=q.device)
        state = torch.empty((batch,) + self.state_dims, dtype=self.state_dtype, device=q.device)
        if batch == 0:
            return o, state
        g, beta, A_log, dt_bias = stand_ins(g, beta, A_log, dt_bias, state, self.gate_in_kernel)
        g, beta = g.contiguous(), beta.contiguous()
        if self.gate_in_kernel:  # else the state stands in for both
            A_log, dt_bias = A_log.contiguous(), dt_bias.contiguous()
        has_state = initial_state is not None
        q, k = q.contiguous(), k.contiguous()
        h0 = initial_state.contiguous() if has_state else state
        if (q.data_ptr() | k.data_ptr() | h0.data_ptr() | g.data_ptr()) & 15:  # vector loads: 16-byte alignment
            q, k, h0, g = (x if x.data_ptr() % 16 == 0 else x.clone() for x in (q, k, h0, g))
            beta = g if self.rule.gate == "none" else beta
        entry = self.entries.get((g.dtype, beta.dtype, A_log.dtype, dt_bias.dtype, has_state))
        if entry is None:
            entry = self.program((g.dtype, beta.dtype, A_log.dtype, dt_bias.dtype, has_state))
        entry(q, k, v.contiguous(), g, beta, h0, A_log, dt_bias, o, state)
        return o, state
