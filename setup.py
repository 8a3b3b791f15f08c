"""Installs the repository's top-level folders as one import package, ``tileops``.

db/, dispatch/, tuner/ and cli/ sit beside tileops/ in the repository and install as
``tileops.db``, ``tileops.dispatch``, ``tileops.tuner`` and ``tileops.cli``; the wheel has no
other top-level name. Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

FOLDERS = {"tileops": "tileops", "tileops.db": "db", "tileops.dispatch": "dispatch",
           "tileops.tuner": "tuner", "tileops.cli": "cli"}


def packages() -> list[str]:
    """Every package under each folder, named inside ``tileops``."""
    names = []
    for package, folder in FOLDERS.items():
        names += [package, *(f"{package}.{sub}" for sub in find_packages(folder))]
    return names


setup(packages=packages(), package_dir=FOLDERS)
