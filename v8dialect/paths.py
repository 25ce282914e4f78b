"""Where the packaged data lives: contract registries, circuits and runtime_c.

In the source tree these are top-level folders; installed, they are the
packages ``v8dialect.contracts``, ``v8dialect.circuits`` and
``v8dialect.runtime_c``.  Resolving them through importlib works for both.
"""

from importlib.resources import files
from pathlib import Path


def _package_dir(package: str) -> Path:
    return Path(str(files(package)))


def contracts_dir() -> Path:
    return _package_dir("v8dialect.contracts")


def circuits_dir() -> Path:
    return _package_dir("v8dialect.circuits")


def runtime_c_dir() -> Path:
    return _package_dir("v8dialect.runtime_c")


def runtime_include_dir() -> Path:
    return runtime_c_dir() / "include"
