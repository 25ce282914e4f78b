"""Vision encoder providers (layer_norm_fp32, gelu_fp32, vision_rope_fp32,
patch_merge_fp32), rung by rung:

- ORACLE: each *_ref against an independent numpy model of its contract, bit for bit;
- PRODUCTION and THREADPOOL (1, 2, 3, 4, 8 workers) against the oracle, bit for bit;
- EXTERNAL: ggml (ggml-python 0.0.45) where it exposes the op.  Layer norm and
  GELU are recorded with their figures: ggml's norm sums squared differences
  in SIMD lane trees and its ggml_gelu on fp32 goes through an fp16 table, so
  neither is this contract's arithmetic.  Vision RoPE must match bit for bit
  under the plain or the FMA-fused rotation.
- argument checks leave the output untouched.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import ops_models as models
import pytest
from ops_specs import fptr, spread

from v8dialect.evidence.record import Rung

F32, F64 = np.float32, np.float64
WORKERS = (1, 2, 3, 4, 8)
SENTINEL = F32(-1234.5)
GGML_ROPE_TYPE_VISION = 24

LN = ("layer_norm_fp32_fp64_sum_ascending_bias", "layer_norm_fp32", "v8_layer_norm_f32",
      "V8_LAYER_NORM_FP32_FP64_SUM_ASCENDING_BIAS")
GELU = ("gelu_fp32_tanh", "gelu_fp32", "v8_gelu_f32", "V8_GELU_FP32_TANH")
ROPE = ("vision_rope_fp32_iterative_theta_2d_sections", "vision_rope_fp32", "v8_vision_rope_f32",
        "V8_VISION_ROPE_FP32_ITERATIVE_THETA_2D_SECTIONS")
MERGE = ("patch_merge_2x2_exact_copy", "patch_merge_fp32", "v8_patch_merge_f32",
         "V8_PATCH_MERGE_2X2_EXACT_COPY")


# ---- numpy models, from the contract texts -------------------------------------------


def layer_norm_model(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    n = x.shape[-1]
    s = np.add.accumulate(x.astype(F64), axis=-1)[..., -1]  # ascending fp64
    mean = (s.astype(F32) / F32(n)).astype(F32)[..., None]
    d = (x - mean).astype(F32)
    sq = np.add.accumulate((d * d).astype(F32).astype(F64), axis=-1)[..., -1]
    var = (sq / F64(n)).astype(F32)
    scale = (F32(1.0) / np.sqrt((var + F32(eps)).astype(F32))).astype(F32)[..., None]
    return (((d * scale).astype(F32) * w).astype(F32) + b).astype(F32)


def gelu_model(x: np.ndarray) -> np.ndarray:
    c, a = F32(0.79788456080286535587989211986876), F32(0.044715)
    inner = ((c * x).astype(F32) * (F32(1) + ((a * x).astype(F32) * x).astype(F32))).astype(F32)
    t = np.array([ctypes_tanhf(v) for v in inner.ravel()], dtype=F32).reshape(x.shape)
    return ((F32(0.5) * x).astype(F32) * (F32(1) + t).astype(F32)).astype(F32)


_libm = ctypes.CDLL("libm.so.6")
_libm.tanhf.restype = ctypes.c_float
_libm.tanhf.argtypes = [ctypes.c_float]
for _f in ("cosf", "sinf"):
    getattr(_libm, _f).restype = ctypes.c_float
    getattr(_libm, _f).argtypes = [ctypes.c_float]


def ctypes_tanhf(v: float) -> float:
    return _libm.tanhf(float(v))


def vision_rope_model(x: np.ndarray, pos: np.ndarray, base: float, sections: tuple[int, ...],
                      fused: bool = False) -> np.ndarray:
    t_, h_, d = x.shape
    half = d // 2
    theta_scale = F32(models.powf(base, float(F32(-2.0) / F32(half))))
    s0, s01 = sections[0], sections[0] + sections[1]
    s012 = s01 + sections[2]
    total = s012 + sections[3]
    y = np.empty_like(x)
    for t in range(t_):
        th = [F32(pos[s][t]) for s in range(4)]
        cs = []
        for i in range(half):
            sector = i % total
            for k, at in enumerate((0, s0, s01, s012)):
                if sector == at:
                    th[k] = F32(pos[k][t])
                    break
            stream = 0 if sector < s0 else 1 if sector < s01 else 2 if sector < s012 else 3
            cs.append((F32(_libm.cosf(float(th[stream]))), F32(_libm.sinf(float(th[stream])))))
            th = [F32(v * theta_scale) for v in th]
        c = np.array([p[0] for p in cs], dtype=F32)
        s = np.array([p[1] for p in cs], dtype=F32)
        a, b = x[t, :, :half], x[t, :, half:]
        if fused:  # ggml's compiler may contract a*c - b*s into fma(a, c, -(b*s))
            y[t, :, :half] = (a.astype(F64) * c - (b * s).astype(F32)).astype(F32)
            y[t, :, half:] = (a.astype(F64) * s + (b * c).astype(F32)).astype(F32)
        else:
            y[t, :, :half] = ((a * c).astype(F32) - (b * s).astype(F32)).astype(F32)
            y[t, :, half:] = ((a * s).astype(F32) + (b * c).astype(F32)).astype(F32)
    return y


def merge_model(x: np.ndarray) -> np.ndarray:
    t, e = x.shape
    return np.stack([np.concatenate([x[4 * j + k] for k in range(4)]) for j in range(t // 4)])


# ---- calls ----------------------------------------------------------------------------


def call(ops: ModuleType, which: tuple[str, ...], suffix: str, i: dict[str, Any],
         out: np.ndarray, pool: Any = None, selector: str | None = None) -> int:
    lead = [pool] if suffix == "_parallel_dispatch" else []
    sel = getattr(ops.lib, selector or which[3])
    fn = getattr(ops.lib, which[2] + suffix)
    f = ops.ffi
    if which is LN:
        return fn(*lead, sel, fptr(f, out), fptr(f, i["x"]), fptr(f, i["w"]), fptr(f, i["b"]),
                  i["x"].shape[0], i["x"].shape[1], i["eps"])
    if which is GELU:
        return fn(*lead, sel, fptr(f, out), fptr(f, i["x"]), i["x"].size)
    if which is ROPE:
        t, h, d = i["x"].shape
        return fn(*lead, sel, fptr(f, out), fptr(f, i["x"]), fptr(f, i["pos"], "int32_t"), t, h,
                  d, i.get("rot", d), i["base"], fptr(f, i["sections"], "int32_t"))
    return fn(*lead, sel, fptr(f, out), fptr(f, i["x"]), i["x"].shape[0], i["x"].shape[1])


def out_shape(which: tuple[str, ...], i: dict[str, Any]) -> tuple[int, ...]:
    if which is MERGE:
        t, e = i["x"].shape
        return (t // 4, 4 * e)
    return i["x"].shape


def run(ops: ModuleType, which: tuple[str, ...], suffix: str, i: dict[str, Any],
        pool: Any = None) -> np.ndarray:
    out = np.full(out_shape(which, i), SENTINEL, dtype=F32)
    assert call(ops, which, suffix, i, out, pool) == 0
    return out


def cases(which: tuple[str, ...], rng: np.random.Generator) -> list[dict[str, Any]]:
    if which is LN:
        return [{"x": spread(rng, (r, n), -4, 4) + F32(off), "w": spread(rng, (n,), -2, 2),
                 "b": spread(rng, (n,), -1, 1), "eps": 1e-6}
                for r, n, off in ((1, 1152, 0.0), (7, 256, 3.0), (33, 1280, -1.0), (3, 5, 0.5))]
    if which is GELU:
        return [{"x": spread(rng, (n,), -12, 12)} for n in (1, 17, 4096, 40000)]
    if which is ROPE:
        out = []
        for t, h, d, sec in ((16, 4, 64, (16, 16, 16, 16)), (9, 3, 72, (18, 18, 18, 18)),
                             (5, 2, 80, (7, 9, 4, 3)), (4, 1, 32, (0, 5, 3, 0))):
            out.append({"x": spread(rng, (t, h, d), -3, 3),
                        "pos": rng.integers(0, 64, size=(4, t)).astype(np.int32),
                        "base": 10000.0, "sections": np.array(sec, dtype=np.int32)})
        return out
    return [{"x": spread(rng, (t, e), -5, 5)} for t, e in ((4, 1), (16, 256), (64, 1152))]


def merge(figures: list[dict[str, Any]]) -> dict[str, Any]:
    return {"cases": len(figures), "compared": sum(f["compared"] for f in figures),
            "bit_exact": sum(f["bit_exact"] for f in figures),
            "max_abs_err": max(f["max_abs_err"] for f in figures),
            "max_ulp": max(f["max_ulp"] for f in figures)}


MODELS: dict[str, Callable[[dict[str, Any]], np.ndarray]] = {
    LN[0]: lambda i: layer_norm_model(i["x"], i["w"], i["b"], i["eps"]),
    GELU[0]: lambda i: gelu_model(i["x"]),
    ROPE[0]: lambda i: vision_rope_model(i["x"], i["pos"], i["base"], tuple(i["sections"])),
    MERGE[0]: lambda i: merge_model(i["x"]),
}
ALL = (LN, GELU, ROPE, MERGE)
IDS = [w[0] for w in ALL]


@pytest.mark.parametrize("which", ALL, ids=IDS)
def test_oracle_matches_numpy_model(ops: ModuleType, which: tuple[str, ...],
                                    evidence: Callable[..., Any]) -> None:
    figures = [models.compare(run(ops, which, "_ref", i), MODELS[which[0]](i))
               for i in cases(which, np.random.default_rng(11))]
    total = merge(figures)
    ok = total["bit_exact"] == total["compared"]
    evidence(Rung.ORACLE, ok, contract=which[0], provider=which[1], oracle=which[2] + "_ref",
             model=f"test/runtime_c/ops/test_vision_ops.py::{which[1]}", **total)
    assert ok, total


@pytest.mark.parametrize("which", ALL, ids=IDS)
def test_production_matches_oracle(ops: ModuleType, which: tuple[str, ...],
                                   evidence: Callable[..., Any]) -> None:
    figures = [models.compare(run(ops, which, "", i), run(ops, which, "_ref", i))
               for i in cases(which, np.random.default_rng(12))]
    total = merge(figures)
    ok = total["bit_exact"] == total["compared"]
    evidence(Rung.PRODUCTION, ok, contract=which[0], provider=which[1], production=which[2],
             **total)
    assert ok, total


@pytest.mark.parametrize("which", ALL, ids=IDS)
def test_threadpool_matches_oracle(ops: ModuleType, pools: dict[int, Any],
                                   which: tuple[str, ...], evidence: Callable[..., Any]) -> None:
    per: dict[int, list[dict[str, Any]]] = {w: [] for w in WORKERS}
    for i in cases(which, np.random.default_rng(13)):
        want = run(ops, which, "_ref", i)
        for w in WORKERS:
            per[w].append(models.compare(run(ops, which, "_parallel_dispatch", i, pools[w]), want))
    totals = {w: merge(f) for w, f in per.items()}
    ok = all(t["bit_exact"] == t["compared"] for t in totals.values())
    evidence(Rung.THREADPOOL, ok, contract=which[0], provider=which[1],
             threadpool=which[2] + "_parallel_dispatch", partition="independent_rows",
             workers={str(w): t for w, t in totals.items()})
    assert ok, totals


@pytest.mark.parametrize("suffix", ("_ref", "", "_parallel_dispatch"))
@pytest.mark.parametrize("which", ALL, ids=IDS)
def test_argument_checks_leave_the_output_untouched(ops: ModuleType, pools: dict[int, Any],
                                                    which: tuple[str, ...], suffix: str) -> None:
    i = cases(which, np.random.default_rng(14))[1]
    wrong = {LN: "V8_RMSNORM_FP32_FP64_SUM_ASCENDING", GELU: "V8_GEGLU_FP32_TANH",
             ROPE: "V8_IMROPE_FP32_ITERATIVE_THETA_INTERLEAVED_SECTIONS",
             MERGE: "V8_HEAD_SPLIT_EXACT_COPY"}[which]
    bad: list[tuple[str, dict[str, Any], str | None, str]] = [
        ("wrong selector", {}, wrong, "V8_ERR_UNKNOWN_SELECTOR")]
    if which is LN:
        bad.append(("negative eps", {"eps": -1.0}, None, "V8_ERR_BAD_DIMENSION"))
    if which is ROPE:
        bad += [("partial rotation", {"rot": 32}, None, "V8_ERR_BAD_DIMENSION"),
                ("sections past head", {"sections": np.array([40, 40, 0, 0], np.int32)}, None,
                 "V8_ERR_BAD_DIMENSION")]
    if which is MERGE:
        bad.append(("not 2x2 windows", {"x": i["x"][:6]}, None, "V8_ERR_BAD_DIMENSION"))
    for label, edit, selector, want in bad:
        args = {**i, **edit}
        out = np.full(out_shape(which, i), SENTINEL, dtype=F32)
        status = call(ops, which, suffix, args, out, pools[2], selector)
        assert status == int(getattr(ops.lib, want)), (label, status)
        assert np.all(out == SENTINEL), label


def test_vision_sections_differ_from_neox_mrope(ops: ModuleType) -> None:
    """Negative control: restarting thetas per section is visible in the bits."""
    i = cases(ROPE, np.random.default_rng(15))[0]
    ours = run(ops, ROPE, "_ref", i)
    t, h, d = i["x"].shape
    other = np.full((t, h, d), SENTINEL, dtype=F32)
    assert ops.lib.v8_mrope_f32_ref(ops.lib.V8_MROPE_FP32_ITERATIVE_THETA_SECTIONS,
                                    fptr(ops.ffi, other), fptr(ops.ffi, i["x"]),
                                    fptr(ops.ffi, i["pos"], "int32_t"), t, h, d, d, i["base"],
                                    fptr(ops.ffi, i["sections"], "int32_t")) == 0
    figures = models.compare(ours, other)
    assert figures["bit_exact"] < figures["compared"] // 2, figures


def _ggml(evidence: Callable[..., Any], which: tuple[str, ...]) -> Any:
    try:
        import ggml
    except ImportError as exc:
        evidence(Rung.EXTERNAL, False, contract=which[0], provider=which[1],
                 backend="ggml-python", reason=str(exc))
        pytest.fail(f"ggml-python is not importable: {exc}")
    return ggml


def test_vision_rope_vs_ggml(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    from test_ops_external_ggml import THREADS, ggml_run

    ggml = _ggml(evidence, ROPE)
    import ggml.utils as gu

    results: dict[str, Any] = {}
    explained = True
    for i in cases(ROPE, np.random.default_rng(16))[:3]:
        ours = run(ops, ROPE, "_ref", i)
        plain = vision_rope_model(i["x"], i["pos"], i["base"], tuple(i["sections"]))
        fused = vision_rope_model(i["x"], i["pos"], i["base"], tuple(i["sections"]), fused=True)
        d = i["x"].shape[2]
        for t in THREADS:
            def build(ctx: Any, i: dict[str, Any] = i, d: int = d) -> Any:
                x = gu.from_numpy(i["x"], ctx)
                p = gu.from_numpy(np.ascontiguousarray(i["pos"].reshape(-1)), ctx)
                sec = (ctypes.c_int * 4)(*[int(v) for v in i["sections"]])
                return ggml.ggml_rope_multi(ctx, x, p, None, d // 2, sec, GGML_ROPE_TYPE_VISION,
                                            0, i["base"], 1.0, 0.0, 1.0, 32.0, 1.0)
            theirs = ggml_run(ggml, build, t)
            n = theirs.size
            rotation = ("plain" if models.compare(theirs, plain)["bit_exact"] == n
                        else "fused" if models.compare(theirs, fused)["bit_exact"] == n
                        else "neither")
            explained &= rotation != "neither"
            results[f"{d}/{list(i['sections'])}/threads={t}"] = {
                "rotation": rotation, "vs_oracle": models.compare(ours, theirs)}
    evidence(Rung.EXTERNAL, explained, contract=ROPE[0], provider=ROPE[1],
             backend="ggml_rope_multi GGML_ROPE_TYPE_VISION (ggml-python 0.0.45)", cases=results)
    assert explained, results


def test_layer_norm_and_gelu_vs_ggml_recorded(ops: ModuleType,
                                              evidence: Callable[..., Any]) -> None:
    """ggml's arithmetic differs from both contracts by design; the figures are recorded
    (not as a pass) and must stay within a stated tolerance."""
    from test_ops_external_ggml import ggml_run

    ggml = _ggml(evidence, LN)
    import ggml.utils as gu

    rng = np.random.default_rng(17)
    ln = []
    for i in cases(LN, rng):
        def build(ctx: Any, i: dict[str, Any] = i) -> Any:
            y = ggml.ggml_norm(ctx, gu.from_numpy(i["x"], ctx), i["eps"])
            y = ggml.ggml_mul(ctx, y, gu.from_numpy(i["w"], ctx))
            return ggml.ggml_add(ctx, y, gu.from_numpy(i["b"], ctx))
        ln.append(models.compare(run(ops, LN, "_ref", i), ggml_run(ggml, build, 1)))
    ge = []
    for i in cases(GELU, rng):
        def build_g(ctx: Any, i: dict[str, Any] = i) -> Any:
            return ggml.ggml_gelu(ctx, gu.from_numpy(i["x"], ctx))
        ge.append(models.compare(run(ops, GELU, "_ref", i), ggml_run(ggml, build_g, 1)))
    ln_total, ge_total = merge(ln), merge(ge)
    # the contracts are not ggml's arithmetic: agreement within a stated tolerance is an
    # observation (it never validates anything), outside it a failure
    ln_ok, ge_ok = ln_total["max_abs_err"] <= 1e-4, ge_total["max_abs_err"] <= 2e-2
    evidence(Rung.OBSERVATION, ln_ok, contract=LN[0], provider=LN[1], tolerance=1e-4,
             backend="ggml_norm + mul + add (ggml-python 0.0.45); ggml_vec_cvar_f32 sums "
             "squares in SIMD lane trees, a different order", **ln_total)
    evidence(Rung.OBSERVATION, ge_ok, contract=GELU[0], provider=GELU[1], tolerance=2e-2,
             backend="ggml_gelu (ggml-python 0.0.45) on fp32 uses its fp16 table", **ge_total)
    assert ln_ok, ln_total
    assert ge_ok, ge_total
