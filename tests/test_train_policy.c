/* test_train_policy.c: the trainer's policy pieces on their own, without a
 * model: the guard (non-finite keys encoded on every rank and decoded from
 * their maxima, the loss-spike test against a window, skip counts),
 * stragglers (lower median, the rank named), --balance (equal shares, the
 * split after measured times, contiguous first sequences) and the step's
 * statistics (the reduction of gathered records; under mpirun, the one
 * all-gather gives every rank the same sums, maxima, minimum, median and
 * straggler as a direct computation over the records every rank can rebuild).
 *
 * References: sample standard deviation and lower median as Python's
 * statistics.stdev and statistics.median_low compute them; the balance
 * splits derived by hand in the comments beside them.
 * usage: test_train_policy (any number of ranks) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "train/balance.h"
#include "train/guard.h"
#include "train/train_config.h"
#include "train/step_stats.h"
#include "train/straggler.h"

/* What the decoded reason must say for one rank's place (the rule of guard.h). */
static void expected_place(int rank, int L, int layer, int block, char *out, size_t n) {
    if (layer >= 0) snprintf(out, n, "non-finite value on rank %d at layer %d", rank, layer);
    else if (block == 0) snprintf(out, n, "non-finite value on rank %d in the embeddings", rank);
    else if (block == L + 1) snprintf(out, n, "non-finite value on rank %d in the final layer norm", rank);
    else snprintf(out, n, "non-finite value on rank %d at layer %d", rank, block - 1);
}

static void test_keys_round_trip(void) {
    const int worlds[] = {1, 2, 3, 8}, layers[] = {1, 3, 12};
    for (int wi = 0; wi < 4; wi++)
        for (int li = 0; li < 3; li++) {
            int W = worlds[wi], L = layers[li];
            for (int rank = 0; rank < W; rank++)
                for (int layer = -1; layer < L; layer++)
                    for (int block = -1; block <= L + 1; block++) {
                        double key[2];
                        char got[192] = "", want[192];
                        guard_nonfinite_keys(rank, W, L, layer, block, key);
                        bool bad = guard_nonfinite_reason(key, W, L, got, sizeof got);
                        CHECK(bad == (layer >= 0 || block >= 0), "W=%d L=%d rank %d layer %d block %d: found %d", W,
                              L, rank, layer, block, bad);
                        if (!bad) continue;
                        expected_place(rank, L, layer, block, want, sizeof want);
                        CHECK(strcmp(got, want) == 0, "W=%d L=%d: '%s', want '%s'", W, L, got, want);
                    }
        }
}

/* The maxima over ranks name the origin: the lowest forward layer on any
 * rank (else the highest backward block), among ranks sharing it the lowest. */
static void test_keys_origin(void) {
    enum { W = 4, L = 6 };
    const struct { int layer[W], block[W]; const char *want; } cases[] = {
        {{-1, 4, 2, 2}, {-1, 5, -1, 3}, "non-finite value on rank 2 at layer 2"},
        {{-1, -1, -1, -1}, {2, 5, 5, 0}, "non-finite value on rank 1 at layer 4"},
        {{-1, -1, -1, -1}, {0, -1, 0, -1}, "non-finite value on rank 0 in the embeddings"},
        {{-1, -1, -1, -1}, {-1, -1, 7, 7}, "non-finite value on rank 2 in the final layer norm"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double max[2] = {0, 0};
        for (int r = 0; r < W; r++) {
            double key[2];
            guard_nonfinite_keys(r, W, L, cases[c].layer[r], cases[c].block[r], key);
            max[0] = fmax(max[0], key[0]);
            max[1] = fmax(max[1], key[1]);
        }
        char got[192] = "";
        CHECK(guard_nonfinite_reason(max, W, L, got, sizeof got), "case %zu: not found", c);
        CHECK(strcmp(got, cases[c].want) == 0, "case %zu: '%s', want '%s'", c, got, cases[c].want);
    }
    double finite[2] = {0, 0};
    char unused[16];
    CHECK(!guard_nonfinite_reason(finite, W, L, unused, sizeof unused), "every rank finite: nothing to name");
}

static void test_spike_window(void) {
    Guard g;
    guard_init(&g, 2.0, 10, 3);
    char why[192] = "";
    /* fewer than 10 losses: no spike test yet */
    for (int i = 0; i < 9; i++) guard_accept(&g, 1.0);
    CHECK(!guard_skip(&g, 1e6, 1.0, why, sizeof why), "spike tested on 9 losses");
    /* the ring keeps the last 10: after 100 losses of 5.0, the losses 1..10 */
    for (int i = 0; i < 100; i++) guard_accept(&g, 5.0);
    for (int i = 1; i <= 10; i++) guard_accept(&g, i);
    const double mean = 5.5, sd = 3.0276503540974917; /* statistics.mean / stdev(range(1, 11)) */
    CHECK(!guard_skip(&g, mean + 1.9 * sd, 1.0, why, sizeof why), "1.9 sd is below the threshold 2");
    CHECK(guard_skip(&g, mean + 2.5 * sd, 1.0, why, sizeof why), "2.5 sd is above the threshold 2");
    CHECK(strstr(why, "is 2.5 standard deviations above the last 10 steps' mean 5.5000") != NULL, "reason: %s", why);
    CHECK(guard_skip(&g, NAN, 1.0, why, sizeof why) && strcmp(why, "non-finite loss or gradient") == 0, "NaN loss");
    CHECK(guard_skip(&g, 1.0, INFINITY, why, sizeof why), "infinite gradient norm");
    guard_free(&g);
    guard_init(&g, 0, 10, 3); /* --skip-spikes 0: off */
    for (int i = 1; i <= 10; i++) guard_accept(&g, i);
    CHECK(!guard_skip(&g, 1e6, 1.0, why, sizeof why), "spike test is off");
    guard_free(&g);
}

static void test_skip_counts(void) {
    Guard g;
    guard_init(&g, 0, 0, 3);
    guard_reject(&g);
    guard_reject(&g);
    guard_accept(&g, 1.0);
    guard_reject(&g);
    CHECK(g.skips == 3 && g.consecutive == 1, "skips %ld in a row %d, want 3 and 1", g.skips, g.consecutive);
    guard_stop_if_stuck(&g, 4, "below --max-skips: goes on");
    guard_free(&g);
}

static void test_straggler(void) {
    double scratch[4];
    const double three[] = {3, 1, 2}, two[] = {1, 2}, four[] = {4, 1, 3, 2};
    CHECK(straggler_median(three, 3, scratch) == 2, "median of 3 1 2");
    CHECK(straggler_median(two, 2, scratch) == 1, "lower median of 1 2"); /* statistics.median_low */
    CHECK(straggler_median(four, 4, scratch) == 2, "lower median of 4 1 3 2");
    const double slow[] = {1, 1.3, 1, 1.25}, close[] = {1, 1.1, 1, 1};
    CHECK(straggler_find(slow, 4, 1, 0.2) == 1, "the slowest beyond 20%% is rank 1");
    CHECK(straggler_find(close, 4, 1, 0.2) == -1, "10%% slower is no straggler at 20%%");
}

static void test_balance(void) {
    Balance b;
    balance_init(&b, false, 2, 1, 1, 2);
    CHECK(balance_micro_batches(&b, 16) == 4 && balance_first_sequence(&b) == -1, "without --balance: equal, interleaved");
    balance_free(&b);
    /* 2 replicas of 2 ranks each, micro-batches of 2 sequences, 16 sequences = 8 micro-batches */
    balance_init(&b, true, 2, 1, 2, 2);
    CHECK(balance_micro_batches(&b, 16) == 4 && balance_first_sequence(&b) == 8, "equal shares first: 4, from 8");
    const double times[] = {1, 0.5, 3, 2}; /* a replica is its slowest rank: 1 and 3 seconds */
    /* per micro-batch 0.25 and 0.75 s: speeds 4 and 4/3 share 8 as 6 and 2 */
    balance_update(&b, times);
    CHECK(b.split[0] == 6 && b.split[1] == 2, "split %d,%d, want 6,2", b.split[0], b.split[1]);
    CHECK(balance_micro_batches(&b, 16) == 2 && balance_first_sequence(&b) == 12, "replica 1: 2 from 12");
    /* again: averages 0.7 x 0.25 + 0.3 x 1/6 = 0.225 and 0.7 x 0.75 + 0.3 x 1.5 = 0.975 s share 8 as 6.5 and 1.5,
     * floored 6 and 1; the eighth goes to the replica done sooner with one more (0.225 x 7 < 0.975 x 2) */
    balance_update(&b, times);
    CHECK(b.split[0] == 7 && b.split[1] == 1, "split %d,%d, want 7,1", b.split[0], b.split[1]);
    CHECK(fabs(b.micro_time[0] - 0.225) < 1e-15 && fabs(b.micro_time[1] - 0.975) < 1e-15, "averages %g %g",
          b.micro_time[0], b.micro_time[1]);
    CHECK(balance_micro_batches(&b, 24) == 6, "another batch size starts from equal shares");
    balance_free(&b);
    balance_init(&b, true, 3, 0, 1, 1);
    int mine = balance_micro_batches(&b, 7);
    CHECK(mine == 3 && b.split[1] == 2 && b.split[2] == 2, "7 over 3: 3,2,2 (got %d,%d,%d)", mine, b.split[1], b.split[2]);
    balance_free(&b);
}

/* Rank r's record in the tests below: distinct values, rank 2 the slow one. */
static StepRecord record_of(int r, int ranks) {
    StepRecord x = {.loss_sum = 0.5 * (r + 1), .micro_sq = 0.25 * r, .compute = r == 2 ? 4.0 : 1.0 + 0.125 * r,
                    .seconds = 2.0 + (r * 7 % ranks) * 0.125, .peak_rss = 1e6 * (r + 1), .pipe_busy = 1.0,
                    .pipe_idle = 0.1 * r};
    guard_nonfinite_keys(r, ranks, 4, -1, r == ranks - 1 ? 2 : -1, x.nonfinite);
    return x;
}

/* The statistics of the records, computed directly. */
static void check_stats(const StepStats *s, int ranks, const char *what) {
    double loss = 0, sq = 0, slowest = 0, fastest = 1e9, bubble = 0;
    for (int r = 0; r < ranks; r++) {
        StepRecord x = record_of(r, ranks);
        loss += x.loss_sum;
        sq += x.micro_sq;
        slowest = fmax(slowest, x.seconds);
        fastest = fmin(fastest, x.seconds);
        bubble = fmax(bubble, x.pipe_idle / (x.pipe_busy + x.pipe_idle));
        CHECK(s->compute[r] == x.compute, "%s: compute of rank %d", what, r);
    }
    CHECK(s->loss_sum == loss && s->micro_sq == sq, "%s: sums %g %g, want %g %g", what, s->loss_sum, s->micro_sq, loss,
          sq);
    CHECK(s->slowest == slowest && s->fastest == fastest, "%s: step %g..%g, want %g..%g", what, s->fastest,
          s->slowest, fastest, slowest);
    CHECK(s->bubble == bubble, "%s: bubble %g, want %g", what, s->bubble, bubble);
    char why[192] = "", want[192];
    snprintf(want, sizeof want, "non-finite value on rank %d at layer 1", ranks - 1);
    CHECK(guard_nonfinite_reason(s->nonfinite, ranks, 4, why, sizeof why) && strcmp(why, want) == 0,
          "%s: '%s', want '%s'", what, why, want);
    /* compute times 1, 1.125, 4, 1.375, 1.5, 1.625: lower medians (statistics.median_low) of the first n */
    const double median[] = {0, 1, 1, 1.125, 1.125, 1.375, 1.375};
    CHECK(s->median_compute == median[ranks], "%s: median %g, want %g", what, s->median_compute, median[ranks]);
    CHECK(s->straggler == (ranks >= 3 ? 2 : -1), "%s: straggler %d", what, s->straggler);
}

static void test_step_stats_reduce(void) {
    for (int ranks = 1; ranks <= 6; ranks++) {
        StepRecord records[6];
        double compute[6], scratch[6];
        for (int r = 0; r < ranks; r++) records[r] = record_of(r, ranks);
        StepStatsExchange x = {NULL, ranks, 0.2, records, compute, scratch};
        StepStats s = step_stats_reduce(&x);
        char what[32];
        snprintf(what, sizeof what, "reduce of %d", ranks);
        check_stats(&s, ranks, what);
        if (ranks == 4) CHECK(s.peak_rss == 4e6, "largest peak memory");
    }
}

static void test_step_stats_exchange(Comm *world) {
    const int ranks = comm_size(world), rank = comm_rank(world);
    StepStatsExchange x;
    step_stats_init(&x, world, 0.2);
    StepRecord mine = record_of(rank, ranks);
    StepStats s = step_stats_exchange(&x, &mine);
    char what[48];
    snprintf(what, sizeof what, "exchange on rank %d of %d", rank, ranks);
    check_stats(&s, ranks, what);
    CHECK(mine.peak_rss > 0, "%s: this process's peak memory", what);
    CHECK(s.peak_rss >= mine.peak_rss, "%s: the largest peak memory", what);
    step_stats_free(&x);
}

/* The configuration's words name the enums' values in their order (the
 * option table stores an index into them): the same as the names the lower
 * layers print and write into checkpoints. */
static void test_config_words(void) {
    for (int k = 0; k < OPTIM_KIND_COUNT; k++)
        CHECK(TRAIN_OPTIMIZER_WORDS[k] && strcmp(TRAIN_OPTIMIZER_WORDS[k], optimizer_kind_name((OptimizerKind)k)) == 0,
              "optimizer %d: '%s' against '%s'", k, TRAIN_OPTIMIZER_WORDS[k], optimizer_kind_name((OptimizerKind)k));
    CHECK(!TRAIN_OPTIMIZER_WORDS[OPTIM_KIND_COUNT], "optimizer words end after %d", OPTIM_KIND_COUNT);
    for (int k = 0; k < PIPE_SCHEDULE_COUNT; k++)
        CHECK(TRAIN_PP_SCHEDULE_WORDS[k] && strcmp(TRAIN_PP_SCHEDULE_WORDS[k], pipe_schedule_name((PipeSchedule)k)) == 0,
              "schedule %d: '%s'", k, TRAIN_PP_SCHEDULE_WORDS[k]);
    CHECK(!TRAIN_PP_SCHEDULE_WORDS[PIPE_SCHEDULE_COUNT], "schedule words end after %d", PIPE_SCHEDULE_COUNT);
    const CommAlgo algos[] = {COMM_ALGO_MPI, COMM_ALGO_RING, COMM_ALGO_HIERARCHICAL};
    for (int k = 0; k < 3; k++)
        CHECK((int)algos[k] == k && strcmp(TRAIN_COMM_ALGO_WORDS[k], comm_algo_name(algos[k])) == 0, "comm algo %d", k);
    const LrScaling rules[] = {LR_SCALING_NONE, LR_SCALING_LINEAR, LR_SCALING_SQRT};
    for (int k = 0; k < 3; k++) {
        LrScaling got;
        char why[128];
        CHECK(lr_scaling_parse(TRAIN_LR_SCALING_WORDS[k], &got, why, sizeof why) && got == rules[k] && (int)got == k,
              "lr scaling %d", k);
    }
    const MatmulBF16Path paths[] = {MATMUL_BF16_AUTO, MATMUL_BF16_ONEDNN, MATMUL_BF16_WIDEN};
    for (int k = 0; k < 3; k++) CHECK((int)paths[k] == k && TRAIN_BF16_MATMUL_WORDS[k], "bf16 path %d", k);
}

int main(int argc, char **argv) {
    Comm *world = comm_init(&argc, &argv, COMM_ALGO_MPI, 0, 60.0, "test");
    if (comm_rank(world) == 0) {
        test_keys_round_trip();
        test_keys_origin();
        test_spike_window();
        test_skip_counts();
        test_straggler();
        test_balance();
        test_step_stats_reduce();
        test_config_words();
    }
    test_step_stats_exchange(world);
    double bad = failures;
    comm_allreduce_double(world, &bad, 1);
    if (comm_rank(world) == 0) printf("%s: %.0f failures\n", bad > 0 ? "FAIL" : "ok", bad);
    comm_finalize(world);
    return bad > 0 ? 1 : 0;
}
