/* test_recompute_memory.c: the activation memory --recompute saves in the
 * CPU engine (gpt_acts_bytes: what a training set allocates) against the
 * planner's prediction for the same mode (plan/memory.h stage_memory: its
 * activations, one stage, one micro-batch in flight, fp32).
 *
 * The planner prices the engine's attention as ATTN_FULL here: the CPU kernel
 * computes only the causal triangle but the engine allocates (and touches a
 * page of every row of) the whole T x T square per head, which ATTN_CAUSAL
 * halves. The two formulas then differ by known terms only, asserted exactly
 * (to half a byte):
 *   - selective: the engine keeps one layer's probabilities in its shared
 *     copy (the layer being recomputed), which the planner does not count:
 *     engine saving = planner saving - B H T T x 4 bytes;
 *   - full: each layer's LayerNorm means and rstds (4 floats a token), which
 *     the planner's formula has not, are kept in none and not in full, so the
 *     engine saves (L - 1) x 16 bytes a token more; and the planner counts the
 *     recomputed layer's output twice (kept, and in the one re-materialized
 *     layer) where the engine's shared copy leaves it out: B T C x 4 more.
 * A layout that kept anything more (or less) than Megatron's definitions
 * (selective: all but the probabilities; full: each layer's input alone)
 * moves the engine's saving by at least B T x 4 bytes and fails.
 * Also: train's --recompute words are the planner's for the same modes.
 * The engine's side is in recompute_memory_engine.c (model/gpt.h and plan/
 * name some types alike). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "plan/model.h"

typedef struct {
    int L, C, H, T, B;
} Shape;

/* recompute_memory_engine.c: gpt_acts_bytes of a training set, mode as GPTRecompute (none 0, selective 1, full 2). */
double engine_acts_bytes(int layers, int channels, int heads, int seq_len, int batch, int mode);
/* recompute_memory_engine.c: train's --recompute word for that mode. */
const char *engine_recompute_word(int mode);

static double engine_bytes(const Shape *s, int mode) {
    return engine_acts_bytes(s->L, s->C, s->H, s->T, s->B, mode);
}

static double planner_bytes(const Shape *s, Recompute r) {
    ModelShape m = {.layers = s->L, .hidden = s->C, .heads = s->H, .kv_heads = s->H, .ffn = 4 * s->C,
                    .vocab = 256, .seq_len = s->T, .vocab_multiple = 128, .act = ACT_GELU,
                    .norm = NORM_LAYERNORM, .bias = true, .tied_embeddings = true, .learned_positions = true};
    Layout l = layout_default();
    l.micro_batch = s->B;
    l.recompute = r;
    StageShape stage = {.layers = s->L, .first = true, .last = true, .in_flight = 1};
    return stage_memory(&m, &l, ATTN_FULL, PREC_FP32, &stage, 0, 0).activations;
}

int main(void) {
    for (int mode = 0; mode < 3; mode++) /* one vocabulary: train --recompute and plan --recompute */
        CHECK(strcmp(engine_recompute_word(mode), recompute_name((Recompute)mode)) == 0,
              "train's --recompute word %d is '%s', the planner's '%s'", mode, engine_recompute_word(mode),
              recompute_name((Recompute)mode));
    const Shape shapes[] = {{12, 256, 4, 512, 8}, {2, 32, 2, 32, 4}, {6, 96, 3, 128, 2}, {1, 64, 4, 64, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const Shape *s = &shapes[i];
        const double BT = (double)s->B * s->T, probs = 4.0 * s->B * s->H * (double)s->T * s->T;
        const double none = engine_bytes(s, 0), plan_none = planner_bytes(s, RECOMPUTE_NONE);
        const struct {
            int mode; /* GPTRecompute */
            Recompute plan;
            double engine_minus_planner;
        } modes[] = {{1, RECOMPUTE_SELECTIVE, -probs},
                     {2, RECOMPUTE_FULL, (s->L - 1) * 16.0 * BT + 4.0 * BT * s->C}};
        for (size_t k = 0; k < 2; k++) {
            const double saved = none - engine_bytes(s, modes[k].mode);
            const double predicted = plan_none - planner_bytes(s, modes[k].plan);
            printf("L%d C%d H%d T%d B%d %-9s: engine saves %.1f MiB, planner predicts %.1f MiB (%+.2f%%)\n", s->L,
                   s->C, s->H, s->T, s->B, recompute_name(modes[k].plan), saved / 1048576, predicted / 1048576,
                   100 * (saved - predicted) / predicted);
            CHECK(fabs(saved - predicted - modes[k].engine_minus_planner) <= 0.5,
                  "%s at L%d C%d T%d B%d: engine saves %.0f bytes, planner %.0f, expected difference %.0f",
                  recompute_name(modes[k].plan), s->L, s->C, s->T, s->B, saved, predicted,
                  modes[k].engine_minus_planner);
        }
    }
    if (failures == 0) printf("ok\n");
    return failures ? 1 : 0;
}
