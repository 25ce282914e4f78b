"""Model manifests: the numbers a circuit is hydrated with, read from a model file.

A manifest holds named values (``block_count``, ``head_count``, ``rope_freq_base``, …)
and, when it comes from a GGUF file, the type and shape of every tensor.  Two
sources are understood:

- a GGUF file, read with ``gguf.GGUFReader``: value ``F`` is the metadata key
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from v8dialect.jsondata import utf8_problem

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
    # Nor this: which x86 build of llama.cpp's CPU backend (v8dialect/host.py); `native`
    # is the build this machine gets.
    "ggml_build": FieldSpec(WORD, None, ()),
    # Nor this: the smallest vector that build's compiler used for ggml's small loops
    # (v8dialect/host.py); `native` is what this machine's compiler makes of them.
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
    from gguf import GGUFReader

    try:
        reader = GGUFReader(file)
    except (OSError, ValueError, KeyError, IndexError, MemoryError) as e:
        raise ManifestError(f"{file}: not a readable GGUF file ({e})") from None
    raw = {name: _field_value(reader, name) for name in reader.fields}
    architecture = raw.get("general.architecture")
    if not isinstance(architecture, str):
        raise ManifestError(f"{file}: GGUF metadata has no 'general.architecture'")
    prefix = key_prefix or architecture
    values: dict[str, ManifestValue] = {}
    for name, spec in FIELDS.items():
        key = f"{prefix}.{spec.gguf}" if spec.gguf else None
        if key is not None and key in raw:
            values[name] = convert(name, raw[key], f"{file}: {key}")
    tensors = {t.name: _tensor_info(t) for t in reader.tensors}
    return Manifest("gguf", str(file), architecture, values, tensors, raw)


def _field_value(reader: Any, name: str) -> Any:
    from gguf import GGUFValueType

    item = reader.fields[name]
    if not item.types:
        return None
    if item.types[0] == GGUFValueType.ARRAY:
        if len(item.types) > 1 and item.types[1] == GGUFValueType.STRING:
            return [bytes(item.parts[i]).decode("utf-8", "replace") for i in item.data]
        return [item.parts[i].tolist()[0] for i in item.data]
    return item.contents()


def _tensor_info(tensor: Any) -> TensorInfo:
    # GGUF lists dimensions innermost first (ne0 = columns); v8 shapes are row-major.
    dims = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    return TensorInfo(tensor.tensor_type.name.lower(), dims)


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
