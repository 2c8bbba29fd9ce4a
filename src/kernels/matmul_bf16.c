/* matmul_bf16.c: bf16 linear layer through oneDNN matmul primitives, cut
 * into fixed blocks and cached per block shape (see matmul_bf16.h), or
 * through the fp32 layer (matmul.c) on operands widened from bf16.
 *
 * On the ONEDNN path each product is cut into the blocks matmul.c uses
 * (kernels.h: MATMUL_ROW_BLOCK rows of out and dinp, MATMUL_DWEIGHT_BLOCK
 * output channels of dweight, the reduction over N never split). A block is
 * one oneDNN matmul dst (M,n) = src (M,K) @ weights (K,n), M the block's
 * rows, planned for one thread and run inside this file's OpenMP loop, so
 * which thread runs a block changes nothing and the bits do not depend on
 * the thread count. One multi-threaded primitive is not enough: oneDNN plans
 * its split (of K too) by the thread count at creation, and on this AMX CPU
 * 1 and 2 threads gave different dinp and dweight bits.
 *   forward  src inp rows (M,IC)        weights weight^T (IC,OC)  dst out rows + bias
 *   dinp     src dout rows (M,OC)       weights weight (OC,IC)    dst dinp rows
 *   dweight  src dout^T rows (M,N)      weights inp (N,IC)        dst dweight rows, sum post-op
 * A transposed weight is the buffer described with swapped strides, never a
 * copy. dout is narrowed to bf16 once per call; a dinp block reads its rows
 * in place, a dweight block copies its columns (N,M) into the running
 * thread's own panel, read by oneDNN as the transposed (M,N) (a column slice
 * of the whole dout, strides (1,OC), would send oneDNN to its slow gemm:jit
 * instead of brgemm), unless the block is all of dout's columns. On the
 * _rounded forward each block narrows its rows of inp into the panel. The
 * weights stay plain: pre-packing them once per call into the layout oneDNN
 * prefers ("any") made the blocks about 2x slower (oneDNN 2.6's AMX kernels,
 * measured), and each block's own copy of them is cheap beside the product.
 * dweight += uses oneDNN's sum post-op (matmul has no beta).
 *
 * oneDNN plans for omp_get_max_threads() at creation, so a primitive is
 * created with the calling thread's count set to 1 (and set back); inside an
 * active parallel region oneDNN's OpenMP runtime runs a primitive on the
 * calling thread alone (omp_in_parallel()). Each worker thread has its own
 * stream, scratchpad, panel and memory objects; primitives are shared.
 * This file does not pick precisions for the model: that is the caller's. */
#include "kernels/matmul_bf16.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"

#if DNNL_VERSION_MAJOR != 2
#error "matmul_bf16.c is written for oneDNN 2.x (Debian bookworm's libdnnl-dev 2.6)"
#endif

typedef enum { PRODUCT_FORWARD, PRODUCT_DINP, PRODUCT_DWEIGHT } Product;

/* Whole operands narrowed (the _rounded calls) or widened (WIDEN path). */
enum { SLOT_SRC, SLOT_WEIGHTS, SLOT_DOUT, NUM_SLOTS };

enum { ARG_SRC, ARG_WEIGHTS, ARG_BIAS, ARG_DST, ARG_SCRATCHPAD, NUM_ARGS };
static const int dnnl_arg[NUM_ARGS] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST,
                                       DNNL_ARG_SCRATCHPAD};

/* One block's matmul dst (M,n) = src (M,K) @ weights (K,n), planned for one
 * thread, with the memory objects each worker runs it with. */
typedef struct {
    Product product;
    bool has_bias;
    size_t M, K, n;
    dnnl_primitive_t primitive;
    dnnl_memory_desc_t md[NUM_ARGS]; /* md[ARG_BIAS] unused without a bias */
    size_t scratchpad_bytes;
    dnnl_memory_t (*mem)[NUM_ARGS];  /* per worker; NULL entries until that worker first runs it */
    int mem_workers;
    char kernel[48]; /* oneDNN's implementation name, e.g. "brg:avx512_core_amx_bf16" */
} BlockMatmul;

/* What one thread of the block loop owns. */
typedef struct {
    dnnl_stream_t stream;
    void *scratchpad;
    size_t scratchpad_bytes;
    void *panel; /* the block's src in bf16, where it is not in place */
    size_t panel_bytes;
} Worker;

struct MatmulBF16 {
    MatmulBF16Path path; /* ONEDNN or WIDEN, never AUTO */
    dnnl_engine_t engine;
    BlockMatmul **cache;
    int cached, capacity;
    Worker *workers;
    int num_workers;
    const char *last_kernel;
    void *slot[NUM_SLOTS];
    size_t slot_bytes[NUM_SLOTS];
};

/* One product of a call, cut into blocks of `block` rows of its M (full
 * blocks, then one shorter tail). The src of the block of rows r0.. is, in
 * src16, rows r0.. of (M,K) (forward, dinp) or for dweight columns r0.. of
 * dout (K,M); or rows r0.. of src32 (M,K) narrowed (the _rounded forward). */
typedef struct {
    BlockMatmul *full, *tail; /* NULL where there is none */
    size_t M, block, K;
    const bf16 *src16;
    const float *src32;
    const void *weights;
    const float *bias;
    float *dst; /* rows of n */
} Job;

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

/* A rows x cols matrix at the given strides (elements). */
static dnnl_memory_desc_t matrix_desc(int64_t rows, int64_t cols, dnnl_data_type_t type, int64_t row_stride,
                                      int64_t col_stride) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {row_stride, col_stride};
    check(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides), "memory descriptor");
    return md;
}

const char *matmul_bf16_cpu_isa(void) {
    const char *name = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
    return strncmp(name, "cpu_isa_", 8) == 0 ? name + 8 : name;
}

bool matmul_bf16_cpu_has_bf16(void) {
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

bool matmul_bf16_onednn_available(void) {
    dnnl_engine_t engine;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return false;
    /* out (2,32) = inp (2,16) @ weight (32,16)^T, as a forward block is described */
    dnnl_memory_desc_t src = matrix_desc(2, 16, dnnl_bf16, 16, 1), weights = matrix_desc(16, 32, dnnl_bf16, 1, 16);
    dnnl_memory_desc_t dst = matrix_desc(2, 32, dnnl_f32, 32, 1);
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t primitive = NULL;
    bool ok = dnnl_matmul_desc_init(&desc, &src, &weights, NULL, &dst) == dnnl_success &&
              dnnl_primitive_desc_create(&pd, &desc, NULL, engine, NULL) == dnnl_success &&
              dnnl_primitive_create(&primitive, pd) == dnnl_success;
    if (primitive) dnnl_primitive_destroy(primitive);
    if (pd) dnnl_primitive_desc_destroy(pd);
    dnnl_engine_destroy(engine);
    return ok;
}

MatmulBF16 *matmul_bf16_create(MatmulBF16Path path) {
    if (path != MATMUL_BF16_WIDEN) {
        bool available = matmul_bf16_onednn_available();
        if (path == MATMUL_BF16_AUTO)
            path = available && matmul_bf16_cpu_has_bf16() ? MATMUL_BF16_ONEDNN : MATMUL_BF16_WIDEN;
        else if (!available)
            bs_die("internal: oneDNN has no bf16 matmul on this CPU (ISA %s): check "
                   "matmul_bf16_onednn_available() before asking for the onednn path",
                   matmul_bf16_cpu_isa());
    }
    MatmulBF16 *mm = bs_calloc(1, sizeof *mm);
    mm->path = path;
    check(dnnl_engine_create(&mm->engine, dnnl_cpu, 0), "engine creation");
    return mm;
}

static void free_block_matmul(BlockMatmul *c) {
    for (int w = 0; w < c->mem_workers; w++)
        for (int a = 0; a < NUM_ARGS; a++)
            if (c->mem[w][a]) dnnl_memory_destroy(c->mem[w][a]);
    free(c->mem);
    dnnl_primitive_destroy(c->primitive);
    free(c);
}

void matmul_bf16_free(MatmulBF16 *mm) {
    if (!mm) return;
    for (int i = 0; i < mm->cached; i++) free_block_matmul(mm->cache[i]);
    free(mm->cache);
    for (int w = 0; w < mm->num_workers; w++) {
        dnnl_stream_destroy(mm->workers[w].stream);
        free(mm->workers[w].scratchpad);
        free(mm->workers[w].panel);
    }
    free(mm->workers);
    for (int s = 0; s < NUM_SLOTS; s++) free(mm->slot[s]);
    dnnl_engine_destroy(mm->engine);
    free(mm);
}

MatmulBF16Path matmul_bf16_path(const MatmulBF16 *mm) { return mm->path; }

const char *matmul_bf16_path_name(MatmulBF16Path path) {
    return path == MATMUL_BF16_ONEDNN ? "onednn-bf16" : path == MATMUL_BF16_WIDEN ? "widen-fp32" : "auto";
}

int matmul_bf16_primitives_created(const MatmulBF16 *mm) { return mm->cached; }

const char *matmul_bf16_last_kernel(const MatmulBF16 *mm) {
    if (mm->path == MATMUL_BF16_WIDEN) return "matmul.c (OpenBLAS sgemm)";
    return mm->last_kernel ? mm->last_kernel : "none";
}

/* The descriptors of a block's operands (see the table at the top). */
static void block_descs(BlockMatmul *c) {
    const int64_t M = (int64_t)c->M, K = (int64_t)c->K, n = (int64_t)c->n;
    if (c->product == PRODUCT_FORWARD) c->md[ARG_WEIGHTS] = matrix_desc(K, n, dnnl_bf16, 1, K);
    else c->md[ARG_WEIGHTS] = matrix_desc(K, n, dnnl_bf16, n, 1);
    /* dweight's src: the panel (K,M) row-major, read as its transpose */
    if (c->product == PRODUCT_DWEIGHT) c->md[ARG_SRC] = matrix_desc(M, K, dnnl_bf16, 1, M);
    else c->md[ARG_SRC] = matrix_desc(M, K, dnnl_bf16, K, 1);
    c->md[ARG_DST] = matrix_desc(M, n, dnnl_f32, n, 1);
    if (c->has_bias) c->md[ARG_BIAS] = matrix_desc(1, n, dnnl_f32, n, 1);
}

static BlockMatmul *create_block_matmul(MatmulBF16 *mm, Product product, bool has_bias, size_t M, size_t K,
                                        size_t n) {
    BlockMatmul *c = bs_calloc(1, sizeof *c);
    *c = (BlockMatmul){.product = product, .has_bias = has_bias, .M = M, .K = K, .n = n};
    block_descs(c);
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
    check(dnnl_matmul_desc_init(&desc, &c->md[ARG_SRC], &c->md[ARG_WEIGHTS], has_bias ? &c->md[ARG_BIAS] : NULL,
                                &c->md[ARG_DST]),
          "matmul descriptor");
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* oneDNN plans the block for the threads it sees now: one */
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &desc, attr, mm->engine, NULL), "matmul primitive descriptor");
    check(dnnl_primitive_create(&c->primitive, pd), "matmul primitive");
    omp_set_num_threads(threads);
    dnnl_primitive_attr_destroy(attr);
    const char *kernel = NULL;
    check(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &kernel), "implementation query");
    snprintf(c->kernel, sizeof c->kernel, "%s", kernel);
    c->md[ARG_SCRATCHPAD] = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    c->scratchpad_bytes = dnnl_memory_desc_get_size(&c->md[ARG_SCRATCHPAD]);
    dnnl_primitive_desc_destroy(pd); /* the primitive keeps its own copy */
    return c;
}

static BlockMatmul *find_or_create(MatmulBF16 *mm, Product product, bool has_bias, size_t M, size_t K, size_t n) {
    for (int i = 0; i < mm->cached; i++) {
        BlockMatmul *c = mm->cache[i];
        if (c->product == product && c->has_bias == has_bias && c->M == M && c->K == K && c->n == n) return c;
    }
    if (mm->cached == mm->capacity) {
        mm->capacity = mm->capacity ? 2 * mm->capacity : 16;
        BlockMatmul **grown = realloc(mm->cache, (size_t)mm->capacity * sizeof *grown);
        if (!grown) bs_die("out of memory growing the matmul primitive cache");
        mm->cache = grown;
    }
    return mm->cache[mm->cached++] = create_block_matmul(mm, product, has_bias, M, K, n);
}

/* A product of M rows in blocks of `block`: dst (M,n) = src (M,K) @ weights (K,n). */
static Job make_job(MatmulBF16 *mm, Product product, bool has_bias, size_t M, size_t block, size_t K, size_t n) {
    Job job = {.M = M, .block = block, .K = K};
    if (M >= block) job.full = find_or_create(mm, product, has_bias, block, K, n);
    if (M % block) job.tail = find_or_create(mm, product, has_bias, M % block, K, n);
    return job;
}

static size_t job_blocks(const Job *job) { return (job->M + job->block - 1) / job->block; }

/* Whether a block of this shape copies or narrows its src into the panel. */
static bool needs_panel(const Job *job, const BlockMatmul *c) {
    return job->src32 || (c->product == PRODUCT_DWEIGHT && c->M != job->M);
}

/* Workers for `threads` threads, each with a panel and scratchpad large
 * enough for every block of the jobs, and memory objects for their
 * primitives: all allocation happens here, before the block loop. */
static void prepare_workers(MatmulBF16 *mm, const Job *jobs, int num_jobs, int threads) {
    if (threads > mm->num_workers) {
        Worker *grown = realloc(mm->workers, (size_t)threads * sizeof *grown);
        if (!grown) bs_die("out of memory growing the matmul workers");
        mm->workers = grown;
        for (int w = mm->num_workers; w < threads; w++) {
            mm->workers[w] = (Worker){0};
            check(dnnl_stream_create(&mm->workers[w].stream, mm->engine, dnnl_stream_default_flags), "stream");
        }
        mm->num_workers = threads;
    }
    for (int j = 0; j < num_jobs; j++) {
        BlockMatmul *parts[2] = {jobs[j].full, jobs[j].tail};
        for (int p = 0; p < 2; p++) {
            BlockMatmul *c = parts[p];
            if (!c) continue;
            if (c->mem_workers < threads) {
                void *grown = realloc(c->mem, (size_t)threads * sizeof *c->mem);
                if (!grown) bs_die("out of memory growing the matmul memory objects");
                c->mem = grown;
                memset(c->mem + c->mem_workers, 0, (size_t)(threads - c->mem_workers) * sizeof *c->mem);
                c->mem_workers = threads;
            }
            for (int w = 0; w < threads; w++) {
                Worker *wk = &mm->workers[w];
                reserve(&wk->scratchpad, &wk->scratchpad_bytes, c->scratchpad_bytes);
                if (needs_panel(&jobs[j], c)) reserve(&wk->panel, &wk->panel_bytes, c->M * c->K * sizeof(bf16));
                for (int a = 0; a < NUM_ARGS; a++)
                    if (!c->mem[w][a] && (a != ARG_BIAS || c->has_bias))
                        check(dnnl_memory_create(&c->mem[w][a], &c->md[a], mm->engine, DNNL_MEMORY_NONE), "memory");
            }
        }
    }
}

/* panel (K,width) = columns c0..c0+width of x (K,ld) */
static void copy_columns(bf16 *panel, const bf16 *x, size_t K, size_t ld, size_t c0, size_t width) {
    for (size_t k = 0; k < K; k++) memcpy(panel + k * width, x + k * ld + c0, width * sizeof(bf16));
}

static void set_handle(dnnl_memory_t m, const void *data) {
    check(dnnl_memory_set_data_handle(m, (void *)data), "memory handle"); /* oneDNN only reads src/weights/bias */
}

/* Block b of the job, on worker w. */
static void run_block(const MatmulBF16 *mm, const Job *job, size_t b, int w) {
    const size_t r0 = b * job->block;
    BlockMatmul *c = r0 + job->block <= job->M ? job->full : job->tail;
    const Worker *wk = &mm->workers[w];
    bf16 *panel = wk->panel;
    const bf16 *src = panel;
    if (!needs_panel(job, c)) src = c->product == PRODUCT_DWEIGHT ? job->src16 : job->src16 + r0 * c->K;
    else if (job->src32) bf16_from_floats(panel, job->src32 + r0 * c->K, c->M * c->K);
    else copy_columns(panel, job->src16, c->K, job->M, r0, c->M); /* dweight: the block's columns of dout */
    dnnl_memory_t *mem = c->mem[w];
    const void *data[NUM_ARGS] = {src, job->weights, job->bias, job->dst + r0 * c->n, wk->scratchpad};
    dnnl_exec_arg_t args[NUM_ARGS];
    int nargs = 0;
    for (int a = 0; a < NUM_ARGS; a++) {
        if (!mem[a]) continue;
        set_handle(mem[a], data[a]);
        args[nargs++] = (dnnl_exec_arg_t){dnnl_arg[a], mem[a]};
    }
    check(dnnl_primitive_execute(c->primitive, wk->stream, nargs, args), "matmul execution");
    check(dnnl_stream_wait(wk->stream), "stream wait");
}

/* Multiply-adds of a job's largest block. */
static double block_work(const Job *job) {
    const BlockMatmul *c = job->full ? job->full : job->tail;
    return (double)c->M * (double)c->K * (double)c->n;
}

/* Every block of the one or two jobs, in one OpenMP loop (blocks of
 * different jobs write different outputs), handed out in order, the job with
 * the larger blocks first: at 2 threads one large dweight block then runs
 * beside the two dinp blocks instead of after them. Each thread's own count
 * is set to 1 inside the region, so an implementation that asked at
 * execution how many threads it has would plan for one too: a guard, not a
 * fix (the brgemm and gemm:jit kernels measured gave the same bits at 1-3
 * threads without it). */
static void run_jobs(MatmulBF16 *mm, const Job *given, int num_jobs) {
    Job jobs[2] = {given[0], given[num_jobs - 1]};
    if (num_jobs == 2 && block_work(&given[1]) > block_work(&given[0])) {
        jobs[0] = given[1];
        jobs[1] = given[0];
    }
    size_t first[2], total = 0;
    for (int j = 0; j < num_jobs; j++) {
        first[j] = total;
        total += job_blocks(&jobs[j]);
    }
    prepare_workers(mm, jobs, num_jobs, omp_get_max_threads());
#pragma omp parallel
    {
        omp_set_num_threads(1); /* this thread's task only; gone when the region ends */
#pragma omp for schedule(dynamic, 1)
        for (size_t b = 0; b < total; b++) {
            int j = num_jobs - 1;
            while (b < first[j]) j--;
            run_block(mm, &jobs[j], b - first[j], omp_get_thread_num());
        }
    }
    const Job *last = &jobs[num_jobs - 1];
    mm->last_kernel = (last->full ? last->full : last->tail)->kernel;
}

/* A bf16 operand widened to fp32 (exactly) in a scratch slot (WIDEN path). */
static float *widened(MatmulBF16 *mm, int slot, const bf16 *x, size_t n) {
    float *wide = reserve(&mm->slot[slot], &mm->slot_bytes[slot], n * sizeof(float));
    bf16_to_floats(wide, x, n);
    return wide;
}

/* A float operand holding bf16 values narrowed to bf16 in a scratch slot. */
static bf16 *narrowed(MatmulBF16 *mm, int slot, const float *x, size_t n) {
    bf16 *narrow = reserve(&mm->slot[slot], &mm->slot_bytes[slot], n * sizeof(bf16));
    bf16_from_floats(narrow, x, n);
    return narrow;
}

/* ONEDNN forward: src rows from inp16, or narrowed from inp32 per block. */
static void onednn_forward(MatmulBF16 *mm, float *out, const bf16 *inp16, const float *inp32, const bf16 *weight,
                           const float *bias, size_t N, int IC, int OC) {
    Job job = make_job(mm, PRODUCT_FORWARD, bias != NULL, N, MATMUL_ROW_BLOCK, (size_t)IC, (size_t)OC);
    job.src16 = inp16, job.src32 = inp32, job.weights = weight, job.bias = bias, job.dst = out;
    run_jobs(mm, &job, 1);
}

/* ONEDNN backward: dout (fp32, or bf16 values in floats) narrowed once;
 * dinp or dweight may be NULL (that product skipped). */
static void onednn_backward(MatmulBF16 *mm, float *dinp, float *dweight, const float *dout32, const bf16 *inp,
                            const bf16 *weight, size_t N, int IC, int OC) {
    if (!dinp && !dweight) return;
    const bf16 *dout = narrowed(mm, SLOT_DOUT, dout32, N * (size_t)OC);
    Job jobs[2];
    int num_jobs = 0;
    if (dinp) {
        Job *j = &jobs[num_jobs++];
        *j = make_job(mm, PRODUCT_DINP, false, N, MATMUL_ROW_BLOCK, (size_t)OC, (size_t)IC);
        j->src16 = dout, j->weights = weight, j->dst = dinp;
    }
    if (dweight) {
        Job *j = &jobs[num_jobs++];
        *j = make_job(mm, PRODUCT_DWEIGHT, false, (size_t)OC, MATMUL_DWEIGHT_BLOCK, N, (size_t)IC);
        j->src16 = dout, j->weights = inp, j->dst = dweight;
    }
    run_jobs(mm, jobs, num_jobs);
}

void matmul_bf16_forward(MatmulBF16 *mm, float *out, const bf16 *inp, const bf16 *weight, const float *bias,
                         size_t N, int IC, int OC) {
    if (N == 0) return;
    if (mm->path == MATMUL_BF16_WIDEN) {
        matmul_forward(out, widened(mm, SLOT_SRC, inp, N * (size_t)IC),
                       widened(mm, SLOT_WEIGHTS, weight, (size_t)OC * IC), bias, N, IC, OC);
        return;
    }
    onednn_forward(mm, out, inp, NULL, weight, bias, N, IC, OC);
}

void matmul_bf16_backward(MatmulBF16 *mm, float *dinp, float *dweight, float *dbias, const float *dout,
                          const bf16 *inp, const bf16 *weight, size_t N, int IC, int OC) {
    if (N == 0) return;
    if (mm->path == MATMUL_BF16_WIDEN) {
        const size_t n = N * (size_t)OC;
        float *d = reserve(&mm->slot[SLOT_DOUT], &mm->slot_bytes[SLOT_DOUT], n * sizeof(float));
        bf16_round_floats(d, dout, n);
        matmul_backward(dinp, dweight, NULL, d, dweight ? widened(mm, SLOT_SRC, inp, N * (size_t)IC) : NULL,
                        dinp ? widened(mm, SLOT_WEIGHTS, weight, (size_t)OC * IC) : NULL, N, IC, OC);
    } else {
        onednn_backward(mm, dinp, dweight, dout, inp, weight, N, IC, OC);
    }
    if (dbias) bias_backward(dbias, dout, N, OC); /* from the fp32 dout */
}

void matmul_bf16_forward_rounded(MatmulBF16 *mm, float *out, const float *inp, const float *weight,
                                 const float *bias, size_t N, int IC, int OC) {
    if (N == 0) return;
    if (mm->path == MATMUL_BF16_WIDEN) {
        matmul_forward(out, inp, weight, bias, N, IC, OC);
        return;
    }
    onednn_forward(mm, out, NULL, inp, narrowed(mm, SLOT_WEIGHTS, weight, (size_t)OC * IC), bias, N, IC, OC);
}

void matmul_bf16_backward_rounded(MatmulBF16 *mm, float *dinp, float *dweight, const float *dout,
                                  const float *inp, const float *weight, size_t N, int IC, int OC) {
    if (N == 0) return;
    if (mm->path == MATMUL_BF16_WIDEN) {
        matmul_backward(dinp, dweight, NULL, dout, inp, weight, N, IC, OC);
        return;
    }
    const bf16 *w = dinp ? narrowed(mm, SLOT_WEIGHTS, weight, (size_t)OC * IC) : NULL;
    const bf16 *x = dweight ? narrowed(mm, SLOT_SRC, inp, N * (size_t)IC) : NULL;
    onednn_backward(mm, dinp, dweight, dout, x, w, N, IC, OC);
}
