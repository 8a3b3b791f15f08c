"""Targets: registered callables serve ops under their name; reserved names and non-callables are
refused; target=None on CPU tensors is served by the reference."""

from __future__ import annotations

import inspect
import itertools
import warnings

import pytest
import torch

from tileops import dispatch
import tileops.linear_attention as la
from tileops.dispatch import router

from tests.support.op_inputs import (OP_NAMES, gen, single_thread, valid_call)
@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():
        yield


# How many outputs each op's forward documents.
ARITY = {"DeltaNetChunkFwdOp": 6, "DeltaNetChunkBwdOp": 4, "GLAChunkBwdOp": 4}

_names = (f"ext{i}" for i in itertools.count())


@pytest.fixture
def name():
    """A fresh target name; launchers are forgotten before and after the test."""
    router.clear()
    used = next(_names)
    yield used
    for op in OP_NAMES:
        la.unregister_target(used, op)
    router.clear()


class Recorder:
    def __init__(self, outputs):
        self.calls = []
        self.outputs = outputs

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.outputs


def documented_outputs(op_name: str) -> tuple:
    return tuple(torch.full((1,), float(i + 1)) for i in range(ARITY.get(op_name, 2)))


@pytest.mark.parametrize("op_name", OP_NAMES)
def test_registered_callable_receives_exactly_the_forward_arguments(op_name, name):
    cls = getattr(la, op_name)
    init, args = valid_call(op_name, gen(1))
    outputs = documented_outputs(op_name)
    impl = Recorder(outputs)
    la.register_target(name, op_name, impl)
    op = cls(**init, target=name)
    values = list(args.values())
    positional, keywords = values[:2], dict(list(args.items())[2:])
    result = op(*positional, **keywords)

    assert len(impl.calls) == 1
    received, received_kw = impl.calls[0]
    bound = inspect.signature(cls.forward).bind(op, *received, **received_kw)
    bound.apply_defaults()
    got = dict(list(bound.arguments.items())[1:])
    expected_names = [p for p in inspect.signature(cls.forward).parameters if p != "self"]
    assert list(got) == expected_names
    for param in expected_names:
        if param in args:
            assert got[param] is args[param], param
        else:
            assert got[param] is None, param
    assert len(result) == len(outputs)
    assert all(r is o for r, o in zip(result, outputs))


def test_gla_chunk_forward_external_result_unpacks_as_documented(name):
    init, args = valid_call("GLAChunkFwdOp", gen(2))
    o, ht = torch.ones(1), torch.zeros(1)
    la.register_target(name, "GLAChunkFwdOp", lambda *a, **k: (o, ht))
    got_o, got_ht = la.GLAChunkFwdOp(**init, target=name)(**args)
    assert got_o is o and got_ht is ht


def test_register_accepts_the_class(name):
    init, args = valid_call("GDNFwdOp", gen(3))
    impl = Recorder(("o", "state"))
    la.register_target(name, la.GDNFwdOp, impl)
    assert la.GDNFwdOp(target=name)(**args) == ("o", "state")
    assert len(impl.calls) == 1


def test_registration_serves_only_its_op(name):
    la.register_target(name, "GDNFwdOp", Recorder(("o", "state")))
    init, args = valid_call("KDAFwdOp", gen(4))
    with pytest.raises(ValueError, match=f"unknown target '{name}' for KDAFwdOp"):
        la.KDAFwdOp(target=name)(**args)


def test_registered_name_is_listed_as_known(name):
    la.register_target(name, "GLAFwdOp", Recorder(("o", "state")))
    init, args = valid_call("GLAFwdOp", gen(5))
    with pytest.raises(ValueError) as info:
        la.GLAFwdOp(target=name + "_missing")(**args)
    assert name in str(info.value) and "reference" in str(info.value)


def test_unregistered_target_no_longer_serves(name):
    init, args = valid_call("GDNFwdOp", gen(6))
    la.register_target(name, "GDNFwdOp", Recorder(("o", "state")))
    op = la.GDNFwdOp(target=name)
    assert op(**args) == ("o", "state")
    la.unregister_target(name, "GDNFwdOp")
    with pytest.raises(ValueError, match="unknown target"):
        op(**args)


def test_reregistered_target_serves_the_new_callable(name):
    init, args = valid_call("GDNFwdOp", gen(7))
    first, second = Recorder(("first", None)), Recorder(("second", None))
    la.register_target(name, "GDNFwdOp", first)
    op = la.GDNFwdOp(target=name)
    assert op(**args)[0] == "first"
    la.register_target(name, "GDNFwdOp", second)
    assert op(**args)[0] == "second"
    assert (len(first.calls), len(second.calls)) == (1, 1)


def test_unregister_of_an_absent_target_is_quiet():
    la.unregister_target("never_registered", "GDNFwdOp")


@pytest.mark.parametrize("reserved", [la.BUILTIN, la.REFERENCE, "builtin", "reference"])
def test_reserved_names_rejected(reserved):
    with pytest.raises(ValueError, match="reserved"):
        la.register_target(reserved, "GDNFwdOp", Recorder(None))
    with pytest.raises(ValueError, match="reserved"):
        la.register_target(reserved, la.KDAFwdOp, Recorder(None))


@pytest.mark.parametrize("implementation", [None, 3, "GDNFwdOp", (lambda: None,)])
def test_non_callable_rejected(implementation, name):
    with pytest.raises(TypeError, match="callable"):
        la.register_target(name, "GDNFwdOp", implementation)
    init, args = valid_call("GDNFwdOp", gen(8))
    with pytest.raises(ValueError, match="unknown target"):
        la.GDNFwdOp(target=name)(**args)


def test_external_target_is_explained_as_external(name):
    la.register_target(name, "GDNFwdOp", Recorder(("o", "state")))
    init, args = valid_call("GDNFwdOp", gen(9))
    explanation = dispatch.explain(la.GDNFwdOp(target=name), **args)
    assert (explanation.target, explanation.kernel, explanation.source) == (name, None, "external target")


@pytest.fixture
def no_database(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEOPS_DB", str(tmp_path / "absent.db"))
    dispatch.reset()
    yield
    dispatch.reset()


@pytest.mark.parametrize("op_name", OP_NAMES)
def test_target_none_on_cpu_picks_reference(op_name, no_database):
    cls = getattr(la, op_name)
    init, args = valid_call(op_name, gen(10))
    explanation = dispatch.explain(cls(**init), **args)
    assert explanation.target == la.REFERENCE
    assert explanation.kernel.startswith("reference.")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        by_default = cls(**init)(**args)
    by_name = cls(**init, target="reference")(**args)
    assert len(by_default) == len(by_name) == ARITY.get(op_name, 2)
    for a, b in zip(by_default, by_name):
        assert torch.equal(a, b)


def test_target_none_ignores_registered_targets(name, no_database):
    impl = Recorder(("o", "state"))
    la.register_target(name, "GDNFwdOp", impl)
    init, args = valid_call("GDNFwdOp", gen(11))
    o, final_state = la.GDNFwdOp()(**args)
    assert isinstance(o, torch.Tensor) and isinstance(final_state, torch.Tensor)
    assert impl.calls == []
