"""usable: unknown kernel, invalid config, stale source, and a usable row."""

from tests.support.db import make_winner

from tileops.dispatch.usable import usable


def check_winner(record):
    config, why = usable(record)
    assert (config is None) == (why is not None)
    return why


def test_a_current_row_is_usable(tiny_kernel):
    config, why = usable(make_winner(source_hash=tiny_kernel.source_hash))
    assert why is None and config.to_json() == tiny_kernel.validate_config(make_winner().config).to_json()


def test_an_unknown_kernel_is_named(tiny_kernel):
    problem = check_winner(make_winner(kernel="gone.kernel", source_hash=tiny_kernel.source_hash))
    assert problem == "unknown kernel: no kernel named 'gone.kernel' is registered"


def test_a_config_outside_the_kernels_schema_says_which_field(tiny_kernel):
    problem = check_winner(make_winner(config={"block": 48, "stages": 1}, source_hash=tiny_kernel.source_hash))
    assert problem.startswith("invalid config: block: Input should be 32, 64 or 128")
    problem = check_winner(make_winner(config={"block": 64, "warps": 4}, source_hash=tiny_kernel.source_hash))
    assert problem == "invalid config: warps: Extra inputs are not permitted"


def test_a_row_tuned_on_other_source_is_stale(tiny_kernel):
    problem = check_winner(make_winner(source_hash="ffffffffffffffff"))
    assert problem == f"stale: tuned on kernel source ffffffffffffffff, the kernel is now {tiny_kernel.source_hash}"
