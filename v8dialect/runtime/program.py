"""Compile a v8 module to native code and call its phases from Python.

    program = v8dialect.build(module_or_text)
    out = program.run("decode", x=x, w=w, ..., n_past=0, workers=2)

Runs whatever pipeline stages the module still needs (resolve-contracts,
lower-to-kernels, prepare-calls), prints the C, compiles it with runtime_c and
the kernels' sources through cffi (cached by content hash) and returns a
Program whose phases take and return numpy arrays.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from io import StringIO
from types import ModuleType
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func, get_all_dialects
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, StringAttr
from xdsl.parser import Parser
from xdsl.passes import ModulePass, PassPipeline

from v8dialect.data import vocab
from v8dialect.data.kernel_maps import WeightPrepare
from v8dialect.data.pipeline_data import pipeline_data
from v8dialect.ir.dialect import V8
from v8dialect.ir.graph_op import LAYOUT_ATTR, GraphOp, dtype_name
from v8dialect.ir.ledger import read_ledger
from v8dialect.ir.lowered import OUTPUTS_ATTR, CallOp, KernelOp
from v8dialect.ir.structure import entry_points
from v8dialect.ir.token_count import max_tokens, token_axes
from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, runtime_cdef
from v8dialect.runtime.cbuild import build as compile_extension

NUMPY_DTYPES: Mapping[str, Any] = {"f32": np.float32, "f16": np.uint16, "bf16": np.uint16,
                                   "i32": np.int32, "q4_k": np.uint8, "q5_k": np.uint8, "q6_k": np.uint8,
                                   "q8_0": np.uint8, "q5_0": np.uint8, "q4_0": np.uint8, "q4_1": np.uint8,
                                   "q5_1": np.uint8}
BLOCK_BYTES = {"q4_k": 144, "q5_k": 176, "q6_k": 210, "q8_0": 34, "q5_0": 22, "q4_0": 18, "q4_1": 20,
               "q5_1": 24}
BLOCK_ELEMENTS = {"q4_k": 256, "q5_k": 256, "q6_k": 256, "q8_0": 32, "q5_0": 32, "q4_0": 32, "q4_1": 32,
                  "q5_1": 32}
ALIGN = 64


def context() -> Context:
    ctx = Context()
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    ctx.load_dialect(V8)
    return ctx


def parse(text: str, name: str = "<string>") -> ModuleOp:
    return Parser(context(), text, name).parse_module()


def stages_needed(module: ModuleOp, **resolve_options: str | None) -> list[ModulePass]:
    from v8passes.lower_to_kernels import LowerToKernels
    from v8passes.prepare_calls import PrepareCalls
    from v8passes.resolve_contracts import ResolveContracts

    ops = list(module.walk())
    stages: list[ModulePass] = []
    if read_ledger(module) is None:
        options = {k: v for k, v in resolve_options.items() if v is not None}
        stages.append(ResolveContracts(**options))  # type: ignore[arg-type]
    if stages or any(isinstance(op, GraphOp) for op in ops):
        stages.append(LowerToKernels())
    if stages or any(isinstance(op, KernelOp) for op in ops):
        stages.append(PrepareCalls())
    return stages


def emit_c(module: ModuleOp, profile: bool = False) -> str:
    from v8passes.emit_c import print_module

    out = StringIO()
    print_module(module, out, profile=profile)
    return out.getvalue()


def entry_declarations(module: ModuleOp) -> str:
    from v8passes.emit_c import print_declarations

    out = StringIO()
    print_declarations(module, out)
    return out.getvalue()


@dataclass(frozen=True)
class Buffer:
    name: str
    dtype: str
    shape: tuple[int, ...]
    token_axis: int | None = None  # one entry per token, when the phase's count is a runtime value
    layout: str | None = None  # a prepared weight layout (made at load time), not the file's rows

    def shape_for(self, n_tokens: int | None) -> tuple[int, ...]:
        """The shape of a call with `n_tokens` tokens (the built shape without a count)."""
        if n_tokens is None or self.token_axis is None:
            return self.shape
        shape = list(self.shape)
        shape[self.token_axis] = n_tokens
        return tuple(shape)

    def nbytes_expected(self, n_tokens: int | None = None) -> int:
        shape = self.shape_for(n_tokens)
        if self.layout is not None:
            return vocab.prepared_bytes(self.layout, shape[0], shape[1])
        count = int(np.prod(shape)) if shape else 1
        if self.dtype in BLOCK_BYTES:
            return count // BLOCK_ELEMENTS[self.dtype] * BLOCK_BYTES[self.dtype]
        return count * np.dtype(NUMPY_DTYPES[self.dtype]).itemsize


@dataclass(frozen=True)
class PhaseSignature:
    name: str
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    max_tokens: int | None = None  # the token count is a run-time argument up to this

    def cdef(self) -> str:
        """The binding: the phase's packed entry point (its buffers as one array of pointers,
        see passes/c_function.py), which keeps the wrapper small whatever the buffer count."""
        count = ", int64_t n_tokens" if self.max_tokens else ""
        return (f"size_t {self.name}_arena_bytes(void);\n"
                f"size_t {self.name}_scratch_bytes(v8_threadpool *pool);\n"
                f"v8_status {self.name}_packed(v8_threadpool *pool, int64_t n_past{count}, void *arena, "
                f"void *scratch, size_t scratch_bytes, void *const *buffers);\n")

    @cached_property
    def input_names(self) -> frozenset[str]:
        return frozenset(b.name for b in self.inputs)

    @cached_property
    def by_name(self) -> Mapping[str, Buffer]:
        return {b.name: b for b in (*self.inputs, *self.outputs)}

    @cached_property
    def token_inputs(self) -> tuple[Buffer, ...]:
        """The inputs with one entry per token."""
        return tuple(b for b in self.inputs if b.token_axis is not None)

    def token_count(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> int | None:
        """The call's token count, read off its token-indexed inputs (all must agree)."""
        if self.max_tokens is None:
            return None
        counts = {inputs[b.name].shape[b.token_axis] for b in self.token_inputs
                  if b.token_axis is not None and b.name in inputs
                  and inputs[b.name].ndim == len(b.shape)}
        if len(counts) != 1:
            raise ValueError(f"{self.name}: the token-indexed inputs disagree on the token count "
                             f"({sorted(counts) or 'none given'})")
        (count,) = counts
        if not 1 <= count <= self.max_tokens:
            raise ValueError(f"{self.name}: {count} tokens; this program takes 1 to "
                             f"{self.max_tokens} per call")
        return int(count)


def signature(fn: func.FuncOp) -> PhaseSignature:
    outputs_attr = fn.attributes.get(OUTPUTS_ATTR)
    assert isinstance(outputs_attr, IntegerAttr)
    n_out = outputs_attr.value.data
    buffers: list[Buffer] = []
    used: set[str] = set()
    limit = max_tokens(fn)
    axes = token_axes(fn)
    args = fn.body.block.args
    first_output = len(args) - n_out
    attrs = list(fn.arg_attrs.data) if fn.arg_attrs is not None else []
    for i, arg in enumerate(args):
        assert isinstance(arg.type, MemRefType)
        dtype = dtype_name(arg.type.get_element_type())  # pyright: ignore
        shape = tuple(int(d) for d in arg.type.get_shape())  # pyright: ignore
        # two arguments may share a name hint (a tied tensor read twice); each input keeps
        # its own key, suffixed like the C printer's parameter names
        name = arg.name_hint or f"arg{i}"
        while name in used:
            name += "_"
        used.add(name)
        # declared per input; a result of such a phase is an activation [tokens, ...], unless
        # it is one row whatever the count (the last token's, with --prefill-logits last)
        if limit is None:
            axis = None
        elif i < first_output:
            axis = axes[i] if i < len(axes) else None
        else:
            axis = 0 if shape[0] == limit else None
        layout = attrs[i].data.get(LAYOUT_ATTR) if i < len(attrs) else None
        buffers.append(Buffer(name, dtype, shape, axis,
                              layout.data if isinstance(layout, StringAttr) else None))
    return PhaseSignature(fn.sym_name.data, tuple(buffers[:first_output]), tuple(buffers[first_output:]),
                          limit)


Bytes = np.ndarray[Any, np.dtype[np.uint8]]


def _aligned(nbytes: int) -> Bytes:
    raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGN
    return raw[offset:offset + nbytes]


class _Workspace(threading.local):
    """Arena and scratch buffers kept between calls, one set per Python thread: allocating
    (and page-faulting) them on every call costs a decode step measurable time, and two threads
    running the same Program at once must not share intermediates.  Every op writes its arena
    and scratch before reading them, so their contents never carry over into a result."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[str, str], Bytes] = {}
        self.frames: dict[tuple[str, int | None], _Frame] = {}

    def get(self, key: tuple[str, str], nbytes: int) -> Bytes:
        buf = self.buffers.get(key)
        if buf is None or buf.nbytes < nbytes:
            buf = _aligned(max(nbytes, 1))
            self.buffers[key] = buf
        return buf

    def frame(self, ffi: Any, phase: str, n_tokens: int | None, slots: int) -> _Frame:
        key = (phase, n_tokens)
        frame = self.frames.get(key)
        if frame is None:
            frame = self.frames[key] = _Frame.empty(ffi, slots)
        return frame


@dataclass
class _Frame:
    """One phase's packed argument array (inputs, then outputs), kept between calls like the
    arena: a model's few hundred weight and cache arguments are the same arrays every call, so
    only the slots whose array changed are bound anew.  Binding every argument on every call
    cost decode ~3 ms a token, and looking each one up in a cache still ~0.4 ms (AMD EPYC, a
    28-layer model with 368 arguments)."""

    slots: Any           # void *[]: what the C entry point reads
    given: list[Any]     # the caller's array behind each slot; None: bind anew next call
    kept: list[Any]      # the C buffer each slot points into, kept alive with the frame

    @classmethod
    def empty(cls, ffi: Any, slots: int) -> _Frame:
        return cls(ffi.new("void *[]", slots), [None] * slots, [None] * slots)


@dataclass(frozen=True)
class ProfileRow:
    """One kernel call or inline op of a profiled program (v8_profile_site): the phase that runs
    it, its function (that phase or a layer function), node, kernel map and C function; runs
    and seconds in all since the program was built or the profile reset."""

    phase: str
    function: str
    node: str
    kernel: str
    callee: str
    calls: int
    seconds: float


def profile_totals(rows: Iterable[ProfileRow], phase: str) -> dict[tuple[str, str], tuple[int, float]]:
    """(node, kernel) -> calls and seconds over every site of `phase` that ran (a layer
    function's sites once per layer), largest time first."""
    totals: dict[tuple[str, str], tuple[int, float]] = {}
    for r in rows:
        if r.phase == phase and r.calls:
            calls, seconds = totals.get((r.node, r.kernel), (0, 0.0))
            totals[(r.node, r.kernel)] = (calls + r.calls, seconds + r.seconds)
    return dict(sorted(totals.items(), key=lambda item: -item[1][1]))


@dataclass
class Program:
    """A compiled module: call ``run(phase, ...)`` with numpy arrays."""

    extension: ModuleType
    phases: Mapping[str, PhaseSignature]
    c_source: str
    # prepared layout -> how its inputs are made from the file's rows (see prepare_input)
    preparations: Mapping[str, WeightPrepare] = field(default_factory=dict[str, WeightPrepare])
    _pools: dict[int, Any] = field(default_factory=dict[int, Any])
    _workspace: _Workspace = field(default_factory=_Workspace)
    _pool_lock: threading.Lock = field(default_factory=threading.Lock)

    def pool(self, workers: int) -> Any:
        with self._pool_lock:  # two threads asking at once get the same pool, never two
            if workers not in self._pools:
                pool = self.extension.lib.v8_threadpool_create(workers)
                if pool == self.extension.ffi.NULL:
                    raise ValueError(f"cannot create a threadpool of {workers} workers")
                self._pools[workers] = pool
            return self._pools[workers]

    def close(self) -> None:
        for pool in self._pools.values():
            self.extension.lib.v8_threadpool_destroy(pool)
        self._pools.clear()

    def __del__(self) -> None:
        self.close()

    def profile_sites(self) -> Any:
        """The C site table (v8_profile_site[]) and its length; an error for a build without
        profiling (build(..., profile=True))."""
        ffi = self.extension.ffi
        table = ffi.new("v8_profile_site **")
        count = int(self.extension.lib.v8_program_profile(table))
        if count == 0:
            raise ValueError("this program was built without profiling (build(..., profile=True))")
        return table[0], count

    def profile(self) -> list[ProfileRow]:
        """Every call site's runs and time so far, in program order."""
        ffi = self.extension.ffi
        table, count = self.profile_sites()

        def text(c_string: Any) -> str:
            return ffi.string(c_string).decode()

        return [ProfileRow(text(s.phase), text(s.function), text(s.node), text(s.kernel),
                           text(s.callee), int(s.calls), int(s.ns) * 1e-9)
                for s in (table[i] for i in range(count))]

    def reset_profile(self) -> None:
        table, count = self.profile_sites()
        for i in range(count):
            table[i].calls = 0
            table[i].ns = 0

    def signature(self, phase: str) -> PhaseSignature:
        sig = self.phases.get(phase)
        if sig is None:
            raise ValueError(f"no phase '{phase}' (phases: {', '.join(self.phases)})")
        return sig

    def run(self, phase: str, *, n_past: int = 0, workers: int = 1,
            **inputs: np.ndarray[Any, Any]) -> list[np.ndarray[Any, Any]]:
        sig = self.signature(phase)
        ffi = self.extension.ffi
        pool = self.pool(workers)
        if inputs.keys() != sig.input_names:
            check_names(sig, inputs.keys())
        n_tokens = sig.token_count(inputs)
        frame = self._workspace.frame(ffi, phase, n_tokens, len(sig.inputs) + len(sig.outputs))
        for i, buf in enumerate(sig.inputs):
            given = inputs[buf.name]
            if given is not frame.given[i]:
                set_slot(frame, i, c_input(ffi, buf, inputs, n_tokens))
                # a copy (of a non-contiguous array) is rebound every call: its source may change
                frame.given[i] = given if given.flags.c_contiguous else None
        return self.call_frame(sig, pool, n_past, n_tokens, frame)

    def bind(self, phase: str, **fixed: np.ndarray[Any, Any]) -> BoundPhase:
        """The phase with the inputs that stay the same arrays call after call (weights, caches,
        states) bound once; each call of the result passes only the others.  The caller's memory
        is bound, so in-place updates are seen: fixed inputs must be contiguous and not indexed by
        token.  One thread at a time may run a bound phase."""
        sig = self.signature(phase)
        unknown = sorted(set(fixed) - sig.input_names)
        if unknown:
            raise ValueError(f"{sig.name}: unknown inputs {unknown}")
        ffi = self.extension.ffi
        frame = _Frame.empty(ffi, len(sig.inputs) + len(sig.outputs))
        for i, buf in enumerate(sig.inputs):
            if buf.name not in fixed:
                continue
            if buf.token_axis is not None:
                raise ValueError(f"input '{buf.name}' has one entry per token: pass it with each call")
            require_contiguous(buf.name, fixed[buf.name])
            set_slot(frame, i, c_input(ffi, buf, fixed, None))
            frame.given[i] = fixed[buf.name]
        return BoundPhase(self, sig, frame)

    def call_frame(self, sig: PhaseSignature, pool: Any, n_past: int, n_tokens: int | None,
                   frame: _Frame) -> list[np.ndarray[Any, Any]]:
        """Fresh outputs into the frame's last slots, then the phase's C entry point."""
        outputs = [np.zeros(b.shape_for(n_tokens), dtype=NUMPY_DTYPES[b.dtype]) for b in sig.outputs]
        counts = (n_past,) if n_tokens is None else (n_past, n_tokens)
        return self.call_outputs(sig, pool, counts, frame, outputs,
                                 getattr(self.extension.lib, f"{sig.name}_packed"))

    def call_outputs(self, sig: PhaseSignature, pool: Any, counts: tuple[int, ...], frame: _Frame,
                     outputs: list[np.ndarray[Any, Any]], packed: Any) -> list[np.ndarray[Any, Any]]:
        """The outputs into the frame's last slots, then the phase's packed C entry point."""
        ffi, lib = self.extension.ffi, self.extension.lib
        for j, out in enumerate(outputs):
            set_slot(frame, len(sig.inputs) + j, ffi.from_buffer(out))
        arena = self._workspace.get((sig.name, "arena"), getattr(lib, f"{sig.name}_arena_bytes")())
        scratch_bytes = getattr(lib, f"{sig.name}_scratch_bytes")(pool)
        scratch = self._workspace.get((sig.name, "scratch"), scratch_bytes)
        try:
            status = packed(pool, *counts, ffi.from_buffer(arena), ffi.from_buffer(scratch),
                            scratch_bytes, frame.slots)
        finally:  # the outputs belong to the caller now: the frame must not keep them alive
            for j in range(len(outputs)):
                set_slot(frame, len(sig.inputs) + j, ffi.NULL)
        if status != 0:
            name = ffi.string(lib.v8_status_name(status)).decode()
            raise RuntimeError(f"{sig.name} failed: {name} (status {status})")
        return outputs


def check_names(sig: PhaseSignature, given: Collection[str]) -> None:
    """A located error for an unknown or a missing input name."""
    unknown = sorted(set(given) - sig.input_names)
    if unknown:
        raise ValueError(f"{sig.name}: unknown inputs {unknown}")
    missing = [b for b in sig.inputs if b.name not in given]
    if missing:
        raise ValueError(f"missing input '{missing[0].name}' ({missing[0].dtype}"
                         f"{list(missing[0].shape)})")


def require_contiguous(name: str, array: np.ndarray[Any, Any]) -> None:
    """An input bound once and read in place must be the caller's own memory."""
    if not array.flags.c_contiguous:
        raise ValueError(f"input '{name}' is not contiguous: a bound copy would not see the "
                         "array's later updates")


def set_slot(frame: _Frame, slot: int, arg: Any) -> None:
    frame.kept[slot] = arg   # first, so the memory outlives the slot that points into it
    frame.slots[slot] = arg


def c_input(ffi: Any, buf: Buffer, inputs: Mapping[str, np.ndarray[Any, Any]],
            n_tokens: int | None) -> Any:
    """The C buffer of one input, its size checked (a contiguous copy if it is not contiguous)."""
    array = np.ascontiguousarray(inputs[buf.name])
    expected = buf.nbytes_expected(n_tokens)
    if array.nbytes != expected:
        raise ValueError(f"input '{buf.name}' has {array.nbytes} bytes, expected "
                         f"{expected} ({buf.dtype}{list(buf.shape_for(n_tokens))})")
    return ffi.from_buffer(array)


@dataclass
class BoundPhase:
    """A phase whose fixed inputs are bound (Program.bind): a call binds only the inputs it
    passes and the outputs.  A decode step's few hundred weight and cache arguments cost it
    ~0.8 ms a token in Python when rechecked every call (the interpreter's data is cold after a
    step has streamed the weights; AMD EPYC, 368 arguments)."""

    program: Program
    sig: PhaseSignature
    frame: _Frame

    @cached_property
    def per_call(self) -> tuple[int, ...]:
        """The input slots each call fills."""
        return tuple(i for i, given in enumerate(self.frame.given[:len(self.sig.inputs)])
                     if given is None)

    @cached_property
    def per_call_names(self) -> frozenset[str]:
        return frozenset(self.sig.inputs[i].name for i in self.per_call)

    def prepared(self, workers: int, **inputs: np.ndarray[Any, Any]) -> PreparedCall:
        """Calls of this phase that pass these very arrays every time, refilled in place by the
        caller between calls (a decode step's token and position): checked and bound once."""
        sig, program = self.sig, self.program
        if inputs.keys() != self.per_call_names:
            check_names(sig, {*inputs, *(sig.input_names - self.per_call_names)})
            raise ValueError(f"{sig.name}: a prepared call passes exactly {sorted(self.per_call_names)}")
        if sig.max_tokens is not None:
            raise ValueError(f"{sig.name}: takes a token count per call; a prepared call is for "
                             "phases of a fixed token count")
        for name, array in inputs.items():
            require_contiguous(name, array)
        ffi = program.extension.ffi
        slots = tuple((i, c_input(ffi, sig.inputs[i], inputs, None)) for i in self.per_call)
        return PreparedCall(self, program.pool(workers), slots)

    def run(self, *, n_past: int = 0, workers: int = 1,
            **inputs: np.ndarray[Any, Any]) -> list[np.ndarray[Any, Any]]:
        sig, program, wanted = self.sig, self.program, self.per_call_names
        if inputs.keys() != wanted:
            check_names(sig, {*inputs, *(sig.input_names - wanted)})
            raise ValueError(f"{sig.name}: {sorted(set(inputs) - wanted)} are bound; each call passes "
                             f"only {sorted(wanted)}")
        pool = program.pool(workers)
        n_tokens = sig.token_count(inputs)
        for i in self.per_call:
            set_slot(self.frame, i, c_input(program.extension.ffi, sig.inputs[i], inputs, n_tokens))
        return program.call_frame(sig, pool, n_past, n_tokens, self.frame)


@dataclass
class PreparedCall:
    """A bound phase of a fixed token count whose per-call inputs are arrays the caller refills
    in place (BoundPhase.prepared): a call is the C entry point with fresh outputs, every lookup
    and check done once.  After an idle pause the interpreter's data is cold, and the generic
    path's checks and lookups took 0.29 ms of a small model's 0.49 ms decode step (AMD EPYC,
    1 thread, 20 ms idle before each step; 0.03 ms warm)."""

    bound: BoundPhase
    pool: Any
    # (input slot, C buffer of the caller's array; the buffer keeps the array alive)
    slots: tuple[tuple[int, Any], ...]

    @cached_property
    def entry(self) -> tuple[Any, list[tuple[tuple[int, ...], Any]]]:
        """The packed C entry point and the outputs' shapes and dtypes."""
        sig, lib = self.bound.sig, self.bound.program.extension.lib
        return (getattr(lib, f"{sig.name}_packed"),
                [(b.shape_for(None), NUMPY_DTYPES[b.dtype]) for b in sig.outputs])

    def __call__(self, n_past: int) -> list[np.ndarray[Any, Any]]:
        frame = self.bound.frame
        for slot, buf in self.slots:  # a BoundPhase.run between calls may have rebound them
            set_slot(frame, slot, buf)
        packed, shapes = self.entry
        outputs = [np.zeros(shape, dtype) for shape, dtype in shapes]
        return self.bound.program.call_outputs(self.bound.sig, self.pool, (n_past,), frame, outputs,
                                               packed)


def build(module: ModuleOp | str, *, kernel_maps: str | None = None, registry: str | None = None,
          mode: str = "bringup", name: str = "v8_model", profile: bool = False) -> Program:
    """profile: every kernel call and inline op keeps its runs and time (Program.profile); a
    profiled program computes the same bits, its calls each read the clock twice."""
    from v8passes.emit_c import PROFILE_DECLARATION

    if isinstance(module, str):
        module = parse(module)
    ctx = context()
    data = pipeline_data(ctx)
    data.select(registry=registry, kernel_maps=kernel_maps)
    PassPipeline(tuple(stages_needed(module, kernel_maps=kernel_maps, registry=registry,
                                     mode=mode))).apply(ctx, module)
    c_source = emit_c(module, profile)
    phases = {fn.sym_name.data: signature(fn) for fn in entry_points(module)}
    # the kernels' C sources come from the maps that bound the calls, not from the IR
    kernel_sources = data.kernel_sources(sorted({op.resolved.word("kernel") for op in module.walk()
                                                 if isinstance(op, CallOp)}))
    spec = CBuild(
        name=name,
        cdef=runtime_cdef() + PROFILE_DECLARATION + "\n" + "".join(p.cdef() for p in phases.values()),
        source=entry_declarations(module),
        program=c_source,
        runtime_sources=RUNTIME_CORE_SOURCES,
        extra_sources=tuple(kernel_sources),
    )
    layouts = {b.layout for p in phases.values() for b in p.inputs if b.layout is not None}
    maps = data.kernel_maps()
    preparations = {layout: maps.preparation(layout) for layout in sorted(layouts)}
    missing = [layout for layout, prepare in preparations.items() if prepare is None]
    if missing:
        raise ValueError(f"no loaded kernel map declares how to prepare layout '{missing[0]}'")
    return Program(compile_extension(spec), phases, c_source,
                   {k: v for k, v in preparations.items() if v is not None})
