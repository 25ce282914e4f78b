"""gated_delta_net_fp32_ggml (gated_delta_rule_fp32_ggml_16_lane_chain): Qwen3.5's recurrent
layer with llama.cpp's CPU arithmetic, rung by rung:

- external: the scalar oracle against the ggml op chain of llama.cpp's src/models/qwen35.cpp
  (SSM_CONV, SILU, RMS_NORM + SCALE, SIGMOID, ADD/SOFTPLUS/MUL, GATED_DELTA_NET, RMS_NORM + MUL,
  SILU, MUL) run by the libggml llama-cpp-python ships (v8dialect/parity/ggml_ops.py), output,
  conv state and recurrent state bit for bit, at 1 and 2 threads, prefill of 1, 5 and 70 tokens
  and states carried over a second call; head dims 32 (the test model), 128 (Qwen3.5's) and
  lengths that reach every part of ggml_vec_dot_f32 (64-lane steps, 16- and 8-blocks, the
  fused tail) and the SiLU tail (rows not a multiple of 16);
- production (value heads outer) and threadpool (heads over 1-8 workers) against the oracle;
- a prefill's last row equals a decode step; argument checks leave outputs and states alone;
- negative control: the portable contract's arithmetic differs from llama.cpp's somewhere.

llama.cpp's lane forms are those of its AVX-512 build; on a CPU without AVX-512 its ggml
computes other lanes and the external rung is recorded as unresolved.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import ops_models as models
import pytest
from ops_specs import fptr, spread

from v8dialect.evidence import Outcome, Rung

F32 = np.float32
WORKERS = (1, 2, 3, 4, 8)
SENTINEL = F32(-1234.5)
CONTRACT = "gated_delta_rule_fp32_ggml_16_lane_chain"
PROVIDER = "gated_delta_net_fp32_ggml"
SELECTOR = "V8_GATED_DELTA_RULE_FP32_GGML_16_LANE_CHAIN"
BASE = "v8_gated_delta_net_ggml_f32"
BACKEND = "llama-cpp-python 0.3.36 libggml (ggml 0.25.3), native build"

# (tokens of the first call, tokens of the second call, key heads, value heads, head dim)
CASES = (
    (1, 1, 2, 8, 32),     # the test model's recurrent dims, decode
    (5, 1, 2, 8, 32),     # prefill 5, then a decode step
    (70, 4, 2, 8, 32),    # prefill 70
    (5, 2, 1, 2, 128),    # Qwen3.5's head dim: two 64-lane steps
    (3, 1, 1, 3, 100),    # 64 lanes, two 16-blocks, a fused tail of 4
    (2, 3, 2, 2, 88),     # 64 lanes, a 16-block and an 8-block
    (4, 2, 1, 3, 24),     # dot 16 + 8, SiLU rows of 120 channels and of 24 (tails of 8)
    (2, 1, 1, 1, 5),      # everything in the fused tail and the SiLU tail
)


def make(rng: np.random.Generator, t: int, hk: int, hv: int, d: int,
         big: bool = False) -> dict[str, Any]:
    ch = 2 * hk * d + hv * d
    alpha = (rng.standard_normal((t, hv)) * 3).astype(F32)
    alpha[0, 0] = F32(25.0)  # the softplus branch above 20
    qkv = spread(rng, (t, ch), -2, 1)
    if big:  # conv outputs past the exp polynomial's saturation (|x| > 133)
        qkv.flat[:: 7] *= F32(400.0)
    return {
        "t": t, "hk": hk, "hv": hv, "dk": d, "dv": d, "k": 4, "eps": 1e-6, "ch": ch,
        "qkv": qkv, "z": spread(rng, (t, hv * d), -2, 1),
        "alpha": alpha, "beta": (rng.standard_normal((t, hv)) * 2).astype(F32),
        "conv_w": (rng.standard_normal((ch, 4)) * 0.5).astype(F32),
        "ssm_a": -np.exp(rng.standard_normal(hv)).astype(F32),
        "dt_bias": rng.standard_normal(hv).astype(F32),
        "norm_w": spread(rng, (d,), -1, 1),
        "conv_state": spread(rng, (ch, 3), -2, 1),
        "ssm_state": (rng.standard_normal((hv, d, d)) * 0.1).astype(F32),
    }


def call(ops: ModuleType, fn: str, i: dict[str, Any], pool: Any = None,
         selector: str = SELECTOR, **override: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """One provider function on copies of the states; (status, y, conv_state, ssm_state)."""
    a = {**i, **override}
    y = np.full((a["t"], a["hv"] * a["dv"]), SENTINEL, dtype=F32)
    conv, ssm = a["conv_state"].copy(), a["ssm_state"].copy()
    ffi = ops.ffi
    status = getattr(ops.lib, fn)(
        *([pool] if pool is not None else []), getattr(ops.lib, selector), fptr(ffi, y),
        fptr(ffi, a["qkv"]), fptr(ffi, a["z"]), fptr(ffi, a["alpha"]), fptr(ffi, a["beta"]),
        fptr(ffi, a["conv_w"]), fptr(ffi, a["ssm_a"]), fptr(ffi, a["dt_bias"]),
        fptr(ffi, a["norm_w"]), fptr(ffi, conv), fptr(ffi, ssm), a["t"], a["hk"], a["hv"],
        a["dk"], a["dv"], a["k"], a["eps"])
    return status, y, conv, ssm


def ggml_chain(g_ops: Any, i: dict[str, Any], threads: int) -> tuple[np.ndarray, ...]:
    out = g_ops.gated_delta_chain(i["qkv"], i["z"], i["alpha"], i["beta"], i["conv_w"],
                                  i["ssm_a"], i["dt_bias"], i["norm_w"], i["conv_state"],
                                  i["ssm_state"], i["hk"], i["eps"], threads)
    return out["y"], out["conv_state"], out["ssm_state"]


_libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_libm.logf.restype = _libm.expf.restype = ctypes.c_float
_libm.logf.argtypes = _libm.expf.argtypes = [ctypes.c_float]


def expf(x: np.ndarray) -> np.ndarray:
    flat = np.asarray(x, dtype=F32).ravel()
    return np.fromiter((_libm.expf(float(v)) for v in flat), F32, flat.size).reshape(np.shape(x))


def logf(x: np.ndarray) -> np.ndarray:
    flat = np.asarray(x, dtype=F32).ravel()
    return np.fromiter((_libm.logf(float(v)) for v in flat), F32, flat.size).reshape(np.shape(x))


def differing(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))


def cpu_has_avx512() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512f" in flags and " avx512dq" in flags


def llamacpp_ggml(evidence: Callable[..., Any]) -> Any:
    if not cpu_has_avx512():
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT, provider=PROVIDER,
                 backend=BACKEND, reason="no AVX-512F/DQ: llama.cpp's ggml runs other lane forms")
        pytest.fail("the contract states llama.cpp's AVX-512 arithmetic; this CPU has no "
                    "AVX-512 (recorded as unresolved)")
    try:
        from v8dialect.parity.ggml_ops import GgmlOps

        return GgmlOps()
    except Exception as exc:  # noqa: BLE001 - any failure to load llama.cpp's ggml
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT, provider=PROVIDER,
                 backend=BACKEND, reason=str(exc))
        pytest.fail(f"llama.cpp's ggml is not loadable: {exc} (recorded as unresolved)")


def test_oracle_vs_llamacpp_ggml_chain(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    g_ops = llamacpp_ggml(evidence)
    rng = np.random.default_rng(35)
    figures: dict[str, dict[str, int]] = {}
    for n, (t1, t2, hk, hv, d) in enumerate(CASES):
        first = make(rng, t1, hk, hv, d, big=(n % 3 == 1))
        _, y1, conv1, ssm1 = call(ops, BASE + "_ref", first)
        nxt = make(rng, t2, hk, hv, d)
        second = {**nxt, "conv_w": first["conv_w"], "ssm_a": first["ssm_a"],
                  "dt_bias": first["dt_bias"], "norm_w": first["norm_w"],
                  "conv_state": conv1, "ssm_state": ssm1}
        _, y2, conv2, ssm2 = call(ops, BASE + "_ref", second)
        for threads in (1, 2):
            ty1, tc1, ts1 = ggml_chain(g_ops, first, threads)
            # the second call starts from llama.cpp's own states
            ty2, tc2, ts2 = ggml_chain(g_ops, {**second, "conv_state": tc1, "ssm_state": ts1},
                                       threads)
            figures[f"T={t1}+{t2} Hk={hk} Hv={hv} D={d} threads={threads}"] = {
                "y": differing(y1, ty1) + differing(y2, ty2),
                "conv_state": differing(conv1, tc1) + differing(conv2, tc2),
                "ssm_state": differing(ssm1, ts1) + differing(ssm2, ts2),
                "compared": y1.size + y2.size + conv1.size + conv2.size + ssm1.size + ssm2.size,
            }
    ok = not any(f["y"] or f["conv_state"] or f["ssm_state"] for f in figures.values())
    evidence(Rung.EXTERNAL, ok, contract=CONTRACT, provider=PROVIDER, backend=BACKEND,
             oracle=BASE + "_ref", chain="src/models/qwen35.cpp build_layer_attn_linear, fused "
             "GATED_DELTA_NET", differing_elements=figures)
    assert ok, figures


def test_ggml_chain_stages_are_llamacpps(evidence: Callable[..., Any]) -> None:
    """The chain's first stages by themselves, against numpy with the operations the contract
    names, computed in numpy with libm's expf/logf: the l2 norm's RMS_NORM + SCALE, the
    gate's ADD, SOFTPLUS and MUL, the beta SIGMOID.  Pins that
    ggml_ops.gated_delta_chain wires llama.cpp's graph, not only that the ends agree."""
    g_ops = llamacpp_ggml(evidence)
    i = make(np.random.default_rng(8), 3, 1, 2, 16)
    out = g_ops.gated_delta_chain(i["qkv"], i["z"], i["alpha"], i["beta"], i["conv_w"],
                                  i["ssm_a"], i["dt_bias"], i["norm_w"], i["conv_state"],
                                  i["ssm_state"], i["hk"], i["eps"], 1)
    d, kd = 16, 16
    x = out["conv_output_silu"][:, :kd].astype(np.float64)
    sq = (out["conv_output_silu"][:, :kd] * out["conv_output_silu"][:, :kd]).astype(np.float64)
    mean = (sq.sum(axis=1) / d).astype(F32)
    r = F32(1) / np.sqrt(mean + F32(F32(1e-6) / F32(d)))
    q = (x.astype(F32) * r[:, None]).astype(F32) * (F32(1) / np.sqrt(F32(d)))
    assert differing(q.astype(F32), out["q_conv_predelta"]) == 0
    pre = (i["alpha"] + i["dt_bias"][None, :]).astype(F32)
    sp = np.where(pre > 20, pre, logf(F32(1) + expf(pre)))
    gate = (sp.astype(F32) * i["ssm_a"][None, :]).astype(F32)
    assert differing(gate, out["gate"]) == 0
    beta = F32(1) / (F32(1) + expf(-i["beta"]))
    assert differing(beta, out["beta_sigmoid"]) == 0


def test_portable_contract_differs_from_llamacpp(ops: ModuleType) -> None:
    """Negative control: the portable contract (ascending scalar sums, libm SiLU, unfused
    updates) gives different bits from llama.cpp's chain on the same inputs."""
    i = make(np.random.default_rng(6), 5, 2, 8, 32)
    _, y_ggml, _, ssm_ggml = call(ops, BASE + "_ref", i)
    _, y_port, _, ssm_port = call(ops, "v8_gated_delta_net_f32_ref", i,
                                  selector="V8_GATED_DELTA_RULE_FP32_TOKEN_SEQUENTIAL_STATE")
    assert differing(y_ggml, y_port) + differing(ssm_ggml, ssm_port) > 0


def test_production_and_threadpool_match_oracle(ops: ModuleType, pools: dict[int, Any],
                                                evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(77)
    production: list[dict[str, Any]] = []
    per_workers: dict[int, list[dict[str, Any]]] = {w: [] for w in WORKERS}
    for t1, _, hk, hv, d in CASES:
        i = make(rng, min(t1, 9), hk, hv, d, big=(d == 32))
        _, *want = call(ops, BASE + "_ref", i)
        status, *got = call(ops, BASE, i)
        assert status == 0
        production += [models.compare(g, w) for g, w in zip(got, want, strict=True)]
        for w in WORKERS:
            status, *got = call(ops, BASE + "_parallel_dispatch", i, pools[w])
            assert status == 0
            per_workers[w] += [models.compare(g, x) for g, x in zip(got, want, strict=True)]

    def merge(f: list[dict[str, Any]]) -> dict[str, Any]:
        return {"compared": sum(x["compared"] for x in f),
                "bit_exact": sum(x["bit_exact"] for x in f)}

    prod = merge(production)
    ok = prod["bit_exact"] == prod["compared"]
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT, provider=PROVIDER, production=BASE, **prod)
    totals = {w: merge(f) for w, f in per_workers.items()}
    ok_pool = all(t["bit_exact"] == t["compared"] for t in totals.values())
    evidence(Rung.THREADPOOL, ok_pool, contract=CONTRACT, provider=PROVIDER,
             threadpool=BASE + "_parallel_dispatch", partition="independent_heads",
             workers={str(w): t for w, t in totals.items()})
    assert ok and ok_pool, (prod, totals)


@pytest.mark.parametrize("fn", (BASE + "_ref", BASE))
def test_prefill_last_row_equals_a_decode_step(ops: ModuleType, fn: str) -> None:
    i = make(np.random.default_rng(12), 7, 2, 4, 16)
    _, y_all, conv_all, ssm_all = call(ops, fn, i)
    head = {key: (v[:6] if key in ("qkv", "z", "alpha", "beta") else v) for key, v in i.items()}
    _, y_head, conv_head, ssm_head = call(ops, fn, head, t=6)
    tail = {key: (v[6:] if key in ("qkv", "z", "alpha", "beta") else v) for key, v in i.items()}
    _, y_step, conv_step, ssm_step = call(ops, fn, tail, t=1, conv_state=conv_head,
                                          ssm_state=ssm_head)
    assert differing(y_all[:6], y_head) == 0 and differing(y_all[6:], y_step) == 0
    assert differing(conv_all, conv_step) == 0 and differing(ssm_all, ssm_step) == 0


@pytest.mark.parametrize("suffix", ("_ref", "", "_parallel_dispatch"))
def test_argument_checks_leave_outputs_and_states_untouched(
    ops: ModuleType, pools: dict[int, Any], suffix: str
) -> None:
    i = make(np.random.default_rng(9), 3, 2, 4, 16)
    pool = pools[2] if suffix == "_parallel_dispatch" else None
    unknown, bad = int(ops.lib.V8_ERR_UNKNOWN_SELECTOR), int(ops.lib.V8_ERR_BAD_DIMENSION)
    null = int(ops.lib.V8_ERR_NULL_ARGUMENT)
    for label, override, selector, want in (
        ("portable selector", {}, "V8_GATED_DELTA_RULE_FP32_TOKEN_SEQUENTIAL_STATE", unknown),
        ("value heads not a multiple of key heads", {"hk": 3}, SELECTOR, bad),
        ("key and value head dims differ", {"dv": 8}, SELECTOR, bad),
        ("head dim over the limit", {"dk": 513, "dv": 513}, SELECTOR, bad),
        ("convolution of width 3", {"k": 3}, SELECTOR, bad),
        ("negative eps", {"eps": -1.0}, SELECTOR, bad),
    ):
        status, y, conv, ssm = call(ops, BASE + suffix, i, pool, selector, **override)
        assert status == want, (label, status)
        assert np.all(y == SENTINEL), label
        assert differing(conv, i["conv_state"]) == 0 and differing(ssm, i["ssm_state"]) == 0
    ffi = ops.ffi
    y = np.full((3, 4 * 16), SENTINEL, dtype=F32)
    status = getattr(ops.lib, BASE + suffix)(
        *([pool] if pool is not None else []), getattr(ops.lib, SELECTOR), fptr(ffi, y),
        ffi.NULL, fptr(ffi, i["z"]), fptr(ffi, i["alpha"]), fptr(ffi, i["beta"]),
        fptr(ffi, i["conv_w"]), fptr(ffi, i["ssm_a"]), fptr(ffi, i["dt_bias"]),
        fptr(ffi, i["norm_w"]), fptr(ffi, i["conv_state"].copy()),
        fptr(ffi, i["ssm_state"].copy()), 3, 2, 4, 16, 16, 4, 1e-6)
    assert status == null and np.all(y == SENTINEL)
