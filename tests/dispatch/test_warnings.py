"""Warnings a user can act on: raised again on every call under an "error" filter (tuning rows
passed over, reference fallback, compile after warm-up), the tileops.dispatch logger's record of
each new launcher, and TILEOPS_STRICT=1 turning the slow paths into errors."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

from tileops import dispatch
from tileops.db.store import TuningStore
from tileops.dispatch import compile_cache, router
from tileops.errors import (CompileAfterWarmupWarning, ReferenceFallbackWarning, StrictModeError, TuningRowWarning,
                            host_read)
from tileops.linear_attention import GDNFwdOp
from tests.dispatch.test_dispatch import call, user_db, winner  # noqa: F401  (user_db is a fixture)

CALLS = 3


def raises_every_call(fn, category) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", category)
        for _ in range(CALLS):
            with pytest.raises(category):
                fn()


def test_stale_tuning_row_warns_on_every_call(user_db):  # noqa: F811
    TuningStore(user_db).put_winner(winner(source_hash="f" * 16))
    op, args = call()
    raises_every_call(lambda: op(*args), TuningRowWarning)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(CALLS):
            op(*args)
    rows = [w for w in seen if issubclass(w.category, TuningRowWarning)]
    assert len(rows) == CALLS and "stale" in str(rows[0].message)
    assert rows[0].filename == __file__  # attributed to the caller, not to tileops


def test_each_new_launcher_is_logged_once(user_db, caplog):  # noqa: F811
    op, args = call()
    with caplog.at_level(logging.INFO, logger="tileops.dispatch"):
        for _ in range(CALLS):
            op(*args)
    records = [r.getMessage() for r in caplog.records if r.name == "tileops.dispatch"]
    assert len(records) == 1
    assert "new launcher: GDNFwdOp" in records[0] and "kernel reference.gdn_chunk" in records[0]
    assert '"chunk_size":64' in records[0] and records[0].endswith("from default")


@pytest.fixture
def after_warmup():
    compile_cache.clear()
    dispatch.reset()
    compile_cache.end_warmup()
    yield
    compile_cache.end_warmup(False)
    compile_cache.clear()
    dispatch.reset()


def test_build_after_warmup_warns_until_it_is_built(after_warmup, monkeypatch):
    op, args = call()
    raises_every_call(lambda: op(*args), CompileAfterWarmupWarning)
    monkeypatch.setenv("TILEOPS_STRICT", "1")
    for _ in range(CALLS):
        with pytest.raises(StrictModeError, match="after warm-up"):
            op(*args)
    monkeypatch.delenv("TILEOPS_STRICT")
    with pytest.warns(CompileAfterWarmupWarning, match="reference.gdn_chunk"):
        op(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileAfterWarmupWarning)
        op(*args)  # built now: nothing more to say


def fallback_route(op_name, target, spec):
    """What route() decides on a GPU when no in-tree kernel accepts the call."""
    chosen = route_before(op_name, "reference", spec)
    return router.Route(chosen.target, chosen.kernel, chosen.selection, fallback=f"{op_name}: no in-tree kernel")


route_before = router.route


def test_reference_fallback_warns_on_every_call_and_is_an_error_when_strict(monkeypatch):
    monkeypatch.setattr(router, "route", fallback_route)
    router.clear()
    op, args = call()
    try:
        raises_every_call(lambda: op(*args), ReferenceFallbackWarning)
        monkeypatch.setenv("TILEOPS_STRICT", "1")
        router.clear()
        for _ in range(CALLS):
            with pytest.raises(StrictModeError, match="no in-tree kernel"):
                op(*args)
    finally:
        router.clear()


def test_host_read_is_an_error_only_when_strict(monkeypatch):
    host_read("cu_seqlens")
    monkeypatch.setenv("TILEOPS_STRICT", "1")
    with pytest.raises(StrictModeError, match="cu_seqlens would be copied"):
        host_read("cu_seqlens")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_strict_refuses_reading_device_offsets(monkeypatch):
    monkeypatch.setenv("TILEOPS_STRICT", "1")
    q = torch.randn(1, 6, 1, 64, device="cuda", dtype=torch.bfloat16)
    v, g, beta = torch.randn_like(q), -torch.rand(1, 6, 1, device="cuda"), torch.rand(1, 6, 1, device="cuda")
    cu = torch.tensor([0, 2, 6], device="cuda", dtype=torch.int32)
    with pytest.raises(StrictModeError, match="cu_seqlens"):
        GDNFwdOp()(q, q, v, g, beta, cu_seqlens=cu)
    GDNFwdOp()(q, q, v, g, beta, cu_seqlens=cu, cu_seqlens_cpu=cu.cpu())
