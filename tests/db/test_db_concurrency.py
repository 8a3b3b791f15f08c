"""Many processes writing trials into one new database at once (SQLite, PostgreSQL, MariaDB) lose
nothing and never fail."""

import multiprocessing
import traceback

from tests.support.db import make_trial

from tileops.db.store import TuningStore

WORKERS = 4
TRIALS_EACH = 200


def write_trials(url: str, worker: int, start, errors) -> None:
    """One tuning worker: open the (new) database, then add its trials one transaction each."""
    try:
        start.wait()
        with TuningStore(url) as store:
            for n in range(TRIALS_EACH):
                store.add_trial(make_trial(config={"block": 64, "stages": 2, "worker": worker, "n": n}))
    except BaseException:  # report to the parent: a child's traceback is otherwise lost
        errors.put(f"worker {worker}: {traceback.format_exc()}")
        raise


def test_concurrent_writers_into_one_new_database(db_url):
    context = multiprocessing.get_context("spawn")
    start, errors = context.Barrier(WORKERS), context.Queue()
    workers = [context.Process(target=write_trials, args=(db_url, w, start, errors)) for w in range(WORKERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    reported = [errors.get() for _ in range(errors.qsize())] if not errors.empty() else []
    assert reported == [] and [w.exitcode for w in workers] == [0] * WORKERS
    with TuningStore(db_url, readonly=True) as store:
        written = {(t.config["worker"], t.config["n"]) for t in store.trials()}
        assert len(store.trials()) == WORKERS * TRIALS_EACH
    assert written == {(w, n) for w in range(WORKERS) for n in range(TRIALS_EACH)}
