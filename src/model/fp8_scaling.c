/* fp8_scaling.c: per-tensor delayed scales with their amax histories, the
 * step's records, and the FP8 linear layer of a site (see fp8_scaling.h). */
#include "model/fp8_scaling.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct Fp8State {
    Fp8Options opt;
    int sites, tensors; /* tensors = 3 x sites, tensor = FP8_KINDS x site + kind */
    float *scale;       /* (tensors) */
    float *history;     /* (tensors, opt.history): slot 0 is the step being recorded */
    Fp8Stats *step;     /* (tensors) the step's record */
    double *reduce;     /* (tensors) scratch of the amax reduction */
    bool recording;
    bool weights_gathered; /* --fp8-param-gather: W's record is made where it is quantized, at the gather */
    Fp8Matmul *matmul;
};

Fp8State *fp8_scaling_create(const Fp8Options *o, int sites) {
    if (o->history < 1) bs_die("internal: an amax history of %d steps", o->history);
    Fp8State *s = bs_calloc(1, sizeof *s);
    s->opt = *o;
    s->sites = sites;
    s->tensors = FP8_KINDS * sites;
    const size_t t = (size_t)(s->tensors ? s->tensors : 1);
    s->scale = bs_malloc(t * sizeof(float));
    for (int i = 0; i < s->tensors; i++) s->scale[i] = 1.0f; /* TE's initial scale */
    s->history = bs_calloc(t * (size_t)o->history, sizeof(float));
    s->step = bs_calloc(t, sizeof(Fp8Stats));
    s->reduce = bs_calloc(t, sizeof(double));
    s->matmul = fp8_matmul_create();
    return s;
}

void fp8_scaling_free(Fp8State *s) {
    if (!s) return;
    free(s->scale);
    free(s->history);
    free(s->step);
    free(s->reduce);
    fp8_matmul_free(s->matmul);
    free(s);
}

const Fp8Options *fp8_scaling_options(const Fp8State *s) { return &s->opt; }
int fp8_scaling_sites(const Fp8State *s) { return s->sites; }

void fp8_scaling_begin_step(Fp8State *s) {
    memset(s->step, 0, (size_t)s->tensors * sizeof(Fp8Stats));
    s->recording = true;
}

void fp8_scaling_set_recording(Fp8State *s, bool recording) { s->recording = recording; }
bool fp8_scaling_recording(const Fp8State *s) { return s->recording; }

void fp8_scaling_set_weights_gathered(Fp8State *s, bool gathered) { s->weights_gathered = gathered; }

Fp8Operand fp8_scaling_operand(Fp8State *s, int site, int kind) {
    const int t = FP8_KINDS * site + kind;
    Fp8Stats *stats = s->recording ? &s->step[t] : NULL;
    if (s->opt.recipe == FP8_RECIPE_BLOCK) return (Fp8Operand){FP8_E4M3, FP8_SCALING_BLOCKS, 0, stats};
    return (Fp8Operand){kind == FP8_GRAD ? FP8_E5M2 : FP8_E4M3, FP8_SCALING_TENSOR, s->scale[t], stats};
}

void fp8_scaling_forward(Fp8State *s, int site, float *out, const float *inp, const float *weight, const float *bias,
                         size_t N, int IC, int OC) {
    Fp8Operand x = fp8_scaling_operand(s, site, FP8_INPUT), w = fp8_scaling_operand(s, site, FP8_WEIGHT);
    if (s->weights_gathered) w.stats = NULL; /* counted, with its amax, where its codes were made */
    fp8_linear_forward(s->matmul, out, inp, &x, weight, &w, bias, N, IC, OC);
}

void fp8_scaling_backward(Fp8State *s, int site, float *dinp, float *dweight, const float *dout, const float *inp,
                          const float *weight, size_t N, int IC, int OC) {
    Fp8Operand g = fp8_scaling_operand(s, site, FP8_GRAD);
    Fp8Operand x = fp8_scaling_operand(s, site, FP8_INPUT), w = fp8_scaling_operand(s, site, FP8_WEIGHT);
    x.stats = w.stats = NULL; /* counted in forward */
    if (!dinp) g.stats = NULL; /* the weight-gradient pass of a split backward: counted in its input pass */
    fp8_linear_backward(s->matmul, dinp, dweight, dout, &g, inp, &x, weight, &w, N, IC, OC);
}

/* The step's amaxes, max-reduced over a group. */
static void reduce_amax(Fp8State *s, Comm *group) {
    if (!group || comm_size(group) < 2) return;
    for (int t = 0; t < s->tensors; t++) s->reduce[t] = s->step[t].amax;
    comm_allreduce_max_double(group, s->reduce, s->tensors);
    for (int t = 0; t < s->tensors; t++) s->step[t].amax = (float)s->reduce[t];
}

/* Transformer Engine's amax_and_scale_update for one tensor (fp8_scaling.h). */
static void update_tensor(Fp8State *s, int t, float fmax) {
    const int len = s->opt.history;
    float *h = s->history + (size_t)t * (size_t)len;
    h[0] = s->step[t].amax;
    float amax = h[0];
    if (s->opt.amax_algo == FP8_AMAX_MAX) /* NaN propagates, as torch.max's does */
        for (int i = 1; i < len; i++)
            if (isnan(h[i]) || h[i] > amax) amax = h[i];
    const float first = h[0];
    memmove(h, h + 1, (size_t)(len - 1) * sizeof(float));
    h[len - 1] = first;
    h[0] = 0;
    float sf = (fmax / amax) / exp2f((float)s->opt.margin);
    if (!(amax > 0.0f) || !isfinite(amax)) sf = s->scale[t];
    if (isinf(sf)) sf = FLT_MAX;
    s->scale[t] = sf;
}

void fp8_scaling_update(Fp8State *s, Comm *tp, Comm *dp) {
    if (s->opt.recipe != FP8_RECIPE_DELAYED) return;
    reduce_amax(s, tp);
    reduce_amax(s, dp);
    for (int t = 0; t < s->tensors; t++) update_tensor(s, t, t % FP8_KINDS == FP8_GRAD ? 57344.0f : 448.0f);
}

Fp8Stats fp8_scaling_kind_stats(const Fp8State *s, int kind) {
    Fp8Stats sum = {0};
    for (int site = 0; site < s->sites; site++) fp8_stats_add(&sum, &s->step[FP8_KINDS * site + kind]);
    return sum;
}

size_t fp8_scaling_site_floats(const Fp8State *s) { return (size_t)FP8_KINDS * (1 + (size_t)s->opt.history); }

void fp8_scaling_save_site(const Fp8State *s, int site, float *out) {
    const size_t len = (size_t)s->opt.history;
    for (int k = 0; k < FP8_KINDS; k++) {
        const int t = FP8_KINDS * site + k;
        out[k * (1 + len)] = s->scale[t];
        memcpy(out + k * (1 + len) + 1, s->history + (size_t)t * len, len * sizeof(float));
    }
}

void fp8_scaling_load_site(Fp8State *s, int site, const float *in) {
    const size_t len = (size_t)s->opt.history;
    for (int k = 0; k < FP8_KINDS; k++) {
        const int t = FP8_KINDS * site + k;
        s->scale[t] = in[k * (1 + len)];
        memcpy(s->history + (size_t)t * len, in + k * (1 + len) + 1, len * sizeof(float));
    }
}
