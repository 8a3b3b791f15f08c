"""Every op class as one ``torch.library`` custom op, ``tileops::<OpClass>``.

The schema is the op's forward arguments followed by its constructor arguments, so a compiled or
exported graph names the op and its configuration in plain values. The custom op is opaque to
torch.compile (no graph breaks: validation, dispatch and the kernel run inside it), its fake
implementation is the op's ``_fake``, it mutates and aliases nothing, and its gradient is one more
custom op, ``tileops::<OpClass>_backward``, that recomputes the call with the PyTorch reference
under autograd. An op whose family has a backward op (DeltaNet's and GLA's chunked forwards) takes
its gradient from that op's kernels instead, when the gradient it needs is one that op gives. The
chunk backward ops have no backward.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Sequence

import torch

from tileops.errors import ReferenceFallbackWarning, warn_or_raise
from tileops.targets import REFERENCE

NAMESPACE = "tileops"
_LIB = torch.library.Library(NAMESPACE, "DEF")

# Constructor annotations (string form) to schema types.
_SETTING_TYPES = {"int": "int", "float": "float", "bool": "bool", "Optional[float]": "float?",
                  "Target": "str?"}

_TENSOR = torch.Tensor
_TRACED = (torch.Tensor, torch.fx.Proxy)  # subclasses of Tensor (fake, functional) and fx proxies
_CLASSES: dict[str, type] = {}
_SETTING_NAMES: dict[str, tuple[str, ...]] = {}
_INSTANCES: dict[tuple, Any] = {}


def needs_custom_op(args: Sequence[object]) -> bool:
    """Whether a call must go through the custom op: an input requires grad (with grad mode on),
    or is not a plain tensor (a fake tensor under torch.export, an fx proxy)."""
    grad = torch.is_grad_enabled()
    for arg in args:
        if arg is None:
            continue
        if type(arg) is _TENSOR:
            if grad and arg.requires_grad:
                return True
        elif isinstance(arg, _TRACED):
            return True
    return False


def settings_of(op: Any) -> tuple:
    """The op's constructor arguments, in the order of its custom op's schema."""
    return tuple(getattr(op, name) for name in _SETTING_NAMES[type(op).__name__])


def call(op: Any, args: Sequence[object]) -> tuple:
    """``op(*args)`` through its custom op."""
    return getattr(torch.ops.tileops, type(op).__name__)(*args, *settings_of(op))


def instance(name: str, settings: Sequence[object]) -> Any:
    """The op ``name`` constructed with ``settings`` (one per distinct configuration)."""
    key = (name, tuple(settings))
    op = _INSTANCES.get(key)
    if op is None:
        op = _INSTANCES[key] = _CLASSES[name](**dict(zip(_SETTING_NAMES[name], settings)))
    return op


def _schema_args(cls: type) -> tuple[list[str], list[str], list[str]]:
    """(forward argument names, schema fragments of the forward arguments, of the settings)."""
    forward = [p for p in inspect.signature(cls.forward).parameters.values() if p.name != "self"]
    init = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    tensors = [f"Tensor{'?' if p.default is None else ''} {p.name}" for p in forward]
    settings = []
    for p in init:
        kind = _SETTING_TYPES.get(p.annotation)
        if kind is None:
            raise TypeError(f"{cls.__name__}.__init__ argument {p.name}: no schema type for {p.annotation!r}")
        settings.append(f"{kind} {p.name}")
    _SETTING_NAMES[cls.__name__] = tuple(p.name for p in init)
    return [p.name for p in forward], tensors, settings


Gradient = Callable[[Any, tuple, tuple, tuple], Optional[tuple]]


def register(cls: type, outputs: int, *, differentiable: bool = True, gradient: Optional[Gradient] = None) -> None:
    """Define ``tileops::<cls>`` (returning ``outputs`` tensors) with its implementation, fake and
    autograd formula; with ``differentiable=False`` backpropagating through it raises.

    ``gradient(op, inputs, outputs, grads)``, where given, computes the inputs' gradients with the
    family's backward op (``grads`` holds None for outputs that carry none), or returns None where
    it cannot; then, as for every other op, the reference recomputes the call."""
    name = cls.__name__
    _CLASSES[name] = cls
    inputs, tensors, settings = _schema_args(cls)
    returns = ", ".join(["Tensor"] * outputs)
    _LIB.define(f"{name}({', '.join(tensors + settings)}) -> ({returns})")
    split = len(inputs)

    def run(*args: Any) -> tuple:
        return _owned(instance(name, args[split:])._run(*args[:split]), args[:split])

    def fake(*args: Any) -> tuple:
        return tuple(instance(name, args[split:])._fake(*args[:split]))

    _LIB.impl(name, run, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIB)
    if differentiable:
        _register_backward(name, split, settings)

    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.save_for_backward(*inputs[:split], *(output if gradient else ()))
        ctx.settings = inputs[split:]
        ctx.split = split
        ctx.set_materialize_grads(gradient is None)  # with a gradient op: None marks an output without one

    torch.library.register_autograd(f"{NAMESPACE}::{name}", _backward_formula(name, differentiable, gradient),
                                    setup_context=setup_context, lib=_LIB)


def _owned(outputs: Sequence[torch.Tensor], inputs: Sequence[object]) -> tuple:
    """The outputs as the fake describes them: contiguous, each in storage of its own (the
    reference returns some as views, of its internals or of one another)."""
    seen = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    out = []
    for x in outputs:
        if x.stride() != _dense_strides(x.shape) or x.storage_offset() or x.untyped_storage().data_ptr() in seen:
            x = x.clone(memory_format=torch.contiguous_format)
        seen.add(x.untyped_storage().data_ptr())
        out.append(x)
    return tuple(out)


def _dense_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _backward_formula(name: str, differentiable: bool, gradient: Optional[Gradient]):
    def backward(ctx: Any, *grads: Optional[torch.Tensor]) -> tuple:
        if not differentiable:
            raise RuntimeError(f"{name} has no backward: it is itself a gradient (double backward is not "
                               "supported); call it under torch.no_grad()")
        saved = list(ctx.saved_tensors)
        inputs, outputs = saved[:ctx.split], saved[ctx.split:]
        computed = None
        if gradient is not None:
            computed = gradient(instance(name, ctx.settings), tuple(inputs), tuple(outputs), grads)
        if computed is None:
            dense = [torch.zeros_like(o) if g is None else g for g, o in zip(grads, outputs)] if outputs else grads
            computed = getattr(torch.ops.tileops, f"{name}_backward")(list(dense), inputs, *ctx.settings)
        computed = iter(computed)
        return tuple(next(computed) if _is_differentiable(x) else None for x in inputs) + (None,) * len(ctx.settings)
    return backward


def _is_differentiable(x: object) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _register_backward(name: str, split: int, settings: list[str]) -> None:
    """``tileops::<name>_backward(grads, inputs, settings)``: the gradient of every floating-point
    input, by the reference recomputed under autograd."""
    qualname = f"{name}_backward"
    _LIB.define(f"{qualname}(Tensor[] grads, Tensor?[] inputs, {', '.join(settings)}) -> Tensor[]")

    def run(grads: list[torch.Tensor], inputs: list, *settings: object) -> list[torch.Tensor]:
        if any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs):
            warn_or_raise(ReferenceFallbackWarning,
                          f"{name} has no backward kernel on the GPU; the PyTorch reference recomputes the "
                          "call to give its gradients (slow)")
        names = _SETTING_NAMES[name]
        reference = instance(name, tuple(REFERENCE if n == "target" else v for n, v in zip(names, settings)))
        where = [i for i, x in enumerate(inputs) if _is_differentiable(x)]

        def forward(*wanted: torch.Tensor) -> tuple:
            args = list(inputs)
            for i, x in zip(where, wanted):
                args[i] = x
            return tuple(reference._run(*args))

        # torch.func.vjp differentiates even where autograd is off (inside a custom op, a compiled graph)
        outputs, vjp = torch.func.vjp(forward, *(inputs[i] for i in where))
        return list(_owned(vjp(tuple(g.to(o.dtype) for o, g in zip(outputs, grads))), ()))

    def fake(grads: list[torch.Tensor], inputs: list, *settings: object) -> list[torch.Tensor]:
        return [x.new_empty(x.shape) for x in inputs if _is_differentiable(x)]

    _LIB.impl(qualname, run, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{qualname}", fake, lib=_LIB)
