/* Internal to the runtime core: cpu.c's self-check of core/expf.c's vector expf. */
#ifndef V8_CORE_EXPF_LANES_H
#define V8_CORE_EXPF_LANES_H

/* 1 if the vector expf of every ISA variant `features` (V8_CPU_* bits as detected) can run
 * gives the C library's expf bit for bit on the self-check's inputs; 0 otherwise, and on a
 * CPU without AVX2 + FMA + F16C. */
int v8_expf_lanes_agree(unsigned features);

#endif
