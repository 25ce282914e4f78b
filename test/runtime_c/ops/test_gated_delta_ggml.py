"""gated_delta_net_fp32_ggml: Qwen3.5's recurrent layer with llama.cpp's CPU arithmetic, for its
two x86 builds: gated_delta_rule_fp32_ggml_16_lane_chain (AVX-512 build) and
gated_delta_rule_fp32_ggml_8_lane_chain (AVX2 build), rung by rung:

- oracle: the scalar oracle of each contract against an independent numpy model of that
  build's order (below: ggml_v_expf's two forms and all three of its AVX2 routes, the SiLU
  blocks and tails, ggml_vec_dot_f32's 4-accumulator steps, its lane folds and GCC's
  vectorized tails, the conv taps), output, conv state and recurrent state bit for bit; the
  two builds' models differ on the same cases;
- external: the scalar oracle against the ggml op chain of llama.cpp's src/models/qwen35.cpp
  (SSM_CONV, SILU, RMS_NORM + SCALE, SIGMOID, ADD/SOFTPLUS/MUL, GATED_DELTA_NET, RMS_NORM + MUL,
  SILU, MUL) run by the libggml llama-cpp-python ships (v8dialect/parity/ggml_ops.py), output,
  conv state and recurrent state bit for bit, at 1 and 2 threads, prefill of 1 to 70 tokens and
  states carried over a second call; head dims 32 (the test model), 128 (Qwen3.5's) and lengths
  that reach every part of ggml_vec_dot_f32 in both builds (4-accumulator steps, the rounded
  tail blocks, the fused tail) and the SiLU tails.  That libggml is one build (GgmlOps.build):
  the contract of the other build is skipped there, with the reason;
- stages: each stage of llama.cpp's chain from its own previous stage, against the numpy model
  of its build (conv, SiLU, l2 norm, gate, beta, GATED_DELTA_NET, gated RMSNorm), and each
  build-dependent choice of the model shown to matter there (the other choice differs);
- production (value heads outer) under every CPU mask (all features, AVX2 only, scalar) and
  threadpool (heads over 1-8 workers) against the oracle, for both contracts;
- a prefill's last row equals a decode step; argument checks leave outputs and states alone;
- negative control: the portable contract's arithmetic differs from llama.cpp's somewhere.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import numpy as np
import ops_models as models
import pytest
from ops_specs import fptr, spread

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung
from v8dialect.runtime.host import native_loop_vectors

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
F32 = np.float32
F64 = np.float64
U32 = np.uint32
WORKERS = (1, 2, 3, 4, 8)
SENTINEL = F32(-1234.5)
PROVIDER = "gated_delta_net_fp32_ggml"
BASE = "v8_gated_delta_net_ggml_f32"
BACKEND = "llama-cpp-python 0.3.36 libggml (ggml 0.25.3), native build"
CPU_ALL, CPU_AVX2_ONLY, CPU_SCALAR = 0xFFFFFFFF, 0b111, 0  # AVX2 | FMA | F16C


@dataclass(frozen=True)
class Build:
    """What the arithmetic of one llama.cpp x86 build depends on (the contract's terms)."""

    name: str             # GgmlOps.build / manifest ggml_build value
    contract: str
    selector: str
    lanes: int            # fp32 lanes per vector register (SiLU blocks, dot accumulators)
    scalef_exp: bool      # ggml_v_expf's AVX-512 form (1 inside, VSCALEFPS), else AVX2's
    hadd_fold: bool       # dot's last four lanes: (0+1)+(2+3) (HADDPS) or (0+2)+(1+3)
    rounded_tail: bool    # dot tail: rounded-product blocks of lanes and lanes/2, fused rest
    conv_rounded: bool    # conv taps: rounded products added from +0, or fused from t0
    tail_block: int       # dot tail: products rounded down to its last < tail_block, fused after
    loop_vectors: str     # manifest ggml_loop_vectors: the smallest vector of GCC's small loops


AVX512 = Build("avx512", "gated_delta_rule_fp32_ggml_16_lane_chain",
               "V8_GATED_DELTA_RULE_FP32_GGML_16_LANE_CHAIN", 16, True, False, True, False, 8,
               "min_8_lanes")
AVX2 = Build("avx2", "gated_delta_rule_fp32_ggml_8_lane_chain",
             "V8_GATED_DELTA_RULE_FP32_GGML_8_LANE_CHAIN", 8, False, True, True, True, 4,
             "min_4_lanes")
# the AVX-512 build whose compiler also vectorizes small loops in 4 lanes (rounded conv taps,
# dot tails rounded down to the last < 4)
AVX512_4_LANE_TAILS = Build("avx512", "gated_delta_rule_fp32_ggml_16_lane_chain_4_lane_tails",
                            "V8_GATED_DELTA_RULE_FP32_GGML_16_LANE_CHAIN_4_LANE_TAILS", 16, True,
                            False, True, True, 4, "min_4_lanes")
BUILDS = (AVX512, AVX2, AVX512_4_LANE_TAILS)


def build_id(b: Build) -> str:
    return b.contract.removeprefix("gated_delta_rule_fp32_ggml_")


def other_lanes(b: Build) -> Build:
    """The build of the other register width (what must differ wherever lanes matter)."""
    return AVX2 if b.lanes == 16 else AVX512
SELECTOR = AVX512.selector

# (tokens of the first call, tokens of the second call, key heads, value heads, head dim)
CASES = (
    (1, 1, 2, 8, 32),     # the test model's recurrent dims, decode
    (5, 1, 2, 8, 32),     # prefill 5, then a decode step
    (70, 4, 2, 8, 32),    # prefill 70
    (5, 2, 1, 2, 128),    # Qwen3.5's head dim: two 64-lane / four 32-lane steps
    (3, 2, 2, 4, 64),     # one 64-lane / two 32-lane steps: eight rows' folds at once, 8 rows x 8
    (34, 1, 1, 1, 128),   # the rows-first walk's 32-token chunks at d 128: a chunk and 2 more
    (3, 1, 1, 3, 100),    # 16-lane: 64 + two 16-blocks + fused 4; 8-lane: 96 + one 4-block
    (2, 3, 2, 2, 88),     # 16-lane: 64 + a 16-block + an 8-block; 8-lane: 64 + three 8-blocks
    (4, 2, 1, 3, 24),     # dot 16 + 8 / three 8s, SiLU rows of 120 channels and of 24
    (2, 1, 1, 1, 5),      # 16-lane: all fused; 8-lane: a 4-block and one fused; SiLU tails only
    (3, 2, 1, 2, 47),     # 8-lane: 32 + an 8-block + a 4-block + 3 fused; rows of 188 and 47
    (2, 2, 2, 2, 7),      # 8-lane: a 4-block + 3 fused; SiLU rows of 28 (tail 4) and 7
    (3, 1, 1, 2, 62),     # 16-lane: 3 16-blocks + 8 + 6 fused; 8-lane: 32 + 3 8s + 4 + 2 fused
)
# (tokens, Hk, Hv, D), big inputs; D = 100 gives the 16-lane builds a vector body (64) whose
# lane fold the stages can see, and a 36-element tail
STAGE_CASES = ((3, 1, 2, 16), (4, 1, 2, 44), (3, 2, 4, 47), (2, 1, 2, 100))


def make(rng: np.random.Generator, t: int, hk: int, hv: int, d: int,
         big: bool = False) -> dict[str, Any]:
    ch = 2 * hk * d + hv * d
    alpha = (rng.standard_normal((t, hv)) * 3).astype(F32)
    alpha[0, 0] = F32(25.0)  # the softplus branch above 20
    qkv = spread(rng, (t, ch), -2, 1)
    if big:  # conv outputs past the exp polynomial's ranges (|x| > 87, > 133)
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
         selector: str = SELECTOR,
         **override: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
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
_libm.logf.restype = _libm.expf.restype = _libm.fmaf.restype = ctypes.c_float
_libm.logf.argtypes = _libm.expf.argtypes = [ctypes.c_float]
_libm.fmaf.argtypes = [ctypes.c_float] * 3


def expf(x: np.ndarray) -> np.ndarray:
    flat = np.asarray(x, dtype=F32).ravel()
    return np.fromiter((_libm.expf(float(v)) for v in flat), F32, flat.size).reshape(np.shape(x))


def logf(x: np.ndarray) -> np.ndarray:
    flat = np.asarray(x, dtype=F32).ravel()
    return np.fromiter((_libm.logf(float(v)) for v in flat), F32, flat.size).reshape(np.shape(x))


def differing(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))


# ---- independent numpy model of both builds' order ---------------------------------------
# Whole arrays per step (one numpy operation per rounding); fma by an exact fp64 product and
# TwoSum, checked against libm's fmaf below.

def fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """fp32 a*b + c rounded once, elementwise."""
    a, b, c = np.broadcast_arrays(np.asarray(a, F32), np.asarray(b, F32), np.asarray(c, F32))
    with np.errstate(over="ignore", invalid="ignore"):
        p = a.astype(F64) * b.astype(F64)  # exact: 48 significant bits
        s = p + c.astype(F64)
        pb = s - p
        err = (p - (s - pb)) + (c.astype(F64) - pb)  # s + err is a*b + c exactly
        r = s.astype(F32)
        # s may sit exactly halfway between two fp32 values while a*b + c does not
        below: np.ndarray = np.nextafter(r, F32(-np.inf))
        lo: np.ndarray = np.where(r.astype(F64) <= s, r, below)
        hi: np.ndarray = np.nextafter(lo, F32(np.inf))
        tie = np.isfinite(s) & (err != 0) & (s == (lo.astype(F64) + hi.astype(F64)) * 0.5)
    return np.where(tie, np.where(err > 0, hi, lo), r).astype(F32)


def H(text: str) -> np.float32:  # noqa: N802 - a C hex float literal
    return F32(float.fromhex(text))


def vexp(x: np.ndarray, b: Build) -> np.ndarray:
    """ggml_v_expf of the build, per element."""
    x = np.asarray(x, F32)
    z = fma(x, H("0x1.715476p+0"), H("0x1.8p23"))
    n = z - H("0x1.8p23")
    r = fma(-n, H("0x1.7f7d1cp-20"), fma(-n, H("0x1.62e4p-1"), x))
    u = r * r
    hi = fma(fma(H("0x1.0e4020p-7"), r, H("0x1.573e2ep-5")), u,
             fma(H("0x1.555e66p-3"), r, H("0x1.fffdb6p-2")))
    with np.errstate(over="ignore", invalid="ignore"):
        if b.scalef_exp:  # the 1 inside, one rounding of p * 2^n (VSCALEFPS)
            p = fma(hi, u, fma(H("0x1.ffffecp-1"), r, F32(1)))
            ni = np.where(np.abs(n) > 192, 0, n).astype(np.int32)
            scaled = np.ldexp(p, ni).astype(F32)
            sat = np.where(n <= 0, F32(0), F32(np.inf))
            return np.where(np.abs(n) > 192, sat, scaled).astype(F32)
        p = fma(hi, u, H("0x1.ffffecp-1") * r)
        e = z.view(U32) << U32(23)
        k = (e + F32(1).view(U32)).view(F32)
        g = np.where(n <= 0, U32(0x82000000), U32(0))
        s1 = (g + U32(0x7F000000)).view(F32)
        s2 = (e - g).view(F32)
        return np.where(np.abs(n) > 192, s1 * s1,
                        np.where(np.abs(n) > 126, fma(s2, p, s2) * s1, fma(k, p, k))).astype(F32)


def silu_rows(x: np.ndarray, b: Build) -> np.ndarray:
    """ggml_vec_silu_f32 over the last axis: vector blocks from the row's start, libm tail."""
    x = np.asarray(x, F32)
    n = x.shape[-1]
    full = n - n % b.lanes
    with np.errstate(over="ignore"):
        vec = x[..., :full] / (F32(1) + vexp(F32(0) - x[..., :full], b))
        tail = x[..., full:] / (F32(1) + expf(-x[..., full:]))
    return np.concatenate([vec, tail], axis=-1).astype(F32)


def dot_rows(m: np.ndarray, y: np.ndarray, b: Build) -> np.ndarray:
    """ggml_vec_dot_f32(row, y) for every row of m [R, n]."""
    rows, n = m.shape
    lanes = b.lanes
    step = 4 * lanes
    top = n - n % step
    acc = np.zeros((rows, step), F32)
    for i in range(0, top, step):
        acc = fma(m[:, i:i + step], y[i:i + step], acc)
    a = [acc[:, j * lanes:(j + 1) * lanes] for j in range(4)]
    v = (a[0] + a[2]) + (a[1] + a[3])
    while v.shape[1] > 4:
        h = v.shape[1] // 2
        v = v[:, :h] + v[:, h:]
    s = (v[:, 0] + v[:, 1]) + (v[:, 2] + v[:, 3]) if b.hadd_fold else \
        (v[:, 0] + v[:, 2]) + (v[:, 1] + v[:, 3])
    rest = n - top
    rounded = rest - rest % b.tail_block if b.rounded_tail else 0
    for t in range(rest):
        i = top + t
        s = s + m[:, i] * y[i] if t < rounded else fma(m[:, i], y[i], s)
    return s.astype(F32)


def conv_model(qkv: np.ndarray, conv_state: np.ndarray, w: np.ndarray, b: Build) -> np.ndarray:
    """SSM_CONV: [T, C] from the window [conv_state, qkv^T] and the taps w [C, 4]."""
    window = np.concatenate([conv_state, qkv.T], axis=1)
    out = np.empty_like(qkv)
    for t in range(qkv.shape[0]):
        if b.conv_rounded:
            c = np.zeros(qkv.shape[1], F32)
            for m in range(4):
                c = c + window[:, t + m] * w[:, m]
        else:
            c = window[:, t] * w[:, 0]
            for m in range(1, 4):
                c = fma(window[:, t + m], w[:, m], c)
        out[t] = c
    return out


def rms_factor(x: np.ndarray, eps: F32) -> np.ndarray:
    """ggml_rms_norm's factor per row of x [..., n]: 1 / sqrtf((float)(fp64 sum / n) + eps)."""
    sq = (x * x).astype(F64)
    s = np.zeros(x.shape[:-1], F64)
    for i in range(x.shape[-1]):
        s = s + sq[..., i]
    mean = (s / x.shape[-1]).astype(F32)
    return (F32(1) / np.sqrt(mean + eps)).astype(F32)


def l2_model(x: np.ndarray, d: int, eps: float) -> np.ndarray:
    """RMS_NORM(eps / D) then SCALE(1 / sqrtf(D)) over heads of D: x [T, H*D]."""
    h = x.reshape(x.shape[0], -1, d)
    r = rms_factor(h, F32(F32(eps) / F32(d)))
    return ((h * r[..., None]) * (F32(1) / np.sqrt(F32(d)))).reshape(x.shape).astype(F32)


def gate_model(i: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    beta = F32(1) / (F32(1) + expf(-i["beta"]))
    pre = (i["alpha"] + i["dt_bias"][None, :]).astype(F32)
    sp = np.where(pre > 20, pre, logf(F32(1) + expf(pre)))
    return beta.astype(F32), (sp.astype(F32) * i["ssm_a"][None, :]).astype(F32)


def gdn_model(q: np.ndarray, k: np.ndarray, v: np.ndarray, gate: np.ndarray, beta: np.ndarray,
              state: np.ndarray, b: Build) -> tuple[np.ndarray, np.ndarray]:
    """GATED_DELTA_NET: q, k [T, Hk*D], v [T, Hv*D], gate, beta [T, Hv], state [Hv, D, D]."""
    t_len, hv, d = v.shape[0], state.shape[0], state.shape[1]
    hk = q.shape[1] // d
    scale = F32(1) / np.sqrt(F32(d))
    out = np.empty((t_len, hv * d), F32)
    state = state.copy()
    for h in range(hv):
        s = state[h]
        kh = h % hk
        for t in range(t_len):
            kt, qt = k[t, kh * d:(kh + 1) * d], q[t, kh * d:(kh + 1) * d]
            s = s * expf(gate[t, h])
            delta = (v[t, h * d:(h + 1) * d] - dot_rows(s, kt, b)) * beta[t, h]
            s = fma(kt[None, :], delta[:, None], s)
            out[t, h * d:(h + 1) * d] = dot_rows(s, qt, b) * scale
        state[h] = s
    return out, state


def gated_norm_model(o: np.ndarray, z: np.ndarray, norm_w: np.ndarray, d: int, eps: float,
                     b: Build) -> np.ndarray:
    oh = o.reshape(o.shape[0], -1, d)
    r = rms_factor(oh, F32(eps))
    normed = (oh * r[..., None]) * norm_w
    return (normed * silu_rows(z.reshape(oh.shape), b)).reshape(o.shape).astype(F32)


def chain_model(i: dict[str, Any], b: Build) -> dict[str, np.ndarray]:
    d, hk = i["dk"], i["hk"]
    kd = hk * d
    raw = conv_model(i["qkv"], i["conv_state"], i["conv_w"], b)
    act = silu_rows(raw, b)
    q, k = l2_model(act[:, :kd], d, i["eps"]), l2_model(act[:, kd:2 * kd], d, i["eps"])
    beta, gate = gate_model(i)
    o, state = gdn_model(q, k, act[:, 2 * kd:], gate, beta, i["ssm_state"], b)
    window = np.concatenate([i["conv_state"], i["qkv"].T], axis=1)
    return {"conv_output_raw": raw, "conv_output_silu": act, "q_conv_predelta": q,
            "k_conv_predelta": k, "beta_sigmoid": beta, "gate": gate, "attn_output": o,
            "y": gated_norm_model(o, i["z"], i["norm_w"], d, i["eps"], b),
            "conv_state": np.ascontiguousarray(window[:, -3:]), "ssm_state": state}


def test_numpy_fma_is_correctly_rounded() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 20000)).astype(F32)
    c = (rng.standard_normal(20000) * 1e-7).astype(F32)
    # ties of the fp64 sum: c a quarter ulp of fp32 beside a*b = 1 + 2^-24 exactly
    a[:4], b[:4] = F32(1 + 2 ** -12), F32(1 + 2 ** -12)
    c[:4] = [F32(2 ** -60), F32(-(2 ** -60)), F32(0), F32(2 ** -30)]
    want = np.array([_libm.fmaf(float(p), float(q), float(r))
                     for p, q, r in zip(a, b, c, strict=True)], F32)
    assert differing(fma(a, b, c), want) == 0


# ---- oracle against the model -----------------------------------------------------------

@pytest.mark.parametrize("build", BUILDS, ids=build_id)
def test_oracle_matches_numpy_model(ops: ModuleType, build: Build,
                                    evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(21)
    other = other_lanes(build)
    figures: dict[str, dict[str, int]] = {}
    builds_differ = 0
    for n, (t1, _, hk, hv, d) in enumerate(CASES):
        i = make(rng, min(t1, 6), hk, hv, d, big=(n % 2 == 0))
        _, y, conv, ssm = call(ops, BASE + "_ref", i, selector=build.selector)
        want = chain_model(i, build)
        figures[f"T={i['t']} Hk={hk} Hv={hv} D={d}"] = {
            "y": differing(y, want["y"]), "conv_state": differing(conv, want["conv_state"]),
            "ssm_state": differing(ssm, want["ssm_state"]),
            "compared": y.size + conv.size + ssm.size}
        builds_differ += differing(chain_model(i, other)["y"], want["y"])
    ok = not any(f["y"] or f["conv_state"] or f["ssm_state"] for f in figures.values())
    evidence(Rung.ORACLE, ok and builds_differ > 0, contract=build.contract, provider=PROVIDER,
             oracle=BASE + "_ref",
             model="test/runtime_c/ops/test_gated_delta_ggml.py::chain_model",
             differing_elements=figures, other_build_model_differs_in_y=builds_differ)
    assert ok, figures
    assert builds_differ > 0  # the cases tell the two builds apart


# ---- external: llama.cpp's own chain ------------------------------------------------------

def llamacpp_ggml(evidence: Callable[..., Any], build: Build) -> Any:
    try:
        from v8dialect.parity.ggml_ops import GgmlOps

        g_ops = GgmlOps()
    except Exception as exc:  # noqa: BLE001 - any failure to load llama.cpp's ggml
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=build.contract, provider=PROVIDER,
                 backend=BACKEND, reason=str(exc))
        pytest.fail(f"llama.cpp's ggml is not loadable: {exc} (recorded as unresolved)")
    if g_ops.build != build.name:
        pytest.skip(f"llama.cpp's libggml-cpu here is its {g_ops.build} build; contract "
                    f"{build.contract} reproduces its {build.name} build")
    # llama.cpp was compiled on this machine: its small loops are what this compiler makes of
    # them (the builder's ggml_loop_vectors = native); a contract for another compiler tuning
    # describes builds this libggml cannot confirm.
    if build.lanes == 16 and native_loop_vectors() != build.loop_vectors:
        pytest.skip(f"this machine's compiler vectorizes ggml's small loops as "
                    f"{native_loop_vectors()}; contract {build.contract} reproduces builds with "
                    f"{build.loop_vectors}")
    return g_ops


@pytest.mark.parametrize("build", BUILDS, ids=build_id)
def test_oracle_vs_llamacpp_ggml_chain(ops: ModuleType, build: Build,
                                       evidence: Callable[..., Any]) -> None:
    g_ops = llamacpp_ggml(evidence, build)
    rng = np.random.default_rng(35)
    figures: dict[str, dict[str, int]] = {}
    for n, (t1, t2, hk, hv, d) in enumerate(CASES):
        first = make(rng, t1, hk, hv, d, big=(n % 3 == 1))
        _, y1, conv1, ssm1 = call(ops, BASE + "_ref", first, selector=build.selector)
        nxt = make(rng, t2, hk, hv, d)
        second = {**nxt, "conv_w": first["conv_w"], "ssm_a": first["ssm_a"],
                  "dt_bias": first["dt_bias"], "norm_w": first["norm_w"],
                  "conv_state": conv1, "ssm_state": ssm1}
        _, y2, conv2, ssm2 = call(ops, BASE + "_ref", second, selector=build.selector)
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
    evidence(Rung.EXTERNAL, ok, contract=build.contract, provider=PROVIDER, backend=BACKEND,
             ggml_build=build.name, oracle=BASE + "_ref",
             chain="src/models/qwen35.cpp build_layer_attn_linear, fused GATED_DELTA_NET",
             differing_elements=figures)
    assert ok, figures


def stage_differences(out: dict[str, np.ndarray], i: dict[str, Any],
                      b: Build) -> dict[str, int]:
    """Each stage of llama.cpp's chain against the model of build b fed with llama.cpp's own
    previous stage; differing elements per stage."""
    d, kd = i["dk"], i["hk"] * i["dk"]
    act = out["conv_output_silu"]
    beta, gate = gate_model(i)
    o, state = gdn_model(out["q_conv_predelta"], out["k_conv_predelta"], act[:, 2 * kd:],
                         out["gate"], out["beta_sigmoid"], i["ssm_state"], b)
    got = {
        "conv_output_raw": conv_model(i["qkv"], i["conv_state"], i["conv_w"], b),
        "conv_output_silu": silu_rows(out["conv_output_raw"], b),
        "q_conv_predelta": l2_model(act[:, :kd], d, i["eps"]),
        "k_conv_predelta": l2_model(act[:, kd:2 * kd], d, i["eps"]),
        "beta_sigmoid": beta, "gate": gate, "attn_output": o, "ssm_state": state,
        "y": gated_norm_model(out["attn_output"], i["z"], i["norm_w"], d, i["eps"], b),
    }
    return {key: differing(v, out[key]) for key, v in got.items()}


@pytest.mark.parametrize("build", BUILDS, ids=build_id)
def test_ggml_chain_stages_are_llamacpps(build: Build, evidence: Callable[..., Any]) -> None:
    """Every stage of ggml_ops.gated_delta_chain, from llama.cpp's own previous stage, against
    the numpy model of the build: pins that the chain is llama.cpp's graph stage by stage (not
    only that the ends agree) and that each build-dependent choice of the contract is the
    one llama.cpp makes: the model with the other choice differs at that stage."""
    g_ops = llamacpp_ggml(evidence, build)
    other = other_lanes(build)
    variants = {  # stage -> models that must differ from llama.cpp there
        "conv_output_raw": [replace(build, conv_rounded=not build.conv_rounded)],
        "conv_output_silu": [other, replace(build, lanes=other.lanes),
                             replace(build, scalef_exp=not build.scalef_exp)],
        "attn_output": [other, replace(build, hadd_fold=not build.hadd_fold),
                        replace(build, rounded_tail=False),
                        replace(build, tail_block=12 - build.tail_block)],  # 8 <-> 4
        "y": [other],
    }
    figures: dict[str, Any] = {}
    variant_hits = {f"{stage}/{n}": 0 for stage, vs in variants.items() for n in range(len(vs))}
    rng = np.random.default_rng(8)
    for t, hk, hv, d in STAGE_CASES:
        i = make(rng, t, hk, hv, d, big=True)
        out = g_ops.gated_delta_chain(i["qkv"], i["z"], i["alpha"], i["beta"], i["conv_w"],
                                      i["ssm_a"], i["dt_bias"], i["norm_w"], i["conv_state"],
                                      i["ssm_state"], i["hk"], i["eps"], 1)
        figures[f"T={t} Hk={hk} Hv={hv} D={d}"] = stage_differences(out, i, build)
        for stage, vs in variants.items():
            for n, v in enumerate(vs):
                variant_hits[f"{stage}/{n}"] += stage_differences(out, i, v)[stage]
    ok = not any(any(f.values()) for f in figures.values())
    evidence(Rung.EXTERNAL, ok, contract=build.contract, provider=PROVIDER, backend=BACKEND,
             ggml_build=build.name, model="test/runtime_c/ops/test_gated_delta_ggml.py stages",
             differing_elements=figures, other_choices_differ=variant_hits)
    assert ok, figures
    assert all(variant_hits.values()), variant_hits


def test_portable_contract_differs_from_llamacpp(ops: ModuleType) -> None:
    """Negative control: the portable contract (ascending scalar sums, libm SiLU, unfused
    updates) gives different bits from both llama.cpp chains on the same inputs, and the
    builds' chains differ from each other."""
    i = make(np.random.default_rng(6), 5, 2, 8, 32)
    _, y_port, _, ssm_port = call(ops, "v8_gated_delta_net_f32_ref", i,
                                  selector="V8_GATED_DELTA_RULE_FP32_TOKEN_SEQUENTIAL_STATE")
    ys: list[np.ndarray] = []
    for b in BUILDS:
        _, y_ggml, _, ssm_ggml = call(ops, BASE + "_ref", i, selector=b.selector)
        assert differing(y_ggml, y_port) + differing(ssm_ggml, ssm_port) > 0
        ys.append(y_ggml)
    assert all(differing(a, b) > 0 for n, a in enumerate(ys) for b in ys[n + 1:])


# ---- production and threadpool ----------------------------------------------------------

@pytest.fixture
def restricted(ops: ModuleType) -> Iterator[Callable[[int], None]]:
    yield ops.lib.v8_cpu_restrict
    ops.lib.v8_cpu_restrict(CPU_ALL)


@pytest.mark.parametrize("build", BUILDS, ids=build_id)
def test_production_and_threadpool_match_oracle(ops: ModuleType, pools: dict[int, Any],
                                                build: Build,
                                                restricted: Callable[[int], None],
                                                evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(77)
    masks = {"all": CPU_ALL, "avx2": CPU_AVX2_ONLY, "scalar": CPU_SCALAR}
    production: dict[str, list[dict[str, Any]]] = {m: [] for m in masks}
    per_workers: dict[int, list[dict[str, Any]]] = {w: [] for w in WORKERS}
    for t1, _, hk, hv, d in CASES:
        i = make(rng, t1, hk, hv, d, big=(d == 32))
        if d == 32:  # the output gate's SiLU on a quiet NaN with a payload, infinities and
            # arguments whose exp saturates or leaves the fp32 range through the 2^n scale
            specials = np.array([0x7FC01234, 0x7F800000, 0xFF800000], np.uint32).view(F32)
            i["z"].flat[3:6] = specials
            i["z"].flat[9:15] = np.array([150, 95, -95, 150, 200, -200], F32)
        _, *want = call(ops, BASE + "_ref", i, selector=build.selector)
        for label, mask in masks.items():
            restricted(mask)
            status, *got = call(ops, BASE, i, selector=build.selector)
            assert status == V8_OK
            production[label] += [models.compare(g, w) for g, w in zip(got, want, strict=True)]
        restricted(CPU_ALL)
        for w in WORKERS:
            status, *got = call(ops, BASE + "_parallel_dispatch", i, pools[w],
                                selector=build.selector)
            assert status == V8_OK
            per_workers[w] += [models.compare(g, x) for g, x in zip(got, want, strict=True)]

    def merge(f: list[dict[str, Any]]) -> dict[str, Any]:
        return {"compared": sum(x["compared"] for x in f),
                "bit_exact": sum(x["bit_exact"] for x in f)}

    prod = {m: merge(f) for m, f in production.items()}
    ok = all(p["bit_exact"] == p["compared"] for p in prod.values())
    evidence(Rung.PRODUCTION, ok, contract=build.contract, provider=PROVIDER, production=BASE,
             cpu_masks=prod)
    totals = {w: merge(f) for w, f in per_workers.items()}
    ok_pool = all(t["bit_exact"] == t["compared"] for t in totals.values())
    evidence(Rung.THREADPOOL, ok_pool, contract=build.contract, provider=PROVIDER,
             threadpool=BASE + "_parallel_dispatch", partition="independent_heads",
             workers={str(w): t for w, t in totals.items()})
    assert ok and ok_pool, (prod, totals)


@pytest.mark.parametrize("build", BUILDS, ids=build_id)
@pytest.mark.parametrize("fn", (BASE + "_ref", BASE))
def test_prefill_last_row_equals_a_decode_step(ops: ModuleType, fn: str, build: Build) -> None:
    i = make(np.random.default_rng(12), 7, 2, 4, 16)
    sel = build.selector
    _, y_all, conv_all, ssm_all = call(ops, fn, i, selector=sel)
    head = {key: (v[:6] if key in ("qkv", "z", "alpha", "beta") else v) for key, v in i.items()}
    _, y_head, conv_head, ssm_head = call(ops, fn, head, selector=sel, t=6)
    tail = {key: (v[6:] if key in ("qkv", "z", "alpha", "beta") else v) for key, v in i.items()}
    _, y_step, conv_step, ssm_step = call(ops, fn, tail, selector=sel, t=1,
                                          conv_state=conv_head, ssm_state=ssm_head)
    assert differing(y_all[:6], y_head) == 0 and differing(y_all[6:], y_step) == 0
    assert differing(conv_all, conv_step) == 0 and differing(ssm_all, ssm_step) == 0


@pytest.mark.parametrize("build", BUILDS, ids=build_id)
@pytest.mark.parametrize("suffix", ("_ref", "", "_parallel_dispatch"))
def test_argument_checks_leave_outputs_and_states_untouched(
    ops: ModuleType, pools: dict[int, Any], suffix: str, build: Build
) -> None:
    i = make(np.random.default_rng(9), 3, 2, 4, 16)
    pool = pools[2] if suffix == "_parallel_dispatch" else None
    unknown, bad = int(ops.lib.V8_ERR_UNKNOWN_SELECTOR), int(ops.lib.V8_ERR_BAD_DIMENSION)
    null = int(ops.lib.V8_ERR_NULL_ARGUMENT)
    sel = build.selector
    for label, override, selector, want in (
        ("portable selector", {}, "V8_GATED_DELTA_RULE_FP32_TOKEN_SEQUENTIAL_STATE", unknown),
        ("value heads not a multiple of key heads", {"hk": 3}, sel, bad),
        ("key and value head dims differ", {"dv": 8}, sel, bad),
        ("head dim over the limit", {"dk": 513, "dv": 513}, sel, bad),
        ("convolution of width 3", {"k": 3}, sel, bad),
        ("negative eps", {"eps": -1.0}, sel, bad),
    ):
        status, y, conv, ssm = call(ops, BASE + suffix, i, pool, selector, **override)
        assert status == want, (label, status)
        assert np.all(y == SENTINEL), label
        assert differing(conv, i["conv_state"]) == 0 and differing(ssm, i["ssm_state"]) == 0
    ffi = ops.ffi
    y = np.full((3, 4 * 16), SENTINEL, dtype=F32)
    status = getattr(ops.lib, BASE + suffix)(
        *([pool] if pool is not None else []), getattr(ops.lib, sel), fptr(ffi, y),
        ffi.NULL, fptr(ffi, i["z"]), fptr(ffi, i["alpha"]), fptr(ffi, i["beta"]),
        fptr(ffi, i["conv_w"]), fptr(ffi, i["ssm_a"]), fptr(ffi, i["dt_bias"]),
        fptr(ffi, i["norm_w"]), fptr(ffi, i["conv_state"].copy()),
        fptr(ffi, i["ssm_state"].copy()), 3, 2, 4, 16, 16, 4, 1e-6)
    assert status == null and np.all(y == SENTINEL)
