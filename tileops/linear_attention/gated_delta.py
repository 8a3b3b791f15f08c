"""GDNFwdOp and KDAFwdOp: inference forward of the gated delta rule, scalar or per-key-channel gate."""

from __future__ import annotations

from typing import Optional

import torch

from tileops.callspec import CallSpec
from tileops.linear_attention.inference import check_sequences, check_state, check_tokens, fake_outputs
from tileops.linear_attention.op import STEP_MODES, Op, beta_dtype, call_spec, gate_dtype
from tileops.linear_attention.validate import Shapes, negative_bound, param_dtypes, positive_scale, require
from tileops.targets import Target


class _GatedDeltaOp(Op):
    """What GDN and KDA share: flags, token and state checks, the input transforms' arguments."""

    family = ""
    gate_layout: tuple[str, ...] = ()
    dt_bias_layouts: tuple[tuple[str, ...], ...] = ()
    dt_bias_optional = False

    def __init__(self, scale: Optional[float] = None, use_qk_l2norm_in_kernel: bool = False,
                 use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False,
                 state_v_first: bool = False, use_gate_in_kernel: bool = False, *,
                 target: Target = None) -> None:
        """Fix recurrence semantics; tensor metadata comes from each call."""
        super().__init__(target=target)
        if scale is not None:
            positive_scale("scale", scale, 1)
        require(not allow_neg_eigval or use_beta_sigmoid_in_kernel,
                "allow_neg_eigval=True needs use_beta_sigmoid_in_kernel=True: it changes the beta "
                "transform from sigmoid(beta) to 2 * sigmoid(beta)")
        self.scale = scale
        self.use_qk_l2norm_in_kernel = bool(use_qk_l2norm_in_kernel)
        self.use_beta_sigmoid_in_kernel = bool(use_beta_sigmoid_in_kernel)
        self.allow_neg_eigval = bool(allow_neg_eigval)
        self.state_v_first = bool(state_v_first)
        self.use_gate_in_kernel = bool(use_gate_in_kernel)

    def _extra_flags(self) -> dict:
        return {}

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                beta: torch.Tensor, initial_state: Optional[torch.Tensor] = None,
                cu_seqlens: Optional[torch.Tensor] = None, cu_seqlens_cpu: Optional[torch.Tensor] = None,
                A_log: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run prefill or decode and return (o, final_state)."""
        return super().forward(q, k, v, g, beta, initial_state, cu_seqlens, cu_seqlens_cpu, A_log, dt_bias)

    def describe(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                 beta: torch.Tensor, initial_state: Optional[torch.Tensor] = None,
                 cu_seqlens: Optional[torch.Tensor] = None, cu_seqlens_cpu: Optional[torch.Tensor] = None,
                 A_log: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
                 ) -> tuple[CallSpec, tuple]:
        shapes = Shapes()
        dtype = check_tokens(shapes, q, k, v, value_heads="HV")
        params = param_dtypes(dtype)
        shapes.tensor("g", g, self.gate_layout, params)
        shapes.tensor("beta", beta, ["B", "T", "HV"], params)
        n, mode = check_sequences(shapes, cu_seqlens, cu_seqlens_cpu)
        check_state(shapes, "initial_state", initial_state, dtype, heads="HV", state_v_first=self.state_v_first)
        self._check_gate_params(shapes, A_log, dt_bias, params)
        s = shapes.sizes
        spec = call_spec(
            self.family, type(self).__name__, mode, q, batch=n, tokens=s["T"], heads=s["H"],
            value_heads=s["HV"], dim_k=s["K"], dim_v=s["V"], scale=positive_scale("scale", self.scale, s["K"]),
            use_qk_l2norm_in_kernel=self.use_qk_l2norm_in_kernel,
            use_beta_sigmoid_in_kernel=self.use_beta_sigmoid_in_kernel, allow_neg_eigval=self.allow_neg_eigval,
            state_v_first=self.state_v_first, use_gate_in_kernel=self.use_gate_in_kernel,
            has_initial_state=initial_state is not None, has_dt_bias=dt_bias is not None,
            # KDA's first pass reads its gate as it comes, GDN's prefill widens its gate first
            gate_dtype=gate_dtype(g, dtype) if "K" in self.gate_layout or mode in STEP_MODES else None,
            beta_dtype=beta_dtype(beta, mode), **self._extra_flags())
        return spec, (q, k, v, g, beta, initial_state, cu_seqlens, cu_seqlens_cpu, A_log, dt_bias)

    def _fake(self, q, k, v, g, beta, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None, A_log=None,
              dt_bias=None) -> tuple[torch.Tensor, torch.Tensor]:
        return fake_outputs(q, v, cu_seqlens, state_v_first=self.state_v_first)

    def _check_gate_params(self, shapes: Shapes, A_log: object, dt_bias: object, params: tuple) -> None:
        if not self.use_gate_in_kernel:
            require(A_log is None and dt_bias is None,
                    "A_log and dt_bias are only used with use_gate_in_kernel=True; g already holds the "
                    "log-space decay here, so drop them or construct the op with use_gate_in_kernel=True")
            return
        require(A_log is not None, "use_gate_in_kernel=True needs A_log [HV] (the log decay rate per value head)")
        shapes.tensor("A_log", A_log, ["HV"], params)
        if dt_bias is None:
            require(self.dt_bias_optional, "use_gate_in_kernel=True needs dt_bias [HV] for GDNFwdOp")
            return
        for layout in self.dt_bias_layouts:
            if dt_bias.dim() == len(layout):
                shapes.tensor("dt_bias", dt_bias, layout, params)
                return
        shapes.tensor("dt_bias", dt_bias, self.dt_bias_layouts[0], params)


class GDNFwdOp(_GatedDeltaOp):
    """Gated DeltaNet (GDN): inference forward for the gated delta rule.

    q and k use [B, T, H, K]; v, g, beta and the output use HV recurrent heads, HV a multiple of H.
    The recurrent state is FP32, key-major [N, HV, K, V] by default and value-major [N, HV, V, K]
    with ``state_v_first=True``; N == B for equal-length inputs, and passing ``cu_seqlens``
    selects packed varlen (B == 1, N packed sequences). ``g`` is the log-space decay per value
    head, or the raw gate with ``use_gate_in_kernel`` (g = -exp(A_log) * softplus(g + dt_bias));
    ``beta`` is the update strength, or logits with ``use_beta_sigmoid_in_kernel`` (sigmoid, or
    2 * sigmoid with ``allow_neg_eigval``). T == 1 without cu_seqlens is decode. Always returns
    (o, final_state).
    """

    family = "gdn"
    gate_layout = ("B", "T", "HV")
    dt_bias_layouts = (("HV",),)


class KDAFwdOp(_GatedDeltaOp):
    """Kimi Delta Attention (KDA): the gated delta rule with a per-key-channel decay.

    As GDNFwdOp, but g carries one log-space decay per key channel, [B, T, HV, K]. With
    ``use_gate_in_kernel`` g is the raw gate: without ``lower_bound`` the decay is
    -exp(A_log[h]) * softplus(g + dt_bias), with it lower_bound * sigmoid(exp(A_log[h]) * (g + dt_bias));
    A_log is [HV], dt_bias [HV * K] (or [HV, K]) and optional (zero when omitted).
    """

    family = "kda"
    gate_layout = ("B", "T", "HV", "K")
    dt_bias_layouts = (("HV*K",), ("HV", "K"))
    dt_bias_optional = True

    def __init__(self, scale: Optional[float] = None, use_qk_l2norm_in_kernel: bool = False,
                 use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False,
                 state_v_first: bool = False, use_gate_in_kernel: bool = False,
                 lower_bound: Optional[float] = None, *, target: Target = None) -> None:
        """Fix recurrence semantics; tensor metadata comes from each call."""
        super().__init__(scale, use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                         state_v_first, use_gate_in_kernel, target=target)
        if lower_bound is not None:
            require(use_gate_in_kernel, "lower_bound is only used with use_gate_in_kernel=True")
        self.lower_bound = None if lower_bound is None else negative_bound("lower_bound", lower_bound)

    def _extra_flags(self) -> dict:
        return {"lower_bound": self.lower_bound}

    def _check_gate_params(self, shapes: Shapes, A_log: object, dt_bias: object, params: tuple) -> None:
        if isinstance(dt_bias, torch.Tensor) and dt_bias.dim() == 1 and "HV" in shapes.sizes:
            shapes.bind("HV*K", shapes.sizes["HV"] * shapes.sizes["K"], "v and q (HV * K)")
        super()._check_gate_params(shapes, A_log, dt_bias, params)
