"""The data model of a circuit: a model family's graph template and the contracts each op
requires.

A circuit (``circuits/<family>.json``, schema ``v8.circuit/1``, described in
``circuits/README.md``) lists the ops of the prologue, of one block (per layer
kind) and of the epilogue, their dataflow by value name, the manifest fields
that size them, and per op and phase the contract it requires — directly, or
chosen by selectors on manifest values (``kv_cache_dtype``, the op's
``weight_type``).  Circuits never name kernels.  ``circuit_reader`` builds these
from JSON; ``circuits.load_circuit`` reads and checks one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from v8dialect.data import vocab
from v8dialect.data.manifest import ManifestValue
from v8dialect.runtime.host import GGML_BUILDS, LOOP_VECTORS

# Selector keys and the values they compare against.
SELECTOR_VALUES: Mapping[str, tuple[str, ...]] = {
    "kv_cache_dtype": ("f32", "f16", "bf16"),
    "weight_type": vocab.DTYPES,
    # whose arithmetic the ops reproduce where engines differ: ggml's CPU backend (llama.cpp:
    # its vector exp, fp16 GELU table, 16-lane fp32 dots) or the portable contracts (one libm
    # call per element, ascending fp32 dots)
    "reference_arithmetic": ("ggml_cpu", "portable"),
    # how the reference engine holds weights: llama.cpp's CPU repack buffer (its default; Q4_K
    # and Q4_0 weights with a row count divisible by 8 go through its repacked GEMV/GEMM) or
    # plain GGUF blocks everywhere (llama.cpp with use_extra_bufts off)
    "weight_layout": ("ggml_repacked", "plain"),
    # which x86 build of llama.cpp's CPU backend: its fp32/fp16/bf16 mul_mat and its fused
    # recurrent chain accumulate in one vector register's lanes (16 with AVX-512, 8 with AVX2)
    "ggml_build": GGML_BUILDS,
    # the smallest vector that build's compiler used for ggml's small plain loops (SSM_CONV's
    # taps, ggml_vec_dot_f32's leftovers): a property of its tuning, not of the ISA class
    "ggml_loop_vectors": LOOP_VECTORS,
}
# Selector keys read from the manifest (weight_type comes from the op's weight tensor).
MANIFEST_SELECTORS = ("kv_cache_dtype", "reference_arithmetic", "weight_layout", "ggml_build",
                      "ggml_loop_vectors")

# Value names that exist before the first op of a section runs.
PREDEFINED: Mapping[str, tuple[str, ...]] = {
    "prologue": ("tokens", "hidden"),  # whichever the circuit's input is
    "block": ("hidden",),
    "epilogue": ("hidden",),
}
POSITIONS = "positions"  # the position stream every rope op reads
DEFAULT_PREFIX = ("blk.{layer}.", "")  # GGUF tensor names: per layer, then global


@dataclass(frozen=True)
class Choice:
    """One alternative requirement: a contract (and execution) active when `when` matches."""

    contract: str
    when: tuple[tuple[str, str], ...] = ()
    execution: tuple[str, str] | None = None  # (runtime, partition)
    path: str = ""
    layout: str | None = None  # a prepared weight layout the op reads (vocab.PREPARED_LAYOUTS)

    def matches(self, facts: Mapping[str, str]) -> bool:
        return all(facts.get(key) == value for key, value in self.when)

    def describe(self) -> str:
        cond = " and ".join(f"{k} == {v}" for k, v in self.when)
        return f"{self.contract} (when {cond})" if cond else self.contract


@dataclass(frozen=True)
class OpTemplate:
    kind: str
    inputs: tuple[str, ...]
    output: str
    path: str  # JSON path of the entry, e.g. $.block[3]
    line: int
    column: int
    status: str
    node: str = ""
    only: tuple[str, ...] = ()
    contracts: Mapping[str, tuple[Choice, ...]] = field(
        default_factory=dict[str, tuple[Choice, ...]]
    )
    weight: str | None = None
    bias: str | None = None
    tied_to: str | None = None
    # manifest fields and constant factors whose product is the width; a nested
    # list is a sum of such products (e.g. the q, k and v channels of a fused projection)
    features: tuple[str | int | tuple[str | int, ...], ...] = ()
    eps: str | None = None
    weight_offset: Mapping[str, float] = field(default_factory=dict[str, float])
    output_scale: tuple[str, str] | None = (
        None  # (kind, manifest field), e.g. ("sqrt", "embedding_length")
    )
    heads: str | None = None
    flatten: bool = False
    freq_base: str | None = None
    dims: str | None = None
    sections: str | None = None
    mask: str | None = None
    scale: tuple[str, str] | None = None
    factor: tuple[str, str] | None = None  # a scale op's (kind, manifest field)
    kv_heads: str | None = None
    window: str | None = None  # manifest field: sliding-window length
    tensors: tuple[str, ...] = ()
    part: int | None = None
    parts: int | None = None

    def in_layer(self, kind: str) -> bool:
        return not self.only or kind in self.only


@dataclass(frozen=True)
class OutputRows:
    """Where llama.cpp's graph keeps only the rows whose results a call returns: right after
    node `after` (of the last layer, or of the epilogue), the values `select` become those rows
    (for a prefill that returns its last token's logits, the last token's row).  Every op from
    there on computes those rows alone, as llama.cpp's do, so their arithmetic is that of a
    one-row call."""

    after: str
    select: tuple[str, ...]
    in_epilogue: bool = False  # `after` is an epilogue node, not a block node


@dataclass(frozen=True)
class LayerPattern:
    kinds: tuple[str, ...]
    every: str | None = None  # manifest field: the period of the pattern
    at_end_of_period: str | None = None  # the kind of the last layer of each period

    def kind_of(self, layer: int, period: int | None) -> str:
        if self.every is None or period is None:
            return self.kinds[0]
        assert self.at_end_of_period is not None
        if (layer + 1) % period == 0:
            return self.at_end_of_period
        return next(k for k in self.kinds if k != self.at_end_of_period)


@dataclass(frozen=True)
class Circuit:
    family: str
    kind: str
    file: str  # display path, e.g. circuits/<family>.json
    description: str
    status: str
    input: str
    architectures: tuple[str, ...]
    key_prefix: str | None
    config_section: str | None
    match: Mapping[str, str]
    required: tuple[str, ...]
    defaults: Mapping[str, ManifestValue]
    weight_tying: str
    layers: LayerPattern
    prologue: tuple[OpTemplate, ...]
    block: tuple[OpTemplate, ...]
    epilogue: tuple[OpTemplate, ...]
    result: str
    output_rows: OutputRows | None = None  # None: no prefill can return its last token's only
    block_prefix: str = DEFAULT_PREFIX[0]  # tensor and node names of layer i start with this
    global_prefix: str = DEFAULT_PREFIX[1]

    def prefix(self, layer: int | None) -> str:
        return self.global_prefix if layer is None else self.block_prefix.format(layer=layer)

    @property
    def phases(self) -> tuple[str, ...]:
        return vocab.PHASES if self.kind == "decoder" else ("prefill",)

    def all_ops(self) -> Iterator[OpTemplate]:
        yield from self.prologue
        yield from self.block
        yield from self.epilogue
