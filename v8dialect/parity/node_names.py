"""Which llama.cpp graph tensor holds which circuit node's output.

llama.cpp names a layer's tensors `<name>-<layer>` (through its graph callback), and some
names more than once in a layer (`Qcur` is the projection and, after RoPE, the rotated
query): an entry names the occurrence it means.  Node names are the circuits' own
(`blk.<i>.<node>` inside blocks).  One table for every family: a family whose graph has no
tensor of some name simply never meets that entry.

Nodes without an entry (a KV-cache store, an op llama.cpp fuses into another) are not
compared; the first compared node that differs is named, so an unmapped op shows up as
the first mapped node after it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from v8dialect.parity.llamacpp import Observed


@dataclass(frozen=True)
class Entry:
    llama: str  # llama.cpp tensor name without the layer suffix
    occurrence: int  # 0: the first tensor of that name in the layer, 1: the second, ...; -1: last
    node: str  # circuit node name without the block prefix
    op: str | None = None  # only tensors of this ggml op


# Per-layer tensors, in priority order: a node takes the first entry whose tensor exists in
# that layer (one llama.cpp name can mean different nodes in different families: Qwen3.5's
# `attn_post_norm` is the norm before its MLP, Gemma3's the norm after attention).
LAYER_ENTRIES: tuple[Entry, ...] = (
    Entry("attn_norm", -1, "attn_norm"),
    Entry("Qcur_full", 0, "attn_q"),
    Entry("Qcur", 0, "attn_q", "MUL_MAT"),
    Entry("Kcur", 0, "attn_k", "MUL_MAT"),
    Entry("Vcur", 0, "attn_v", "MUL_MAT"),
    Entry("Qcur_normed", -1, "attn_q_norm"),
    Entry("Kcur_normed", -1, "attn_k_norm"),
    Entry("Qcur", -1, "rope_q", "ROPE"),
    Entry("Kcur", -1, "rope_k", "ROPE"),
    Entry("attn_pregate", -1, "attn"),
    Entry("kqv_out", -1, "attn"),
    Entry("attn_gated", -1, "attn_gate"),
    Entry("attn_output", 0, "attn_output", "MUL_MAT"),
    Entry("MUL_MAT@kqv_out", 0, "attn_output"),
    Entry("attn_out", -1, "attn_output"),
    Entry("linear_attn_qkv_mixed", -1, "attn_qkv"),
    Entry("z", 0, "attn_gate", "MUL_MAT"),
    Entry("alpha", -1, "ssm_alpha"),
    Entry("beta", 0, "ssm_beta"),
    Entry("final_output", -1, "linear_attn"),
    Entry("linear_attn_out", 0, "ssm_out", "MUL_MAT"),
    Entry("attn_post_norm", -1, "attn_post_norm"),
    Entry("ffn_inp", -1, "attn_residual"),
    Entry("attn_residual", -1, "attn_residual"),
    Entry("ffn_norm", -1, "ffn_norm"),
    Entry("attn_post_norm", -1, "ffn_norm"),
    Entry("ffn_gate", -1, "ffn_gate"),
    Entry("ffn_up", -1, "ffn_up"),
    Entry("ffn_swiglu", -1, "ffn_act"),
    Entry("ffn_geglu", -1, "ffn_act"),
    Entry("ffn_out", -1, "ffn_down"),
    Entry("ffn_post_norm", -1, "ffn_post_norm"),
    Entry("l_out", -1, "ffn_residual"),
)

# Tensors outside the blocks.
GLOBAL_ENTRIES: Mapping[str, str] = {
    "inp_embd": "token_embd",
    "model.input_embed": "token_embd",
    "inp_scaled": "token_embd",
    "result_norm": "output_norm",
    "result_output": "output",
}


def split_name(name: str) -> tuple[str, int | None]:
    """'Qcur-3' -> ('Qcur', 3); 'result_norm' -> ('result_norm', None)."""
    stem, sep, layer = name.rpartition("-")
    if sep and layer.isdigit():
        return stem, int(layer)
    return name, None


def group_observed(nodes: Sequence[Observed]) -> dict[tuple[str, int | None], list[Observed]]:
    """Tensors by (name stem, layer), in evaluation order.  A tensor llama.cpp left unnamed
    (`node_<n>`) is keyed `<OP>@<last named stem>` in the last named tensor's layer: the
    output projection after `kqv_out` is `MUL_MAT@kqv_out`."""
    groups: dict[tuple[str, int | None], list[Observed]] = {}
    last: tuple[str, int | None] = ("", None)
    for obs in nodes:
        if obs.name.startswith("node_"):
            key = (f"{obs.op}@{last[0]}", last[1])
        else:
            key = last = split_name(obs.name)
        groups.setdefault(key, []).append(obs)
    return groups


def pick(found: list[Observed], entry: Entry) -> Observed | None:
    chosen = [o for o in found if entry.op is None or o.op == entry.op]
    if -len(chosen) <= entry.occurrence < len(chosen):
        return chosen[entry.occurrence]
    return None


def index_observed(nodes: Sequence[Observed]) -> dict[str, Observed]:
    """node name -> llama.cpp's tensor for it, from one evaluation's observed tensors."""
    groups = group_observed(nodes)
    out: dict[str, Observed] = {}
    for (stem, layer), found in groups.items():
        if layer is None and stem in GLOBAL_ENTRIES:
            out.setdefault(GLOBAL_ENTRIES[stem], found[-1])
    layers = sorted({layer for _, layer in groups if layer is not None})
    for layer in layers:
        for entry in LAYER_ENTRIES:
            node = f"blk.{layer}.{entry.node}"
            if node in out:
                continue
            obs = pick(groups.get((entry.llama, layer), []), entry)
            if obs is not None:
                out[node] = obs
    return out
