"""One Optuna study per tuning key: the default first, an earlier winner next, then the sampler.

Studies live in any Optuna storage URL, so several processes or machines pointed at one
PostgreSQL server share them. Every measured candidate becomes a trial row in the tuning
database; a config already measured for a key is read back instead of measured again.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional

import optuna

from db.schemas import TrialRecord
from db.store import TuningStore
from dispatch.key import TuningKey
from tileops.kernels.base import KernelDef
from tuner.cases import Case
from tuner.evaluate import Job, Outcome
from tuner.worker import CandidateWorker

optuna.logging.set_verbosity(optuna.logging.WARNING)


def open_storage(url: str, attempts: int = 6) -> optuna.storages.BaseStorage:
    """An Optuna storage, retried while other workers are creating the same schema."""
    if "://" not in url:
        return url
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
        except Exception:  # another worker created the tables between our check and our create
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 + random.random() * (attempt + 1))
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class KeyTask:
    """What to tune: a case, the kernel that serves it, its key and its call description."""

    case: Case
    kernel: KernelDef
    key: TuningKey
    spec: object


def study_name(key: TuningKey) -> str:
    """A stable, readable study name per tuning key."""
    return "|".join(str(v) for v in asdict(key).values())


def _record(task: KeyTask, config_json: str, outcome: Outcome, run_id: Optional[int]) -> TrialRecord:
    fields = {k: v for k, v in outcome.as_dict().items() if v is not None or k == "noise"}
    return TrialRecord(**asdict(task.key), config=json.loads(config_json), run_id=run_id,
                       source_hash=task.kernel.source_hash, **fields)


class KeyStudy:
    """Runs the trials of one key against a store, a worker and an Optuna storage."""

    def __init__(self, task: KeyTask, store: TuningStore, worker: CandidateWorker,
                 storage: optuna.storages.BaseStorage,
                 run_id: Optional[int], seed: int = 0) -> None:
        self.task, self.store, self.worker, self.run_id = task, store, worker, run_id
        self.space = task.kernel.config_model.choices()
        self.default_json = task.kernel.default(task.spec).to_json()
        self.seed = seed
        self.study = optuna.create_study(study_name=study_name(task.key), storage=storage, direction="minimize",
                                         sampler=self._sampler(), load_if_exists=True)

    def _sampler(self) -> optuna.samplers.BaseSampler:
        """Exhaustive over a small space, TPE over a large one."""
        if self.space_size() <= 64:
            return optuna.samplers.GridSampler({k: list(v) for k, v in self.space.items()}, seed=self.seed)
        return optuna.samplers.TPESampler(seed=self.seed)

    def space_size(self) -> int:
        """How many configs the declared space holds (before constraints)."""
        return math.prod(len(v) for v in self.space.values()) if self.space else 1

    def enqueue(self, earlier_winner: Optional[dict]) -> None:
        """The default config first, then an earlier winner: both are always candidates."""
        for params in (json.loads(self.default_json), earlier_winner):
            if params:
                self.study.enqueue_trial({k: v for k, v in params.items() if k in self.space}, skip_if_exists=True)

    def measure(self, config_json: str) -> TrialRecord:
        """A trial row for a config: read back if this key already measured it, else measured now."""
        known = self.store.find_trial(self.task.key, config_json, source_hash=self.task.kernel.source_hash)
        if known is not None:
            return known
        outcome = self.worker.evaluate(Job(self.task.kernel.name, config_json, self.task.case.to_json(),
                                           self.seed, time_twice=config_json == self.default_json))
        record = _record(self.task, config_json, outcome, self.run_id)
        self.store.add_trial(record)
        return record

    def objective(self, trial: optuna.Trial) -> float:
        params = {name: trial.suggest_categorical(name, list(values)) for name, values in self.space.items()}
        try:
            config_json = self.task.kernel.validate_config(params, self.task.spec).to_json()
        except ValueError as err:
            config_json = json.dumps(params, sort_keys=True, separators=(",", ":"))
            if self.store.find_trial(self.task.key, config_json, source_hash=self.task.kernel.source_hash) is None:
                self.store.add_trial(_record(self.task, config_json, Outcome("invalid", error=str(err)), self.run_id))
            raise optuna.TrialPruned(f"invalid config: {err}") from None
        record = self.measure(config_json)
        trial.set_user_attr("status", record.status)
        if record.status != "ok":
            raise optuna.TrialPruned(f"{record.status}: {record.error}")
        return record.median_ms

    def run(self, n_trials: int, on_trial: Callable[[], None]) -> None:
        """Trials until ``n_trials`` distinct configs are measured or the space is exhausted.

        A sampler may propose a config again (an enqueued default, a shared study); such repeats
        are read back for free, so they do not count against the budget. Nor do configs the
        kernel refuses for this call (a tile that does not fit): they cost no compile and no time.
        """
        if not self.space:
            self.measure(self.default_json)
            on_trial()
            return
        seen: set[str] = set()
        goal = min(n_trials, self.space_size())
        grid = isinstance(self.study.sampler, optuna.samplers.GridSampler)

        def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            key = json.dumps(trial.params, sort_keys=True)
            if key not in seen and "status" in trial.user_attrs:  # measured, not refused
                seen.add(key)
                on_trial()
            if len(seen) >= goal:
                study.stop()

        # A grid stops by itself once every point was proposed; TPE gets a bounded number of tries.
        attempts = self.space_size() + 2 if grid else 3 * goal + 2
        self.study.optimize(self.objective, n_trials=attempts, callbacks=[callback])
