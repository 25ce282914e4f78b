"""Stitched end-to-end parity: tiny GGUF decoders built by v8-build, resolved, lowered,
emitted, compiled and run through cffi, against an independent numpy decoder.

Every contract on these graphs pins its order, so the comparison is bit for bit (tolerance
none; the max abs error is still recorded):
  rmsnorm/qk_norm_fp32_fp64_sum_ascending (fp64 ascending sum), linear/logits_fp32_ascending_
  fp32_accumulate (one fp32 accumulator, k ascending), q4_k/q6_k_x_q8_k_fp32_block_order (8 FMA
  lanes, 4 min lanes, fixed horizontal tree), rope_neox/normal_fp32_iterative_theta (libm cosf/
  sinf), swiglu_fp32_expf / geglu_fp32_tanh (libm), residual_add_fp32, embedding row copy,
  kv_store_f16_round_nearest_even, f16_flash_auto_qtile64 (below 64 queries: the f16 single
  range recurrence, dot lane tree named by the provider) and f16_online_fp32_merge (chunks =
  workers from an extent of 512, merged in fp32 ascending).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from conftest import Cases
from e2e_support import DECODE_STEPS, PREFILL_TOKENS, VOCAB, max_abs, same_bits

from v8dialect.evidence.record import Rung

FAMILIES = ["qwen3", "qwen2", "nanbeige", "gemma3"]
WORKERS = [1, 2]


def contract_ids(module_text: str) -> str:
    return "+".join(sorted(set(re.findall(r'contract #v8\.\w+<"([a-z0-9_]+)"', module_text))))


def tokens(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, n).astype(np.int32)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("family", FAMILIES)
def test_prefill_and_decode_match_numpy_decoder_bit_for_bit(
        cases: Cases, evidence: Any, family: str, workers: int) -> None:
    case = cases.get(family)
    runner, model = case.runner, case.model()
    runner.reset()
    ids = tokens(11, PREFILL_TOKENS + DECODE_STEPS)
    got = runner.run("prefill", ids[:PREFILL_TOKENS], 0, workers)
    want = model.forward(ids[:PREFILL_TOKENS], 0, "prefill", workers)
    figures: dict[str, Any] = {"prefill": f"{same_bits(got, want)}/{want.size}"}
    errors = [max_abs(got, want)]
    exact = same_bits(got, want) == want.size
    # the caches the program wrote in place equal the model's fp16 rows
    cache_bits = all(np.array_equal(runner.caches[f"blk.{i}.{kv}_cache"],
                                    (model.k if kv == "k" else model.v)[i])
                     for i in range(case.fam.layers) for kv in "kv")
    steps = []
    for s in range(DECODE_STEPS):
        n_past = PREFILL_TOKENS + s
        got = runner.run("decode", ids[n_past:n_past + 1], n_past, workers)
        want = model.forward(ids[n_past:n_past + 1], n_past, "decode", workers)
        steps.append(f"{same_bits(got, want)}/{want.size}")
        errors.append(max_abs(got, want))
        exact = exact and same_bits(got, want) == want.size
    figures["decode_steps"] = steps
    evidence(Rung.STITCHED, exact and cache_bits, circuit=family,
             contract=contract_ids(case.built.module_text), workers=workers,
             bit_exact=figures, max_abs_err=max(errors), tolerance="none (bit-exact)",
             kv_cache_bits_equal=cache_bits, attention_tree=case.tree,
             arguments_renamed=case.built.renamed, layers=case.fam.layers)
    assert cache_bits
    assert max(errors) == 0.0 and exact, figures


@pytest.mark.parametrize("family", FAMILIES)
def test_prefill_rows_equal_decode_steps(cases: Cases, evidence: Any, family: str) -> None:
    """Prefill of N tokens vs N single-token decode steps from an empty cache: row i of the
    prefill equals step i bit for bit, the last token included.  This holds because both
    phases share every contract here: the linears' GEMM (output tiles) and GEMV (rows) are
    one contract; the prefill attention is the auto contract's single-range part (fewer
    than 64 queries) and decode's split-KV runs one chunk while the extent is below 512,
    whose merge of one chunk is exact (O = A * 1, S = S_c).  It does not hold for a prefill
    of 64 or more queries (the tiled contract: fp32 values, fp64 sum update) or for decode
    at an extent >= 512 with more than one worker (chunks = workers)."""
    case = cases.get(family)
    runner = case.runner
    ids = tokens(23, PREFILL_TOKENS)
    text = case.built.module_text
    # the conditions named above, read from the built IR
    assert "selector = query_batch, threshold = 64" in text
    assert "chunks = workers, extent_multiple = 256, threshold = 512" in text
    figures = {}
    ok = True
    for workers in WORKERS:
        runner.reset()
        prefill = runner.run("prefill", ids, 0, workers)
        prefill_caches = {k: v.copy() for k, v in runner.caches.items()}
        runner.reset()
        rows = [runner.run("decode", ids[i:i + 1], i, workers)[0] for i in range(len(ids))]
        decoded = np.stack(rows)
        equal_rows = sum(same_bits(prefill[i], decoded[i]) == VOCAB for i in range(len(ids)))
        caches_equal = all(np.array_equal(prefill_caches[k], runner.caches[k])
                           for k in prefill_caches)
        last = same_bits(prefill[-1], decoded[-1])
        figures[f"workers_{workers}"] = {"rows_equal": f"{equal_rows}/{len(ids)}",
                                         "last_token": f"{last}/{VOCAB}",
                                         "caches_equal": caches_equal}
        ok = ok and equal_rows == len(ids) and caches_equal
    evidence(Rung.STITCHED, ok, circuit=family, contract=contract_ids(text),
             check="prefill_rows_equal_decode_steps", bit_exact=figures)
    assert ok, figures


def test_prefill_of_n_minus_one_then_decode_equals_prefill_of_n(
        cases: Cases, evidence: Any) -> None:
    """The same claim with two compiled prefill widths: prefill(N)[N-1] == decode after
    prefill(N-1), bit for bit, and the caches agree."""
    full, short = cases.get("qwen3"), cases.get("qwen3", PREFILL_TOKENS - 1)
    ids = tokens(31, PREFILL_TOKENS)
    full.runner.reset()
    want = full.runner.run("prefill", ids, 0, 2)[-1]
    short.runner.reset()
    short.runner.run("prefill", ids[:-1], 0, 2)
    got = short.runner.run("decode", ids[-1:], PREFILL_TOKENS - 1, 2)[0]
    equal = same_bits(got, want)
    caches = all(np.array_equal(full.runner.caches[k], short.runner.caches[k])
                 for k in full.runner.caches)
    evidence(Rung.STITCHED, equal == VOCAB and caches, circuit="qwen3",
             contract=contract_ids(full.built.module_text),
             check="prefill_n_minus_1_plus_decode", bit_exact=f"{equal}/{VOCAB}",
             caches_equal=caches, max_abs_err=max_abs(got, want), workers=2)
    assert equal == VOCAB and caches


# ---- crossing the split-KV threshold during decode -------------------------------------------


def _prefix_caches(runner: Any, n: int, seed: int) -> dict[str, np.ndarray]:
    """fp16 K/V rows for positions [0, n) standing in for an earlier context."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, arr in runner.caches.items():
        c = np.zeros_like(arr)
        c[:, :n] = rng.standard_normal((arr.shape[0], n, arr.shape[2])).astype(
            np.float16).view(np.uint16)
        out[name] = c
    return out


def _load(runner: Any, models: list[Any], prefix: dict[str, np.ndarray]) -> None:
    """The same earlier context into the program's caches and every model's."""
    for name, c in prefix.items():
        np.copyto(runner.caches[name], c)
        layer, kv = int(name.split(".")[1]), name.split(".")[2][0]
        for model in models:
            np.copyto((model.k if kv == "k" else model.v)[layer], c)


@pytest.mark.parametrize("first_valid", [255, 511])
def test_crossing_the_split_kv_threshold_changes_only_what_the_contract_declares(
        cases: Cases, evidence: Any, first_valid: int) -> None:
    """Decode steps at valid KV first_valid, +1, +2 (KV capacity 1024) over a synthetic
    earlier context.  f16_online_fp32_merge: extent = valid KV rounded up to 256; chunks =
    workers when the extent is >= 512, else 1.  So 255 -> 256 -> 257 crosses the threshold
    (extent 256, 256, 512) and 511 -> 512 -> 513 moves the chunk boundary only (extent 512,
    512, 768; at 2 workers chunks [0,256)+[256,512), then [0,384)+[384,768)).

    At 1 worker every step equals the single-range recurrence bit for bit; at 2 workers every
    step equals the contract's 2-chunk model bit for bit, is identical to 1 worker while the
    extent is below 512, and differs from it from the first step whose extent reaches 512."""
    case = cases.get("qwen3")
    runner = case.runner
    runner.reset()
    prefix = _prefix_caches(runner, first_valid - 1, seed=first_valid)
    ids = tokens(first_valid, 3)
    results: dict[int, list[np.ndarray]] = {}
    figures: dict[str, Any] = {}
    ok = True
    for workers in WORKERS:
        model = case.model()
        single = case.model()  # the same context under one single-range reduction
        _load(runner, [model, single], prefix)
        outs, rows = [], []
        for s in range(3):
            n_past = first_valid - 1 + s
            got = runner.run("decode", ids[s:s + 1], n_past, workers)
            want = model.forward(ids[s:s + 1], n_past, "decode", workers)
            ref = single.forward(ids[s:s + 1], n_past, "decode", decode_single_range=True)
            extent = (n_past + 1 + 255) // 256 * 256
            row = {"valid_kv": n_past + 1, "extent": extent,
                   "chunks": workers if extent >= 512 else 1,
                   "vs_contract_model": f"{same_bits(got, want)}/{VOCAB}",
                   "vs_single_range": f"{same_bits(got, ref)}/{VOCAB}",
                   "max_abs_vs_single_range": max_abs(got, ref)}
            ok = ok and same_bits(got, want) == VOCAB
            if workers == 1:
                ok = ok and same_bits(got, ref) == VOCAB
            rows.append(row)
            outs.append(got)
        results[workers] = outs
        figures[f"workers_{workers}"] = rows
    split_seen = False
    for s, row in enumerate(figures["workers_2"]):
        identical = same_bits(results[1][s], results[2][s])
        row["vs_1_worker"] = f"{identical}/{VOCAB}"
        split_seen = split_seen or row["extent"] >= 512
        # the split is visible from the first extent >= 512, and not before
        ok = ok and (identical < VOCAB if split_seen else identical == VOCAB)
    evidence(Rung.STITCHED, ok, circuit="qwen3", contract="f16_online_fp32_merge",
             check=f"split_kv_threshold_from_valid_kv_{first_valid}", bit_exact=figures)
    assert ok, figures
