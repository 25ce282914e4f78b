"""One parity run: the v8 program and llama.cpp on the same GGUF file and the same tokens,
logits compared position by position; on the first divergence, the first differing op.

A run is a sequence of calls: the prompt as one prefill, then one decode call per token.
Both engines see the same token ids (a fixed sequence, not each engine's own argmax), so a
difference in one position cannot change the inputs of the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from v8dialect.parity.compare import Difference, difference
from v8dialect.parity.llamacpp import LlamaConfig, LlamaCppModel, LlamaCppSession
from v8dialect.parity.node_names import index_observed
from v8dialect.runtime.model_session import ModelSession

Logits = np.ndarray[Any, Any]


@dataclass(frozen=True)
class ParityCase:
    model: Path
    circuit: str
    prompt: tuple[int, ...]
    decode: tuple[int, ...]
    threads: int = 1
    repack: bool = True
    kv_capacity: int = 1024
    overrides: tuple[str, ...] = ()
    position_streams: bool = False  # four distinct M-RoPE streams, llama.cpp fed embeddings
    ubatch: int = 512  # the prompt runs in micro-batches of at most this many tokens
    reference_build: str | None = None  # llama.cpp's x86 build class (ggml_build), when known
    reference_loop_vectors: str | None = None  # its compiler's small-loop form, when known
    prefill_logits: str = "all"  # "last": each prefill call returns its last token's logits only

    def calls(self) -> list[tuple[str, tuple[int, ...]]]:
        """The prompt in micro-batches (each one prefill call, as llama.cpp splits a batch into
        ubatches), then one decode call per token."""
        chunks = [self.prompt[i:i + self.ubatch] for i in range(0, len(self.prompt), self.ubatch)]
        return [("prefill", c) for c in chunks] + [("decode", (t,)) for t in self.decode]

    def build_overrides(self) -> tuple[str, ...]:
        """The v8 build's manifest settings: the case's own, plus what the reference engine
        implies unless the case sets it itself — weight_layout from the repack switch
        (ggml_repacked when llama.cpp repacks, plain when it does not), ggml_build from
        the build of the llama.cpp that runs and ggml_loop_vectors from its libggml."""
        given = {o.partition("=")[0].strip() for o in self.overrides}
        implied = {"weight_layout": "ggml_repacked" if self.repack else "plain"}
        if self.reference_build is not None:
            implied["ggml_build"] = self.reference_build
        if self.reference_loop_vectors is not None:
            implied["ggml_loop_vectors"] = self.reference_loop_vectors
        return (*self.overrides,
                *(f"{key}={value}" for key, value in implied.items() if key not in given))

    def llama_config(self) -> LlamaConfig:
        return LlamaConfig(threads=self.threads, repack=self.repack, n_ctx=self.kv_capacity,
                           n_ubatch=self.ubatch)


@dataclass(frozen=True)
class PositionRow:
    call: int  # 0: the prefill, i > 0: the i-th decode step
    phase: str
    position: int
    diff: Difference
    argmax_ours: int
    argmax_reference: int


@dataclass(frozen=True)
class Located:
    """The first op whose output differs, with what it resolved to."""

    call: int
    phase: str
    node: str
    contract: str
    provider: str
    diff: Difference
    compared: int  # nodes compared up to and including this one
    caveat: str = ""  # e.g. llama.cpp computed differently while observed


@dataclass
class ParityResult:
    case: ParityCase
    rows: list[PositionRow] = field(default_factory=list[PositionRow])
    located: Located | None = None
    unmatched: list[str] = field(default_factory=list[str])  # nodes with no llama.cpp tensor
    divergent_logits: tuple[Logits, Logits] | None = None  # (ours, llama.cpp) of that call

    @property
    def exact(self) -> bool:
        return all(r.diff.exact for r in self.rows)

    def first_divergent_call(self) -> int | None:
        return next((r.call for r in self.rows if not r.diff.exact), None)


def open_v8(case: ParityCase, checkpoints: bool) -> ModelSession:
    """v8's program for the case, its kernels restricted to the reference build's ISA."""
    session = ModelSession.open(case.model, case.circuit,
                                prefill_tokens=min(len(case.prompt), case.ubatch),
                                kv_capacity=case.kv_capacity, checkpoints=checkpoints,
                                overrides=case.build_overrides(), name="v8_parity",
                                prefill_logits=case.prefill_logits)
    if case.reference_build is not None:
        session.restrict_to(case.reference_build)
    return session


def stream_positions(n_past: int, t: int) -> np.ndarray[Any, Any]:
    """Four distinct position streams [4, t] (t = p, h and w a raster-like walk, e a small
    offset): a wrong stream for any RoPE pair changes the bits."""
    p = np.arange(n_past, n_past + t, dtype=np.int64)
    return np.stack([p, 3 + p // 4 * 2, 7 + p % 4 * 3, p % 2]).astype(np.int32)


class EmbeddingTable:
    """The file's fp32 token embedding, so llama.cpp can be fed the rows v8 gathers."""

    def __init__(self, model: Path) -> None:
        from v8dialect.runtime.model_session import read_tensors

        table = read_tensors(model, {"token_embd.weight"}).get("token_embd.weight")
        if table is None or table.dtype != np.float32:
            raise ValueError(f"{model}: position streams need an fp32 token_embd.weight")
        self.table = table

    def rows(self, tokens: Sequence[int]) -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(self.table[np.asarray(tokens, np.int64)], np.float32)


@dataclass
class Step:
    """Runs one call in both engines: tokens, or with position streams embedding rows."""

    case: ParityCase
    ours: ModelSession
    reference: LlamaCppSession
    table: EmbeddingTable | None = None

    def __call__(self, phase: str, tokens: Sequence[int]) -> tuple[Any, Logits]:
        if self.table is None:
            last_only = phase == "prefill" and self.case.prefill_logits == "last"
            return (self.ours.run(phase, tokens, self.case.threads),
                    self.reference.eval(tokens, last_only=last_only))
        positions = stream_positions(self.ours.n_past, len(tokens))
        ours = self.ours.run(phase, tokens, self.case.threads, positions=positions)
        return ours, self.reference.eval_embeddings(self.table.rows(tokens), positions)


def stepper(case: ParityCase, ours: ModelSession, reference: LlamaCppSession) -> Step:
    return Step(case, ours, reference, EmbeddingTable(case.model) if case.position_streams else None)


def compare_logits(case: ParityCase, llama: LlamaCppModel) -> ParityResult:
    result = ParityResult(case)
    ours_session = open_v8(case, checkpoints=False)
    reference = llama.session(case.llama_config())
    try:
        step = stepper(case, ours_session, reference)
        position = 0
        for call, (phase, tokens) in enumerate(case.calls()):
            run, ref = step(phase, tokens)
            ours = run.logits
            if result.divergent_logits is None and not difference(ours, ref).exact:
                result.divergent_logits = (ours, ref)
            first = len(tokens) - len(ours)  # a last-token-only prefill returns its last row
            for row in range(len(ours)):
                result.rows.append(PositionRow(call, phase, position + first + row,
                                               difference(ours[row], ref[row]),
                                               int(np.argmax(ours[row])), int(np.argmax(ref[row]))))
            position += len(tokens)
    finally:
        reference.close()
        ours_session.close()
    return result


def locate(case: ParityCase, llama: LlamaCppModel, call: int,
           plain: tuple[Logits, Logits] | None = None) -> tuple[Located | None, list[str]]:
    """Replays the calls before `call` in both engines, then runs `call` with every op's
    output kept (v8's checkpoint build, llama.cpp's eval callback) and returns the first
    node, in v8's graph order, whose output differs from llama.cpp's tensor for it."""
    calls = case.calls()
    ours_session = open_v8(case, checkpoints=True)
    reference = llama.session(case.llama_config(), observe=True)
    try:
        step = stepper(case, ours_session, reference)
        for phase, tokens in calls[:call]:
            step(phase, tokens)
        phase, tokens = calls[call]
        ours, ref_logits = step(phase, tokens)
        observed = index_observed(reference.observed())
        caveat = ""
        if plain is not None and not difference(ref_logits, plain[1]).exact:
            caveat = "llama.cpp's logits changed while its tensors were observed"
        if plain is not None and not difference(ours.logits, plain[0]).exact:
            caveat += "; the checkpoint build's logits differ from the plain build's"
        unmatched: list[str] = []
        compared = 0
        for node, values in ours.checkpoints.items():
            obs = observed.get(node)
            if obs is None or obs.values.size != values.size:
                unmatched.append(node)
                continue
            compared += 1
            diff = difference(values.reshape(-1), obs.values.reshape(-1))
            if not diff.exact:
                kernel, contract = ours_session.resolution(phase, node)
                first = diff.first_index
                if first is not None:  # report the index in v8's own shape
                    shaped = tuple(int(i) for i in np.unravel_index(first[0], values.shape))
                    diff = Difference(diff.count, diff.total, diff.max_abs, diff.max_ulps, shaped,
                                      diff.first_values)
                return Located(call, phase, node, contract, kernel, diff, compared, caveat), unmatched
        return None, unmatched
    finally:
        reference.close()
        ours_session.close()


def run_parity(case: ParityCase, llama: LlamaCppModel, locate_divergence: bool = True) -> ParityResult:
    result = compare_logits(case, llama)
    call = result.first_divergent_call()
    if call is not None and locate_divergence:
        result.located, result.unmatched = locate(case, llama, call, result.divergent_logits)
    return result


def seeded_tokens(seed: int, count: int, vocab: int) -> tuple[int, ...]:
    return tuple(int(t) for t in np.random.default_rng(seed).integers(0, vocab, count))


def describe_rows(rows: Sequence[PositionRow]) -> list[str]:
    def argmax(r: PositionRow) -> str:
        flag = "" if r.argmax_ours == r.argmax_reference else " (differs)"
        return f"argmax {r.argmax_ours} vs {r.argmax_reference}{flag}"

    return [f"{r.phase:7s} pos {r.position:4d}: {r.diff.describe()}; {argmax(r)}" for r in rows]
