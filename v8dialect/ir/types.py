"""The v8 dialect's enum attributes (phase, mask) and its quantized element types.

``#v8.phase<prefill>`` and ``#v8.mask<causal>`` are closed enums; ``!v8.q4_k`` and the other
block formats are the element types of quantized weight tensors, one per ggml block layout.
"""

from __future__ import annotations

from xdsl.dialects.utils.enum_attribute import EnumAttribute
from xdsl.ir import ParametrizedAttribute, SpacedOpaqueSyntaxAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.utils.str_enum import StrEnum

# ---- enums -----------------------------------------------------------------


class Phase(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


@irdl_attr_definition
class PhaseAttr(EnumAttribute[Phase], SpacedOpaqueSyntaxAttribute):
    name = "v8.phase"


class Mask(StrEnum):
    CAUSAL = "causal"
    FULL = "full"


@irdl_attr_definition
class MaskAttr(EnumAttribute[Mask], SpacedOpaqueSyntaxAttribute):
    name = "v8.mask"


# ---- quantized element types -----------------------------------------------


@irdl_attr_definition
class Q4KType(ParametrizedAttribute, TypeAttribute):
    """ggml Q4_K: 256 weights in 144 bytes (fp16 d, dmin; 6-bit scales/mins; nibbles)."""

    name = "v8.q4_k"


@irdl_attr_definition
class Q6KType(ParametrizedAttribute, TypeAttribute):
    """ggml Q6_K: 256 weights in 210 bytes (low nibbles, high bit pairs, int8 scales, fp16 d)."""

    name = "v8.q6_k"


@irdl_attr_definition
class Q5KType(ParametrizedAttribute, TypeAttribute):
    """ggml Q5_K: 256 weights in 176 bytes (fp16 d, dmin; 6-bit scales/mins; nibbles; fifth bits)."""

    name = "v8.q5_k"


@irdl_attr_definition
class Q80Type(ParametrizedAttribute, TypeAttribute):
    """ggml Q8_0: 32 weights in 34 bytes (fp16 d, 32 int8 levels)."""

    name = "v8.q8_0"


@irdl_attr_definition
class Q50Type(ParametrizedAttribute, TypeAttribute):
    """ggml Q5_0: 32 weights in 22 bytes (fp16 d, 32 fifth bits, 16 bytes of nibbles)."""

    name = "v8.q5_0"


@irdl_attr_definition
class Q40Type(ParametrizedAttribute, TypeAttribute):
    """ggml Q4_0: 32 weights in 18 bytes (fp16 d, 16 bytes of nibbles)."""

    name = "v8.q4_0"


@irdl_attr_definition
class Q41Type(ParametrizedAttribute, TypeAttribute):
    """ggml Q4_1: 32 weights in 20 bytes (fp16 d and min m, 16 bytes of nibbles)."""

    name = "v8.q4_1"


@irdl_attr_definition
class Q51Type(ParametrizedAttribute, TypeAttribute):
    """ggml Q5_1: 32 weights in 24 bytes (fp16 d and min m, 32 fifth bits, 16 bytes of nibbles)."""

    name = "v8.q5_1"
