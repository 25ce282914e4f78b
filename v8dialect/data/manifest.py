"""Model manifests: the numbers a circuit is hydrated with, read from a model file.

A manifest holds named values (``block_count``, ``head_count``, ``rope_freq_base``, …)
and, when it comes from a GGUF file, the type and shape of every tensor.  Two
sources are understood:

- a GGUF file, its header read by ``GgufHeader``: value ``F`` is the metadata key
  ``<prefix>.<suffix of F>`` where the prefix is ``general.architecture`` (or
  the circuit's ``key_prefix``);
- a config JSON (the ``config.json`` beside a checkpoint): value ``F`` is the
  first of its config keys that is present, inside the circuit's
  ``config_section`` when it names one.  A config carries no tensors, so
  weights are taken as fp32 and shaped by the circuit.

The field names are one closed vocabulary shared with the circuits; nothing
here knows a model family.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from v8dialect.data.jsondata import utf8_problem

ManifestValue = int | float | str | bool | tuple[int, ...]

# Value kinds, checked when a value is read so a malformed file fails early.
INT, FLOAT, WORD, INTS, FLAG = "int", "float", "word", "ints", "flag"


@dataclass(frozen=True)
class FieldSpec:
    kind: str
    gguf: str | None  # key suffix after the prefix; None when GGUF never stores it
    config: tuple[str, ...] = ()  # dotted config.json keys, first present wins


FIELDS: Mapping[str, FieldSpec] = {
    "block_count": FieldSpec(INT, "block_count", ("num_hidden_layers", "depth")),
    "embedding_length": FieldSpec(INT, "embedding_length", ("hidden_size",)),
    "feed_forward_length": FieldSpec(INT, "feed_forward_length", ("intermediate_size",)),
    "head_count": FieldSpec(INT, "attention.head_count", ("num_attention_heads", "num_heads")),
    "head_count_kv": FieldSpec(INT, "attention.head_count_kv", ("num_key_value_heads",)),
    "key_length": FieldSpec(INT, "attention.key_length", ("head_dim",)),
    "value_length": FieldSpec(INT, "attention.value_length", ("head_dim",)),
    "context_length": FieldSpec(INT, "context_length", ("max_position_embeddings",)),
    "vocab_size": FieldSpec(INT, "vocab_size", ("vocab_size",)),
    "rms_epsilon": FieldSpec(FLOAT, "attention.layer_norm_rms_epsilon", ("rms_norm_eps",)),
    "layer_norm_epsilon": FieldSpec(FLOAT, "attention.layer_norm_epsilon", ("layer_norm_eps",)),
    "rope_freq_base": FieldSpec(FLOAT, "rope.freq_base", ("rope_theta",)),
    "rope_freq_base_swa": FieldSpec(FLOAT, "rope.freq_base_swa", ("rope_local_base_freq",)),
    "rope_dimension_count": FieldSpec(INT, "rope.dimension_count", ()),
    "rope_sections": FieldSpec(
        INTS,
        "rope.dimension_sections",
        ("rope_scaling.mrope_section", "rope_parameters.mrope_section"),
    ),
    "sliding_window": FieldSpec(INT, "attention.sliding_window", ("sliding_window",)),
    "sliding_window_pattern": FieldSpec(
        INT, "attention.sliding_window_pattern", ("sliding_window_pattern",)
    ),
    "full_attention_interval": FieldSpec(
        INT, "full_attention_interval", ("full_attention_interval",)
    ),
    "ssm_conv_kernel": FieldSpec(INT, "ssm.conv_kernel", ("linear_conv_kernel_dim",)),
    "ssm_state_size": FieldSpec(INT, "ssm.state_size", ("linear_key_head_dim",)),
    "ssm_group_count": FieldSpec(INT, "ssm.group_count", ("linear_num_key_heads",)),
    "ssm_time_step_rank": FieldSpec(INT, "ssm.time_step_rank", ("linear_num_value_heads",)),
    "ssm_inner_size": FieldSpec(INT, "ssm.inner_size", ()),
    "projection_dim": FieldSpec(INT, "projection_dim", ("out_hidden_size",)),
    "tie_word_embeddings": FieldSpec(FLAG, None, ("tie_word_embeddings",)),
    # Not a property of the model file: how the runtime stores its KV cache.
    "kv_cache_dtype": FieldSpec(WORD, None, ()),
    # Not a property of the model file either: whose arithmetic to reproduce.
    "reference_arithmetic": FieldSpec(WORD, None, ()),
    # Nor this: whether the reference engine multiplies repacked weights (llama.cpp's CPU
    # backend repacks eligible weights by default, with its own GEMV/GEMM arithmetic).
    "weight_layout": FieldSpec(WORD, None, ()),
    # Nor this: which x86 build of llama.cpp's CPU backend (v8dialect/runtime/host.py); `native`
    # is the build this machine gets.
    "ggml_build": FieldSpec(WORD, None, ()),
    # Nor this: the smallest vector that build's compiler used for ggml's small loops
    # (v8dialect/runtime/host.py); `native` is what this machine's compiler makes of them.
    "ggml_loop_vectors": FieldSpec(WORD, None, ()),
}

# Values derived from others when neither the file nor the circuit gives them;
# each is the convention every GGUF writer and HF config follows.
DERIVED: Mapping[str, tuple[str, ...]] = {
    "key_length": ("embedding_length", "head_count"),
    "value_length": ("embedding_length", "head_count"),
    "head_count_kv": ("head_count",),
    "rope_dimension_count": ("key_length",),
}

SOURCES = ("gguf", "config")


class ManifestError(Exception):
    """A model file that cannot be read as a manifest; the message names the file."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str  # v8 dtype name (vocab.DTYPES) or the GGML type name, lower case
    shape: tuple[int, ...]  # row-major: [rows, columns] for a matrix


@dataclass(frozen=True)
class Manifest:
    source: str  # "gguf" or "config"
    file: str
    architecture: str
    values: Mapping[str, ManifestValue]
    tensors: Mapping[str, TensorInfo] | None = None  # None: the source holds no tensors
    raw: Mapping[str, Any] = field(default_factory=dict[str, Any])  # every metadata key read

    def get(self, name: str) -> ManifestValue | None:
        return self.values.get(name)

    def with_values(self, extra: Mapping[str, ManifestValue]) -> Manifest:
        return Manifest(
            self.source,
            self.file,
            self.architecture,
            {**self.values, **extra},
            self.tensors,
            self.raw,
        )


# ---- value conversion ----------------------------------------------------------


def convert(name: str, value: Any, where: str) -> ManifestValue:
    """A raw metadata value as the kind its field declares, or a ManifestError naming where."""
    kind = FIELDS[name].kind
    if kind == INTS:
        if not _is_array(value) or not all(_is_int(v) for v in value):
            raise ManifestError(f"{where}: '{name}' must be a list of integers, got {value!r}")
        return tuple(int(v) for v in value)
    if kind == FLAG:
        if not isinstance(value, bool):
            raise ManifestError(f"{where}: '{name}' must be true or false, got {value!r}")
        return value
    if kind == WORD:
        if not isinstance(value, str):
            raise ManifestError(f"{where}: '{name}' must be a string, got {value!r}")
        return value
    if kind == INT:
        if not _is_int(value):
            raise ManifestError(f"{where}: '{name}' must be an integer, got {value!r}")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ManifestError(f"{where}: '{name}' must be a number, got {value!r}")
    return float(value)


def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


# isinstance would narrow to list[Unknown] / dict[Unknown, Unknown]; these guards give the
# element types a raw value (a GGUF field, a JSON value) really has.
def _is_array(value: object) -> TypeGuard[list[Any] | tuple[Any, ...]]:
    return isinstance(value, list | tuple)


def _is_object(value: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict)  # JSON object keys are always strings


def parse_override(text: str) -> tuple[str, ManifestValue]:
    """`name=value` from the command line, typed by the field's kind."""
    name, eq, raw = text.partition("=")
    if not eq or name not in FIELDS:
        known = ", ".join(sorted(FIELDS))
        raise ManifestError(f"--set {text}: expected NAME=VALUE with NAME one of: {known}")
    kind = FIELDS[name].kind
    try:
        value: Any = {
            INT: lambda: int(raw),
            FLOAT: lambda: float(raw),
            WORD: lambda: raw,
            FLAG: lambda: {"true": True, "false": False}[raw],
            INTS: lambda: [int(v) for v in raw.split(",")],
        }[kind]()
    except (ValueError, KeyError):
        raise ManifestError(f"--set {text}: '{raw}' is not a valid {kind} value") from None
    return name, convert(name, value, "--set")


# ---- GGUF ----------------------------------------------------------------------


def read_gguf(file: Path, key_prefix: str | None = None) -> Manifest:
    """The manifest of a GGUF file: metadata under the architecture's prefix and every tensor."""
    try:
        raw, tensors = GgufHeader.read(file)
    except (OSError, ValueError, KeyError, IndexError, MemoryError, OverflowError, struct.error) as e:
        raise ManifestError(f"{file}: not a readable GGUF file ({e})") from None
    architecture = raw.get("general.architecture")
    if not isinstance(architecture, str):
        raise ManifestError(f"{file}: GGUF metadata has no 'general.architecture'")
    prefix = key_prefix or architecture
    values: dict[str, ManifestValue] = {}
    for name, spec in FIELDS.items():
        key = f"{prefix}.{spec.gguf}" if spec.gguf else None
        if key is not None and key in raw:
            values[name] = convert(name, raw[key], f"{file}: {key}")
    return Manifest("gguf", str(file), architecture, values, tensors, raw)


# GGUF value types: struct format of the scalars, 8 a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32


class GgufHeader:
    """The metadata and tensor infos of a little-endian GGUF file, and nothing else.

    gguf.GGUFReader maps the tensor data and builds numpy views of every header part (a
    vocabulary of 32k tokens alone is ~100k of them), which cost seconds per v8-build; this reads
    the header with struct and checks what GGUFReader checks (version, duplicate keys and
    tensors, known tensor types, alignment, tensor data inside the file)."""

    def __init__(self, data: mmap.mmap) -> None:
        self.data = data
        self.pos = 0

    @staticmethod
    def read(file: Path) -> tuple[dict[str, Any], dict[str, TensorInfo]]:
        with file.open("rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            if size < 4:
                raise ValueError("GGUF magic invalid")
            with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return GgufHeader(data).contents(size)

    def take(self, fmt: str, count: int = 1) -> tuple[Any, ...]:
        layout = f"<{count}{fmt}"
        width = struct.calcsize(layout)
        if count < 0 or self.pos + width > len(self.data):
            raise ValueError(f"header ends inside a value at byte {self.pos}")
        values = struct.unpack_from(layout, self.data, self.pos)
        self.pos += width
        return values

    def string(self) -> str:
        (n,) = self.take("Q")
        if self.pos + n > len(self.data):
            raise ValueError(f"string of {n} bytes at byte {self.pos} runs past the end")
        text = self.data[self.pos:self.pos + n]
        self.pos += n
        return text.decode("utf-8", "replace")

    def value(self, kind: int) -> Any:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            (item, count) = self.take("I") + self.take("Q")
            if item in _SCALARS:
                return list(self.take(_SCALARS[item], count))
            if count > len(self.data) - self.pos:  # every element takes at least a byte
                raise ValueError(f"array of {count} elements at byte {self.pos} runs past the end")
            return [self.value(item) for _ in range(count)]
        if kind not in _SCALARS:
            raise ValueError(f"unknown GGUF value type {kind} at byte {self.pos}")
        return self.take(_SCALARS[kind])[0]

    def contents(self, size: int) -> tuple[dict[str, Any], dict[str, TensorInfo]]:
        if self.take("I")[0] != 0x46554747:
            raise ValueError("GGUF magic invalid")
        (version,) = self.take("I")
        if version not in _VERSIONS:
            raise ValueError(f"file appears to be version {version}, not one of {_VERSIONS} (or big-endian)")
        tensor_count, kv_count = self.take("Q", 2)
        raw: dict[str, Any] = {"GGUF.version": version, "GGUF.tensor_count": tensor_count,
                               "GGUF.kv_count": kv_count}
        for _ in range(kv_count):
            key = self.string()
            if key in raw:
                raise KeyError(f"duplicate key {key}")
            (kind,) = self.take("I")
            if key == "general.alignment" and kind != _UINT32:
                raise ValueError("bad type for general.alignment field")
            raw[key] = self.value(kind)
        infos = [self.tensor_info() for _ in range(tensor_count)]
        return raw, self.tensors(infos, raw.get("general.alignment", _DEFAULT_ALIGNMENT), size)

    def tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self.string()
        (n_dims,) = self.take("I")
        dims = self.take("Q", n_dims)
        kind, offset = self.take("I") + self.take("Q")
        return name, dims, kind, offset

    def tensors(self, infos: Sequence[tuple[str, tuple[int, ...], int, int]], alignment: int,
                size: int) -> dict[str, TensorInfo]:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError("invalid alignment: must be a non-zero power of two")
        start = -(-self.pos // alignment) * alignment
        found: dict[str, TensorInfo] = {}
        for name, dims, kind, offset in infos:
            if name in found:
                raise ValueError(f"duplicated tensor with name {name}")
            ggml_type = GGMLQuantizationType(kind)
            block, type_size = GGML_QUANT_SIZES[ggml_type]
            n_bytes = math.prod(dims) * type_size // block
            if start + offset + n_bytes > size:
                raise ValueError(f"tensor {name} runs past the end of the file")
            # GGUF lists dimensions innermost first (ne0 = columns); v8 shapes are row-major.
            found[name] = TensorInfo(ggml_type.name.lower(), tuple(reversed(dims)))
        return found


# ---- config JSON ----------------------------------------------------------------


def read_config(file: Path, section: str | None = None) -> Manifest:
    """The manifest of a config JSON; `section` names a nested object (e.g. a text config)."""
    try:
        data = file.read_bytes()
        if (problem := utf8_problem(data)) is not None:
            raise ManifestError(f"{file}: {problem}")
        doc = json.loads(data.decode("utf-8"))
    except OSError as e:
        raise ManifestError(f"{file}: cannot read: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ManifestError(
            f"{file}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None
    if not _is_object(doc):
        raise ManifestError(f"{file}: expected a JSON object")
    scope = doc
    nested = doc.get(section) if section is not None else None
    if _is_object(nested):
        # A multimodal config nests the text model's values; a text-only one has them on top.
        scope = {**doc, **nested}
    architecture = scope.get("model_type")
    if not isinstance(architecture, str):
        raise ManifestError(f"{file}: config has no 'model_type'")
    values: dict[str, ManifestValue] = {}
    for name, spec in FIELDS.items():
        for key in spec.config:
            found = _dotted(scope, key)
            if found is not None:
                values[name] = convert(name, found, f"{file}: {key}")
                break
    return Manifest("config", str(file), architecture, values, None, scope)


def _dotted(doc: Mapping[str, Any], key: str) -> Any:
    value: Any = doc
    for part in key.split("."):
        if not _is_object(value) or part not in value:
            return None
        value = value[part]
    return value


# ---- completion -------------------------------------------------------------------


def complete(
    manifest: Manifest, defaults: Mapping[str, ManifestValue], required: Sequence[str]
) -> Manifest:
    """Fill absent values from the circuit's defaults, then the derivation conventions.

    A value the file states always wins: defaults exist so that a manifest
    written before a field existed still builds with today's circuit.
    """
    values = dict(manifest.values)
    for name, value in defaults.items():
        values.setdefault(name, value)
    for name, inputs in DERIVED.items():
        if name in values or not all(i in values for i in inputs):
            continue
        values[name] = _derive(name, [values[i] for i in inputs])
    missing = [name for name in required if name not in values]
    if missing:
        raise ManifestError(
            f"{manifest.file}: the model states no '{missing[0]}' and the circuit "
            "gives no default for it"
        )
    return Manifest(
        manifest.source,
        manifest.file,
        manifest.architecture,
        values,
        manifest.tensors,
        manifest.raw,
    )


def _derive(name: str, inputs: list[ManifestValue]) -> ManifestValue:
    if name in ("key_length", "value_length"):
        embedding, heads = inputs
        assert isinstance(embedding, int) and isinstance(heads, int)
        return embedding // heads if heads else 0
    return inputs[0]


def read_manifest(
    file: Path, key_prefix: str | None = None, section: str | None = None
) -> Manifest:
    """A GGUF file or a config JSON, told apart by content (GGUF starts with its magic)."""
    try:
        with file.open("rb") as stream:
            magic = stream.read(4)
    except OSError as e:
        raise ManifestError(f"{file}: cannot read: {e.strerror or e}") from None
    if magic == b"GGUF":
        return read_gguf(file, key_prefix)
    return read_config(file, section)
