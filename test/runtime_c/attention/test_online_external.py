"""External oracles for the online providers: ggml's flash_attn_ext (the
native build of this host, and an AVX2-only build for the AVX2 tree) and
PyTorch SDPA.  A missing backend is recorded `unresolved` and fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

sys.path.insert(0, str(Path(__file__).parent))
import online_model as M  # noqa: E402
from test_online_contracts import SCALE, C, bits_equal, inputs, maxerr  # noqa: E402

_V8 = constants(["attention/v8_attention.h"])
V8_OK = _V8["V8_OK"]
# the contracts called below, by selector
MERGE, SINGLE = C["f16_online_fp32_merge"], C["f16_online_single_range"]
NOSCALE = C["f16_online_single_range_noscale"]
F16KV, F32KV = C["f16_kv_fp32_online"], C["fp32_online"]
HERE = Path(__file__).parent
TREE_ID = M.tree_of_id()  # v8_attn_online_dot_tree() -> the numpy model's tree


@pytest.fixture(scope="module")
def on():
    return M.Online()


@pytest.fixture(scope="module")
def gg():
    reason = M.ggml_available()
    return reason if reason else M.GgmlFlashAttn()


SHAPES = [(32, 8, 128), (8, 2, 64), (16, 16, 72), (4, 1, 80)]
KVS = [1, 255, 256, 257, 511, 512, 513, 1047, 1058, 1609, 4096]
# the largest shape runs a subset of lengths to keep the suite short
DECODE = [(s, kv) for s in SHAPES for kv in KVS if s[0] < 32 or kv in (1, 257, 512, 1058, 4096)]


@pytest.mark.parametrize("shape,kv", DECODE, ids=["h%d_%d_d%d-kv%d" % (s + (kv,)) for s, kv in DECODE])
def test_decode_bit_exact_with_ggml(on, gg, evidence, shape, kv):
    h, hkv, d = shape
    contract = "f16_online_fp32_merge" if kv > 256 else "f16_online_single_range"
    provider = "attn_online_split_f16kv" if kv > 256 else "attn_online_f16kv"
    if isinstance(gg, str):
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=contract, provider=provider,
                 backend="ggml", reason=gg)
        pytest.fail(gg)
    rng = np.random.default_rng(kv * 31 + d)
    q, k, v = inputs(rng, 1, h, hkv, d, kv, kv + 300)
    tree = on.lib.v8_attn_online_dot_tree()
    res = {}
    for threads in (1, 2):
        ref = gg.run(q, k, v, hkv, kv, kv - 1, True, SCALE[d], threads)
        st, ours = on.call("v8_attn_online_split_ref_workers", MERGE, q, k, v, hkv, kv, kv - 1, 1,
                           SCALE[d], threads)
        res[threads] = (st == V8_OK and bits_equal(ours, ref), maxerr(ours, ref))
    ok = all(r[0] for r in res.values())
    evidence(Rung.EXTERNAL, ok, contract=contract, provider=provider, backend="ggml-python 0.0.45",
             ggml_build="native", tree=TREE_ID[tree], threads={str(t): r[0] for t, r in res.items()},
             shape=dict(H=h, Hkv=hkv, D=d, kv=kv), bit_exact=ok,
             max_abs_err=max(r[1] for r in res.values()))
    assert ok, res


# prefill rows through the single-range contract (ggml takes its one-chunk
# path below 64 query rows; at >= 64 it tiles, which is another contract)
# (one row after 1013 keys is a decode at extent 1024: the split-KV contract, above)
PREFILL = [(q, p) for q in (1, 5, 14, 63) for p in (0, 5, 1013) if (q, p) != (1, 1013)]


@pytest.mark.parametrize("n_q,past", PREFILL, ids=["q%d-past%d" % x for x in PREFILL])
@pytest.mark.parametrize("shape", [(8, 2, 128), (16, 16, 72), (4, 1, 80)], ids=lambda s: "h%d_%d_d%d" % s)
def test_prefill_single_range_bit_exact_with_ggml(on, gg, evidence, n_q, past, shape):
    h, hkv, d = shape
    if isinstance(gg, str):
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract="f16_online_single_range",
                 provider="attn_online_f16kv", backend="ggml", reason=gg)
        pytest.fail(gg)
    kv = past + n_q
    rng = np.random.default_rng(n_q * 100 + past + d)
    q, k, v = inputs(rng, n_q, h, hkv, d, kv, kv + 9)
    res = {}
    st, ours = on.call("v8_attn_online_f16kv_ref", SINGLE, q, k, v, hkv, kv, past, 1, SCALE[d])
    for threads in (1, 2):
        ref = gg.run(q, k, v, hkv, kv, past, True, SCALE[d], threads)
        res[threads] = (st == V8_OK and bits_equal(ours, ref), maxerr(ours, ref))
    ok = all(r[0] for r in res.values())
    evidence(Rung.EXTERNAL, ok, contract="f16_online_single_range", provider="attn_online_f16kv",
             backend="ggml-python 0.0.45", ggml_build="native",
             shape=dict(H=h, Hkv=hkv, D=d, n_q=n_q, past=past), bit_exact=ok,
             max_abs_err=max(r[1] for r in res.values()))
    assert ok, res


def test_noscale_bit_exact_with_ggml(on, gg, evidence):
    h, hkv, d, kv = 8, 2, 128, 300
    if isinstance(gg, str):
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract="f16_online_single_range_noscale",
                 provider="attn_online_f16kv", backend="ggml", reason=gg)
        pytest.fail(gg)
    rng = np.random.default_rng(5)
    q, k, v = inputs(rng, 1, h, hkv, d, kv, kv)
    q *= np.float32(0.1)
    ref = gg.run(q, k, v, hkv, kv, kv - 1, True, 1.0, 1)
    st, ours = on.call("v8_attn_online_f16kv_ref", NOSCALE, q, k, v, hkv, kv, kv - 1, 1, 0.5)
    ok = st == V8_OK and bits_equal(ours, ref)
    evidence(Rung.EXTERNAL, ok, contract="f16_online_single_range_noscale",
             provider="attn_online_f16kv", backend="ggml-python 0.0.45 (scale 1)", bit_exact=ok,
             max_abs_err=maxerr(ours, ref))
    assert ok


# ---- AVX2-only ggml: the AVX2 tree against the ggml built for that ISA ----

AVX2_SCRIPT = r"""
import sys, json, numpy as np
sys.path.insert(0, sys.argv[1])
import online_model as M
data = np.load(sys.argv[2])
cases = json.loads(sys.argv[3])
g = M.GgmlFlashAttn()
outs = {}
for i, c in enumerate(cases):
    outs[f"o{i}"] = g.run(data[f"q{i}"], data[f"k{i}"], data[f"v{i}"], c["hkv"], c["kv"],
                          c["p0"], True, c["scale"], c["threads"])
np.savez(sys.argv[4], **outs)
"""


def test_avx2_tree_bit_exact_with_avx2_ggml(on, evidence):
    """V8_GGML_AVX2_PYTHON names a python whose ggml-python was built with
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"."""
    py = os.environ.get("V8_GGML_AVX2_PYTHON", "")
    if not py or not Path(py).exists():
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract="f16_online_fp32_merge",
                 provider="attn_online_split_f16kv", backend="ggml AVX2-only build",
                 reason="V8_GGML_AVX2_PYTHON not set")
        pytest.fail("AVX2-only ggml not available (set V8_GGML_AVX2_PYTHON)")
    cases, arrays, ours = [], {}, []
    i = 0
    for (h, hkv, d) in [(8, 2, 64), (16, 16, 72), (4, 1, 80), (8, 2, 128)]:
        for kv, n_q in ((255, 1), (513, 1), (1058, 1), (40, 5)):
            for threads in (1, 2):
                rng = np.random.default_rng(i)
                q, k, v = inputs(rng, n_q, h, hkv, d, kv, kv)
                p0 = kv - n_q
                arrays.update({f"q{i}": q, f"k{i}": k, f"v{i}": v})
                cases.append(dict(hkv=hkv, kv=kv, p0=p0, scale=SCALE[d], threads=threads))
                if n_q == 1:
                    st, o = on.call("v8_attn_online_split_ref_tree", MERGE, q, k, v, hkv, kv, p0, 1,
                                    SCALE[d], 1, threads)
                else:
                    st, o = on.call("v8_attn_online_f16kv_ref_tree", SINGLE, q, k, v, hkv, kv, p0, 1,
                                    SCALE[d], 1)
                ours.append((st, o, dict(H=h, Hkv=hkv, D=d, kv=kv, n_q=n_q, threads=threads)))
                i += 1
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(Path(tmp) / "in.npz", **arrays)
        subprocess.run([py, "-c", AVX2_SCRIPT, str(HERE), str(Path(tmp) / "in.npz"),
                        json.dumps(cases), str(Path(tmp) / "out.npz")], check=True, timeout=300)
        got = np.load(Path(tmp) / "out.npz")
        results = [(st == V8_OK and bits_equal(o, got[f"o{j}"]), maxerr(o, got[f"o{j}"]), meta)
                   for j, (st, o, meta) in enumerate(ours)]
    n_exact = sum(r[0] for r in results)
    ok = n_exact == len(results)
    evidence(Rung.EXTERNAL, ok, contract="f16_online_fp32_merge+f16_online_single_range",
             provider="attn_online_split_f16kv", backend="ggml-python 0.0.45", ggml_build="avx2",
             tree=M.TREE_AVX2, cases=len(results), bit_exact_cases=n_exact,
             max_abs_err=max(r[1] for r in results))
    assert ok, [r for r in results if not r[0]]


# ---- PyTorch SDPA for f16_kv_fp32_online (tolerance 5e-5) ----------------

TORCH_CASES = [(32, 8, 128, 1, 1058, 1057), (8, 2, 64, 1, 4096, 4095), (16, 16, 72, 14, 1027, 1013),
               (4, 1, 80, 5, 10, 5), (4, 2, 128, 63, 63, 0)]


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: "h%d_%d_d%d_q%d_kv%d" % c[:5])
def test_f16_kv_fp32_online_vs_pytorch(on, evidence, case):
    h, hkv, d, n_q, kv, p0 = case
    try:
        import torch
    except Exception as exc:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract="f16_kv_fp32_online",
                 provider="attn_online_f16kv", backend="torch", reason=str(exc))
        pytest.fail(f"torch missing: {exc}")
    rng = np.random.default_rng(kv + n_q)
    q, k, v = inputs(rng, n_q, h, hkv, d, kv, kv + 3)
    st, ours = on.call("v8_attn_online_f16kv", F16KV, q, k, v, hkv, kv, p0, 1, SCALE[d])
    group = h // hkv
    kt = torch.from_numpy(k.view(np.float16)[:, :kv].astype(np.float32)).repeat_interleave(group, 0)
    vt = torch.from_numpy(v.view(np.float16)[:, :kv].astype(np.float32)).repeat_interleave(group, 0)
    qt = torch.from_numpy(np.transpose(q, (1, 0, 2)).copy())
    mask = torch.zeros((n_q, kv), dtype=torch.bool)
    for i in range(n_q):
        mask[i, : p0 + i + 1] = True
    ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=SCALE[d])
    ref = np.transpose(ref.numpy(), (1, 0, 2))
    err = maxerr(ours, ref)
    ok = st == V8_OK and err <= 5e-5
    evidence(Rung.EXTERNAL, ok, contract="f16_kv_fp32_online", provider="attn_online_f16kv",
             backend=f"torch {torch.__version__} SDPA (K/V rounded through fp16)", tolerance=5e-5,
             max_abs_err=err, shape=dict(H=h, Hkv=hkv, D=d, n_q=n_q, kv=kv))
    assert ok, err


def test_fp32_online_vs_pytorch(on, evidence):
    import torch
    h, hkv, d, n_q, kv, p0 = 8, 2, 128, 3, 700, 697
    rng = np.random.default_rng(9)
    q, k, v = inputs(rng, n_q, h, hkv, d, kv, kv, f16=False)
    st, ours = on.call("v8_attn_online_f32kv", F32KV, q, k, v, hkv, kv, p0, 1, SCALE[d])
    kt = torch.from_numpy(k[:, :kv]).repeat_interleave(h // hkv, 0)
    vt = torch.from_numpy(v[:, :kv]).repeat_interleave(h // hkv, 0)
    qt = torch.from_numpy(np.transpose(q, (1, 0, 2)).copy())
    mask = torch.zeros((n_q, kv), dtype=torch.bool)
    for i in range(n_q):
        mask[i, : p0 + i + 1] = True
    ref = np.transpose(torch.nn.functional.scaled_dot_product_attention(
        qt, kt, vt, attn_mask=mask, scale=SCALE[d]).numpy(), (1, 0, 2))
    err = maxerr(ours, ref)
    ok = st == V8_OK and err <= 5e-5
    evidence(Rung.EXTERNAL, ok, contract="fp32_online", provider="attn_online_f32kv",
             backend=f"torch {torch.__version__} SDPA", tolerance=5e-5, max_abs_err=err)
    assert ok, err
