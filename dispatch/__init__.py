"""Dispatch: from a call to a config to a compiled kernel, without database I/O on the hot path.

``explain(op, *args)`` says which config a call will run and why (``explain_spec`` for a call
described ahead, such as one on a GPU this machine lacks); ``reset()`` forgets every cache
(after the tuning database changed in this process); ``end_warmup()`` marks the end of warm-up,
after which a kernel built on the call path warns.
"""

from tileops.dispatch.compile_cache import end_warmup
from tileops.dispatch.explain import Explanation, explain, explain_spec


def reset() -> None:
    """Forget resolved launchers, selections and the database handle; built kernels stay."""
    from tileops.dispatch import lookup, router

    router.clear()
    lookup.reset()


__all__ = ["Explanation", "end_warmup", "explain", "explain_spec", "reset"]
