"""Fixtures for the quantized-linear evidence: one compiled provider, one
ggml import, and per-shape test models (ggml-quantized weights that went
through a real GGUF file) built once per session."""

from __future__ import annotations

import gc
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ql_support import QL, GgmlLinear, gguf_roundtrip, import_ggml, make_activation, make_weights


@pytest.fixture(scope="session")
def ql() -> Iterator[QL]:
    lib = QL()
    yield lib
    lib.lib.v8_cpu_restrict(0xFFFFFFFF)
    lib.close()


@pytest.fixture(scope="session")
def ggml_mod() -> Any | None:
    return import_ggml()


@dataclass
class Model:
    fmt: str
    n: int
    k: int
    wq: np.ndarray          # weight blocks as read back from the GGUF file
    x: np.ndarray           # one activation vector (GEMV)
    quantized_by: str       # "ggml" or "v8" (when ggml is missing)
    runners: dict[int, GgmlLinear]  # ggml mul_mat graphs by token count


class Models:
    def __init__(self, ql: QL, ggml: Any | None, root: Path) -> None:
        self.ql, self.ggml, self.root = ql, ggml, root
        self.cache: dict[tuple[str, int, int], Model] = {}

    def get(self, fmt: str, n: int, k: int) -> Model:
        key = (fmt, n, k)
        if key in self.cache:
            return self.cache[key]
        seed = zlib.crc32(f"{fmt}:{n}:{k}".encode()) & 0xFFFF
        w = make_weights(n, k, seed)
        runners: dict[int, GgmlLinear] = {}
        if self.ggml is not None:
            runner = GgmlLinear(self.ggml, fmt, n, k, 1)
            raw = runner.quantize(w)
            runners[1] = runner
            by = "ggml"
        else:
            raw = self.ql.quantize(fmt, w)
            by = "v8"
        del w
        gc.collect()
        path = self.root / f"{fmt}_{n}x{k}.gguf"
        wq = gguf_roundtrip(path, {"blk.0.w": (fmt, raw)})["blk.0.w"]
        assert np.array_equal(wq, raw)
        del raw
        model = Model(fmt, n, k, wq, make_activation(k, seed + 1), by, runners)
        self.cache[key] = model
        return model

    def runner(self, model: Model, m: int) -> GgmlLinear | None:
        if self.ggml is None:
            return None
        if m not in model.runners:
            r = GgmlLinear(self.ggml, model.fmt, model.n, model.k, m)
            r.set_weights(model.wq)
            model.runners[m] = r
        return model.runners[m]

    def close(self) -> None:
        for model in self.cache.values():
            for r in model.runners.values():
                r.close()


@pytest.fixture(scope="session")
def models(ql: QL, ggml_mod: Any | None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Models]:
    m = Models(ql, ggml_mod, tmp_path_factory.mktemp("gguf"))
    yield m
    m.close()
