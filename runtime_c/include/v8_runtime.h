/* v8 runtime foundations: status codes, argument checks, fp16/bf16 conversion,
 * CPU feature detection and the persistent threadpool.
 *
 * Every kernel in runtime_c builds on this header.  The code compiles with a
 * baseline x86-64 target; ISA-specific regions opt in with GCC target pragmas
 * and are only entered after v8_cpu_features() says the running CPU has them. */
#ifndef V8_RUNTIME_H
#define V8_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ------------------------------------------------------ */

typedef enum v8_status {
    V8_OK = 0,
    V8_ERR_NULL_ARGUMENT = 1,      /* a required pointer is NULL */
    V8_ERR_BAD_DIMENSION = 2,      /* a size is zero, negative or not a supported multiple */
    V8_ERR_UNKNOWN_SELECTOR = 3,   /* the contract selector is not one this kernel delivers */
    V8_ERR_BAD_THREADING = 4,      /* worker count or threadpool unusable */
    V8_ERR_NO_MEMORY = 5,          /* scratch allocation failed (never in a hot path) */
    V8_ERR_UNSUPPORTED_ISA = 6     /* a forced ISA variant the CPU does not have */
} v8_status;

const char *v8_status_name(v8_status status);

/* Early return for argument checks, so kernels validate everything before
 * the first write to an output. */
#define V8_REQUIRE(cond, status) \
    do {                         \
        if (!(cond)) {           \
            return (status);     \
        }                        \
    } while (0)

/* ---- fp16 / bf16 ------------------------------------------------------- */

/* Exact IEEE binary16 <-> binary32 conversion, round-to-nearest-even.  The
 * software path is bit-identical to F16C's VCVTPS2PH with imm8 = 0 and to
 * VCVTPH2PS, NaNs included (both quiet a signalling NaN and keep the top
 * payload bits). */
float v8_f16_to_f32(uint16_t h);
uint16_t v8_f32_to_f16(float f);
/* r16(x): round an fp32 value to fp16 and widen it back. */
float v8_round_f16(float f);

float v8_bf16_to_f32(uint16_t b);
/* Round-to-nearest-even; NaN stays NaN (quiet). */
uint16_t v8_f32_to_bf16(float f);

void v8_f16_to_f32_array(const uint16_t *src, float *dst, size_t n);
void v8_f32_to_f16_array(const float *src, uint16_t *dst, size_t n);

/* ---- CPU features ------------------------------------------------------ */

enum {
    V8_CPU_AVX2 = 1u << 0,
    V8_CPU_FMA = 1u << 1,
    V8_CPU_F16C = 1u << 2,
    V8_CPU_AVX512F = 1u << 3,
    V8_CPU_AVX512BW = 1u << 4,
    V8_CPU_AVX512VL = 1u << 5,
    V8_CPU_AVX512DQ = 1u << 6,
    V8_CPU_AVX512VNNI = 1u << 7,
    V8_CPU_AVX512BF16 = 1u << 8, /* VDPBF16PS */
    /* Not an instruction set but a measured trait: explicit per-line prefetches of
     * streamed weights pay for themselves.  Set on every CPU but AMD's (on AMD EPYC
     * Zen 4 the AVX-512 x16 Q4_K GEMV streamed faster without them, on Intel Xeon
     * Emerald Rapids with them); masking it off selects the header-only walk. */
    V8_CPU_LINE_PREFETCH = 1u << 9,
    /* A measured trait too: narrowing 16 fp32 lanes to fp16 in one 512-bit conversion is no
     * slower than in two 256-bit ones.  Set on every CPU but AMD's: on AMD EPYC Zen 4 a
     * dependent fma + fp16 round trip took 3.1 cycles per 512-bit vector against 2.3 per two
     * 256-bit ones.  Masking it off selects the 256-bit fp16 value updates on AVX-512 hosts. */
    V8_CPU_WIDE_F16_NARROWING = 1u << 10,
    /* A property of this process's C library on this CPU: the vector expf of core/expf.c gave
     * the library's expf bit for bit on every input of a self-check run when the features are
     * first read (set only on AVX2 + FMA hosts).  Masking it off makes v8_expf_array call the
     * library's expf for every value. */
    V8_CPU_LIBM_EXPF_LANES = 1u << 11
};

/* Features of the running CPU (and OS support for the register state),
 * intersected with the restriction mask below. */
unsigned v8_cpu_features(void);
/* Restrict the features kernels may dispatch on (a mask of V8_CPU_* bits;
 * ~0u lifts the restriction).  Tests and benchmarks use it to run the AVX2
 * variant on an AVX-512 host; it never enables what the CPU lacks. */
void v8_cpu_restrict(unsigned mask);

/* The ISA variants runtime dispatch chooses between. */
typedef enum v8_isa {
    V8_ISA_SCALAR = 0,
    V8_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C */
    V8_ISA_AVX512 = 2   /* AVX-512 F + BW + VL + DQ (plus everything AVX2 has) */
} v8_isa;

v8_isa v8_cpu_best_isa(void);

/* Whether this thread's vector registers have their upper halves in use (ymm/zmm 0-15 beyond
 * bit 127, XINUSE components 2 and 6): 1 in use, 0 clear, -1 where the CPU cannot say.  On
 * Intel cores every switch between legacy-SSE code (baseline C) and VEX code (libm's routines)
 * then costs tens of nanoseconds until a vzeroupper clears them, so every vector kernel clears
 * them before baseline code runs. */
int v8_cpu_upper_state_dirty(void);

/* y[i] = expf(x[i]) for i in [0, n), bit for bit the C library's expf (the function the
 * attention contracts' softmax recurrence names): with V8_CPU_LIBM_EXPF_LANES, a vector form of
 * the library's own algorithm (core/expf.c), else the library call per value.  NULL pointers or
 * n < 0 return an error and write nothing. */
v8_status v8_expf_array(const float *x, float *y, int64_t n);

/* ---- threadpool -------------------------------------------------------- */

/* A persistent pool of n_workers threads; the calling thread counts as
 * worker 0, so n_workers = 1 runs everything on the caller. */
typedef struct v8_threadpool v8_threadpool;

/* Work item callback: `task` in [0, n_tasks), `worker` in [0, n_workers). */
typedef void (*v8_task_fn)(void *ctx, int64_t task, int worker);

/* Returns NULL when n_workers < 1 or > V8_MAX_WORKERS or on allocation failure. */
#define V8_MAX_WORKERS 256
v8_threadpool *v8_threadpool_create(int n_workers);
void v8_threadpool_destroy(v8_threadpool *pool);
int v8_threadpool_workers(const v8_threadpool *pool);

/* Runs fn(ctx, t, w) exactly once for every t in [0, n_tasks) and returns
 * when all have finished.  Which worker takes which task is not specified:
 * kernels must make each task own disjoint outputs (or partials indexed by
 * task), so the assignment can never change results.  Each worker starts on
 * its own contiguous share of the tasks and claims it in order, so a kernel
 * whose consecutive tasks are consecutive rows reads one stream per worker.
 * A worker still asleep when every task has been claimed sits the job out:
 * the call returns once the workers that joined have finished. */
v8_status v8_parallel_for(v8_threadpool *pool, int64_t n_tasks, v8_task_fn fn, void *ctx);

/* The vector-state audit (process-wide, off by default): while on, v8_parallel_for checks
 * v8_cpu_upper_state_dirty() when a job starts and after every task, and keeps the first
 * finding: the task function, and whether the job started in that state (the code before it
 * left the registers in use) or the task itself did.  v8_threadpool_audit_upper(1) also forgets
 * the last finding; v8_threadpool_audit_finding returns 0 while there is none. */
void v8_threadpool_audit_upper(int on);
uintptr_t v8_threadpool_audit_finding(int *at_job_start);

/* ---- call-site profile ------------------------------------------------- */

/* One kernel call (or inline op) of a generated program built with profiling: where it is and
 * what it runs, how often it ran and for how long in all (wall time as its caller sees it, so a
 * threadpool call counts until its last task ends).  A program's sites come from its
 * v8_program_profile(&sites), which returns their count (0 for a build without profiling);
 * the counters may be zeroed between measurements. */
typedef struct v8_profile_site {
    const char *phase;    /* the entry point that runs it (phases sharing a function: a+b) */
    const char *function; /* that phase, or the layer function the call is in */
    const char *node;     /* the op it computes */
    const char *kernel;   /* the kernel map that delivers it */
    const char *callee;   /* the C function it calls */
    uint64_t calls;
    uint64_t ns;
} v8_profile_site;

#ifdef __cplusplus
}
#endif

#endif /* V8_RUNTIME_H */
