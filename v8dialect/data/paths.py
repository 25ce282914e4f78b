"""Where the packaged data lives: contract registries, circuits and runtime_c.

In the source tree these are top-level folders beside ``v8dialect/``;
installed, they are the packages ``v8dialect.contract_data``,
``v8dialect.circuit_data`` and ``v8dialect.runtime_c``.  Both layouts resolve here.
"""

from importlib.resources import files
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _data_dir(name: str, package: str) -> Path:
    in_source_tree = _SOURCE_ROOT / name
    if (_SOURCE_ROOT / "pyproject.toml").is_file() and in_source_tree.is_dir():
        return in_source_tree
    return Path(str(files(package)))


def contracts_dir() -> Path:
    return _data_dir("contracts", "v8dialect.contract_data")


def circuits_dir() -> Path:
    return _data_dir("circuits", "v8dialect.circuit_data")


def runtime_c_dir() -> Path:
    return _data_dir("runtime_c", "v8dialect.runtime_c")


def runtime_include_dir() -> Path:
    return runtime_c_dir() / "include"


def option_paths(option: str | None) -> list[Path] | None:
    """A pass option naming files or folders, comma-separated; None means the packaged default."""
    if not option:
        return None
    return [Path(p) for p in option.split(",") if p]
