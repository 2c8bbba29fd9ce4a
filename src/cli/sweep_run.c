/* sweep_run.c: one run of the batch sweep (see sweep_run.h). */
#include "cli/sweep_run.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli/run_child.h"
#include "cli/sweep_lr.h"
#include "core/error.h"
#include "core/io.h"
#include "sweep/crossing.h"

int sweep_eval_every(const SweepSettings *s, int batch) {
    long long every = llround((double)s->eval_tokens / ((double)batch * s->seq_len));
    return every < 1 ? 1 : every > 1000000000 ? 1000000000 : (int)every;
}

/* The base command with this run's options; the caller frees it. */
static void run_command_for(const RunCommand *base, const SweepSettings *s, const SweepRun *run, RunCommand *cmd) {
    char **words = bs_calloc((size_t)base->count + 4, sizeof(char *));
    int n = base->count;
    for (int i = 0; i < n; i++) words[i] = base->words[i];
    words[n++] = "--quiet";        /* the sweep prints one line per run */
    words[n++] = "--strict-batch"; /* a batch the layout cannot hold is an error, not rounded */
    if (s->from) words[n++] = "--resume-new-batch"; /* each batch continues the one checkpoint */
    run_command_init(cmd, n, words);
    free(words);
    if (s->from) run_command_set(cmd, "resume", s->from);
    char value[64];
    snprintf(value, sizeof value, "%d", run->batch);
    run_command_set(cmd, "global-batch", value);
    snprintf(value, sizeof value, "%ld", run->seed);
    run_command_set(cmd, "seed", value);
    snprintf(value, sizeof value, "%ld", s->from_step + s->max_steps); /* --steps counts from step 0 */
    run_command_set(cmd, "steps", value);
    snprintf(value, sizeof value, "%.17g", s->target);
    run_command_set(cmd, "target-val-loss", value);
    run_command_set(cmd, "metrics", run->metrics);
    if (!run_command_get(base, "eval-every")) {
        snprintf(value, sizeof value, "%d", sweep_eval_every(s, run->batch));
        run_command_set(cmd, "eval-every", value);
    }
    if (!run_command_get(base, "sample-tokens")) run_command_set(cmd, "sample-tokens", "0");
    if (!isnan(run->lr)) sweep_lr_apply(cmd, s->base_lr, s->base_min_lr, run->lr);
}

static double number(json_t *j, const char *key) {
    json_t *v = json_object_get(j, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Reads the run's metrics into `run`, its steps and tokens counted from the sweep's starting point; returns the
 * number of lines (0: no file or no steps). */
static int read_metrics(SweepRun *run, const SweepSettings *s, double target) {
    if (!bs_path_exists(run->metrics)) return 0;
    size_t len;
    char *text = bs_read_file(run->metrics, &len);
    SweepCrossing crossing;
    sweep_crossing_start(&crossing, target);
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j) bs_die("batch-sweep: %s: line %d is not JSON", run->metrics, lines + 1);
        lines++;
        SweepEval e = {number(j, "step") - (double)s->from_step, number(j, "tokens") - s->from_tokens,
                       number(j, "val_loss")};
        run->eval_step = (long)e.step + s->from_step;
        if (e.step > 0 && isfinite(e.tokens)) run->seq_len = (int)llround(e.tokens / (e.step * run->batch));
        json_decref(j);
        sweep_crossing_add(&crossing, e);
    }
    free(text);
    run->best_val_loss = crossing.best_loss;
    if (!crossing.reached) return lines;
    run->outcome = RUN_REACHED;
    run->eval_step = (long)crossing.at.step + s->from_step;
    sweep_crossing_point(&crossing, &run->steps, &run->tokens, &run->at_first_eval);
    return lines;
}

/* The run's metrics file: runs/batchB_seedK.jsonl, or with an lr runs/batchB_lrX_seedK.jsonl. */
static void metrics_path(const SweepSettings *s, SweepRun *run) {
    char lr[64] = "";
    if (!isnan(run->lr)) {
        char spelled[48];
        sweep_lr_spell(run->lr, spelled, sizeof spelled);
        snprintf(lr, sizeof lr, "_lr%s", spelled);
    }
    snprintf(run->metrics, sizeof run->metrics, "%s/batch%d%s_seed%ld.jsonl", s->runs_dir, run->batch, lr, run->seed);
}

void sweep_run_at(const SweepRun *run, const SweepSettings *s, double loss, SweepRun *out) {
    *out = *run;
    out->steps = out->tokens = out->best_val_loss = NAN;
    out->at_first_eval = false;
    if (run->outcome == RUN_FAILED) return; /* left out at every loss, as at the target */
    out->outcome = RUN_NOT_REACHED;
    read_metrics(out, s, loss);
}

void sweep_run(const RunCommand *base, const SweepSettings *s, int batch, double lr, long seed, SweepRun *out) {
    memset(out, 0, sizeof *out);
    out->batch = batch, out->seed = seed, out->lr = lr, out->outcome = RUN_NOT_REACHED;
    out->steps = out->tokens = out->best_val_loss = NAN;
    metrics_path(s, out);
    remove(out->metrics); /* a previous sweep's file must not be read as this run's */
    RunCommand cmd;
    run_command_for(base, s, out, &cmd);
    ChildResult r = run_child(cmd.words, 0, false, run_command_ranks(&cmd) > 0);
    if (r.stop_signal) bs_die("batch-sweep: interrupted by signal %d during the run at batch %d, seed %ld",
                              r.stop_signal, batch, seed);
    int lines = read_metrics(out, s, s->target);
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
        char how[128], *text = run_command_text(&cmd);
        run_describe_status(r.status, how, sizeof how);
        if (lines == 0)
            bs_die("batch-sweep: the run at batch %d, seed %ld failed before its first step (%s); its command: %s",
                   batch, seed, how, text);
        free(text);
        out->outcome = RUN_FAILED;
        out->exit_status = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 128 + WTERMSIG(r.status);
    }
    run_command_free(&cmd);
}
