/* opt_driver.c: test driver for src/optim (used by test_opt_ref.py and
 * test_opt_batch.py; it checks nothing itself).
 *
 *   opt_driver step SPEC.json
 *       Runs optimizer steps on raw float32 files named in SPEC (see
 *       run_step below) and writes the parameters then each state array.
 *       With cut points, each range is a simulated rank: its own copies of
 *       its parameters, gradients and state (as under ZeRO-3), one thread
 *       per rank, and optimizer_step's sum_across_ranks done with a barrier.
 *   opt_driver batch SCHEDULE FINAL_BATCH TOKEN_BUDGET TOKENS...
 *       Prints batch_at for each token count, one per line.
 *   opt_driver run SCHEDULE FINAL_BATCH TOKEN_BUDGET SEQ_LEN GRANULE STRICT START_TOKENS STEPS
 *       A training loop's view: per step "tokens batch", the batch rounded
 *       to GRANULE (the first rounding warned once on stderr).
 *   opt_driver lr-scale RULE BATCH BASE_BATCH
 *       Prints the learning-rate multiplier.
 *   opt_driver optimizer NAME
 *       Prints the kind's name and its state arrays per parameter.
 * Bad input dies with the module's one-line message. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/subject_flags.h"
#include "core/error.h"
#include "core/io.h"
#include "optim/batch_schedule.h"
#include "optim/lr_scaling.h"
#include "optim/optimizer.h"

#define MAX_RANKS 8

/* ---- step ---- */

typedef struct {
    pthread_barrier_t barrier;
    int ranks;
    double *published[MAX_RANKS];
} World;

typedef struct {
    World *world;
    int rank;
    Optimizer opt;
    OptimizerShard shard;
    const float *all_grads; /* steps x n */
    size_t n;
    int steps;
    const OptimizerStep *schedule;
} Rank;

/* An all-reduce by hand: publish, wait, add every rank's values in rank order, wait. */
static void barrier_sum(void *ctx, double *values, int n) {
    Rank *r = ctx;
    World *w = r->world;
    w->published[r->rank] = values;
    pthread_barrier_wait(&w->barrier);
    double *total = bs_calloc((size_t)n, sizeof(double));
    for (int k = 0; k < w->ranks; k++)
        for (int i = 0; i < n; i++) total[i] += w->published[k][i];
    pthread_barrier_wait(&w->barrier);
    memcpy(values, total, sizeof(double) * (size_t)n);
    free(total);
}

static void *rank_main(void *arg) {
    Rank *r = arg;
    float *grads = (float *)r->shard.grads;
    for (int s = 0; s < r->steps; s++) {
        memcpy(grads, r->all_grads + (size_t)s * r->n + r->shard.offset, sizeof(float) * r->shard.count);
        optimizer_step(&r->opt, &r->shard, &r->schedule[s], r->world->ranks > 1 ? barrier_sum : NULL, r);
    }
    return NULL;
}

static float *read_floats(const char *path, size_t n) {
    size_t bytes;
    float *x = (float *)bs_read_file(path, &bytes);
    if (bytes != n * sizeof(float)) bs_die("%s: %zu bytes, expected %zu", path, bytes, n * sizeof(float));
    return x;
}

static double num(json_t *spec, const char *key) {
    json_t *v = json_object_get(spec, key);
    if (!json_is_number(v)) bs_die("spec: '%s' must be a number", key);
    return json_number_value(v);
}

/* SPEC: {"kind", "beta1", "beta2", "eps", "weight_decay", "momentum", "dampening", "nesterov", "lars_eta",
 *        "lamb_clamp", "n", "tensors": [[offset, count, decays], ...], "cuts": [c1, ...],
 *        "steps": [[lr, grad_scale], ...], "params", "grads" (steps x n floats), "out"} */
static void run_step(const char *spec_path) {
    json_error_t err;
    json_t *spec = json_load_file(spec_path, 0, &err);
    if (!spec) bs_die("%s: %s", spec_path, err.text);
    OptimizerConfig cfg = {0};
    char why[256];
    if (!optimizer_kind_parse(json_string_value(json_object_get(spec, "kind")), &cfg.kind, why, sizeof why))
        bs_die("%s", why);
    cfg.beta1 = (float)num(spec, "beta1");
    cfg.beta2 = (float)num(spec, "beta2");
    cfg.eps = (float)num(spec, "eps");
    cfg.weight_decay = (float)num(spec, "weight_decay");
    cfg.momentum = (float)num(spec, "momentum");
    cfg.dampening = (float)num(spec, "dampening");
    cfg.nesterov = json_is_true(json_object_get(spec, "nesterov"));
    cfg.lars_eta = (float)num(spec, "lars_eta");
    cfg.lamb_clamp = json_is_true(json_object_get(spec, "lamb_clamp"));
    size_t n = (size_t)num(spec, "n");

    json_t *jt = json_object_get(spec, "tensors");
    int num_tensors = (int)json_array_size(jt);
    OptimTensor *tensors = bs_malloc(sizeof(OptimTensor) * (size_t)(num_tensors + 1));
    for (int t = 0; t < num_tensors; t++) {
        json_t *e = json_array_get(jt, (size_t)t);
        tensors[t] = (OptimTensor){(size_t)json_integer_value(json_array_get(e, 0)),
                                   (size_t)json_integer_value(json_array_get(e, 1)),
                                   json_is_true(json_array_get(e, 2))};
    }
    json_t *js = json_object_get(spec, "steps");
    int steps = (int)json_array_size(js);
    OptimizerStep *schedule = bs_malloc(sizeof(OptimizerStep) * (size_t)steps);
    for (int s = 0; s < steps; s++) {
        json_t *e = json_array_get(js, (size_t)s);
        schedule[s] = (OptimizerStep){(float)json_number_value(json_array_get(e, 0)),
                                      (float)json_number_value(json_array_get(e, 1)), s + 1};
    }
    json_t *jc = json_object_get(spec, "cuts");
    int ranks = (int)json_array_size(jc) + 1;
    if (ranks > MAX_RANKS) bs_die("spec: at most %d ranks", MAX_RANKS);
    size_t bounds[MAX_RANKS + 1] = {0};
    for (int k = 1; k < ranks; k++) bounds[k] = (size_t)json_integer_value(json_array_get(jc, (size_t)(k - 1)));
    bounds[ranks] = n;

    float *params = read_floats(json_string_value(json_object_get(spec, "params")), n);
    float *grads = read_floats(json_string_value(json_object_get(spec, "grads")), n * (size_t)steps);
    int arrays = optimizer_state_arrays(cfg.kind);

    World world = {.ranks = ranks};
    pthread_barrier_init(&world.barrier, NULL, (unsigned)ranks);
    Rank rank[MAX_RANKS];
    pthread_t threads[MAX_RANKS];
    for (int k = 0; k < ranks; k++) {
        Rank *r = &rank[k];
        size_t count = bounds[k + 1] - bounds[k];
        *r = (Rank){.world = &world, .rank = k, .all_grads = grads, .n = n, .steps = steps, .schedule = schedule};
        optimizer_init(&r->opt, &cfg, tensors, num_tensors);
        r->shard.offset = bounds[k];
        r->shard.count = count;
        r->shard.params = bs_malloc(sizeof(float) * (count + 1));
        memcpy(r->shard.params, params + bounds[k], sizeof(float) * count);
        r->shard.grads = bs_malloc(sizeof(float) * (count + 1));
        for (int a = 0; a < arrays; a++) r->shard.state[a] = bs_calloc(count + 1, sizeof(float));
        pthread_create(&threads[k], NULL, rank_main, r);
    }
    float *out = bs_calloc(n * (size_t)(1 + arrays), sizeof(float));
    for (int k = 0; k < ranks; k++) {
        Rank *r = &rank[k];
        pthread_join(threads[k], NULL);
        size_t bytes = sizeof(float) * r->shard.count;
        memcpy(out + bounds[k], r->shard.params, bytes);
        for (int a = 0; a < arrays; a++) memcpy(out + (size_t)(a + 1) * n + bounds[k], r->shard.state[a], bytes);
        free(r->shard.params);
        free((float *)r->shard.grads);
        for (int a = 0; a < arrays; a++) free(r->shard.state[a]);
        optimizer_free(&r->opt);
    }
    pthread_barrier_destroy(&world.barrier);
    const char *out_path = json_string_value(json_object_get(spec, "out"));
    FILE *f = bs_fopen(out_path, "wb");
    bs_fwrite_all(out, sizeof(float) * n * (size_t)(1 + arrays), f, out_path);
    fclose(f);
    free(out);
    free(params);
    free(grads);
    free(schedule);
    free(tensors);
    json_decref(spec);
}

/* ---- batch schedules ---- */

static BatchSchedule prepared_schedule(const char *text, const char *final_batch, const char *budget) {
    BatchSchedule s;
    char why[600];
    if (!batch_schedule_parse(text, &s, why, sizeof why)) bs_die("%s", why);
    if (!batch_schedule_prepare(&s, atol(final_batch), strtoull(budget, NULL, 10), why, sizeof why)) bs_die("%s", why);
    return s;
}

static void run_batch(int argc, char **argv) {
    BatchSchedule s = prepared_schedule(argv[2], argv[3], argv[4]);
    for (int i = 5; i < argc; i++) printf("%ld\n", batch_at(&s, strtoull(argv[i], NULL, 10)));
}

static void run_loop(char **argv) {
    BatchSchedule s = prepared_schedule(argv[2], argv[3], argv[4]);
    long seq_len = atol(argv[5]), granule = atol(argv[6]);
    bool strict = atoi(argv[7]) != 0, warned = false;
    unsigned long long tokens = strtoull(argv[8], NULL, 10);
    long steps = atol(argv[9]);
    char why[600];
    for (long step = 0; step < steps; step++) {
        long batch;
        if (!batch_round(batch_at(&s, tokens), granule, strict, &batch, why, sizeof why)) bs_die("%s", why);
        if (why[0] && !warned) bs_warn("%s", why), warned = true;
        printf("%llu %ld\n", tokens, batch);
        tokens += (unsigned long long)batch * (unsigned long long)seq_len;
    }
}

int main(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : "";
    char why[256];
    cli_name_subjects(); /* reasons name their flags as `batchscale train` does */
    if (strcmp(cmd, "step") == 0 && argc == 3) {
        run_step(argv[2]);
    } else if (strcmp(cmd, "batch") == 0 && argc >= 5) {
        run_batch(argc, argv);
    } else if (strcmp(cmd, "run") == 0 && argc == 10) {
        run_loop(argv);
    } else if (strcmp(cmd, "lr-scale") == 0 && argc == 5) {
        LrScaling rule;
        if (!lr_scaling_parse(argv[2], &rule, why, sizeof why)) bs_die("%s", why);
        printf("%.17g\n", lr_scaling_factor(rule, atol(argv[3]), atol(argv[4])));
    } else if (strcmp(cmd, "optimizer") == 0 && argc == 3) {
        OptimizerKind kind;
        if (!optimizer_kind_parse(argv[2], &kind, why, sizeof why)) bs_die("%s", why);
        printf("%s %d\n", optimizer_kind_name(kind), optimizer_state_arrays(kind));
    } else {
        bs_die("usage: opt_driver step SPEC | batch SCHEDULE FINAL BUDGET TOKENS... | run SCHEDULE FINAL BUDGET "
               "SEQ_LEN GRANULE STRICT START STEPS | lr-scale RULE BATCH BASE | optimizer NAME");
    }
    return 0;
}
