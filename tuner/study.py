"""One Optuna study per tuning key: the default first, configs that won before next, then the sampler.

Studies live in any Optuna storage URL, so several processes or machines pointed at one
PostgreSQL or MariaDB server share them. Every measured candidate becomes a trial row in the
tuning database; a config already measured for a key is read back instead of measured again.
"""

from __future__ import annotations

import functools
import json
import math
import random
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Optional

import optuna

from tileops.callspec import CallSpec
from tileops.cases import Case
from tileops.db.engine import driver_url
from tileops.db.key import TuningKey
from tileops.db.schemas import TrialRecord
from tileops.db.store import TuningStore
from tileops.kernels.base import KernelDef
from tileops.tuner.evaluate import Job, Outcome
from tileops.tuner.heartbeat import HEARTBEAT_S, LEASE_S
from tileops.tuner.worker import CandidateWorker

optuna.logging.set_verbosity(optuna.logging.WARNING)


def open_storage(url: str, attempts: int = 6) -> optuna.storages.BaseStorage:
    """An Optuna storage, retried while other workers are creating the same schema. Its trials
    beat while they run, so that one left RUNNING by a killed tuner fails once it has been silent
    for the lease (Optuna checks when the study next runs a trial)."""
    if "://" not in url:
        return url
    for attempt in range(attempts):
        try:
            with warnings.catch_warnings():  # heartbeats are an experimental feature of Optuna's
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(driver_url(url).render_as_string(hide_password=False),
                                                  engine_kwargs={"pool_pre_ping": True},
                                                  heartbeat_interval=HEARTBEAT_S, grace_period=LEASE_S)
        except Exception:  # another worker created the tables between our check and our create
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 + random.random() * (attempt + 1))
    raise AssertionError("unreachable")


class SharedGridSampler(optuna.samplers.GridSampler):
    """A grid sampler for a study many workers share: a trial that another worker enqueued carries
    no grid id (its params were fixed, not drawn), which the stock sampler's end-of-trial check
    assumes it does and fails on with a KeyError; here such a trial simply does not stop the study."""

    def after_trial(self, study, trial, state, values) -> None:
        if "grid_id" in study._storage.get_trial_system_attrs(trial._trial_id):
            super().after_trial(study, trial, state, values)
        elif not self._get_unvisited_grid_ids(study):
            study.stop()


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


def _point_key(params: dict) -> str:
    """The identity of a point of the space, as trials are compared."""
    return json.dumps(params, sort_keys=True)


def _record(task: KeyTask, config_json: str, outcome: Outcome, run_id: Optional[int]) -> TrialRecord:
    fields = {k: v for k, v in outcome.as_dict().items() if v is not None or k == "noise"}
    return TrialRecord(**asdict(task.key), config=json.loads(config_json), run_id=run_id,
                       source_hash=task.kernel.source_hash, **fields)


def space_point(kernel: KernelDef, spec: CallSpec, params: dict) -> Optional[dict]:
    """``params`` as a point of the kernel's declared space if it accepts them for this call, else None."""
    try:
        config = kernel.validate_config(params, spec)
    except ValueError:
        return None
    space = kernel.config_model.choices()
    return {k: v for k, v in config.model_dump().items() if k in space}


def valid_points(kernel: KernelDef, spec: CallSpec) -> list[dict]:
    """Every point of the kernel's declared space that it accepts for this call.

    Spaces are small (a hundred points or so) and a refusal is a validation, so enumerating
    costs milliseconds.
    """
    return [p for p in kernel.config_model.points() if space_point(kernel, spec, p) is not None]


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
            return SharedGridSampler({k: list(v) for k, v in self.space.items()}, seed=self.seed)
        return optuna.samplers.TPESampler(seed=self.seed)

    def space_size(self) -> int:
        """How many configs the declared space holds (before constraints)."""
        return math.prod(len(v) for v in self.space.values()) if self.space else 1

    def _point(self, params: dict) -> Optional[dict]:
        """``params`` as a point of the declared space if the kernel accepts it for this call, else None."""
        return space_point(self.task.kernel, self.task.spec, params)

    @functools.cached_property
    def valid_points(self) -> list[dict]:
        """Every point of the declared space the kernel accepts for this call."""
        return valid_points(self.task.kernel, self.task.spec)

    def _grid(self) -> bool:
        return isinstance(self.study.sampler, optuna.samplers.GridSampler)

    def goal(self, n_trials: int) -> int:
        """How many distinct configs ``run(n_trials)`` measures: no more than the space holds and,
        under TPE, no more than this call accepts."""
        if not self.space or self._grid():
            return min(n_trials, self.space_size())
        return min(n_trials, len(self.valid_points))

    def enqueue(self, known: Iterable[dict]) -> None:
        """The default config first, then configs that won before (an earlier run's, the shipped
        snapshot's): all are candidates, except those this call refuses, silently left out."""
        if not self.space:  # nothing to choose: run() measures the default
            return
        for params in (json.loads(self.default_json), *known):
            point = self._point(params)
            if point is not None:
                self.study.enqueue_trial(point, skip_if_exists=True)

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
        """Trials until ``goal(n_trials)`` distinct configs are measured or the attempts run out.

        A sampler may propose a config again (an enqueued default, a shared study); such repeats
        are read back for free, so they do not count against the budget. Nor do configs the
        kernel refuses for this call (a tile that does not fit): they cost no compile and no time.

        A grid proposes every point once, so it gets one attempt per point. TPE may propose
        refused or measured points again and again, so each of its draws that measures nothing
        new is answered by enqueueing a spare: a valid point not seen yet, from a seeded shuffle
        of ``valid_points``. Alone, a worker thus needs at most ``2 * goal + waiting`` trials
        (waiting: the trials queued before the run, as the default), its bound; one sharing the
        study may lose spares to other workers and stop at the bound with fewer of its own.
        """
        if not self.space:
            self.measure(self.default_json)
            on_trial()
            return
        seen: set[str] = set()
        goal = self.goal(n_trials)
        if self._grid():
            spares = iter(())
            attempts = self.space_size() + 2
        else:
            spares = iter(random.Random(self.seed).sample(self.valid_points, len(self.valid_points)))
            waiting = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
            attempts = 2 * goal + len(waiting)

        def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            key = _point_key(trial.params)
            if key not in seen and "status" in trial.user_attrs:  # measured, not refused
                seen.add(key)
                on_trial()
            elif "fixed_params" not in trial.system_attrs:  # a draw wasted: the next trial is a spare
                spare = next((p for p in spares if _point_key(p) not in seen), None)
                if spare is not None:
                    study.enqueue_trial(spare)
            if len(seen) >= goal:
                study.stop()

        self.study.optimize(self.objective, n_trials=attempts, callbacks=[callback])
