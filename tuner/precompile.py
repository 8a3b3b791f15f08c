"""Building a tuning run's candidates ahead of it, on a machine with nvcc but no GPU, so that the
GPU's time goes to measuring: the same studies, seeds and candidate order as the real run, with
each candidate compiled into TileLang's disk cache instead of measured."""

from __future__ import annotations

import time
import traceback

from tileops.kernels.registry import get_kernel
from tileops.cases import Case
from tileops.tuner.cases import spec_for_arch
from tileops.tuner.evaluate import Job, Outcome


class CompileOnlyWorker:
    """Stands in for the candidate worker: builds each candidate for ``arch`` and reports a
    constant time, so the sampler proposes what it would propose before any measurement."""

    def __init__(self, arch: str) -> None:
        self.arch = arch

    def evaluate(self, job: Job) -> Outcome:
        spec = spec_for_arch(Case.from_json(job.case).smallest(), self.arch)
        kernel = get_kernel(job.kernel)
        start = time.perf_counter()
        try:
            kernel.build(kernel.validate_config(job.config, spec), spec)
        except Exception:
            return Outcome("compile_error", error=traceback.format_exc(limit=4)[-2000:])
        return Outcome("ok", 1.0, 1.0, 1.0, 1, 0.0, time.perf_counter() - start)

    def close(self) -> None:
        """Nothing to stop."""
