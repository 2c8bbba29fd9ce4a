/* moe_device.c: the MoE layers on a device (moe_device.h), launch for launch
 * as model/moe.c runs moe_forward and moe_backward on the CPU (dropless:
 * every expert computes all its rows, in dispatch order); under expert
 * parallelism the experts' side between the two moves of
 * moe_device_exchange.h, as parallel/moe_parallel.c on the CPU. */
#include "model/moe_device.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#include "model/moe.h"
#include "model/moe_device_exchange.h"

_Static_assert(sizeof(MoeStats) == DK_MOE_STATS * sizeof(double), "MoeStats is the DK_MOE_STAT_* layout");
_Static_assert((int)MOE_MAX_EXPERTS == (int)DK_MOE_MAX_EXPERTS, "one bound on the experts");

#define TRY(x)                                                                                                        \
    do {                                                                                                              \
        if ((x) != 0) return -1;                                                                                      \
    } while (0)

typedef struct { /* one MoE layer's forward, kept for its backward */
    float *logits, *scores, *lse, *slot_weight, *rows, *h, *gelu, *y;
    float *expert_rows, *expert_y; /* the experts' side: rows and y, or what the exchange brought (ep) */
    int32_t *slot_expert, *slot_pos, *disp_row, *counts;
    double *stats;
    int32_t *host_counts; /* the experts' rows, for the products' shapes */
    MoeStats *host_stats; /* the micro-step's statistics */
} MoeDeviceLayer;

enum { MAX_BUFFERS = 32 };

struct MoeDevice {
    Device *dev;
    GPTConfig cfg;
    MoeConfig moe;
    size_t N;
    MoeDeviceLayer *layer; /* per layer; dense ones unused */
    float *bias;           /* (layers, E) */
    float *dlogits, *slot_dweight, *dy, *dgelu, *drows, *dx_router; /* backward's scratch, shared */
    float *expert_dy, *expert_drows; /* the experts' side of dy and drows (ep: exchanged) */
    size_t R;                        /* the experts' side's rows at most (S; ep: what a rank may receive) */
    MoeDeviceExchange *ep;           /* expert parallelism (moe_device_set_expert_group), else NULL */
    void **owned;          /* every device allocation */
    int nowned;
    double loss_weight, aux, z;
    MoeStats *step; /* per layer */
    Comm *group;    /* the data-parallel ranks (NULL: none) */
    bool training;
};

const char *moe_device_unsupported(const GPTConfig *cfg) {
    const MoeConfig moe = gpt_moe_config(cfg);
    if (moe.capacity_factor > 0) return "a device runs dropless MoE layers for now (no capacity factor)";
    return NULL;
}

static void *take(MoeDevice *m, size_t bytes) {
    void *p = device_alloc(m->dev, bytes);
    if (p) m->owned[m->nowned++] = p;
    return p;
}

static int allocate_layer(MoeDevice *m, MoeDeviceLayer *a) {
    const size_t N = m->N, E = (size_t)m->moe.experts, S = N * (size_t)m->moe.top_k;
    const size_t C = (size_t)m->moe.channels, F = (size_t)m->moe.hidden, f = sizeof(float), i = sizeof(int32_t);
    a->logits = take(m, f * N * E), a->scores = take(m, f * N * E), a->lse = take(m, f * N);
    a->slot_weight = take(m, f * S), a->rows = take(m, f * S * C), a->h = take(m, f * m->R * F);
    a->gelu = take(m, f * m->R * F), a->y = take(m, f * S * C), a->slot_expert = take(m, i * S);
    const bool ep = gpt_ep_size(&m->cfg) > 1;
    a->expert_rows = ep ? take(m, f * m->R * C) : a->rows, a->expert_y = ep ? take(m, f * m->R * C) : a->y;
    a->slot_pos = take(m, i * S), a->disp_row = take(m, i * S), a->counts = take(m, i * E);
    a->stats = take(m, sizeof(MoeStats));
    a->host_counts = device_host_alloc(m->dev, i * E);
    a->host_stats = device_host_alloc(m->dev, sizeof(MoeStats));
    return a->logits && a->scores && a->lse && a->slot_weight && a->rows && a->h && a->gelu && a->y &&
                   a->expert_rows && a->expert_y &&
                   a->slot_expert && a->slot_pos && a->disp_row && a->counts && a->stats && a->host_counts &&
                   a->host_stats
               ? 0
               : -1;
}

static int allocate(MoeDevice *m) {
    const size_t N = m->N, E = (size_t)m->moe.experts, S = N * (size_t)m->moe.top_k;
    const size_t C = (size_t)m->moe.channels, F = (size_t)m->moe.hidden, f = sizeof(float);
    m->dlogits = take(m, f * N * E), m->slot_dweight = take(m, f * S), m->dy = take(m, f * S * C);
    m->dgelu = take(m, f * m->R * F), m->drows = take(m, f * S * C), m->dx_router = take(m, f * N * C);
    const bool ep = gpt_ep_size(&m->cfg) > 1;
    m->expert_dy = ep ? take(m, f * m->R * C) : m->dy, m->expert_drows = ep ? take(m, f * m->R * C) : m->drows;
    m->bias = take(m, f * E * (size_t)m->cfg.num_layers);
    if (!m->dlogits || !m->slot_dweight || !m->dy || !m->dgelu || !m->drows || !m->dx_router || !m->bias ||
        !m->expert_dy || !m->expert_drows)
        return -1;
    for (int l = 0; l < m->cfg.num_layers; l++)
        if (gpt_layer_is_moe(&m->cfg, l) && allocate_layer(m, &m->layer[l]) != 0) return -1;
    return 0;
}

MoeDevice *moe_device_create(Device *dev, const GPTConfig *cfg, size_t rows) {
    MoeDevice *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->dev = dev, m->cfg = *cfg, m->moe = gpt_moe_config(cfg), m->N = rows, m->loss_weight = 1;
    const int ep = gpt_ep_size(cfg);
    m->R = ep > 1 ? moe_device_exchange_max_received(m->moe.experts, ep, m->moe.top_k, rows) : rows * (size_t)m->moe.top_k;
    m->layer = calloc((size_t)cfg->num_layers, sizeof *m->layer);
    m->step = calloc((size_t)cfg->num_layers, sizeof *m->step);
    m->owned = calloc((size_t)(MAX_BUFFERS * (cfg->num_layers + 1)), sizeof *m->owned);
    if (!m->layer || !m->step || !m->owned || allocate(m) != 0) {
        moe_device_free(m);
        return NULL;
    }
    return m;
}

void moe_device_free(MoeDevice *m) {
    if (!m) return;
    for (int i = 0; i < m->nowned; i++) device_free(m->dev, m->owned[i]);
    for (int l = 0; m->layer && l < m->cfg.num_layers; l++) {
        device_host_free(m->dev, m->layer[l].host_counts);
        device_host_free(m->dev, m->layer[l].host_stats);
    }
    moe_device_exchange_free(m->ep);
    free(m->owned);
    free(m->layer);
    free(m->step);
    free(m);
}

void moe_device_begin_step(MoeDevice *m, double loss_weight, Comm *group) {
    m->loss_weight = loss_weight, m->aux = m->z = 0;
    m->group = group && comm_size(group) > 1 ? group : NULL;
    memset(m->step, 0, sizeof *m->step * (size_t)m->cfg.num_layers);
}

int moe_device_set_bias(MoeDevice *m, DeviceStream *s, const float *bias) {
    const size_t bytes = sizeof(float) * (size_t)m->moe.experts * (size_t)m->cfg.num_layers;
    return device_copy(m->dev, s, m->bias, bias, bytes, COPY_HOST_TO_DEVICE);
}

/* The kernels' arguments of layer l (the pointers each kernel reads). */
static MoeArgs args(const MoeDevice *m, int l) {
    const MoeDeviceLayer *a = &m->layer[l];
    return (MoeArgs){.logits = a->logits, .scores = a->scores, .lse = a->lse, .slot_weight = a->slot_weight,
                     .slot_dweight = m->slot_dweight, .rows = a->rows, .dy = m->dy, .dlogits = m->dlogits,
                     .slot_expert = a->slot_expert, .slot_pos = a->slot_pos, .disp_row = a->disp_row,
                     .counts = a->counts, .stats = a->stats, .bias = m->bias + (size_t)l * m->moe.experts,
                     .y = a->y, .drows = m->drows, .dx_router = m->dx_router, .N = (int)m->N,
                     .C = m->moe.channels, .E = m->moe.experts, .K = m->moe.top_k, .router = (int)m->moe.router,
                     .gates = (int)m->moe.gates, .routed_scale = (float)m->moe.routed_scale,
                     .aux_coef = m->loss_weight * m->moe.aux_coef, .z_coef = m->loss_weight * m->moe.z_coef};
}

static int moe_launch(MoeDevice *m, DeviceStream *s, DeviceKernel k, MoeArgs a) {
    DeviceCall call = {.kernel = k, .a.moe = a};
    return device_launch(m->dev, s, &call);
}

static int product(MoeDevice *m, DeviceStream *s, DeviceKernel k, MatmulArgs a) {
    DeviceCall call = {.kernel = k, .a.matmul = a};
    return device_launch(m->dev, s, &call);
}

/* Block b of layer l's experts' side, E blocks in all: its rows and (local)
 * expert. One rank: expert b's rows in dispatch order; expert parallelism:
 * the exchange's received layout (source rank, then local expert). */
static int block_rows(const MoeDevice *m, int l, int b, int *expert) {
    if (!m->ep) return *expert = b, m->layer[l].host_counts[b];
    *expert = b % moe_device_exchange_local_experts(m->ep);
    return (int)moe_device_exchange_block_rows(m->ep, l, b);
}

/* Each expert's MLP over its rows: y = fcproj(gelu(fc(rows))), h keeping fc's output. */
static int experts_forward(MoeDevice *m, DeviceStream *s, int l, const float *experts) {
    const MoeDeviceLayer *a = &m->layer[l];
    const int C = m->moe.channels, F = m->moe.hidden;
    size_t r0 = 0;
    for (int b = 0, e, n; b < m->moe.experts; r0 += (size_t)n, b++) {
        if ((n = block_rows(m, l, b, &e)) == 0) continue;
        const MoeExpert p = moe_expert(&m->moe, experts, e);
        TRY(product(m, s, DK_MATMUL_FORWARD, (MatmulArgs){.out = a->gelu + r0 * F, .pre_gelu = a->h + r0 * F,
                                                          .inp = a->expert_rows + r0 * C, .weight = p.fcw, .bias = p.fcb,
                                                          .N = n, .IC = C, .OC = F}));
        TRY(product(m, s, DK_MATMUL_FORWARD, (MatmulArgs){.out = a->expert_y + r0 * C, .inp = a->gelu + r0 * F,
                                                          .weight = p.fcprojw, .bias = p.fcprojb, .N = n, .IC = F,
                                                          .OC = C}));
    }
    return 0;
}

int moe_device_forward(MoeDevice *m, DeviceStream *s, int l, float *out, const float *x, const float *router_w,
                       const float *experts) {
    if (gpt_ep_size(&m->cfg) > 1 && !m->ep) bs_die("internal error: an expert-parallel MoE layer without its group");
    const MoeDeviceLayer *a = &m->layer[l];
    MoeArgs route = args(m, l);
    route.x = x, route.router_w = router_w, route.out = out;
    TRY(device_zero(m->dev, s, a->stats, sizeof(MoeStats)));
    TRY(moe_launch(m, s, DK_MOE_ROUTE, route));
    TRY(moe_launch(m, s, DK_MOE_DISPATCH, route));
    TRY(device_copy(m->dev, s, a->host_counts, a->counts, sizeof(int32_t) * (size_t)m->moe.experts, COPY_DEVICE_TO_HOST));
    TRY(device_copy(m->dev, s, a->host_stats, a->stats, sizeof(MoeStats), COPY_DEVICE_TO_HOST));
    TRY(device_stream_sync(m->dev, s)); /* the counts shape the products */
    if (m->group && m->training) { /* the data-parallel batch's statistics, for backward's losses */
        comm_allreduce_double(m->group, (double *)a->host_stats, (int)MOE_STATS_DOUBLES);
        TRY(device_copy(m->dev, s, a->stats, a->host_stats, sizeof(MoeStats), COPY_HOST_TO_DEVICE));
    }
    if (m->ep) { /* the rows to their experts' ranks, the outputs back */
        const size_t received = moe_device_exchange_plan(m->ep, l, a->host_counts, m->N * (size_t)m->moe.top_k);
        if (received > m->R) bs_die("internal error: MoE exchange over its bound");
        moe_device_exchange_dispatch(m->ep, l, a->rows, a->expert_rows, (size_t)m->moe.channels);
    }
    TRY(experts_forward(m, s, l, experts));
    if (m->ep) moe_device_exchange_return(m->ep, l, a->expert_y, a->y, (size_t)m->moe.channels);
    return moe_launch(m, s, DK_MOE_COMBINE, route);
}

/* Each expert's MLP backward: drows from dy, its gradients +=. */
static int experts_backward(MoeDevice *m, DeviceStream *s, int l, const float *experts, float *dexperts) {
    const MoeDeviceLayer *a = &m->layer[l];
    const int C = m->moe.channels, F = m->moe.hidden;
    size_t r0 = 0;
    for (int b = 0, e, n; b < m->moe.experts; r0 += (size_t)n, b++) {
        if ((n = block_rows(m, l, b, &e)) == 0) continue;
        const MoeExpert p = moe_expert(&m->moe, experts, e), d = moe_expert(&m->moe, dexperts, e);
        float *dg = m->dgelu + r0 * F;
        TRY(product(m, s, DK_MATMUL_BACKWARD, (MatmulArgs){.dinp = dg, .dweight = d.fcprojw, .dbias = d.fcprojb,
                                                           .dout = m->expert_dy + r0 * C, .inp = a->gelu + r0 * F,
                                                           .weight = p.fcprojw, .N = n, .IC = F, .OC = C}));
        DeviceCall gelu = {.kernel = DK_GELU_BACKWARD, .a.elementwise = {dg, a->h + r0 * F, dg, (size_t)n * F}};
        TRY(device_launch(m->dev, s, &gelu));
        TRY(product(m, s, DK_MATMUL_BACKWARD, (MatmulArgs){.dinp = m->expert_drows + r0 * C, .dweight = d.fcw, .dbias = d.fcb,
                                                           .dout = dg, .inp = a->expert_rows + r0 * C, .weight = p.fcw,
                                                           .N = n, .IC = C, .OC = F}));
    }
    return 0;
}

int moe_device_backward(MoeDevice *m, DeviceStream *s, int l, float *dx, float *drouter_w, float *dexperts,
                        const float *dout, const float *x, const float *router_w, const float *experts) {
    MoeArgs b = args(m, l);
    b.dout = dout, b.dx = dx;
    TRY(moe_launch(m, s, DK_MOE_COMBINE_BACKWARD, b));
    const size_t C = (size_t)m->moe.channels;
    if (m->ep) moe_device_exchange_dispatch(m->ep, l, m->dy, m->expert_dy, C); /* the outputs' gradients to the experts */
    TRY(experts_backward(m, s, l, experts, dexperts));
    if (m->ep) moe_device_exchange_return(m->ep, l, m->expert_drows, m->drows, C); /* the rows' gradients back */
    TRY(moe_launch(m, s, DK_MOE_ROUTER_BACKWARD, b));
    TRY(product(m, s, DK_MATMUL_BACKWARD, (MatmulArgs){.dinp = m->dx_router, .dweight = drouter_w, .dout = m->dlogits,
                                                       .inp = x, .weight = router_w, .N = (int)m->N,
                                                       .IC = m->moe.channels, .OC = m->moe.experts}));
    return moe_launch(m, s, DK_MOE_SCATTER_BACKWARD, b);
}

void moe_device_add_micro_step(MoeDevice *m) {
    for (int l = 0; l < m->cfg.num_layers; l++) {
        if (!gpt_layer_is_moe(&m->cfg, l)) continue;
        const MoeStats *st = m->layer[l].host_stats;
        double *sum = (double *)&m->step[l], aux, z;
        for (size_t k = 0; k < MOE_STATS_DOUBLES; k++) sum[k] += ((const double *)st)[k];
        moe_losses(&m->moe, st, st, &aux, &z);
        m->aux += m->loss_weight * aux;
        m->z += m->loss_weight * z;
    }
}

void moe_device_set_training(MoeDevice *m, bool training) { m->training = training; }

void moe_device_set_expert_group(MoeDevice *m, Comm *ep_group, DeviceComm *rows) {
    if (comm_size(ep_group) != gpt_ep_size(&m->cfg)) bs_die("internal error: the EP group is not the model's ep");
    m->ep = moe_device_exchange_create(ep_group, rows, m->moe.experts, m->cfg.num_layers);
}

const MoeStats *moe_device_step_stats(const MoeDevice *m, int l) { return &m->step[l]; }

void moe_device_step_losses(const MoeDevice *m, double *aux, double *z) { *aux = m->aux, *z = m->z; }
