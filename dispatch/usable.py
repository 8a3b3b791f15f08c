"""Whether a stored winner can serve: the one rule that dispatch and ``tileops-db`` both apply.

A row is usable when its kernel is registered, its config validates against the kernel's current
schema (and against the call, when there is one), and it was tuned on the kernel's current
programs (its source hash); otherwise the answer says which of the three failed.
"""

from __future__ import annotations

from typing import Optional

from pydantic import ValidationError

from tileops.callspec import CallSpec
from tileops.db.schemas import WinnerRecord, describe_errors
from tileops.kernels.base import KernelDef
from tileops.kernels.config import KernelConfig
from tileops.kernels.registry import get_kernel


def usable(record: WinnerRecord, spec: Optional[CallSpec] = None,
           kernel: Optional[KernelDef] = None) -> tuple[Optional[KernelConfig], Optional[str]]:
    """(config, None) for a row that can serve (``spec``: this call), else (None, why not).

    ``kernel`` saves the registry lookup when the caller already has the row's kernel.
    """
    if kernel is None:
        try:
            kernel = get_kernel(record.kernel)
        except KeyError:
            return None, f"unknown kernel: no kernel named {record.kernel!r} is registered"
    if record.source_hash != kernel.source_hash:
        return None, (f"stale: tuned on kernel source {record.source_hash}, "
                      f"the kernel is now {kernel.source_hash}")
    try:
        return kernel.validate_config(record.config, spec), None
    except ValueError as err:
        cause = err.__cause__
        detail = describe_errors(cause) if isinstance(cause, ValidationError) else str(err)
        return None, f"invalid config: {detail}"
