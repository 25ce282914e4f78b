"""llama.cpp as the end-to-end oracle: the same GGUF file, run through llama-cpp-python's
low-level API, giving per-position logits and, on request, every graph node's output.

The context is configured the way the v8 circuits' llama.cpp contracts describe it: flash
attention on, fp16 K and V caches, one sequence, every token's logits kept, the whole prompt
in one micro-batch (so the attention route llama.cpp takes is the one its batch size
selects), `n_threads` for both batch and single-token evaluation, and weight repacking on or
off (llama.cpp's `use_extra_bufts`; on is its default).

Observing intermediate tensors uses the scheduler's eval callback (`cb_eval`).  Asking to
observe a node makes the scheduler compute the graph in pieces, which can change what
llama.cpp fuses; the caller compares an observed run's logits with a plain run's before
trusting its tensors (see `v8dialect.parity.locate`).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from v8dialect.runtime.host import cpu_model

GGML_MAX_DIMS = 4
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
GGML_TYPE_I32 = 26


class GgmlTensor(ctypes.Structure):
    """The leading fields of ggml's `struct ggml_tensor` (ggml.h), up to its name."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
    ]


class OracleMissing(Exception):
    """llama-cpp-python is not importable (the `oracle` extra is not installed)."""


def import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except Exception as exc:  # noqa: BLE001 - any import failure means no oracle
        override = os.environ.get("LLAMA_CPP_LIB_PATH")
        fix = (f"LLAMA_CPP_LIB_PATH={override} must name a folder holding a llama.cpp build's "
               "libllama.so" if override else
               "install the 'oracle' extra: pip install -e '.[oracle]'")
        raise OracleMissing(f"llama-cpp-python is not importable ({exc}); {fix}") from None
    return llama_cpp


@dataclass(frozen=True)
class OracleInfo:
    """What a ledger row records about the llama.cpp that produced it."""

    llama_cpp_python: str
    llama_cpp: str
    system_info: str
    cpu: str

    def as_dict(self) -> dict[str, str]:
        return {"llama_cpp_python": self.llama_cpp_python, "llama_cpp": self.llama_cpp,
                "ggml_system_info": self.system_info, "cpu": self.cpu}


def oracle_info() -> OracleInfo:
    lib = import_llama_cpp()
    version = lib.llama_version().decode() if hasattr(lib, "llama_version") else "unknown"
    return OracleInfo(lib.__version__, version, lib.llama_print_system_info().decode().strip(),
                      cpu_model())


@dataclass(frozen=True)
class LlamaConfig:
    threads: int = 1
    repack: bool = True
    n_ctx: int = 1024
    n_ubatch: int = 512


@dataclass(frozen=True)
class Observed:
    """One graph node's output as llama.cpp computed it (fp32 values in ggml order
    reversed: a ggml tensor with ne = (D, T) is a numpy array [T, D])."""

    name: str
    op: str
    values: np.ndarray[Any, Any]


@dataclass
class Observer:
    """Collects every fp32/fp16 node the scheduler computes, in evaluation order."""

    ggml: Any
    nodes: list[Observed] = field(default_factory=list[Observed])

    def __call__(self, tensor_ptr: int, ask: bool, user_data: int) -> bool:
        del user_data
        t = GgmlTensor.from_address(tensor_ptr)
        if ask:
            return t.type in (GGML_TYPE_F32, GGML_TYPE_F16)
        if t.data and t.type in (GGML_TYPE_F32, GGML_TYPE_F16):
            self.nodes.append(Observed(t.name.decode(errors="replace"), self.op_desc(tensor_ptr),
                                       read_tensor(t)))
        return True

    def op_desc(self, tensor_ptr: int) -> str:
        return self.ggml.ggml_op_desc(ctypes.c_void_p(tensor_ptr)).decode()


def read_tensor(t: GgmlTensor) -> np.ndarray[Any, Any]:
    """A copy of a host tensor's values as fp32, numpy axes in reverse ggml order, leading
    unit axes dropped; strides are honoured, so views read what they view."""
    dtype = np.dtype(np.float32 if t.type == GGML_TYPE_F32 else np.float16)
    dims = [int(t.ne[i]) for i in range(GGML_MAX_DIMS)]
    strides = [int(t.nb[i]) for i in range(GGML_MAX_DIMS)]
    span = sum((n - 1) * s for n, s in zip(dims, strides, strict=True)) + dtype.itemsize
    raw = (ctypes.c_uint8 * span).from_address(t.data)
    values = np.ndarray(shape=dims[::-1], dtype=dtype, buffer=memoryview(raw), strides=strides[::-1])
    out = np.array(values, dtype=np.float32)
    while out.ndim > 1 and out.shape[0] == 1:
        out = out[0]
    return out


def _ggml_lib() -> Any:
    from llama_cpp._ggml import libggml

    libggml.ggml_op_desc.argtypes = [ctypes.c_void_p]
    libggml.ggml_op_desc.restype = ctypes.c_char_p
    return libggml


class LlamaCppModel:
    """One model file loaded once; each `session()` is a fresh context (empty KV cache)."""

    def __init__(self, path: Path, repack: bool = True) -> None:
        self.lib = import_llama_cpp()
        self.log: list[str] = []
        self._log_cb = self.lib.llama_log_callback(self._on_log)
        self.lib.llama_log_set(self._log_cb, None)
        self.lib.llama_backend_init()
        params = self.lib.llama_model_default_params()
        params.use_extra_bufts = repack
        params.use_mmap = True
        self.model = self.lib.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            tail = "".join(self.log[-5:]).strip()
            raise ValueError(f"{path}: llama.cpp cannot load this file: {tail}")
        self.vocab = self.lib.llama_n_vocab(self.lib.llama_model_get_vocab(self.model))
        self.repack = repack
        if repack and any("AMX model buffer" in line for line in self.log):
            # A build with ggml's AMX backend (on CPUs with AMX) places K-quant weights in its
            # AMX buffer rather than the CPU repack layout weight_layout=ggml_repacked
            # reproduces; its arithmetic is no v8 contract (and llama_decode crashes on it in
            # the pinned release), so there is nothing to compare against.
            self.close()
            raise ValueError(f"{path}: error: this llama.cpp build placed weights in ggml's AMX buffer: "
                             "no v8 contract reproduces its arithmetic; compare with --repack "
                             "off, or use a llama.cpp built without AMX (.ci/run builds it "
                             "with -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)")

    def _on_log(self, level: int, text: bytes, user_data: Any) -> None:
        del level, user_data
        self.log.append(text.decode(errors="replace"))

    def repacked_tensors(self) -> str:
        """What llama.cpp's load log says about repacked weights (empty when off)."""
        return "".join(line for line in self.log if "repack" in line.lower()).strip()

    def session(self, config: LlamaConfig, observe: bool = False) -> LlamaCppSession:
        return LlamaCppSession(self, config, observe)

    def close(self) -> None:
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None


def _drop_log(level: int, text: bytes | None, user_data: int | None) -> None:
    """A llama_log_callback that drops llama.cpp's log messages."""


class Vocabulary:
    """llama.cpp's tokenizer of a GGUF file (the file loaded vocabulary-only)."""

    def __init__(self, path: Path) -> None:
        self.lib = import_llama_cpp()
        self._log_cb = self.lib.llama_log_callback(_drop_log)
        self.lib.llama_log_set(self._log_cb, None)
        params = self.lib.llama_model_default_params()
        params.vocab_only = True
        self.model = self.lib.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise ValueError(f"{path}: llama.cpp cannot read this file's vocabulary")
        self.vocab = self.lib.llama_model_get_vocab(self.model)

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        raw = text.encode()
        room = len(raw) + 8
        out = (self.lib.llama_token * room)()
        n = self.lib.llama_tokenize(self.vocab, raw, len(raw), out, room, add_special, False)
        if n < 0:
            raise ValueError(f"the prompt needs {-n} tokens, more than expected")
        return list(out[:n])

    def detokenize(self, tokens: Sequence[int]) -> str:
        ids = (self.lib.llama_token * max(len(tokens), 1))(*tokens)
        room = 16 * len(tokens) + 16
        buf = ctypes.create_string_buffer(room)
        n = self.lib.llama_detokenize(self.vocab, ids, len(tokens), buf, room, False, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.lib.llama_detokenize(self.vocab, ids, len(tokens), buf, -n, False, False)
        return buf.raw[:n].decode(errors="replace")

    def close(self) -> None:
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None


class LlamaCppSession:
    """A context: tokens in, logits of every position out, KV cache kept between calls."""

    def __init__(self, model: LlamaCppModel, config: LlamaConfig, observe: bool) -> None:
        lib = model.lib
        self.lib, self.model, self.config = lib, model, config
        params = lib.llama_context_default_params()
        params.n_ctx = config.n_ctx
        params.n_batch = config.n_ubatch
        params.n_ubatch = config.n_ubatch
        params.n_seq_max = 1
        params.n_threads = config.threads
        params.n_threads_batch = config.threads
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
        # A full-size cache for sliding-window layers too (the context default, set here so it
        # cannot drift): the window then only masks, which is what v8.attention's window
        # names.  The small ring-like SWA cache reorders keys once it wraps.
        params.swa_full = True
        params.type_k = GGML_TYPE_F16
        params.type_v = GGML_TYPE_F16
        params.embeddings = False
        params.no_perf = True
        self.observer: Observer | None = None
        if observe:
            self.observer = Observer(_ggml_lib())
            self._cb = lib.ggml_backend_sched_eval_callback(self.observer)
            params.cb_eval = self._cb
            params.cb_eval_user_data = None
        self.ctx = lib.llama_init_from_model(model.model, params)
        if not self.ctx:
            raise ValueError("llama.cpp cannot create a context: "
                             + "".join(model.log[-5:]).strip())
        self.n_past = 0

    def eval(self, tokens: Sequence[int], last_only: bool = False) -> np.ndarray[Any, Any]:
        """Evaluate tokens at the next positions; returns [len(tokens), vocab] logits, or with
        `last_only` the last token's [1, vocab] (llama.cpp's graph then keeps only that row
        from its model's output-row selection on)."""
        lib = self.lib
        n = len(tokens)
        if n > self.config.n_ubatch:
            raise ValueError(f"{n} tokens exceed the micro-batch of {self.config.n_ubatch}")
        if self.observer is not None:
            self.observer.nodes.clear()
        batch = lib.llama_batch_init(n, 0, 1)
        try:
            for i, tok in enumerate(tokens):
                batch.token[i] = int(tok)
                batch.pos[i] = self.n_past + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if not last_only or i == n - 1 else 0
            batch.n_tokens = n
            rc = lib.llama_decode(self.ctx, batch)
            if rc != 0:
                raise ValueError(f"llama_decode failed with status {rc}")
            vocab = self.model.vocab
            rows = [n - 1] if last_only else range(n)
            out = np.empty((len(rows), vocab), np.float32)
            for j, i in enumerate(rows):
                row = lib.llama_get_logits_ith(self.ctx, i)
                out[j] = np.ctypeslib.as_array(row, shape=(vocab,))
        finally:
            lib.llama_batch_free(batch)
        self.n_past += n
        return out

    def eval_embeddings(self, rows: np.ndarray[Any, Any],
                        positions: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Evaluate embedding rows [n, dim] at explicit positions [streams, n] (multi-section
        RoPE reads every stream; a token batch would broadcast one position to all)."""
        lib = self.lib
        n, dim = rows.shape
        streams = positions.shape[0]
        if self.observer is not None:
            self.observer.nodes.clear()
        # room for every stream's positions: llama.cpp reads them section-major, pos[j*n + i]
        batch = lib.llama_batch_init(n * streams, dim, 1)
        try:
            flat = np.ascontiguousarray(rows, np.float32)
            ctypes.memmove(batch.embd, flat.ctypes.data, flat.nbytes)
            for j in range(streams):
                for i in range(n):
                    batch.pos[j * n + i] = int(positions[j, i])
            for i in range(n):
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1
            batch.n_tokens = n
            rc = lib.llama_decode(self.ctx, batch)
            if rc != 0:
                raise ValueError(f"llama_decode failed with status {rc}")
            out = np.empty((n, self.model.vocab), np.float32)
            for i in range(n):
                out[i] = np.ctypeslib.as_array(lib.llama_get_logits_ith(self.ctx, i),
                                               shape=(self.model.vocab,))
        finally:
            lib.llama_batch_free(batch)
        self.n_past += n
        return out

    def observed(self) -> list[Observed]:
        return list(self.observer.nodes) if self.observer is not None else []

    def close(self) -> None:
        if self.ctx:
            self.lib.llama_free(self.ctx)
            self.ctx = None
