"""The data one pipeline works from: the contract registry and the kernel maps, loaded once.

Passes share one PipelineData per xDSL Context (``pipeline_data(ctx)``).  A pass with a
``registry`` or ``kernel_maps`` option names the data for the rest of the pipeline
(resolve-contracts does; a later pass naming other data replaces it); every pass after it binds
against the same loaded maps, and nothing is reloaded from paths recorded in the IR.  The IR
carries kernel map ids and header paths relative to a maps root, never a file system path:
the C sources a program links are found here, from the maps that bound its calls.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from xdsl.context import Context

from v8dialect.data.contracts import ContractRegistry, load_registry
from v8dialect.data.jsondata import DataError
from v8dialect.data.kernel_maps import KernelMap, KernelMapSet, load_kernel_maps
from v8dialect.data.paths import option_paths
from v8dialect.diagnostics import V8Error, data_error, located


@dataclass
class PipelineData:
    """The registry and kernel maps the pipeline's options name, each loaded on first use."""

    registry_option: str | None = None
    maps_option: str | None = None
    _registries: dict[str | None, ContractRegistry] = field(
        default_factory=dict[str | None, ContractRegistry])
    _maps: dict[tuple[str | None, str | None], KernelMapSet] = field(
        default_factory=dict[tuple[str | None, str | None], KernelMapSet])

    def select(self, registry: str | None = None, kernel_maps: str | None = None) -> None:
        """Name the data of the passes that follow (None keeps what an earlier pass named)."""
        if registry:
            self.registry_option = registry
        if kernel_maps:
            self.maps_option = kernel_maps

    def registry(self) -> ContractRegistry:
        key = self.registry_option
        if key not in self._registries:
            try:
                self._registries[key] = load_registry(option_paths(key))
            except DataError as e:
                raise data_error(e, "contract registry") from None
        return self._registries[key]

    def kernel_maps(self) -> KernelMapSet:
        key = (self.registry_option, self.maps_option)
        if key not in self._maps:
            registry = self.registry()
            try:
                self._maps[key] = load_kernel_maps(registry, option_paths(self.maps_option))
            except DataError as e:
                raise data_error(e, "kernel map") from None
        return self._maps[key]

    def kernel_map(self, kernel: str) -> KernelMap:
        kmap = self.kernel_maps().get(kernel)
        if kmap is None:
            raise V8Error([located("<module>", f"kernel '{kernel}' is in no loaded kernel map")])
        return kmap

    def kernel_sources(self, kernels: Iterable[str]) -> list[Path]:
        """The C sources of the named kernels' maps, each once, sorted."""
        found: set[Path] = set()
        for kernel in kernels:
            kmap = self.kernel_map(kernel)
            root = maps_root(kmap)
            found.update((root / src).resolve() for src in kmap.sources)
        return sorted(found, key=str)


def maps_root(kmap: KernelMap) -> Path:
    """The folder a map's header and source paths start from: the nearest one above the map
    file that holds its header."""
    root = Path(kmap.source).parent
    while not (root / kmap.header).is_file() and root != root.parent:
        root = root.parent
    return root


_BY_CONTEXT: dict[int, PipelineData] = {}


def pipeline_data(ctx: Context | None) -> PipelineData:
    """The data shared by every pass run with `ctx` (a fresh one without a context)."""
    if ctx is None:
        return PipelineData()
    data = _BY_CONTEXT.get(id(ctx))
    if data is None:
        data = _BY_CONTEXT[id(ctx)] = PipelineData()
        weakref.finalize(ctx, _BY_CONTEXT.pop, id(ctx), None)
    return data
