"""Whether a stored winner can still be used: its kernel exists, its config fits the kernel's
current schema, and it was tuned on the kernel's current source."""

from __future__ import annotations

from typing import Optional

from pydantic import ValidationError

from tileops.db.schemas import WinnerRecord, describe_errors
from tileops.kernels.registry import get_kernel


def check_winner(record: WinnerRecord) -> Optional[str]:
    """None for a usable row, else why not: unknown kernel, invalid config, or stale source."""
    try:
        kernel = get_kernel(record.kernel)
    except KeyError:
        return f"unknown kernel: no kernel named {record.kernel!r} is registered"
    try:
        kernel.validate_config(record.config)
    except ValueError as err:
        cause = err.__cause__
        detail = describe_errors(cause) if isinstance(cause, ValidationError) else str(err)
        return f"invalid config: {detail}"
    if record.source_hash != kernel.source_hash:
        return (f"stale: tuned on kernel source {record.source_hash}, "
                f"the kernel is now {kernel.source_hash}")
    return None
