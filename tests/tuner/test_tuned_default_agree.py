"""Tuned and default configs agree: for every winner — freshly tuned here, in $TILEOPS_DB when
set, and in the shipped snapshots — the op's output under the winner, and under another valid
config of its key that is not the default, equals its output under the kernel's default on fresh
random inputs (a winner is often the default itself: the second config is what makes the check
bite). A winner for another architecture must still validate, not be stale, and compile for its
architecture when nvcc is present."""

from __future__ import annotations

import os
import random
import shutil
from importlib import resources

import pytest

from tileops.db.jsonl import read_winners
from tileops.dispatch.usable import usable
from tileops.device import current_arch
from tileops.kernels.registry import get_kernel
from tileops.cases import Case
from tileops.tuner.cases import make_inputs, make_op, spec_for_arch
from tileops.tuner.evaluate import gate_case
from tileops.tuner.gate import TOLERANCE, worst_error
from tileops.tuner.study import valid_points


def shipped() -> list:
    """Every row of every shipped snapshot."""
    folder = resources.files("tileops") / "snapshots"
    rows = []
    for item in sorted(folder.iterdir(), key=lambda p: p.name) if folder.is_dir() else []:
        if item.name.endswith(".jsonl"):
            records, rejects = read_winners(item)
            assert not rejects, f"{item.name} has rows that do not validate: {rejects}"
            rows += records
    return rows


def user_rows() -> list:
    """The winners of the database named by $TILEOPS_DB, when the variable is set."""
    if not os.environ.get("TILEOPS_DB"):
        return []
    from tileops.db.store import TuningStore

    return TuningStore(os.environ["TILEOPS_DB"], readonly=True).winners()


def other_config(kernel, spec, rng: random.Random):
    """A valid config of this call that is not the default, or None when the space has no other."""
    default = kernel.default(spec).to_json()
    others = [c for c in (kernel.validate_config(p, spec) for p in valid_points(kernel, spec))
              if c.to_json() != default]
    return rng.choice(others) if others else None


def _agree(record) -> None:
    kernel = get_kernel(record.kernel)
    case = gate_case(Case.from_json(record.call)).on("cuda" if record.arch.startswith("sm") else "cpu")
    rng = random.Random(random.SystemRandom().randrange(1 << 30))
    seed = rng.randrange(1 << 30)
    spec, args = make_op(case).describe(*make_inputs(case, seed))
    default = kernel.build(kernel.default(spec), spec)(*args)
    other = other_config(kernel, spec, rng)
    assert other is not None or len(valid_points(kernel, spec)) <= 1
    for config in (kernel.validate_config(record.config, spec), other):
        if config is None:
            continue
        error = worst_error(tuple(kernel.build(config, spec)(*args)), tuple(default))
        assert error <= 2 * TOLERANCE[case.dtype], f"{record.kernel} {config.to_json()}: {error:.3g} (seed {seed})"


def _compiles_for_its_arch(record) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is absent: the compile check of a GPU winner needs it")
    kernel = get_kernel(record.kernel)
    spec = spec_for_arch(Case.from_json(record.call).smallest(), record.arch, record.device_name)
    assert kernel.build(kernel.validate_config(record.config, spec), spec) is not None


def check(record) -> None:
    """The whole check for one winner."""
    assert record.call, f"winner {record.kernel} does not record the call it was tuned on"
    assert usable(record)[1] is None, usable(record)[1]
    if record.arch == current_arch():
        _agree(record)
    else:
        _compiles_for_its_arch(record)


@pytest.mark.parametrize("record", shipped(), ids=lambda r: f"{r.kernel}-t{r.bucket_tokens}-r{r.bucket_rows}")
def test_shipped_winner_agrees_with_default(record):
    check(record)


@pytest.mark.parametrize("record", user_rows(), ids=lambda r: f"{r.kernel}-t{r.bucket_tokens}-r{r.bucket_rows}")
def test_user_winner_agrees_with_default(record):
    check(record)


# What each machine can tune: the reference kernels of every op on a CPU (a small fp32 call);
# on an sm90 GPU the TileLang kernels, which exist for GDN (half precision, 64-wide state).
FRESH_TUNING = {"cpu": (("gdn", "kda", "gla", "deltanet"), 16, "float32"), "sm90": (("gdn",), 64, "bfloat16")}


def test_freshly_tuned_winners_agree_with_default(tmp_path):
    from tileops.db.store import TuningStore
    from tileops.tuner.run import tune

    arch = current_arch()
    if arch not in FRESH_TUNING:
        pytest.skip(f"no kernels to tune on {arch}")
    ops, width, dtype = FRESH_TUNING[arch]
    db = f"sqlite:///{tmp_path / 'tuning.db'}"
    for op in ops:  # tuned on this machine's device: timing needs it
        tune([op], arch, ["B1xT160xH1xHV2"], width, dtype, 3, 120.0, db,
             f"sqlite:///{tmp_path / 'o.db'}", lambda label, n: (lambda: None))
    winners = TuningStore(db, readonly=True).winners()
    assert {w.op for w in winners} == set(ops)
    for record in winners:
        check(record)
