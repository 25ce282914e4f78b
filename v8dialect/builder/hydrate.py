"""Hydration: the manifest a circuit is built with, completed and checked."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from v8dialect.builder.values import (
    DEFAULT_KV_CAPACITY,
    DEFAULT_PREFILL_TOKENS,
    UNEXPRESSED_METADATA,
    BuildError,
)
from v8dialect.data.circuit_model import (
    MANIFEST_SELECTORS,
    SELECTOR_VALUES,
    Circuit,
)
from v8dialect.data.manifest import (
    Manifest,
    ManifestError,
    ManifestValue,
    complete,
)
from v8dialect.runtime.host import NATIVE, HostError, native_ggml_build, native_loop_vectors


@dataclass(frozen=True)
class BuildOptions:
    prefill_tokens: int = DEFAULT_PREFILL_TOKENS
    kv_capacity: int | None = None
    overrides: Mapping[str, ManifestValue] = field(default_factory=dict[str, ManifestValue])
    expand_layers: bool = False  # every layer's ops in its phase (see builder/layers.py)
    prefill_logits: str = "all"  # "last": a decoder's prefill returns the last token's result only


# ---- hydration: the manifest the circuit is built with ---------------------------------


def hydrate(circuit: Circuit, manifest: Manifest) -> Manifest:
    """The manifest completed with the circuit's defaults and checked against the circuit."""
    if manifest.architecture not in circuit.architectures:
        raise BuildError(
            manifest.file,
            f"architecture '{manifest.architecture}' is not one that "
            f"{circuit.file} builds ({', '.join(circuit.architectures)})",
        )
    for key, wanted in circuit.match.items():
        found = manifest.raw.get(key)
        if manifest.source == "gguf" and found != wanted:
            raise BuildError(
                manifest.file,
                f"metadata '{key}' is {found!r}; {circuit.file} builds "
                f"only models where it is '{wanted}'",
            )
    _refuse_unexpressed(circuit, manifest)
    try:
        done = complete(manifest, circuit.defaults, circuit.required)
    except ManifestError as e:
        raise BuildError(manifest.file, str(e).removeprefix(f"{manifest.file}: ")) from None
    _check_heads(manifest.file, done)
    done = _native_build_resolved(done)
    _check_selector_values(done)
    return done


def _check_selector_values(manifest: Manifest) -> None:
    """A selector value no requirement can compare against is a typo, not a default."""
    for key in MANIFEST_SELECTORS:
        value = manifest.get(key)
        if value is not None and value not in SELECTOR_VALUES[key]:
            raise BuildError(manifest.file, f"{key} = {value!r} is not one of "
                                            f"{', '.join(SELECTOR_VALUES[key])}")


# Manifest values whose `native` this machine decides (v8dialect/runtime/host.py).
NATIVE_RESOLVERS: Mapping[str, Callable[[], str]] = {
    "ggml_build": native_ggml_build,
    "ggml_loop_vectors": native_loop_vectors,
}


def _native_build_resolved(manifest: Manifest) -> Manifest:
    """`ggml_build = native` becomes the build class of this machine and `ggml_loop_vectors
    = native` what its compiler makes of ggml's small loops (v8dialect/runtime/host.py): the IR names
    the arithmetic it was built for, never "whatever the host is"."""
    values = dict(manifest.values)
    for key, resolve in NATIVE_RESOLVERS.items():
        if values.get(key) != NATIVE:
            continue
        try:
            values[key] = resolve()
        except HostError as e:
            raise BuildError(manifest.file, str(e)) from None
    if values == manifest.values:
        return manifest
    return Manifest(manifest.source, manifest.file, manifest.architecture, values,
                    manifest.tensors, manifest.raw)


def _refuse_unexpressed(circuit: Circuit, manifest: Manifest) -> None:
    prefix = circuit.key_prefix or manifest.architecture
    for suffix in UNEXPRESSED_METADATA:
        value = manifest.raw.get(f"{prefix}.{suffix}")
        if value is not None and value not in ("none", 0, 0.0):
            raise BuildError(
                manifest.file,
                f"metadata '{prefix}.{suffix}' = {value!r} changes the "
                f"arithmetic, and {circuit.file} declares no op for it",
            )


def _check_heads(file: str, manifest: Manifest) -> None:
    heads, kv_heads = manifest.get("head_count"), manifest.get("head_count_kv")
    if not (isinstance(heads, int) and isinstance(kv_heads, int)):
        return  # absent values are reported by the op that needs them
    if heads < 1 or kv_heads < 1 or heads % kv_heads:
        raise BuildError(
            file,
            f"head_count {heads} is not a multiple of head_count_kv "
            f"{kv_heads} (grouped-query attention needs H % Hkv == 0)",
        )


def default_kv_capacity(manifest: Manifest) -> int:
    """Context length capped at 4096 (sliding windows mask inside a full-size cache)."""
    capacity = DEFAULT_KV_CAPACITY
    context = manifest.get("context_length")
    if isinstance(context, int) and context > 0:
        capacity = min(capacity, context)
    return capacity


