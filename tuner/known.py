"""Configs that already won a key: an earlier run's winner in the tuning database and the shipped
snapshot's. A re-tune measures them as candidates, so it never loses one to the sampler's luck."""

from __future__ import annotations

from dataclasses import asdict

from tileops.db.models import KEY_COLUMNS
from tileops.db.store import TuningStore
from tileops.db.key import TuningKey
from tileops.dispatch.snapshot import shipped_matching


def shipped_configs(key: TuningKey) -> list[dict]:
    """The snapshot's winners for this key, tuned on any device of its architecture and any
    kernel source: a stale or foreign winner is still a good candidate."""
    fields = {name: getattr(key, name) for name in KEY_COLUMNS if name != "device_name"}
    return [row.config for row in shipped_matching(fields)]


def known_configs(store: TuningStore, key: TuningKey) -> list[dict]:
    """The database's winner for this key first, then the shipped ones."""
    return [row.config for row in store.winners(**asdict(key))] + shipped_configs(key)
