"""The correctness gate: a candidate's outputs against the float64 reference on fresh inputs."""

from __future__ import annotations

import torch

# ‖out − ref‖ / ‖ref‖ that a kernel computing in this dtype must reach (fp32 accumulation).
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2.5e-2}


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (inf when out holds NaN or inf)."""
    out64, ref64 = out.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
    if out64.shape != ref64.shape:
        return float("inf")
    if not torch.isfinite(out64).all():
        return float("inf")
    return float((out64 - ref64).norm() / ref64.norm().clamp_min(1e-300))


def in_float64(args: tuple) -> tuple:
    """Call arguments for the float64 reference: floating tensors up-cast, the rest as given."""
    return tuple(a.detach().to(torch.float64) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for a in args)


def as_outputs(result: object) -> tuple:
    """An op's result as a tuple of its outputs: a lone tensor is one output, not the rows that
    ``tuple()`` would split it into; GLA's chunked forward's pair (o, final_state) with the h it
    carries, as its kernels return all three."""
    if isinstance(result, torch.Tensor):
        return (result,)
    h = getattr(result, "h", None)
    return tuple(result) + ((h,) if h is not None else ())


def worst_error(outputs: tuple, references: tuple) -> float:
    """The largest relative error over every output tensor of an op (the chunked training forward
    has six, its backward four); inf when the op returned another number of outputs."""
    if len(outputs) != len(references):
        return float("inf")
    return max(relative_error(o, r) for o, r in zip(outputs, references))
