/* Internal to the runtime core: cpu.c's self-check of core/expf.c's vector expf. */
#ifndef V8_CORE_EXPF_LANES_H
#define V8_CORE_EXPF_LANES_H

#include "v8_runtime.h"

/* 1 if the vector expf of every variant up to `isa` (the widest the detected features allow)
 * gives the C library's expf bit for bit on the self-check's inputs; 0 otherwise, and for
 * V8_ISA_SCALAR. */
int v8_expf_lanes_agree(v8_isa isa);

#endif
