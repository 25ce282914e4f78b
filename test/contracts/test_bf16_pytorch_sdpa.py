"""bf16_pytorch_sdpa is an observed contract: PyTorch's CPU SDPA against our model of it.

No C provider delivers it and PyTorch's GEMM order is not pinned, so the
comparison is within a tolerance (two bf16 ulps of each output) and is
recorded as an observation, which can never make the contract validated.
A missing PyTorch is recorded as unresolved and fails.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from v8dialect.evidence.record import Outcome, Rung

CONTRACT = "bf16_pytorch_sdpa"


def bf16_round(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # nearest, ties to even
    return rounded.astype(np.uint32).view(np.float32)


def model(q: np.ndarray[Any, Any], k: np.ndarray[Any, Any], v: np.ndarray[Any, Any],
          scale: float) -> np.ndarray[Any, Any]:
    """The registry's description: bf16 storage promoted to fp32, Q and K each times
    sqrt(scale), fp32 products, full-row fp32 softmax, context rounded to bf16."""
    s = np.float32(np.sqrt(np.float32(scale)))
    qs, ks = (q * s).astype(np.float32), (k * s).astype(np.float32)
    scores = np.einsum("htd,hsd->hts", qs, ks, dtype=np.float32)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores).astype(np.float32)
    p = p / p.sum(axis=-1, keepdims=True)
    return bf16_round(np.einsum("hts,hsd->htd", p, v, dtype=np.float32))


@pytest.mark.parametrize(("heads", "tokens", "dim"), [(4, 16, 64), (2, 33, 128)])
def test_pytorch_sdpa_bf16_agrees_with_the_contract_within_two_ulps(
        heads: int, tokens: int, dim: int, evidence: Any) -> None:
    try:
        import torch
    except ImportError:
        evidence(Rung.OBSERVATION, Outcome.UNRESOLVED, contract=CONTRACT, backend="torch missing")
        pytest.fail("PyTorch is not installed: the observation is unresolved")
    rng = np.random.default_rng(heads * tokens)
    q, k, v = (bf16_round(rng.standard_normal((heads, tokens, dim)).astype(np.float32))
               for _ in range(3))
    scale = 1.0 / np.sqrt(dim)
    with torch.no_grad():
        got = torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(a).to(torch.bfloat16) for a in (q, k, v)), scale=scale
        ).to(torch.float32).numpy()
    want = model(q, k, v, scale)
    ulp = np.abs(want) * 2.0**-7 + 1e-30  # one bf16 ulp is at most 2^-7 relative
    err = np.abs(got - want)
    ok = bool(np.all(err <= 2 * ulp))
    evidence(Rung.OBSERVATION, ok, contract=CONTRACT, backend=f"torch {torch.__version__}",
             max_abs_err=float(err.max()), max_err_in_ulps=float((err / ulp).max()),
             bit_exact=f"{int(np.sum(got == want))}/{got.size}")
    assert ok, float((err / ulp).max())
