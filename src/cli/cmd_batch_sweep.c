/* cmd_batch_sweep.c: `batchscale batch-sweep [options] -- COMMAND`: the
 * steps/tokens trade-off measured. COMMAND is a training job as `batchscale
 * run` takes it (`batchscale train ...`, or `mpirun -np P ... batchscale
 * train ...`); the sweep runs it once per global batch of --batches and seed
 * 1..--seeds, each to --target-loss (a validation loss, cli/sweep_run.h says
 * why) or --max-steps, one after another as child processes; records the
 * steps S and tokens E each took; fits McCandlish et al.'s trade-off with a
 * bootstrap interval (sweep/critical_batch.h); prints the table and S_min,
 * E_min, B_crit; writes OUT/sweep.json, OUT/pareto.png and each run's
 * metrics under OUT/runs/.
 *
 * In each run the sweep sets --global-batch, --seed, --steps (the cap),
 * --target-val-loss, --metrics, --quiet and --strict-batch, and --eval-every
 * (from --eval-tokens) and --sample-tokens 0 unless the command gives them;
 * it drops --out, --ckpt-dir, --save-model and --resume (every run starts
 * from scratch and keeps only its metrics). With --from CKPT every run
 * instead continues that checkpoint (train --resume CKPT --resume-new-batch:
 * its weights, optimizer state, step and data position, at the run's batch)
 * and its steps and tokens are counted from the checkpoint's, so the trade-off
 * is measured past the warm-up the checkpoint's run went through, for every
 * batch from the same weights. Everything else passes through,
 * so the learning rate is the command's at every batch: give a constant one
 * (--min-lr equal to --lr) so that the cap does not shape a cosine decay.
 * With --lrs every (batch, lr, seed) is a run, each lr replacing the
 * command's --lr (and scaling its --min-lr, cli/sweep_lr.h); per batch the
 * lr whose runs reach the target in the fewest steps is kept, and the fit
 * and its bootstrap use only the kept lr's runs, the choice made again in
 * every resample (sweep/lr_choice.h).
 * A run that does not reach the target, or fails after its first step, is
 * reported as such and left out of the fit; fewer than two batch sizes
 * reaching it is an error (after sweep.json records the runs). Deliberately
 * not here: running runs in parallel (they share the machine's cores). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/run_child.h"
#include "cli/sweep_lr.h"
#include "cli/sweep_report.h"
#include "cli/sweep_run.h"
#include "core/error.h"
#include "core/io.h"
#include "sweep/fit.h"

#define MAX_BATCHES 64

typedef struct {
    const char *batches, *out, *lrs; /* lrs: NULL when --lrs is not given */
    const char *along;               /* --along: losses above the target fitted from the same runs (NULL: none) */
    const char *from;                /* --from: the checkpoint every run continues ("" : none) */
    const char *step_time;           /* --step-time A:B: the bound on what changing the batch wins (NULL: none) */
    double step_a, step_b;           /* --step-time's A and B, parsed before any run */
    int seeds, max_steps, resamples;
    double target;
    long long eval_tokens;
} SweepOptions;

/* --batches "8,16,32": whole numbers of sequences, distinct, at least two. Returns the count. */
static int parse_batches(const char *text, int *batches) {
    int n = 0;
    const char *at = text;
    while (*at) {
        char *end;
        long b = strtol(at, &end, 10);
        if (end == at || (*end && *end != ',') || b < 1 || b > (1 << 30))
            bs_die("batch-sweep: --batches '%s': each entry must be a whole number of sequences from 1 up, separated "
                   "by commas (e.g. --batches 8,16,32,64)", text);
        for (int i = 0; i < n; i++)
            if (batches[i] == b) bs_die("batch-sweep: --batches '%s': %ld is given twice", text, b);
        if (n == MAX_BATCHES) bs_die("batch-sweep: --batches '%s': at most %d batch sizes", text, MAX_BATCHES);
        batches[n++] = (int)b;
        at = *end ? end + 1 : end;
        if (*end && !*at) bs_die("batch-sweep: --batches '%s' ends with a comma", text);
    }
    if (n < 2)
        bs_die("batch-sweep: --batches '%s': give at least two global batch sizes (the fit has two parameters), e.g. "
               "--batches 8,16,32,64", text);
    return n;
}

/* A train option holding a positive count, else `fallback`. */
static long option_count(const RunCommand *cmd, const char *name, long fallback) {
    const char *text = run_command_get(cmd, name);
    double v;
    return text && parse_count(text, &v) && v >= 1 ? (long)v : fallback;
}

/* The train command: a batchscale train with validation data; every batch a whole number of micro-batches per
 * data-parallel rank; the options the sweep owns dropped (with a word). */
static void check_command(RunCommand *cmd, const int *batches, int n) {
    if (cmd->train_at < 0)
        bs_die("batch-sweep: the command after -- must run `batchscale train` (e.g. -- batchscale train --data ... "
               "--val-data ...)");
    if (!run_command_get(cmd, "val-data") && !run_command_get(cmd, "config"))
        bs_die("batch-sweep: the train command needs --val-data: the target is a validation loss");
    const char *dropped[] = {"out", "ckpt-dir", "save-model", "resume"};
    for (size_t i = 0; i < sizeof dropped / sizeof dropped[0]; i++)
        if (run_command_get(cmd, dropped[i])) {
            bs_warn("batch-sweep: --%s dropped from the train command (each run starts afresh and keeps only its "
                    "metrics)", dropped[i]);
            run_command_remove(cmd, dropped[i]);
        }
    const int ranks = run_command_ranks(cmd) > 0 ? run_command_ranks(cmd) : 1;
    const long micro = option_count(cmd, "micro-batch", 8);
    const long split = option_count(cmd, "tp", 1) * option_count(cmd, "pp", 1) * option_count(cmd, "cp", 1);
    const long dp = option_count(cmd, "dp", ranks / split > 0 ? ranks / split : 1);
    for (int i = 0; i < n; i++)
        if (batches[i] % (micro * dp) != 0)
            bs_die("batch-sweep: --batches: %d is not a multiple of --micro-batch %ld x %ld data-parallel rank%s "
                   "(every run keeps the command's micro-batch)", batches[i], micro, dp, dp == 1 ? "" : "s");
}

/* The runs as the fit sees them (sweep/fit.h), into points[]. */
static SweepRuns fit_view(const SweepResult *r, const SweepRun *runs, int resamples, SweepPoint *points) {
    for (int i = 0; i < r->num_runs; i++) {
        const SweepRun *u = &runs[i];
        points[i] = (SweepPoint){u->batch, sweep_batch_index(r, i), u->lr_index, u->outcome == RUN_REACHED, u->steps,
                                 u->tokens};
    }
    return (SweepRuns){points, r->num_runs, r->num_batches, r->num_lrs, r->seeds, r->seq_len, resamples};
}

/* Fits the runs (with --lrs, each batch's lr chosen first) into r; false if fewer than two batch sizes reached the
 * target. */
static bool fit_runs(SweepResult *r, int resamples) {
    SweepPoint *points = bs_malloc(sizeof *points * (size_t)r->num_runs);
    const SweepRuns in = fit_view(r, r->runs, resamples, points);
    SweepFit f = {.chosen = r->chosen, .cells = r->cells, .choice_counts = r->choice_counts};
    sweep_fit(&in, &f);
    free(points);
    r->fitted = f.fitted, r->runs_used = f.runs_used, r->fit = f.fit, r->interval = f.interval;
    r->has_interval = f.has_interval, r->within_batches = f.within_batches;
    return r->fitted;
}

/* The error when the fit cannot be made: which runs reached the target and what to change. */
static void die_unfitted(const SweepResult *r) {
    double best = INFINITY;
    int best_batch = 0, reached_batches = 0, last = 0;
    for (int i = 0; i < r->num_runs; i++) {
        const SweepRun *u = &r->runs[i];
        if (u->best_val_loss < best) best = u->best_val_loss, best_batch = u->batch;
        if (u->outcome == RUN_REACHED && u->batch != last) reached_batches++, last = u->batch;
    }
    const SweepSettings *s = r->settings;
    if (reached_batches == 0)
        bs_die("batch-sweep: no run reached --target-loss %g within --max-steps %d (best validation loss %.4f, at "
               "batch %d): raise --max-steps or the target", s->target, s->max_steps, best, best_batch);
    bs_die("batch-sweep: only batch %d reached --target-loss %g within --max-steps %d: the fit needs two batch sizes; "
           "raise --max-steps or the target", last, s->target, s->max_steps);
}

/* The grid of a sweep: every (batch, lr, seed), batch by batch, then lr by lr, then seed. */
typedef struct {
    const int *batches;
    int num_batches;
    const double *lrs; /* NULL: the command's lr */
    int num_lrs, seeds;
} SweepGrid;

/* Runs the grid, one run after another, a line each; runs[] in the grid's order. */
static void run_grid(const RunCommand *cmd, const SweepSettings *s, const SweepGrid *g, SweepRun *runs) {
    const int per_batch = g->num_lrs > 0 ? g->num_lrs : 1, total = g->num_batches * per_batch * g->seeds;
    run_signals_block();
    for (int b = 0, k = 0; b < g->num_batches; b++)
        for (int l = 0; l < per_batch; l++)
            for (int seed = 1; seed <= g->seeds; seed++, k++) {
                char lr[64] = "", spelled[48];
                if (g->num_lrs > 0) sweep_lr_spell(g->lrs[l], spelled, sizeof spelled);
                if (g->num_lrs > 0) snprintf(lr, sizeof lr, ", lr %s", spelled);
                printf("batch-sweep: run %d of %d: batch %d%s, seed %d ... ", k + 1, total, g->batches[b], lr, seed);
                fflush(stdout);
                sweep_run(cmd, s, g->batches[b], g->num_lrs > 0 ? g->lrs[l] : NAN, seed, &runs[k]);
                runs[k].lr_index = l;
                const SweepRun *u = &runs[k];
                if (u->outcome == RUN_REACHED) printf("%.1f steps, %.0f tokens\n", u->steps, u->tokens);
                else if (u->outcome == RUN_NOT_REACHED) printf("not reached (best %.4f)\n", u->best_val_loss);
                else printf("failed (exit status %d)\n", u->exit_status);
            }
}

/* --along: each loss fitted from the same runs' crossings of it (the lr chosen again at each), then the target's own
 * fit; points[] in decreasing loss, the target last. Returns the count. */
static int fit_along(const SweepResult *r, const SweepOptions *o, AlongPoint *points) {
    double losses[SWEEP_MAX_ALONG];
    const int n = sweep_along_parse(o->along, r->settings->target, losses);
    SweepSettings s = *r->settings;
    SweepRun *runs = bs_malloc(sizeof *runs * (size_t)r->num_runs);
    SweepPoint *crossed = bs_malloc(sizeof *crossed * (size_t)(r->num_runs * n));
    SweepRuns at[SWEEP_MAX_ALONG];
    for (int k = 0; k < n; k++) {
        s.target = losses[k];
        for (int i = 0; i < r->num_runs; i++) sweep_run_at(&r->runs[i], &s, losses[k], &runs[i]);
        at[k] = fit_view(r, runs, o->resamples, crossed + k * r->num_runs);
    }
    const SweepFit target = {.runs_used = r->runs_used, .fit = r->fit, .has_interval = r->has_interval,
                             .interval = r->interval};
    const int count = sweep_along_fit(at, losses, n, r->settings->target, &target, points);
    free(crossed);
    free(runs);
    return count;
}

/* Prints and writes the result; dies (after sweep.json) if it could not be fitted. */
static void report(SweepResult *r, const SweepOptions *o) {
    bool fitted = fit_runs(r, o->resamples);
    AlongPoint along[SWEEP_MAX_ALONG + 1];
    if (fitted && o->along) r->num_along = fit_along(r, o, along), r->along = along;
    SweepBound bound = {0};
    if (fitted && o->step_time) {
        bound.a = o->step_a, bound.b = o->step_b;
        sweep_bound_compute(r->along, r->num_along, &r->fit, r->seq_len, &bound);
        r->bound = &bound;
    }
    sweep_print_table(r);
    if (r->num_lrs > 0) sweep_print_choice(r);
    char path[4300], png[4300];
    snprintf(path, sizeof path, "%s/sweep.json", o->out);
    sweep_write_json(r, path);
    if (!fitted) die_unfitted(r);
    snprintf(png, sizeof png, "%s/pareto.png", o->out);
    sweep_write_png(r, png);
    sweep_print_fit(r);
    if (r->num_along > 0) sweep_along_print(r->along, r->num_along, r->seq_len);
    if (r->bound) sweep_bound_print(r->bound);
    printf("wrote %s and %s\n", path, png);
}

/* --from: the checkpoint's step and tokens, the point every run's steps and tokens are counted from. */
static void start_from(const char *dir, SweepSettings *s) {
    if (!bs_path_exists(dir)) bs_die("batch-sweep: --from %s: no such checkpoint", dir);
    CkptManifest *m = bs_malloc(sizeof *m);
    ckpt_read_manifest(dir, m);
    if (strcmp(m->batch_schedule, "constant") != 0)
        bs_die("batch-sweep: --from %s: written with --batch-schedule %s; only a constant-batch checkpoint continues "
               "at another batch", dir, m->batch_schedule);
    s->from = dir, s->from_step = m->step, s->from_tokens = (double)m->tokens_consumed;
    free(m);
}

static int sweep(const SweepOptions *o, RunCommand *cmd, const char *command_text) {
    int batches[MAX_BATCHES];
    double lrs[SWEEP_MAX_LRS];
    const int num_batches = parse_batches(o->batches, batches);
    const int num_lrs = o->lrs ? sweep_lrs_parse(o->lrs, lrs) : 0;
    double along[SWEEP_MAX_ALONG];
    if (o->along) sweep_along_parse(o->along, o->target, along); /* refused before any run, not after all */
    check_command(cmd, batches, num_batches);
    char runs_dir[4200];
    snprintf(runs_dir, sizeof runs_dir, "%s/runs", o->out);
    SweepSettings s = {o->target, o->max_steps, o->eval_tokens, (int)option_count(cmd, "seq-len", 128), runs_dir,
                       NAN, NAN, NULL, 0, 0};
    if (num_lrs > 0) sweep_lr_base(cmd, &s.base_lr, &s.base_min_lr);
    if (o->from[0]) start_from(o->from, &s);
    bs_mkdir_p(runs_dir);
    const SweepGrid g = {batches, num_batches, lrs, num_lrs, o->seeds};
    const int total = num_batches * (num_lrs > 0 ? num_lrs : 1) * o->seeds, cells = num_batches * num_lrs;
    SweepRun *runs = bs_calloc((size_t)total, sizeof *runs);
    run_grid(cmd, &s, &g, runs);
    SweepResult r = {.settings = &s, .seeds = o->seeds, .runs = runs, .num_runs = total, .command = command_text,
                     .seq_len = s.seq_len, .batches = batches, .num_batches = num_batches, .lrs = lrs,
                     .num_lrs = num_lrs, .chosen = bs_calloc((size_t)num_batches, sizeof(int)),
                     .cells = bs_calloc((size_t)(cells > 0 ? cells : 1), sizeof(LrCell)),
                     .choice_counts = bs_calloc((size_t)(cells > 0 ? cells : 1), sizeof(int))};
    for (int k = 0; k < total; k++)
        if (runs[k].seq_len > 0) r.seq_len = runs[k].seq_len; /* the metrics' word over the flag's */
    report(&r, o);
    free(r.choice_counts);
    free(r.cells);
    free(r.chosen);
    free(runs);
    return 0;
}

int cmd_batch_sweep(int argc, char **argv) {
    SweepOptions o = {0};
    const OptionSpec specs[] = {
        {"batches", OPT_STRING, &o.batches, OPT_NO_RANGE, "LIST", "global batch sizes in sequences, e.g. 8,16,32,64", "", NULL},
        {"seeds", OPT_INT, &o.seeds, 1, 1000, "N", "runs per batch size, seeds 1..N", "3", NULL},
        {"target-loss", OPT_DOUBLE, &o.target, 0, 1e9, "LOSS", "the validation loss every run trains to (required)", "0", NULL},
        {"max-steps", OPT_INT, &o.max_steps, 1, 1e9, "N", "step cap of each run (the train command's --steps)", "1000", NULL},
        {"eval-tokens", OPT_LONG, &o.eval_tokens, 1, 9e18, "TOKENS", "evaluate every this many tokens (--eval-every per batch, unless the command gives it)", "16384", NULL},
        {"out", OPT_STRING, &o.out, OPT_NO_RANGE, "DIR", "sweep.json, pareto.png and runs/", "batch-sweep", NULL},
        {"resamples", OPT_INT, &o.resamples, 10, 1000000, "N", "bootstrap resamples", "1000", NULL},
        {"from", OPT_STRING, &o.from, OPT_NO_RANGE, "CKPT", "every run continues this checkpoint (a constant-batch one: weights, optimizer state, data position) at its own batch; steps and tokens count from it", "", NULL},
        {"along", OPT_STRING, &o.along, OPT_NO_RANGE, "LOSSES", "also fit these higher validation losses from the same runs, e.g. 2.8,2.6 (the critical batch as the loss falls, and each stretch's own)", NULL, NULL},
        {"step-time", OPT_STRING, &o.step_time, OPT_NO_RANGE, "A:B", "seconds per step = A + B x batch in sequences (measured on the cluster): also print what changing the batch during the run can win at best, from the --along stretches (sweep/schedule_bound.h)", NULL, NULL},
        {"lrs", OPT_STRING, &o.lrs, OPT_NO_RANGE, "LIST", "learning rates to try at every batch, e.g. 1e-3,2e-3,4e-3 (each replaces the command's --lr; the fit keeps each batch's fastest)", NULL, NULL},
    };
    int split = 1;
    while (split < argc && strcmp(argv[split], "--") != 0) split++;
    if (!options_parse(specs, (int)(sizeof specs / sizeof specs[0]), split, argv,
                       "usage: batchscale batch-sweep --batches 8,16,32 --target-loss X [options] -- [mpirun -np P "
                       "...] batchscale train ...\n\nTrains the same model at each global batch and seed to a target "
                       "validation loss, fits McCandlish et al.'s\n(S/S_min - 1)(E/E_min - 1) = 1 and reports S_min, "
                       "E_min and the critical batch B_crit = E_min/S_min."))
        return 0;
    if (!o.batches[0])
        bs_die("batch-sweep: --batches is required: give at least two global batch sizes, e.g. --batches 8,16,32,64");
    if (!(o.target > 0)) bs_die("batch-sweep: --target-loss is required and must be above 0 (a validation loss)");
    if (split + 1 >= argc)
        bs_die("batch-sweep: give the training command after --, e.g. batchscale batch-sweep --batches 8,16 "
               "--target-loss 2.5 -- batchscale train --data ... --val-data ...");
    if (o.step_time) sweep_step_time_parse(o.step_time, &o.step_a, &o.step_b); /* refused before any run */
    RunCommand cmd;
    run_command_init(&cmd, argc - split - 1, argv + split + 1);
    char *text = run_command_text(&cmd);
    int status = sweep(&o, &cmd, text);
    free(text);
    run_command_free(&cmd);
    return status;
}
