"""A grid study shared by workers survives a trial enqueued with fixed params (no grid id) that
ends when one grid point is left: the stock GridSampler of Optuna 4 and 5.0 (the GPU machine's)
fails there with KeyError 'grid_id'; 5.1 no longer does."""

import optuna

from tileops.tuner.study import SharedGridSampler

SPACE = {"x": [1, 2]}


def one_left_then_enqueued(sampler) -> optuna.Study:
    study = optuna.create_study(sampler=sampler)
    objective = lambda t: t.suggest_categorical("x", SPACE["x"])  # noqa: E731
    study.optimize(objective, n_trials=1)
    left = ({1, 2} - {study.trials[0].params["x"]}).pop()
    study.enqueue_trial({"x": left})  # as another worker's known config would be
    study.optimize(objective, n_trials=1)
    return study


def test_the_shared_grid_sampler_finishes_it():
    study = one_left_then_enqueued(SharedGridSampler(SPACE, seed=0))
    assert sorted(t.params["x"] for t in study.trials if t.state.is_finished()) == [1, 2]
