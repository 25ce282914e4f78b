"""Stitched end-to-end parity for the two families whose RoPE reads four position streams:
qwen3vl (the Qwen3 block with interleaved M-RoPE) and qwen35 (3 gated-DeltaNet layers and
1 gated-attention layer).  Tiny GGUF decoders built by v8-build, compiled, run through cffi
at 1 and 2 workers, against an independent numpy decoder (e2e_support.StreamDecoder).

Every contract on these graphs pins its order, so the comparison is bit for bit (tolerance
none; the max abs error is still recorded).  Beyond those listed in test_stitched_parity:
  imrope_fp32_iterative_theta_interleaved_sections (iterative fp32 theta per stream, pair ->
  stream by the interleave rule, libm cosf/sinf, each product and sum rounded),
  gated_delta_rule_fp32_token_sequential_state (taps ascending, fp64 ascending norm sums,
  fp32 ascending state dots, libm expf/logf; the state update is token-sequential in both
  phases and heads are independent, so the worker count cannot change a bit),
  head_split_exact_copy (a copy) and sigmoid_gate_fp32_expf (libm expf, each step rounded).

Positions are [4][T] with four different streams (e2e_support.stream_positions): with text
positions (t = h = w) every stream assignment would give the same angles and a wrong
`sections` property would go unseen.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import e2e_support as S
import numpy as np
import pytest
from e2e_support import (
    DECODE_STEPS,
    PREFILL_TOKENS,
    VOCAB,
    contract_ids,
    ggml_missing,
    max_abs,
    same_bits,
    tokens,
)

from v8dialect.evidence.record import Rung

FAMILIES = ["qwen3vl", "qwen35"]
WORKERS = [1, 2]


@dataclass
class StreamCase:
    fam: S.StreamFamily
    weights: dict[str, tuple[str, np.ndarray]]
    built: S.Built
    runner: S.StreamRunner
    tree: str

    def model(self) -> S.StreamDecoder:
        return S.StreamDecoder(self.fam, self.weights, S.KV_CAPACITY, self.tree)


class StreamCases:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache: dict[str, StreamCase] = {}

    def get(self, family: str) -> StreamCase:
        if family not in self.cache:
            fam = S.STREAM_FAMILIES[family]
            path = S.write_stream_gguf(fam, self.root / f"{family}.gguf",
                                       seed=sum(map(ord, family)))
            weights = S.read_gguf(path)
            built = S.build_program(path, fam.circuit, PREFILL_TOKENS, S.KV_CAPACITY, self.root)
            self.cache[family] = StreamCase(fam, weights, built, S.StreamRunner(built, weights),
                                            S.attention_tree(built.program))
        return self.cache[family]

    def close(self) -> None:
        for case in self.cache.values():
            case.built.program.close()


@pytest.fixture(scope="module")
def stream_cases(tmp_path_factory: pytest.TempPathFactory,
                 evidence_session: Any) -> Iterator[StreamCases]:
    missing = ggml_missing()
    if missing is not None:
        evidence_session(missing)
        pytest.fail(f"unresolved: {missing}")
    c = StreamCases(tmp_path_factory.mktemp("e2e_streams"))
    yield c
    c.close()


def state_bits(runner: S.StreamRunner, model: S.StreamDecoder) -> dict[str, str]:
    """Program caches/states written in place vs the model's, as equal-bit counts."""
    out = {}
    for name, arr in {**runner.caches, **runner.states}.items():
        layer = int(name.split(".")[1])
        kind = name.split(".")[2]
        mine = {"k_cache": model.k, "v_cache": model.v, "conv_state": model.conv,
                "ssm_state": model.ssm}[kind][layer]
        equal = (np.count_nonzero(arr.view(np.uint16) == mine.view(np.uint16))
                 if arr.dtype == np.uint16 else same_bits(arr, mine))
        out[name] = f"{equal}/{mine.size}"
    return out


def all_equal(counts: dict[str, str]) -> bool:
    return all(a == b for a, b in (v.split("/") for v in counts.values()))


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("family", FAMILIES)
def test_prefill_and_decode_match_numpy_decoder_bit_for_bit(
        stream_cases: StreamCases, evidence: Any, family: str, workers: int) -> None:
    case = stream_cases.get(family)
    runner, model = case.runner, case.model()
    runner.reset()
    ids = tokens(11, PREFILL_TOKENS + DECODE_STEPS)
    got = runner.run("prefill", ids[:PREFILL_TOKENS], 0, workers)
    want = model.forward(ids[:PREFILL_TOKENS], 0, "prefill", workers)
    figures: dict[str, Any] = {"prefill": f"{same_bits(got, want)}/{want.size}",
                               "prefill_max_abs_err": max_abs(got, want)}
    exact = same_bits(got, want) == want.size
    after_prefill = state_bits(runner, model)
    steps, step_errors = [], []
    for s in range(DECODE_STEPS):
        n_past = PREFILL_TOKENS + s
        got = runner.run("decode", ids[n_past:n_past + 1], n_past, workers)
        want = model.forward(ids[n_past:n_past + 1], n_past, "decode", workers)
        steps.append(f"{same_bits(got, want)}/{want.size}")
        step_errors.append(max_abs(got, want))
        exact = exact and same_bits(got, want) == want.size
    after_decode = state_bits(runner, model)
    figures |= {"decode_steps": steps, "decode_max_abs_err": max(step_errors),
                "state_after_prefill": after_prefill, "state_after_decode": after_decode}
    # the recurrent states must be live, or their equality would prove nothing
    live = {k: float(np.max(np.abs(v))) for k, v in runner.states.items()}
    states_ok = all_equal(after_prefill) and all_equal(after_decode) and all(
        v > 0.0 for v in live.values())
    errors = [figures["prefill_max_abs_err"], *step_errors]
    evidence(Rung.STITCHED, exact and states_ok, circuit=family,
             contract=contract_ids(case.built.module_text), workers=workers,
             bit_exact=figures, max_abs_err=max(errors), tolerance="none (bit-exact)",
             attention_tree=case.tree, arguments_renamed=case.built.renamed,
             layers=case.fam.layers,
             recurrent_layers=sum(not case.fam.is_attention(i) for i in range(case.fam.layers)),
             state_max_abs=live)
    assert states_ok, figures
    assert max(errors) == 0.0 and exact, figures


@pytest.mark.parametrize("family", FAMILIES)
def test_prefill_rows_equal_decode_steps_and_state_carries_across_phases(
        stream_cases: StreamCases, evidence: Any, family: str) -> None:
    """Prefill of N tokens vs N single-token decode steps from empty caches and states: row i
    of the prefill equals step i bit for bit (the last token included), the caches and the
    recurrent states end equal, and one more decode step after each path gives the same
    logits, so the state the prefill leaves behind is the one decode continues from.  Holds
    for the reasons given in test_stitched_parity (fewer than 64 queries, one split-KV chunk
    below an extent of 512) and because the gated delta rule is token-sequential in both
    phases.  Control: the same next step with the recurrent states zeroed must differ, or
    the carried state would be untested."""
    case = stream_cases.get(family)
    runner = case.runner
    ids = tokens(23, PREFILL_TOKENS + 1)
    text = case.built.module_text
    assert "selector = query_batch, threshold = 64" in text
    assert "chunks = workers, extent_multiple = 256, threshold = 512" in text
    figures: dict[str, Any] = {}
    ok = True
    for workers in WORKERS:
        runner.reset()
        prefill = runner.run("prefill", ids[:-1], 0, workers)
        after_prefill = {k: v.copy() for k, v in {**runner.caches, **runner.states}.items()}
        next_after_prefill = runner.run("decode", ids[-1:], PREFILL_TOKENS, workers)
        runner.reset()
        rows = [runner.run("decode", ids[i:i + 1], i, workers)[0]
                for i in range(PREFILL_TOKENS)]
        after_steps = {**runner.caches, **runner.states}
        carried_equal = {k: bool(np.array_equal(after_prefill[k], after_steps[k]))
                         for k in after_prefill}
        next_after_steps = runner.run("decode", ids[-1:], PREFILL_TOKENS, workers)
        decoded = np.stack(rows)
        equal_rows = sum(same_bits(prefill[i], decoded[i]) == VOCAB
                         for i in range(PREFILL_TOKENS))
        last = same_bits(prefill[-1], decoded[-1])
        following = same_bits(next_after_prefill, next_after_steps)
        row: dict[str, Any] = {"rows_equal": f"{equal_rows}/{PREFILL_TOKENS}",
                               "last_token": f"{last}/{VOCAB}",
                               "caches_and_states_equal": f"{sum(carried_equal.values())}/"
                                                          f"{len(carried_equal)}",
                               "next_decode_step": f"{following}/{VOCAB}"}
        ok = ok and equal_rows == PREFILL_TOKENS and all(carried_equal.values()) \
            and following == VOCAB
        if runner.states:
            for k, v in after_prefill.items():
                if k in runner.states:
                    np.copyto(runner.states[k], np.zeros_like(v))
                else:
                    np.copyto(runner.caches[k], v)
            zeroed = runner.run("decode", ids[-1:], PREFILL_TOKENS, workers)
            row["next_step_with_zeroed_states"] = f"{same_bits(zeroed, next_after_prefill)}/{VOCAB}"
            row["zeroed_states_max_abs_diff"] = max_abs(zeroed, next_after_prefill)
            ok = ok and same_bits(zeroed, next_after_prefill) < VOCAB
        figures[f"workers_{workers}"] = row
    evidence(Rung.STITCHED, ok, circuit=family, contract=contract_ids(text),
             check="prefill_rows_equal_decode_steps_state_carried", bit_exact=figures)
    assert ok, figures


def test_mrope_sections_and_streams_are_seen(stream_cases: StreamCases, evidence: Any) -> None:
    """Negative controls for qwen3vl's rotation: the numpy decoder with the contiguous-section
    M-RoPE (ggml's MROPE, a different contract) or with text positions (all streams = t)
    must differ from the program's prefill, while the interleaved decoder matches it.  This
    is what makes the bit-exact parity above evidence that the `sections` property and the
    [4][T] positions reach the kernel."""
    case = stream_cases.get("qwen3vl")
    fam = case.fam
    ids = tokens(11, PREFILL_TOKENS)
    case.runner.reset()
    got = case.runner.run("prefill", ids, 0, 1)

    class Contiguous(S.StreamDecoder):
        def rope(self, x: np.ndarray, pos4: np.ndarray) -> np.ndarray:
            return S.OPS.mrope(x, pos4, fam.rope_dims, fam.rope_base, fam.sections)

    class TextPositions(S.StreamDecoder):
        def rope(self, x: np.ndarray, pos4: np.ndarray) -> np.ndarray:
            text = np.stack([pos4[0]] * 3 + [np.zeros_like(pos4[0])])
            return super().rope(x, text)

    figures = {}
    for label, cls in (("interleaved", S.StreamDecoder), ("contiguous_sections", Contiguous),
                       ("text_positions", TextPositions)):
        want = cls(fam, case.weights, S.KV_CAPACITY, case.tree).forward(ids, 0, "prefill", 1)
        figures[label] = f"{same_bits(got, want)}/{want.size}"
    size = str(len(ids) * VOCAB)
    ok = (figures["interleaved"] == f"{size}/{size}"
          and figures["contiguous_sections"] != f"{size}/{size}"
          and figures["text_positions"] != f"{size}/{size}")
    evidence(Rung.STITCHED, ok, circuit="qwen3vl",
             contract="imrope_fp32_iterative_theta_interleaved_sections",
             check="mrope_negative_controls", bit_exact=figures)
    assert ok, figures
