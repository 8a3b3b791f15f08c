"""Whatever $TILEOPS_DB names, an op call returns the reference's result, waits at most ~2 s on the
database and says so once with a TuningDatabaseWarning: servers that accept and never answer, FIFOs,
unusable default folders, malformed URLs."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import warnings

import pytest
import torch

from tileops import dispatch
from tileops.errors import TuningDatabaseWarning
from tileops.linear_attention import GDNFwdOp

# How long one call may take with a silent database: the 2 s deadline and some slack for a busy CI.
BOUND_S = 6.0


@contextlib.contextmanager
def silent_server(lifetime_s: float = 30.0):
    """A TCP listener on 127.0.0.1 whose connections complete and are never answered; yields its
    port. It closes on exit, or by itself after ``lifetime_s``."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # the kernel completes handshakes for the backlog; nothing ever replies
    timer = threading.Timer(lifetime_s, listener.close)
    timer.daemon = True
    timer.start()
    try:
        yield listener.getsockname()[1]
    finally:
        timer.cancel()
        listener.close()


def gdn_call(make_inputs):
    x = make_inputs(1, 40, 2, 16, 16, gate="scalar", dtype=torch.float32)
    return GDNFwdOp(), (x["q"], x["k"], x["v"], x["g"], x["beta"])


def call_with(monkeypatch, make_inputs, value, *, expect_warning=True):
    """Run one op call with ``TILEOPS_DB=value``; returns the seconds it took."""
    monkeypatch.setenv("TILEOPS_DB", value)
    dispatch.reset()
    op, args = gdn_call(make_inputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.monotonic()
        o, _ = op(*args)
        took = time.monotonic() - start
        op(*args)  # the broken database is not asked again
        expected = GDNFwdOp(target="reference")(*args)[0]
    named = [w for w in caught if issubclass(w.category, TuningDatabaseWarning)]
    assert len(named) == (1 if expect_warning else 0), [str(w.message) for w in caught]
    torch.testing.assert_close(o, expected)
    dispatch.reset()
    return took


@pytest.mark.parametrize("scheme", ["postgresql", "mysql+pymysql"])
def test_a_server_that_never_answers_costs_at_most_the_deadline(scheme, monkeypatch, make_inputs):
    with silent_server() as port:
        took = call_with(monkeypatch, make_inputs, f"{scheme}://u@127.0.0.1:{port}/tuning")
    assert took < BOUND_S, f"an op call waited {took:.1f} s on a silent {scheme} server"


def test_a_fifo_is_refused_at_once(tmp_path, monkeypatch, make_inputs):
    fifo = tmp_path / "tuning.db"
    os.mkfifo(fifo)
    took = call_with(monkeypatch, make_inputs, str(fifo))
    assert took < BOUND_S


def test_a_malformed_port_falls_back(monkeypatch, make_inputs):
    call_with(monkeypatch, make_inputs, "postgresql://u@127.0.0.1:notaport/tuning")


def test_a_home_under_a_regular_file_falls_back_without_a_word(tmp_path, monkeypatch, make_inputs):
    home = tmp_path / "home"
    home.write_text("a file, not a folder")
    monkeypatch.setenv("HOME", str(home))
    call_with(monkeypatch, make_inputs, "", expect_warning=False)
    assert home.is_file()


def test_a_parent_that_is_a_file_falls_back(tmp_path, monkeypatch, make_inputs):
    parent = tmp_path / "parent"
    parent.write_text("x")
    call_with(monkeypatch, make_inputs, str(parent / "tuning.db"), expect_warning=False)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_home_is_never_written(tmp_path, monkeypatch, make_inputs):
    home = tmp_path / "home"
    home.mkdir(mode=0o500)
    monkeypatch.setenv("HOME", str(home))
    call_with(monkeypatch, make_inputs, "", expect_warning=False)
    assert list(home.iterdir()) == []
