/* matmul_bf16.c: bf16 linear layer through oneDNN matmul primitives, cached
 * per shape (see matmul_bf16.h), or through the fp32 layer (matmul.c) on
 * operands widened from bf16 where the CPU has no bf16 arithmetic.
 *
 * On the ONEDNN path each product is one oneDNN matmul
 * dst (M,N) = src (M,K) @ weights (K,N)
 * over plain row-major buffers; a transposed operand is the same buffer
 * described with swapped strides, never a copy:
 *   forward  src inp (N,IC)       weights weight^T (IC,OC)  dst out (N,OC)  + bias
 *   dinp     src dout (N,OC)      weights weight (OC,IC)    dst dinp (N,IC)
 *   dweight  src dout^T (OC,N)    weights inp (N,IC)        dst dweight (OC,IC), sum post-op
 * dweight += uses oneDNN's sum post-op (dst = product + 1.0 * dst; matmul
 * has no beta). The bias rides in the forward primitive. All primitives
 * share one user-mode scratchpad owned by the cache, since calls never
 * overlap. The WIDEN path widens the operands into the cache's scratch and
 * calls matmul_forward/matmul_backward. This file does not pick precisions
 * for the model: that is the caller's. */
#include "kernels/matmul_bf16.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "kernels/kernels.h"

#if DNNL_VERSION_MAJOR != 2
#error "matmul_bf16.c is written for oneDNN 2.x (Debian bookworm's libdnnl-dev 2.6)"
#endif

typedef enum { PRODUCT_FORWARD, PRODUCT_DINP, PRODUCT_DWEIGHT } Product;

/* Scratch for the operands: bf16 dout, on the WIDEN path fp32 copies, and
 * for the _rounded calls on the ONEDNN path bf16 copies of all three. */
enum { SLOT_SRC, SLOT_WEIGHTS, SLOT_DOUT, NUM_SLOTS };

typedef struct {
    Product product;
    bool has_bias;
    size_t N;
    int IC, OC, threads;
    dnnl_primitive_t primitive;
    dnnl_memory_t src, weights, bias, dst, scratchpad; /* bias NULL without one */
    char kernel[48]; /* oneDNN's implementation name, e.g. "brg:avx512_core_amx" */
} CachedMatmul;

struct MatmulBF16 {
    MatmulBF16Path path; /* ONEDNN or WIDEN, never AUTO */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    CachedMatmul *cache;
    int cached, capacity, created;
    const char *last_kernel;
    void *scratchpad;
    size_t scratchpad_bytes;
    void *slot[NUM_SLOTS];
    size_t slot_bytes[NUM_SLOTS];
};

static void check(dnnl_status_t status, const char *what) {
    if (status != dnnl_success) bs_die("internal: oneDNN %s failed: %s", what, dnnl_status2str(status));
}

/* Grows *buf to at least bytes (only when a larger shape first appears). */
static void *reserve(void **buf, size_t *have, size_t bytes) {
    if (bytes > *have) {
        free(*buf);
        *buf = bs_malloc(bytes);
        *have = bytes;
    }
    return *buf;
}

bool matmul_bf16_cpu_has_bf16(void) {
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

MatmulBF16 *matmul_bf16_create(MatmulBF16Path path) {
    MatmulBF16 *mm = bs_calloc(1, sizeof *mm);
    if (path == MATMUL_BF16_AUTO) path = matmul_bf16_cpu_has_bf16() ? MATMUL_BF16_ONEDNN : MATMUL_BF16_WIDEN;
    mm->path = path;
    check(dnnl_engine_create(&mm->engine, dnnl_cpu, 0), "engine creation");
    check(dnnl_stream_create(&mm->stream, mm->engine, dnnl_stream_default_flags), "stream creation");
    return mm;
}

void matmul_bf16_free(MatmulBF16 *mm) {
    if (!mm) return;
    for (int i = 0; i < mm->cached; i++) {
        CachedMatmul *c = &mm->cache[i];
        dnnl_memory_t mems[] = {c->src, c->weights, c->bias, c->dst, c->scratchpad};
        for (size_t m = 0; m < sizeof mems / sizeof mems[0]; m++)
            if (mems[m]) dnnl_memory_destroy(mems[m]);
        dnnl_primitive_destroy(c->primitive);
    }
    free(mm->cache);
    free(mm->scratchpad);
    for (int s = 0; s < NUM_SLOTS; s++) free(mm->slot[s]);
    dnnl_stream_destroy(mm->stream);
    dnnl_engine_destroy(mm->engine);
    free(mm);
}

MatmulBF16Path matmul_bf16_path(const MatmulBF16 *mm) { return mm->path; }

const char *matmul_bf16_path_name(MatmulBF16Path path) {
    return path == MATMUL_BF16_ONEDNN ? "onednn-bf16" : path == MATMUL_BF16_WIDEN ? "widen-fp32" : "auto";
}

int matmul_bf16_primitives_created(const MatmulBF16 *mm) { return mm->created; }

const char *matmul_bf16_last_kernel(const MatmulBF16 *mm) {
    if (mm->path == MATMUL_BF16_WIDEN) return "matmul.c (OpenBLAS sgemm)";
    return mm->last_kernel ? mm->last_kernel : "none";
}

/* A rows x cols matrix over a row-major buffer; transposed: the buffer holds
 * the cols x rows matrix whose transpose this is. */
static dnnl_memory_desc_t matrix_desc(int64_t rows, int64_t cols, dnnl_data_type_t type, bool transposed) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {cols, 1};
    if (transposed) {
        strides[0] = 1;
        strides[1] = rows;
    }
    check(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides), "memory descriptor");
    return md;
}

static dnnl_memory_t memory_for(const MatmulBF16 *mm, const dnnl_memory_desc_t *md) {
    dnnl_memory_t m;
    check(dnnl_memory_create(&m, md, mm->engine, DNNL_MEMORY_NONE), "memory object");
    return m;
}

static CachedMatmul create_matmul(MatmulBF16 *mm, Product product, bool has_bias, size_t N, int IC, int OC,
                                  int threads) {
    const int64_t n = (int64_t)N;
    dnnl_memory_desc_t src, weights, dst, bias;
    if (product == PRODUCT_FORWARD) {
        src = matrix_desc(n, IC, dnnl_bf16, false);
        weights = matrix_desc(IC, OC, dnnl_bf16, true);
        dst = matrix_desc(n, OC, dnnl_f32, false);
    } else if (product == PRODUCT_DINP) {
        src = matrix_desc(n, OC, dnnl_bf16, false);
        weights = matrix_desc(OC, IC, dnnl_bf16, false);
        dst = matrix_desc(n, IC, dnnl_f32, false);
    } else {
        src = matrix_desc(OC, n, dnnl_bf16, true);
        weights = matrix_desc(n, IC, dnnl_bf16, false);
        dst = matrix_desc(OC, IC, dnnl_f32, false);
    }
    if (has_bias) bias = matrix_desc(1, OC, dnnl_f32, false);

    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "attribute creation");
    check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad mode");
    if (product == PRODUCT_DWEIGHT) {
        dnnl_post_ops_t ops;
        check(dnnl_post_ops_create(&ops), "post-op creation");
        check(dnnl_post_ops_append_sum(ops, 1.0f), "sum post-op");
        check(dnnl_primitive_attr_set_post_ops(attr, ops), "post-op attribute");
        dnnl_post_ops_destroy(ops);
    }
    dnnl_matmul_desc_t desc;
    check(dnnl_matmul_desc_init(&desc, &src, &weights, has_bias ? &bias : NULL, &dst), "matmul descriptor");
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &desc, attr, mm->engine, NULL), "matmul primitive descriptor");
    dnnl_primitive_attr_destroy(attr);

    CachedMatmul c = {.product = product, .has_bias = has_bias, .N = N, .IC = IC, .OC = OC, .threads = threads};
    check(dnnl_primitive_create(&c.primitive, pd), "matmul primitive");
    const char *kernel = NULL;
    check(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &kernel), "implementation query");
    snprintf(c.kernel, sizeof c.kernel, "%s", kernel);
    const dnnl_memory_desc_t *scratch_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    reserve(&mm->scratchpad, &mm->scratchpad_bytes, dnnl_memory_desc_get_size(scratch_md));
    c.src = memory_for(mm, &src);
    c.weights = memory_for(mm, &weights);
    c.dst = memory_for(mm, &dst);
    c.bias = has_bias ? memory_for(mm, &bias) : NULL;
    c.scratchpad = memory_for(mm, scratch_md);
    dnnl_primitive_desc_destroy(pd); /* the primitive keeps its own copy */
    mm->created++;
    return c;
}

static CachedMatmul *find_or_create(MatmulBF16 *mm, Product product, bool has_bias, size_t N, int IC, int OC) {
    const int threads = omp_get_max_threads();
    for (int i = 0; i < mm->cached; i++) {
        CachedMatmul *c = &mm->cache[i];
        if (c->product == product && c->has_bias == has_bias && c->N == N && c->IC == IC && c->OC == OC &&
            c->threads == threads)
            return c;
    }
    if (mm->cached == mm->capacity) {
        mm->capacity = mm->capacity ? 2 * mm->capacity : 16;
        CachedMatmul *grown = realloc(mm->cache, (size_t)mm->capacity * sizeof *grown);
        if (!grown) bs_die("out of memory growing the matmul primitive cache");
        mm->cache = grown;
    }
    mm->cache[mm->cached] = create_matmul(mm, product, has_bias, N, IC, OC, threads);
    return &mm->cache[mm->cached++];
}

static void set_handle(dnnl_memory_t m, const void *data) {
    check(dnnl_memory_set_data_handle(m, (void *)data), "memory handle"); /* oneDNN only reads src/weights/bias */
}

static void run(MatmulBF16 *mm, Product product, size_t N, int IC, int OC, const void *src, const void *weights,
                const float *bias, float *dst) {
    CachedMatmul *c = find_or_create(mm, product, bias != NULL, N, IC, OC);
    set_handle(c->src, src);
    set_handle(c->weights, weights);
    set_handle(c->dst, dst);
    set_handle(c->scratchpad, mm->scratchpad);
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, c->src}, {DNNL_ARG_WEIGHTS, c->weights}, {DNNL_ARG_DST, c->dst},
        {DNNL_ARG_SCRATCHPAD, c->scratchpad}};
    int nargs = 4;
    if (bias) {
        set_handle(c->bias, bias);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, c->bias};
    }
    check(dnnl_primitive_execute(c->primitive, mm->stream, nargs, args), "matmul execution");
    check(dnnl_stream_wait(mm->stream), "stream wait");
    mm->last_kernel = c->kernel;
}

/* A bf16 operand widened to fp32 (exactly) in a scratch slot (WIDEN path). */
static float *widened(MatmulBF16 *mm, int slot, const bf16 *x, size_t n) {
    float *wide = reserve(&mm->slot[slot], &mm->slot_bytes[slot], n * sizeof(float));
    bf16_to_floats(wide, x, n);
    return wide;
}

void matmul_bf16_forward(MatmulBF16 *mm, float *out, const bf16 *inp, const bf16 *weight, const float *bias,
                         size_t N, int IC, int OC) {
    if (N == 0) return;
    if (mm->path == MATMUL_BF16_WIDEN) {
        matmul_forward(out, widened(mm, SLOT_SRC, inp, N * (size_t)IC),
                       widened(mm, SLOT_WEIGHTS, weight, (size_t)OC * IC), bias, N, IC, OC);
        return;
    }
    run(mm, PRODUCT_FORWARD, N, IC, OC, inp, weight, bias, out);
}

void matmul_bf16_backward(MatmulBF16 *mm, float *dinp, float *dweight, float *dbias, const float *dout,
                          const bf16 *inp, const bf16 *weight, size_t N, int IC, int OC) {
    if (N == 0) return;
    const size_t n = N * (size_t)OC;
    if (mm->path == MATMUL_BF16_WIDEN) {
        float *d = reserve(&mm->slot[SLOT_DOUT], &mm->slot_bytes[SLOT_DOUT], n * sizeof(float));
        bf16_round_floats(d, dout, n);
        matmul_backward(dinp, dweight, NULL, d, widened(mm, SLOT_SRC, inp, N * (size_t)IC),
                        widened(mm, SLOT_WEIGHTS, weight, (size_t)OC * IC), N, IC, OC);
    } else {
        bf16 *d = reserve(&mm->slot[SLOT_DOUT], &mm->slot_bytes[SLOT_DOUT], n * sizeof(bf16));
        bf16_from_floats(d, dout, n);
        if (dinp) run(mm, PRODUCT_DINP, N, IC, OC, d, weight, NULL, dinp);
        run(mm, PRODUCT_DWEIGHT, N, IC, OC, d, inp, NULL, dweight);
    }
    if (dbias) bias_backward(dbias, dout, N, OC); /* from the fp32 dout */
}

/* A float operand holding bf16 values narrowed to bf16 in a scratch slot. */
static bf16 *narrowed(MatmulBF16 *mm, int slot, const float *x, size_t n) {
    bf16 *narrow = reserve(&mm->slot[slot], &mm->slot_bytes[slot], n * sizeof(bf16));
    bf16_from_floats(narrow, x, n);
    return narrow;
}

void matmul_bf16_forward_rounded(MatmulBF16 *mm, float *out, const float *inp, const float *weight,
                                 const float *bias, size_t N, int IC, int OC) {
    if (N == 0) return;
    if (mm->path == MATMUL_BF16_WIDEN) {
        matmul_forward(out, inp, weight, bias, N, IC, OC);
        return;
    }
    run(mm, PRODUCT_FORWARD, N, IC, OC, narrowed(mm, SLOT_SRC, inp, N * (size_t)IC),
        narrowed(mm, SLOT_WEIGHTS, weight, (size_t)OC * IC), bias, out);
}

void matmul_bf16_backward_rounded(MatmulBF16 *mm, float *dinp, float *dweight, const float *dout,
                                  const float *inp, const float *weight, size_t N, int IC, int OC) {
    if (N == 0) return;
    if (mm->path == MATMUL_BF16_WIDEN) {
        matmul_backward(dinp, dweight, NULL, dout, inp, weight, N, IC, OC);
        return;
    }
    const bf16 *d = narrowed(mm, SLOT_DOUT, dout, N * (size_t)OC);
    if (dinp) run(mm, PRODUCT_DINP, N, IC, OC, d, narrowed(mm, SLOT_WEIGHTS, weight, (size_t)OC * IC), NULL, dinp);
    run(mm, PRODUCT_DWEIGHT, N, IC, OC, d, narrowed(mm, SLOT_SRC, inp, N * (size_t)IC), NULL, dweight);
}
