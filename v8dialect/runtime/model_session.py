"""Run the program v8 builds from a GGUF file, phase after phase, on that file's weights.

    session = ModelSession.open(Path("model.gguf"), "<circuit>", prefill_tokens=16, kv_capacity=1024)
    logits = session.prefill(tokens, workers=1).logits        # [T, vocab]
    logits = session.decode(next_token, workers=1).logits     # [1, vocab]

The session keeps what a model keeps between phases: the KV caches and the recurrent
states, written in place by the program, and the number of positions already seen.
Weights are the file's own tensors, read once into one huge-page weight arena (fp32
tensors that the IR loads with a transform, such as (1 + w) norm weights, are
transformed once in fp32).  An argument that declares a prepared layout (``v8.layout``,
e.g. the 16-row interleaved Q4_K copy decode's GEMV reads) is made once from the file's
rows by the preparation its kernel map declares, into a second huge-page arena.

A checkpoint session (``checkpoints=True``) builds the same program with
``keep-checkpoints``: every op's output is returned too, by node name.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import FloatAttr, ModuleOp, StringAttr
from xdsl.ir import Attribute

from v8dialect.ir.graph_op import LAYOUT_ATTR
from v8dialect.ir.ledger import read_ledger
from v8dialect.ir.structure import entry_points
from v8dialect.ops.last_token import LastTokenOp
from v8dialect.runtime.host import restrict_to_build
from v8dialect.runtime.program import BoundPhase, PreparedCall, ProfileRow, Program, build

F32 = np.float32


class SessionError(Exception):
    """A user-facing problem with the model file or the inputs (no traceback)."""


@dataclass(frozen=True)
class PhaseResult:
    logits: np.ndarray[Any, Any]
    checkpoints: Mapping[str, np.ndarray[Any, Any]]


def phase_result(outputs: Sequence[np.ndarray[Any, Any]], checkpoints: Sequence[str]) -> PhaseResult:
    """The logits (first output) and the kept checkpoints (the last outputs, by name)."""
    kept = dict(zip(checkpoints, outputs[len(outputs) - len(checkpoints):], strict=True))
    return PhaseResult(outputs[0], kept)


@dataclass(frozen=True)
class DecodeStep:
    """The decode phase's prepared call and the token and position arrays it reads, which
    ModelSession.decode refills in place each step."""

    call: PreparedCall
    tokens: np.ndarray[Any, Any]
    positions: np.ndarray[Any, Any]
    checkpoints: tuple[str, ...]

    def set_position(self, p: int) -> None:
        """The token's position as ModelSession.positions gives it: one stream, or for
        multi-section RoPE p in the first three streams and 0 (never written) in the fourth."""
        if self.positions.ndim == 1:
            self.positions[0] = p
        else:
            self.positions[:3] = p


def build_graph(model: Path, circuit: str, prefill_tokens: int, kv_capacity: int | None,
                overrides: Sequence[str] = (), expand_layers: bool = False,
                prefill_logits: str = "all") -> ModuleOp:
    """v8-build's hydration: the GraphIR module (located errors as SessionError)."""
    from v8dialect.builder.build import BuildError, build_from_file

    try:
        return build_from_file(model, circuit, prefill_tokens=prefill_tokens,
                               kv_capacity=kv_capacity, overrides=overrides,
                               expand_layers=expand_layers, prefill_logits=prefill_logits)
    except BuildError as e:
        raise SessionError(str(e)) from None


WeightRow = tuple[int, str, tuple[tuple[str, float], ...], str | None]


def weight_args(fn: func.FuncOp) -> list[WeightRow]:
    """(argument index, GGUF tensor, load transforms, prepared layout or None) of every weight
    argument; a tensor read under two transforms, or in two layouts, is two arguments."""
    attrs = fn.arg_attrs.data if fn.arg_attrs is not None else [None] * len(fn.args)
    out: list[WeightRow] = []
    for index, attr in enumerate(attrs):
        entries: Mapping[str, Attribute] = attr.data if attr is not None else {}
        tensor = entries.get("v8.tensor")
        if not isinstance(tensor, StringAttr):
            continue
        transforms = tuple(sorted((k.removeprefix("v8."), float(v.value.data))
                                  for k, v in entries.items()
                                  if isinstance(v, FloatAttr) and k.startswith("v8.weight_")))
        layout = entries.get(LAYOUT_ATTR)
        out.append((index, tensor.data, transforms, layout.data if isinstance(layout, StringAttr) else None))
    return out


ARENA_ALIGN = 64


def read_tensors(model: Path, names: Collection[str] | None = None) -> dict[str, np.ndarray[Any, Any]]:
    """name -> the tensor as stored (fp32/fp16 values, quantized blocks as raw bytes), read
    into one weight arena (see `weight_arena`); every tensor, or those of `names`."""
    from gguf import GGUFReader

    try:
        listed = GGUFReader(str(model)).tensors
    except (OSError, ValueError) as e:   # gguf's reader checks each tensor against the file
        raise SessionError(f"{model}: not a readable GGUF file ({e})") from None
    infos = [t for t in listed if names is None or t.name in names]
    sizes = [int(t.n_bytes) for t in infos]
    offsets = np.cumsum([0, *((n + ARENA_ALIGN - 1) // ARENA_ALIGN * ARENA_ALIGN for n in sizes)])
    arena = weight_arena(int(offsets[-1]))
    with model.open("rb") as f:
        for t, size, at in zip(infos, sizes, offsets, strict=False):
            f.seek(int(t.data_offset))
            if f.readinto(arena[at:at + size].data) != size:
                raise SessionError(f"{model}: tensor '{t.name}' is cut short")
    return {t.name: arena[at:at + size].view(t.data.dtype).reshape(t.data.shape)
            for t, size, at in zip(infos, sizes, offsets, strict=False)}


def weight_arena(nbytes: int) -> np.ndarray[Any, Any]:
    """Anonymous memory for every weight, backed by transparent huge pages where the kernel
    offers them.  Decode streams each weight once per token; with the file's own 4 KiB
    page-cache pages mapped instead, TLB misses and prefetches stopping at page boundaries
    cost a fifth of the GEMV bandwidth (AMD EPYC, 32768x1024 fp32 head: 12.6 vs 15.1 GB/s).
    The file is read, not mapped, so its pages never count towards the process's RSS."""
    import mmap

    region = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        region.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(region, np.uint8)


def transformed(values: np.ndarray[Any, Any], transforms: Mapping[str, float] | Sequence[tuple[str, float]]
                ) -> np.ndarray[Any, Any]:
    """The argument's load transforms in fp32: (w + offset), then w * scale; a tensor without
    transforms stays as stored (quantized blocks included)."""
    given = dict(transforms)
    if not given:
        return np.ascontiguousarray(values)
    out = np.asarray(values, F32)
    if "weight_offset" in given:
        out = (out + F32(given["weight_offset"])).astype(F32)
    if "weight_scale" in given:
        out = (out * F32(given["weight_scale"])).astype(F32)
    return np.ascontiguousarray(out)


def phase_weights(program: Program, weight_rows: Mapping[str, Sequence[WeightRow]],
                  tensors: Mapping[str, np.ndarray[Any, Any]], workers: int = 1
                  ) -> dict[str, dict[str, np.ndarray[Any, Any]]]:
    """Every phase's weight inputs, keyed as the program's inputs: the file's tensors (load
    transforms applied), and for an argument in a prepared layout its copy in that layout, made
    once per (tensor, layout) — phases share it — into one huge-page arena."""
    wanted: dict[tuple[str, str], tuple[int, ...]] = {}
    for phase, rows in weight_rows.items():
        inputs = program.phases[phase].inputs
        for i, tensor, transforms, layout in rows:
            if layout is not None:
                if transforms:
                    raise SessionError(f"'{tensor}' is read in layout '{layout}' under load transforms "
                                       f"{dict(transforms)}; a prepared layout takes the file's rows")
                wanted[(tensor, layout)] = inputs[i].shape
    prepared = prepare_weights(program, wanted, tensors, workers)
    out: dict[str, dict[str, np.ndarray[Any, Any]]] = {}
    for phase, rows in weight_rows.items():
        inputs = program.phases[phase].inputs
        out[phase] = {inputs[i].name: prepared[(tensor, layout)] if layout is not None
                      else transformed(tensors[tensor], transforms)
                      for i, tensor, transforms, layout in rows}
    return out


def prepare_weights(program: Program, wanted: Mapping[tuple[str, str], tuple[int, ...]],
                    tensors: Mapping[str, np.ndarray[Any, Any]], workers: int = 1
                    ) -> dict[tuple[str, str], np.ndarray[Any, Any]]:
    """(tensor, layout) -> the tensor's rows in that layout, by the program's preparations."""
    from v8dialect.data import vocab
    from v8dialect.runtime.weight_prepare import prepare_into

    if not wanted:
        return {}
    keys = sorted(wanted)
    sizes = [vocab.prepared_bytes(layout, *wanted[(t, layout)][:2]) for t, layout in keys]
    offsets = np.cumsum([0, *((n + ARENA_ALIGN - 1) // ARENA_ALIGN * ARENA_ALIGN for n in sizes)])
    arena = weight_arena(int(offsets[-1]))
    out: dict[tuple[str, str], np.ndarray[Any, Any]] = {}
    for (tensor, layout), size, at in zip(keys, sizes, offsets, strict=False):
        n, k = wanted[(tensor, layout)][:2]
        dst = arena[at:at + size]
        prepare_into(program.preparations[layout], dst, tensors[tensor], n, k, workers)
        out[(tensor, layout)] = dst
    return out


@dataclass(frozen=True)
class ModelSource:
    """What a program is built from; one program per prefill length, built on first use."""

    model: Path
    circuit: str
    kv_capacity: int | None = None
    overrides: tuple[str, ...] = ()
    checkpoints: bool = False
    name: str = "v8_model"
    # "last": each prefill call returns its last token's logits only; "auto": so where the
    # circuit says how llama.cpp selects that row (v8-build --prefill-logits)
    prefill_logits: str = "all"
    # every kernel call keeps its runs and time (Program.profile); same bits
    profile: bool = False

    @property
    def build_name(self) -> str:
        return (self.name + ("_checkpoints" if self.checkpoints else "")
                + ("_profile" if self.profile else ""))


@dataclass(frozen=True)
class BuiltProgram:
    program: Program
    checkpoint_names: Mapping[str, list[str]]
    resolutions: Mapping[str, tuple[str, str]]
    weight_rows: Mapping[str, list[WeightRow]]
    last_token_prefill: bool  # the prefill returns its last token's logits only (one row)


def build_program(source: ModelSource, prefill_tokens: int) -> BuiltProgram:
    from v8passes.keep_checkpoints import KeepCheckpoints, checkpoint_names
    from xdsl.passes import PassPipeline

    from v8dialect.runtime.program import context

    # a checkpoint build names every layer's nodes, so its layers are expanded into the phases
    module = build_graph(source.model, source.circuit, prefill_tokens, source.kv_capacity,
                         source.overrides, expand_layers=source.checkpoints,
                         prefill_logits=source.prefill_logits)
    functions = entry_points(module)
    rows = {fn.sym_name.data: weight_args(fn) for fn in functions}
    last_token = any(isinstance(op, LastTokenOp) for op in module.walk())  # before lowering
    if source.checkpoints:
        PassPipeline((KeepCheckpoints(),)).apply(context(), module)
    names = {fn.sym_name.data: checkpoint_names(fn) for fn in functions}
    program = build(module, name=source.build_name, profile=source.profile)
    ledger = read_ledger(module) or {}
    resolutions = {key: (r.word("kernel"), r.word("contract")) for key, r in ledger.items()}
    return BuiltProgram(program, names, resolutions, rows, last_token)


@dataclass
class ModelSession:
    """Prefill any number of tokens (in chunks of at most `ubatch`, each its own call, as
    llama.cpp's micro-batches) and decode one token at a time, on one KV cache."""

    source: ModelSource
    programs: dict[int, BuiltProgram]
    weights: Mapping[str, Mapping[str, np.ndarray[Any, Any]]]
    state: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict[str, np.ndarray[Any, Any]])
    n_past: int = 0
    written: int = 0  # cache positions a run may have written since the last reset
    # (built program, phase) -> the phase with the state and weight arrays bound; dropped when
    # reset replaces a state array
    bound_phases: dict[tuple[int, str], BoundPhase] = field(default_factory=dict[tuple[int, str], BoundPhase])
    # workers -> the decode phase's prepared call; dropped with bound_phases
    decode_steps: dict[int, DecodeStep] = field(default_factory=dict[int, DecodeStep])
    # the ggml build class whose ISA every program's kernels are held to (restrict_to)
    restricted_to: str | None = None

    @classmethod
    def open(cls, model: Path, circuit: str, *, prefill_tokens: int, kv_capacity: int | None = None,
             checkpoints: bool = False, overrides: Sequence[str] = (),
             name: str = "v8_model", prefill_logits: str = "all",
             profile: bool = False) -> ModelSession:
        """prefill_logits="last": prefill returns the prompt's last logits row only (the ops
        after the circuit's output_rows node run on that row), as generation after a prompt
        needs; "auto": so where the circuit declares output_rows."""
        source = ModelSource(model, circuit, kv_capacity, tuple(overrides), checkpoints, name,
                             prefill_logits, profile)
        first = build_program(source, prefill_tokens)
        # the program keys its inputs by argument position (two reads of one tensor under
        # different transforms or layouts are two inputs); every prefill length has the same
        # arguments
        weights = phase_weights(first.program, first.weight_rows, read_tensors(model),
                                workers=min(4, os.cpu_count() or 1))
        session = cls(source, {prefill_tokens: first}, weights)
        session.reset()
        return session

    @property
    def program(self) -> Program:
        return next(iter(self.programs.values())).program

    def built(self, prefill_tokens: int) -> BuiltProgram:
        """A program whose prefill takes `prefill_tokens` tokens: the smallest one built for at
        least that many (the count is a run-time argument), else a new one for exactly that."""
        fitting = [n for n in self.programs if n >= prefill_tokens]
        if fitting:
            return self.programs[min(fitting)]
        built = self.programs[prefill_tokens] = build_program(self.source, prefill_tokens)
        if self.restricted_to is not None:
            restrict_to_build(built.program.extension.lib, self.restricted_to)
        return built

    def restrict_to(self, build: str) -> None:
        """Hold the kernels of every program, built now or later (a longer prompt builds its
        own, with its own runtime), to the ISA a ggml build of class `build` runs on."""
        self.restricted_to = build
        for built in self.programs.values():
            restrict_to_build(built.program.extension.lib, build)

    def profile(self) -> list[ProfileRow]:
        """Each built program's call sites (one program per prefill length) with their runs and
        time since the session opened or reset_profile; an error unless opened with profile."""
        return [row for built in self.programs.values() for row in built.program.profile()]

    def reset_profile(self) -> None:
        for built in self.programs.values():
            built.program.reset_profile()

    def resolution(self, phase: str, node: str) -> tuple[str, str]:
        """(provider kernel id, contract id) the node of that phase resolved to."""
        for built in self.programs.values():
            if f"{phase}::{node}" in built.resolutions:
                return built.resolutions[f"{phase}::{node}"]
        return ("?", "?")

    def reset(self) -> None:
        """Empty caches and states: the next prefill starts a new sequence.  Buffers that
        exist are cleared in place (only the cache positions written since the last reset):
        fresh ones would fault their pages in again during the next timed prefill."""
        sig = self.program.phases["decode" if "decode" in self.program.phases else "prefill"]
        try:
            for buf in sig.inputs:
                if buf.name.endswith("_cache"):
                    self.clear(buf.name, buf.shape, np.uint16, positions=True)
                elif buf.name.endswith(("conv_state", "ssm_state")):
                    self.clear(buf.name, buf.shape, F32, positions=False)
        except MemoryError as e:  # a KV capacity this machine cannot hold is the user's input
            self.state = {}
            self.bound_phases.clear()
            self.decode_steps.clear()
            raise SessionError(f"the KV caches and recurrent states do not fit in memory ({e}); "
                               "build with a smaller --kv-capacity") from None
        self.n_past = self.written = 0

    def clear(self, name: str, shape: tuple[int, ...], dtype: type[np.generic], *,
              positions: bool) -> None:
        """Zero one state buffer: a cache (positions on axis 1) up to the written mark."""
        held = self.state.get(name)
        if held is None or held.shape != shape or held.dtype != dtype:
            self.state[name] = np.zeros(shape, dtype)
            self.bound_phases.clear()
            self.decode_steps.clear()
        elif positions:
            held[:, :self.written] = 0
        else:
            held.fill(0)

    def positions(self, program: Program, phase: str, t: int) -> np.ndarray[Any, Any]:
        """Token positions as a token batch gives them: one stream, or for multi-section
        RoPE the same position in the first three streams and 0 in the fourth."""
        shape = program.phases[phase].by_name["positions"].shape
        p = np.arange(self.n_past, self.n_past + t, dtype=np.int32)
        if len(shape) == 2:
            return np.stack([p, p, p, np.zeros_like(p)]).astype(np.int32)
        return p

    def run(self, phase: str, tokens: Sequence[int] | np.ndarray[Any, Any], workers: int,
            positions: np.ndarray[Any, Any] | None = None) -> PhaseResult:
        """One call: `prefill` with any number of tokens (a program built for at least that
        many; one token runs the decode phase, which is llama.cpp's graph for a one-token
        batch), `decode` with one."""
        toks = np.asarray(tokens, np.int32).reshape(-1)
        if len(toks) == 0:
            raise SessionError(f"{phase} needs at least one token")
        if phase == "decode" and len(toks) != 1:
            raise SessionError(f"decode takes 1 token, got {len(toks)}")
        capacity = self.cache_positions
        if self.n_past + len(toks) > capacity:
            raise SessionError(f"{self.n_past} cached + {len(toks)} new positions exceed the KV "
                               f"capacity of {capacity}")
        if phase == "prefill" and len(toks) == 1 and "decode" in self.program.phases:
            phase = "decode"
        built = self.built(len(toks)) if phase == "prefill" else next(iter(self.programs.values()))
        pos = self.positions(built.program, phase, len(toks)) if positions is None else positions
        self.written = max(self.written, self.n_past + len(toks))
        outputs = self.bound(built, phase).run(n_past=self.n_past, workers=workers, tokens=toks,
                                               positions=pos)
        self.n_past += len(toks)
        return phase_result(outputs, built.checkpoint_names.get(phase, []))

    def bound(self, built: BuiltProgram, phase: str) -> BoundPhase:
        """The phase with this session's weights, caches and states bound once (a decode step
        would otherwise recheck its few hundred arguments every call)."""
        key = (id(built), phase)
        hit = self.bound_phases.get(key)
        if hit is None:
            hit = self.bound_phases[key] = built.program.bind(phase, **self.state, **self.weights[phase])
        return hit

    @property
    def last_token_prefill(self) -> bool:
        """Whether prefill returns the last token's logits only (the programs are all built
        from one source, so the first one answers for all)."""
        return next(iter(self.programs.values())).last_token_prefill

    @cached_property
    def cache_positions(self) -> int:
        """The caches' capacity, read off the signature once (decode asks every step)."""
        caches = [b.shape[1] for b in self.program.phases["prefill"].inputs if b.name.endswith("_cache")]
        return min(caches) if caches else 1 << 62

    def prefill(self, tokens: Sequence[int] | np.ndarray[Any, Any], workers: int = 1,
                ubatch: int = 512) -> np.ndarray[Any, Any]:
        """The prompt in micro-batches of at most `ubatch` tokens; every position's logits, or
        with a last-token prefill (prefill_logits) the last position's ([1, vocab])."""
        toks = np.asarray(tokens, np.int32).reshape(-1)
        parts = [self.run("prefill", toks[i:i + ubatch], workers).logits
                 for i in range(0, len(toks), ubatch)]
        if self.last_token_prefill:
            return parts[-1]
        # one micro-batch is returned as the run gave it: a copy of 512 positions' logits
        # (64 MiB at a 32768 vocabulary) faulted in fresh pages for 3-4% of the prefill
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def decode(self, token: int, workers: int = 1) -> PhaseResult:
        """One token through the decode phase; through its prepared call (DecodeStep), the
        same arithmetic as run("decode", [token]) with the per-call work done once."""
        step = self.decode_steps.get(workers)
        if step is None:
            if "decode" not in self.program.phases:
                return self.run("decode", [token], workers)
            step = self.decode_steps[workers] = self.decode_step(workers)
        if self.n_past + 1 > self.cache_positions:
            raise SessionError(f"{self.n_past} cached + 1 new positions exceed the KV capacity of "
                               f"{self.cache_positions}")
        step.tokens[0] = token
        step.set_position(self.n_past)
        self.written = max(self.written, self.n_past + 1)
        outputs = step.call(self.n_past)
        self.n_past += 1
        return phase_result(outputs, step.checkpoints)

    def decode_step(self, workers: int) -> DecodeStep:
        built = next(iter(self.programs.values()))
        sig = built.program.phases["decode"]
        tokens = np.zeros(sig.by_name["tokens"].shape, np.int32)
        positions = np.zeros(sig.by_name["positions"].shape, np.int32)
        call = self.bound(built, "decode").prepared(workers, tokens=tokens, positions=positions)
        return DecodeStep(call, tokens, positions, tuple(built.checkpoint_names.get("decode", [])))

    def close(self) -> None:
        for built in self.programs.values():
            built.program.close()
