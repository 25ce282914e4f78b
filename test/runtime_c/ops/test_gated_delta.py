"""Qwen3.5's recurrent layer and gated attention ops, rung by rung:

- gated_delta_net_fp32 (gated_delta_rule_fp32_token_sequential_state): the scalar
  oracle against an independent numpy model written from the contract text (output,
  conv state and recurrent state, bit for bit); production (value heads outer) and
  threadpool (heads over 1-8 workers) against the oracle; a prefill's last row and final
  states equal a prefill of the other tokens followed by one decode step; argument checks
  leave outputs and states untouched.
- head_split_fp32 and sigmoid_gate_fp32: oracle against numpy, production and threadpool
  against the oracle.

The external rung (ggml's ggml_gated_delta_net) is not bit-comparable: ggml forms the state
dots and updates with its SIMD vec_dot/vec_mad (lane trees, FMA) and its SiLU with a vector
exp, where this contract pins ascending scalar fp32 sums and libm expf.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import ops_models as models
import pytest
from ops_specs import fptr, spread

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
F32 = np.float32
WORKERS = (1, 2, 3, 4, 8)
SENTINEL = F32(-1234.5)
GDN = "gated_delta_rule_fp32_token_sequential_state"
GDN_PROVIDER = "gated_delta_net_fp32"
GDN_SELECTOR = "V8_GATED_DELTA_RULE_FP32_TOKEN_SEQUENTIAL_STATE"

_libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_libm.logf.restype = ctypes.c_float
_libm.logf.argtypes = [ctypes.c_float]


def expf(x: np.ndarray) -> np.ndarray:
    return models._libm_map("expf", x)


def logf(x: np.ndarray) -> np.ndarray:
    flat = np.asarray(x, dtype=F32).ravel()
    out = np.fromiter((_libm.logf(float(v)) for v in flat), dtype=F32, count=flat.size)
    return out.reshape(np.shape(x))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (F32(1.0) + expf(-x))


def sum_f64_ascending(sq: np.ndarray) -> np.ndarray:
    """Sum over the last axis in fp64, ascending (fp32 squares widened one by one)."""
    total = np.zeros(sq.shape[:-1], dtype=np.float64)
    for i in range(sq.shape[-1]):
        total = total + sq[..., i].astype(np.float64)
    return total


def gdn_model(i: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The contract, token by token: returns (y, conv_state, ssm_state)."""
    hk, dk, dv, eps = i["hk"], i["dk"], i["dv"], F32(i["eps"])
    qkv, conv_w = i["qkv"], i["conv_w"]
    t_count, _ = qkv.shape
    hv, kernel = i["hv"], conv_w.shape[1]
    seq = np.concatenate([i["conv_state"].T, qkv], axis=0)  # [K-1+T][C]
    state = i["ssm_state"].copy()  # [Hv][Dv][Dk]
    y = np.empty((t_count, hv * dv), dtype=F32)
    key_of = np.arange(hv) % hk
    scale = F32(1.0) / np.sqrt(F32(dk))
    for t in range(t_count):
        acc = np.zeros(seq.shape[1], dtype=F32)
        for m in range(kernel):
            acc = acc + seq[t + m] * conv_w[:, m]
        x = silu(acc)
        q = x[: hk * dk].reshape(hk, dk)
        k = x[hk * dk : 2 * hk * dk].reshape(hk, dk)
        v = x[2 * hk * dk :].reshape(hv, dv)
        normed = []
        for part in (q, k):
            r = F32(1.0) / np.maximum(np.sqrt(sum_f64_ascending(part * part).astype(F32)), eps)
            normed.append(part * r[:, None])
        qh, kh = normed[0][key_of], normed[1][key_of]  # [Hv][Dk]
        b = F32(1.0) / (F32(1.0) + expf(-i["beta"][t]))
        u = i["alpha"][t] + i["dt_bias"]
        sp = np.where(u > F32(20.0), u, logf(F32(1.0) + expf(u)))
        decay = expf(sp * i["ssm_a"])
        state = state * decay[:, None, None]
        for j in range(dv):
            d = np.zeros(hv, dtype=F32)
            for c in range(dk):
                d = d + state[:, j, c] * kh[:, c]
            delta = (v[:, j] - d) * b
            state[:, j, :] = state[:, j, :] + kh * delta[:, None]
        o = np.empty((hv, dv), dtype=F32)
        for j in range(dv):
            d = np.zeros(hv, dtype=F32)
            for c in range(dk):
                d = d + state[:, j, c] * qh[:, c]
            o[:, j] = d * scale
        mean = (sum_f64_ascending(o * o) / np.float64(dv)).astype(F32)
        rs = F32(1.0) / np.sqrt(mean + eps)
        gate = silu(i["z"][t].reshape(hv, dv))
        y[t] = (((o * rs[:, None]) * i["norm_w"][None, :]) * gate).ravel()
    conv_state = np.ascontiguousarray(seq[seq.shape[0] - (kernel - 1) :].T)
    return y, conv_state, state


GDN_CASES = (
    dict(t=1, hk=1, hv=1, dk=4, dv=4, k=2),
    dict(t=5, hk=2, hv=4, dk=32, dv=64, k=4),
    dict(t=17, hk=2, hv=2, dk=16, dv=16, k=4),
    dict(t=3, hk=1, hv=3, dk=8, dv=12, k=3),
    dict(t=2, hk=2, hv=6, dk=24, dv=8, k=4),  # T < K - 1: the new state keeps old inputs
)
GDN_BIG = dict(t=9, hk=2, hv=8, dk=64, dv=64, k=4)


def gdn_make(rng: np.random.Generator, c: dict[str, Any]) -> dict[str, Any]:
    hv, hk, dk, dv, k, t = c["hv"], c["hk"], c["dk"], c["dv"], c["k"], c["t"]
    ch = 2 * hk * dk + hv * dv
    alpha = (rng.standard_normal((t, hv)) * 3).astype(F32)
    alpha[0, 0] = F32(25.0)  # the softplus branch above 20
    return {
        **c, "eps": 1e-6, "ch": ch,
        "qkv": spread(rng, (t, ch), -2, 1), "z": spread(rng, (t, hv * dv), -2, 1),
        "alpha": alpha, "beta": (rng.standard_normal((t, hv)) * 2).astype(F32),
        "conv_w": (rng.standard_normal((ch, k)) * 0.5).astype(F32),
        "ssm_a": -np.exp(rng.standard_normal(hv)).astype(F32),
        "dt_bias": rng.standard_normal(hv).astype(F32),
        "norm_w": spread(rng, (dv,), -1, 1),
        "conv_state": spread(rng, (ch, k - 1), -2, 1),
        "ssm_state": (rng.standard_normal((hv, dv, dk)) * 0.1).astype(F32),
    }


def gdn_call(ops: ModuleType, fn: str, i: dict[str, Any], pool: Any = None,
             selector: str = GDN_SELECTOR, **override: Any
             ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Runs one provider function on copies of the states; returns (status, y, conv, ssm)."""
    a = {**i, **override}
    y = np.full((a["t"], a["hv"] * a["dv"]), SENTINEL, dtype=F32)
    conv = a["conv_state"].copy()
    ssm = a["ssm_state"].copy()
    lead = [pool] if pool is not None else []
    ffi = ops.ffi
    status = getattr(ops.lib, fn)(
        *lead, getattr(ops.lib, selector), fptr(ffi, y), fptr(ffi, a["qkv"]), fptr(ffi, a["z"]),
        fptr(ffi, a["alpha"]), fptr(ffi, a["beta"]), fptr(ffi, a["conv_w"]),
        fptr(ffi, a["ssm_a"]), fptr(ffi, a["dt_bias"]), fptr(ffi, a["norm_w"]),
        fptr(ffi, conv), fptr(ffi, ssm), a["t"], a["hk"], a["hv"], a["dk"], a["dv"], a["k"],
        a["eps"])
    return status, y, conv, ssm


def merge(figures: list[dict[str, Any]]) -> dict[str, Any]:
    return {"cases": len(figures), "compared": sum(f["compared"] for f in figures),
            "bit_exact": sum(f["bit_exact"] for f in figures),
            "max_abs_err": max(f["max_abs_err"] for f in figures),
            "max_ulp": max(f["max_ulp"] for f in figures)}


def three(got: tuple[Any, ...], want: tuple[Any, ...]) -> list[dict[str, Any]]:
    return [models.compare(g, w) for g, w in zip(got, want, strict=True)]


def test_gdn_oracle_matches_numpy_model(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(2025)
    figures = []
    for case in GDN_CASES:
        i = gdn_make(rng, case)
        status, *got = gdn_call(ops, "v8_gated_delta_net_f32_ref", i)
        assert status == V8_OK
        figures += three(tuple(got), gdn_model(i))
    total = merge(figures)
    ok = total["bit_exact"] == total["compared"]
    evidence(Rung.ORACLE, ok, contract=GDN, provider=GDN_PROVIDER,
             oracle="v8_gated_delta_net_f32_ref",
             model="test/runtime_c/ops/test_gated_delta.py::gdn_model",
             compared_outputs="y, conv_state, ssm_state", **total)
    assert ok, total


def test_gdn_numpy_model_sees_a_different_scale_placement(ops: ModuleType) -> None:
    """Negative control: scaling q by 1/sqrt(Dk) before the dot (the PyTorch reference's
    placement) instead of the dot afterwards changes bits the comparison must see."""
    i = gdn_make(np.random.default_rng(4), GDN_CASES[1])
    _, y, _, _ = gdn_call(ops, "v8_gated_delta_net_f32_ref", i)
    dk = i["dk"]
    shifted = dict(i, qkv=i["qkv"].copy())
    # the same function with q pre-scaled: differs because (S.q)*s != S.(q*s) in fp32
    q_cols = slice(0, i["hk"] * dk)
    shifted["qkv"][:, q_cols] = shifted["qkv"][:, q_cols] * F32(1.0) / np.sqrt(F32(dk))
    _, other, _, _ = gdn_call(ops, "v8_gated_delta_net_f32_ref", shifted)
    figures = models.compare(y, other)
    assert figures["bit_exact"] < figures["compared"], figures


def test_gdn_production_and_threadpool_match_oracle(
    ops: ModuleType, pools: dict[int, Any], evidence: Callable[..., Any]
) -> None:
    rng = np.random.default_rng(77)
    production: list[dict[str, Any]] = []
    per_workers: dict[int, list[dict[str, Any]]] = {w: [] for w in WORKERS}
    for case in (*GDN_CASES, GDN_BIG):
        i = gdn_make(rng, case)
        _, *want = gdn_call(ops, "v8_gated_delta_net_f32_ref", i)
        status, *got = gdn_call(ops, "v8_gated_delta_net_f32", i)
        assert status == V8_OK
        production += three(tuple(got), tuple(want))
        for w in WORKERS:
            status, *got = gdn_call(ops, "v8_gated_delta_net_f32_parallel_dispatch", i,
                                    pools[w])
            assert status == V8_OK
            per_workers[w] += three(tuple(got), tuple(want))
    prod = merge(production)
    ok = prod["bit_exact"] == prod["compared"]
    evidence(Rung.PRODUCTION, ok, contract=GDN, provider=GDN_PROVIDER,
             production="v8_gated_delta_net_f32", **prod)
    totals = {w: merge(f) for w, f in per_workers.items()}
    ok_pool = all(t["bit_exact"] == t["compared"] for t in totals.values())
    evidence(Rung.THREADPOOL, ok_pool, contract=GDN, provider=GDN_PROVIDER,
             threadpool="v8_gated_delta_net_f32_parallel_dispatch",
             partition="independent_heads", workers={str(w): t for w, t in totals.items()})
    assert ok and ok_pool, (prod, totals)


@pytest.mark.parametrize("fn", ("v8_gated_delta_net_f32_ref", "v8_gated_delta_net_f32"))
def test_gdn_prefill_last_row_equals_a_decode_step(ops: ModuleType, fn: str) -> None:
    i = gdn_make(np.random.default_rng(12), dict(t=7, hk=2, hv=4, dk=16, dv=16, k=4))
    _, y_all, conv_all, ssm_all = gdn_call(ops, fn, i)
    head = {key: (v[:6] if key in ("qkv", "z", "alpha", "beta") else v) for key, v in i.items()}
    _, y_head, conv_head, ssm_head = gdn_call(ops, fn, head, t=6)
    tail = {key: (v[6:] if key in ("qkv", "z", "alpha", "beta") else v) for key, v in i.items()}
    _, y_step, conv_step, ssm_step = gdn_call(ops, fn, tail, t=1, conv_state=conv_head,
                                              ssm_state=ssm_head)
    assert np.array_equal(y_all[:6].view(np.uint32), y_head.view(np.uint32))
    assert np.array_equal(y_all[6:].view(np.uint32), y_step.view(np.uint32))
    assert np.array_equal(conv_all.view(np.uint32), conv_step.view(np.uint32))
    assert np.array_equal(ssm_all.view(np.uint32), ssm_step.view(np.uint32))


@pytest.mark.parametrize("suffix", ("_ref", "", "_parallel_dispatch"))
def test_gdn_argument_checks_leave_outputs_and_states_untouched(
    ops: ModuleType, pools: dict[int, Any], suffix: str
) -> None:
    i = gdn_make(np.random.default_rng(9), GDN_CASES[1])
    pool = pools[2] if suffix == "_parallel_dispatch" else None
    unknown, bad = int(ops.lib.V8_ERR_UNKNOWN_SELECTOR), int(ops.lib.V8_ERR_BAD_DIMENSION)
    for label, override, selector, want in (
        ("sigmoid selector", {}, "V8_SIGMOID_GATE_FP32_EXPF", unknown),
        ("value heads not a multiple of key heads", {"hk": 3}, GDN_SELECTOR, bad),
        ("head dim over the limit", {"dk": 513}, GDN_SELECTOR, bad),
        ("convolution of width 1", {"k": 1}, GDN_SELECTOR, bad),
        ("negative eps", {"eps": -1.0}, GDN_SELECTOR, bad),
    ):
        status, y, conv, ssm = gdn_call(ops, "v8_gated_delta_net_f32" + suffix, i, pool,
                                        selector, **override)
        assert status == want, (label, status)
        assert np.all(y == SENTINEL), label
        assert np.array_equal(conv, i["conv_state"]) and np.array_equal(ssm, i["ssm_state"])


# ---- head split and sigmoid gate ------------------------------------------------------


def split_call(ops: ModuleType, fn: str, x: np.ndarray, part: int, parts: int,
               pool: Any = None, selector: str = "V8_HEAD_SPLIT_EXACT_COPY"
               ) -> tuple[int, np.ndarray]:
    t, h, width = x.shape
    y = np.full((t, h, width // parts), SENTINEL, dtype=F32)
    lead = [pool] if pool is not None else []
    status = getattr(ops.lib, fn)(*lead, getattr(ops.lib, selector), fptr(ops.ffi, y),
                                  fptr(ops.ffi, x), t, h, width // parts, part, parts)
    return status, y


def gate_call(ops: ModuleType, fn: str, a: np.ndarray, g: np.ndarray, pool: Any = None,
              selector: str = "V8_SIGMOID_GATE_FP32_EXPF") -> tuple[int, np.ndarray]:
    y = np.full(a.shape, SENTINEL, dtype=F32)
    lead = [pool] if pool is not None else []
    status = getattr(ops.lib, fn)(*lead, getattr(ops.lib, selector), fptr(ops.ffi, y),
                                  fptr(ops.ffi, a), fptr(ops.ffi, g), a.size)
    return status, y


def test_head_split_copies_the_declared_part(ops: ModuleType, pools: dict[int, Any],
                                             evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(1)
    figures: dict[str, list[dict[str, Any]]] = {"oracle": [], "production": [], "threadpool": []}
    for t, h, d, parts in ((1, 1, 4, 2), (20, 4, 64, 2), (7, 16, 80, 3), (300, 8, 128, 2)):
        x = spread(rng, (t, h, d * parts))
        for part in range(parts):
            want = np.ascontiguousarray(x[:, :, part * d:(part + 1) * d])
            status, ref = split_call(ops, "v8_head_split_f32_ref", x, part, parts)
            assert status == V8_OK
            figures["oracle"].append(models.compare(ref, want))
            figures["production"].append(models.compare(
                split_call(ops, "v8_head_split_f32", x, part, parts)[1], ref))
            for w in WORKERS:
                figures["threadpool"].append(models.compare(split_call(
                    ops, "v8_head_split_f32_parallel_dispatch", x, part, parts, pools[w])[1], ref))
    totals = {k: merge(v) for k, v in figures.items()}
    oks = {k: t["bit_exact"] == t["compared"] for k, t in totals.items()}
    for rung, key in ((Rung.ORACLE, "oracle"), (Rung.PRODUCTION, "production"),
                      (Rung.THREADPOOL, "threadpool")):
        evidence(rung, oks[key], contract="head_split_exact_copy", provider="head_split_fp32",
                 **totals[key])
    assert all(oks.values()), totals
    x = spread(rng, (2, 2, 8))
    status, y = split_call(ops, "v8_head_split_f32", x, 2, 2)
    assert status == int(ops.lib.V8_ERR_BAD_DIMENSION) and np.all(y == SENTINEL)
    status, y = split_call(ops, "v8_head_split_f32", x, 0, 2, selector=GDN_SELECTOR)
    assert status == int(ops.lib.V8_ERR_UNKNOWN_SELECTOR) and np.all(y == SENTINEL)


def test_sigmoid_gate_matches_numpy_model(ops: ModuleType, pools: dict[int, Any],
                                          evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(2)
    figures: dict[str, list[dict[str, Any]]] = {"oracle": [], "production": [], "threadpool": []}
    for n in (1, 17, 4099, 70000):
        a = spread(rng, (n,), -4, 4)
        g = spread(rng, (n,), -4, 6)
        if n > 100:
            g[:6] = np.array([-100.0, -88.5, 88.5, 100.0, 0.0, -0.0], F32)
        want = a * (F32(1.0) / (F32(1.0) + expf(-g)))
        status, ref = gate_call(ops, "v8_sigmoid_gate_f32_ref", a, g)
        assert status == V8_OK
        figures["oracle"].append(models.compare(ref, want))
        figures["production"].append(models.compare(
            gate_call(ops, "v8_sigmoid_gate_f32", a, g)[1], ref))
        for w in WORKERS:
            figures["threadpool"].append(models.compare(
                gate_call(ops, "v8_sigmoid_gate_f32_parallel_dispatch", a, g, pools[w])[1], ref))
    totals = {k: merge(v) for k, v in figures.items()}
    oks = {k: t["bit_exact"] == t["compared"] for k, t in totals.items()}
    for rung, key in ((Rung.ORACLE, "oracle"), (Rung.PRODUCTION, "production"),
                      (Rung.THREADPOOL, "threadpool")):
        evidence(rung, oks[key], contract="sigmoid_gate_fp32_expf", provider="sigmoid_gate_fp32",
                 **totals[key])
    assert all(oks.values()), totals
    status, y = gate_call(ops, "v8_sigmoid_gate_f32", a, g, selector="V8_HEAD_SPLIT_EXACT_COPY")
    assert status == int(ops.lib.V8_ERR_UNKNOWN_SELECTOR) and np.all(y == SENTINEL)
