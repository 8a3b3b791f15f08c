"""What the kernel package keeps on disk between processes, in a folder of TileLang's cache
($TILELANG_CACHE_DIR, else ~/.tilelang/cache), so that one setting moves both: compiled programs
(``launch.compiled``) and kernels' code hashes (``base.KernelDef.source_hash``)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def kept_root() -> Path:
    """The package's folder inside TileLang's cache folder."""
    cache = os.environ.get("TILELANG_CACHE_DIR") or os.path.expanduser("~/.tilelang/cache")
    return Path(cache) / "tileops"


def read_json(path: Path) -> dict:
    """A kept JSON object, or {} when it is absent or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_json(path: Path, value: dict) -> None:
    """Replace a kept JSON object at once (readers never see half a file); a folder that cannot be
    written keeps nothing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as out:
            json.dump(value, out, sort_keys=True)
        os.replace(out.name, path)
    except OSError:
        pass
