"""Helpers shared by the tuning-database tests: database URLs (SQLite and throw-away PostgreSQL
and MariaDB databases), a small test kernel, record factories and a way to run tileops-db in a
subprocess.

The fixtures reach every test through ``pytest_plugins`` in tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Literal

import pytest
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError

from tileops.db.engine import driver_url
from tileops.db.schemas import TrialRecord, WinnerRecord

REPO = Path(__file__).resolve().parents[2]
# The test servers, as URL templates; the databases the tests use are made and dropped per test.
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/{database}"
MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/{database}"
TINY_KERNEL_NAME = "test.tiny_db"


# -- databases ---------------------------------------------------------------------------------

@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite URL of a file that does not exist yet."""
    return f"sqlite:///{tmp_path / 'tuning.db'}"


@contextlib.contextmanager
def throwaway_database(server: str, url: str, required_by: str, drop_options: str = ""):
    """A fresh database on the server that ``url`` names (``{database}`` left to fill in),
    yielding its URL and dropping it on exit; the server's ``test`` database administers.

    Skips when no server answers, unless $``required_by`` is set: then it fails.
    """
    admin_url = driver_url(url.format(database="test"))
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        connection = admin.connect()
    except OperationalError as err:
        admin.dispose()
        address = f"{admin_url.host}:{admin_url.port}"
        if os.environ.get(required_by):
            pytest.fail(f"{required_by} is set but {server} does not answer: {err.orig}")
        pytest.skip(f"no {server} server on {address} (set {required_by}=1 to fail instead): {err.orig}")
    name = f"tileops_test_{uuid.uuid4().hex[:12]}"
    try:
        connection.exec_driver_sql(f"CREATE DATABASE {name}")
        try:
            yield url.format(database=name)
        finally:
            connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{drop_options}")
    finally:
        connection.close()
        admin.dispose()


def throwaway_postgres():
    """A fresh PostgreSQL database URL, dropped on exit (even with sessions still open on it).

    Skips when no server answers, unless $TILEOPS_TEST_POSTGRES is set: then it fails.
    """
    return throwaway_database("PostgreSQL", POSTGRES_URL, "TILEOPS_TEST_POSTGRES", drop_options=" WITH (FORCE)")


def throwaway_mariadb():
    """A fresh MariaDB database URL, dropped on exit.

    Skips when no server answers, unless $TILEOPS_TEST_MARIADB is set: then it fails.
    """
    return throwaway_database("MariaDB", MARIADB_URL, "TILEOPS_TEST_MARIADB")


@pytest.fixture
def postgres_url():
    """A fresh PostgreSQL database, dropped afterwards."""
    with throwaway_postgres() as url:
        yield url


@pytest.fixture
def mariadb_url():
    """A fresh MariaDB database, dropped afterwards."""
    with throwaway_mariadb() as url:
        yield url


# The servers besides SQLite: pytest params marked with their names, and their throw-away databases.
SERVERS = [pytest.param("postgres", marks=pytest.mark.postgres),
           pytest.param("mariadb", marks=pytest.mark.mariadb)]
THROWAWAY_DATABASES = {"postgres": throwaway_postgres, "mariadb": throwaway_mariadb}


@pytest.fixture(params=SERVERS)
def server_url(request) -> str:
    """Each test using it runs once on PostgreSQL and once on MariaDB."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture(params=["sqlite", *SERVERS])
def db_url(request) -> str:
    """Each test using it runs once on SQLite, once on PostgreSQL and once on MariaDB."""
    return request.getfixturevalue(f"{request.param}_url")


# -- a kernel of our own -----------------------------------------------------------------------

def make_tiny_kernel():
    """A kernel with a two-knob config space; nothing is ever built."""
    from tileops.kernels.base import KernelDef
    from tileops.kernels.config import KernelConfig

    class TinyConfig(KernelConfig):
        block: Literal[32, 64, 128] = 64
        stages: Literal[1, 2] = 1

    return KernelDef(name=TINY_KERNEL_NAME, family="test", archs=frozenset({"cpu", "sm90"}),
                     config_model=TinyConfig, build=lambda config, spec: (lambda *args: None),
                     refuse=lambda spec: None, default=lambda spec: TinyConfig())


def isolate_registry(kernel) -> None:
    """Serve only ``kernel`` (and whatever was already loaded) from the registry, without
    importing the in-tree kernel modules: these tests are about rows, not kernels."""
    from tileops.kernels import registry

    registry._loaded = True
    registry.register(kernel)


@pytest.fixture
def tiny_kernel(monkeypatch):
    """The test kernel, registered for one test (the in-tree kernel modules are not imported)."""
    from tileops.kernels import registry

    kernel = make_tiny_kernel()
    monkeypatch.setattr(registry, "_loaded", True)
    monkeypatch.setitem(registry._KERNELS, kernel.name, kernel)
    return kernel


# -- records -----------------------------------------------------------------------------------

KEY = dict(op="gdn", kernel=TINY_KERNEL_NAME, arch="sm90", device_name="NVIDIA H200", dtype="bfloat16",
           dim_k=128, dim_v=128, flags='{"mode":"prefill"}', bucket_tokens=12, bucket_rows=6)


def make_winner(**fields) -> WinnerRecord:
    """A valid winner for the test kernel; ``fields`` override the defaults."""
    values = dict(KEY, config={"block": 64, "stages": 2}, time_ms=0.5, default_ms=0.75, speedup=1.5,
                  rel_error=1e-3, source_hash="0123456789abcdef", tilelang_version="0.1.12",
                  torch_version="2.13.0", cuda_version="12.8", source="tuned")
    values.update(fields)
    return WinnerRecord(**values)


def make_trial(**fields) -> TrialRecord:
    """A successful trial for the test kernel; ``fields`` override the defaults."""
    values = dict(KEY, config={"block": 64, "stages": 2}, status="ok", median_ms=0.5, p20_ms=0.49,
                  p80_ms=0.52, repeats=50, rel_error=1e-3, compile_s=1.25, source_hash="0123456789abcdef")
    values.update(fields)
    return TrialRecord(**values)


# -- the CLI in a subprocess -------------------------------------------------------------------

# The real tileops-db main, after registering the test kernel in that process.
_WITH_TINY_KERNEL = ("import tests.support.db as h; h.isolate_registry(h.make_tiny_kernel()); "
                     "import tileops.cli.db as c; c.main()")


def run_cli(*args: str, with_tiny_kernel: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m tileops.cli.db ARGS`` from the repository root (or the same main with the test
    kernel registered), output captured as text on a wide terminal."""
    env = dict(os.environ, COLUMNS="250", NO_COLOR="1",
               PYTHONPATH=str(REPO))
    env.pop("TILEOPS_DB", None)
    command = ["-c", _WITH_TINY_KERNEL] if with_tiny_kernel else ["-m", "tileops.cli.db"]
    return subprocess.run([sys.executable, *command, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)
