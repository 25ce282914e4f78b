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


# Per-layer tensors.  Occurrences count in llama.cpp's evaluation order.
LAYER_ENTRIES: tuple[Entry, ...] = (
    Entry("attn_norm", -1, "attn_norm"),
    Entry("Qcur", 0, "attn_q"),
    Entry("Kcur", 0, "attn_k"),
    Entry("Vcur", 0, "attn_v"),
    Entry("Qcur_normed", -1, "attn_q_norm"),
    Entry("Kcur_normed", -1, "attn_k_norm"),
    Entry("Qcur", -1, "rope_q"),
    Entry("Kcur", -1, "rope_k"),
    Entry("kqv_out", -1, "attn"),
    Entry("MUL_MAT@kqv_out", 0, "attn_output"),
    Entry("attn_out", -1, "attn_output"),
    Entry("attn_post_norm", -1, "attn_post_norm"),
    Entry("ffn_inp", -1, "attn_residual"),
    Entry("ffn_norm", -1, "ffn_norm"),
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


def index_observed(nodes: Sequence[Observed]) -> dict[str, Observed]:
    """node name -> llama.cpp's tensor for it, from one evaluation's observed tensors.
    A tensor llama.cpp left unnamed (`node_<n>`) is keyed `<OP>@<last named stem>` in the
    last named tensor's layer: the output projection is `MUL_MAT@kqv_out`."""
    by_name: dict[tuple[str, int | None], list[Observed]] = {}
    last: tuple[str, int | None] = ("", None)
    for obs in nodes:
        if obs.name.startswith("node_"):
            key = (f"{obs.op}@{last[0]}", last[1])
        else:
            key = last = split_name(obs.name)
        by_name.setdefault(key, []).append(obs)
    out: dict[str, Observed] = {}
    for (stem, layer), found in by_name.items():
        if layer is None:
            if stem in GLOBAL_ENTRIES:
                out[GLOBAL_ENTRIES[stem]] = found[-1]
            continue
        for entry in LAYER_ENTRIES:
            if entry.llama == stem and -len(found) <= entry.occurrence < len(found):
                out[f"blk.{layer}.{entry.node}"] = found[entry.occurrence]
    return out
