/* sweep_report.c: the batch sweep's table, JSON and Pareto-front PNG (see sweep_report.h). */
#include "cli/sweep_report.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/report_chart.h"
#include "cli/sweep_lr.h"
#include "core/error.h"
#include "core/io.h"

#define CURVE_POINTS 120

static const char *outcome_word(RunOutcome o) {
    return o == RUN_REACHED ? "reached" : o == RUN_NOT_REACHED ? "not reached" : "failed";
}

int sweep_batch_index(const SweepResult *r, int run) { return run / ((r->num_lrs > 0 ? r->num_lrs : 1) * r->seeds); }

/* With --lrs: run i is at its batch's chosen lr. */
static bool at_chosen_lr(const SweepResult *r, int run) {
    return r->num_lrs > 0 && r->chosen[sweep_batch_index(r, run)] == r->runs[run].lr_index;
}

bool sweep_run_in_fit(const SweepResult *r, int run) {
    return r->runs[run].outcome == RUN_REACHED && (r->num_lrs == 0 || at_chosen_lr(r, run));
}

/* The table's first columns: batch, (with --lrs) the lr with a * if chosen, seed. */
static void print_row_start(const SweepResult *r, int run) {
    const SweepRun *u = &r->runs[run];
    if (r->num_lrs == 0) {
        printf("%7d %6ld", u->batch, u->seed);
        return;
    }
    char lr[48];
    sweep_lr_spell(u->lr, lr, sizeof lr);
    printf("%7d %10s%c %6ld", u->batch, lr, at_chosen_lr(r, run) ? '*' : ' ', u->seed);
}

void sweep_print_table(const SweepResult *r) {
    const SweepSettings *s = r->settings;
    printf("\nvalidation loss %.4g: steps and tokens to reach it (interpolated between evaluations)\n", s->target);
    if (s->from)
        printf("counted from checkpoint %s (step %ld, %.0f tokens), which every run continues\n", s->from,
               s->from_step, s->from_tokens);
    if (r->num_lrs == 0) printf("%7s %6s %9s %12s  %s\n", "batch", "seed", "steps", "tokens", "target");
    else printf("%7s %11s %6s %9s %12s  %s\n", "batch", "lr", "seed", "steps", "tokens", "target");
    for (int i = 0; i < r->num_runs; i++) {
        const SweepRun *u = &r->runs[i];
        print_row_start(r, i);
        if (u->outcome == RUN_REACHED)
            printf(" %9.1f %12.0f  at the evaluation of step %ld%s\n", u->steps, u->tokens, u->eval_step,
                   u->at_first_eval ? " (its first: steps is an upper bound)" : "");
        else if (u->outcome == RUN_NOT_REACHED)
            printf(" %9s %12s  not reached within --max-steps %d (best validation loss %.4f): left out of the "
                   "fit\n", "-", "-", s->max_steps, u->best_val_loss);
        else
            printf(" %9s %12s  failed at step %ld (exit status %d): left out of the fit\n", "-", "-", u->eval_step,
                   u->exit_status);
    }
    if (r->num_lrs > 0) printf("(* the lr chosen at that batch: only its runs that reached the target are fitted)\n");
}

/* "55.3", or "55.3, 1 of 2 not reached", or "none of 2 reached": an lr's standing at a batch. */
static void describe_cell(const LrCell *c, char *text, size_t size) {
    if (c->missed == c->runs) snprintf(text, size, "none of %d reached", c->runs);
    else if (c->missed == 0) snprintf(text, size, "%.1f", exp(c->mean_log_steps));
    else snprintf(text, size, "%.1f, %d of %d not reached", exp(c->mean_log_steps), c->missed, c->runs);
}

/* "batch B: lr X (geometric-mean steps ...; other lrs ...)" for batch b. */
static void print_batch_choice(const SweepResult *r, int b) {
    const int chosen = r->chosen[b];
    const LrCell *cells = r->cells + (size_t)b * r->num_lrs;
    char lr[48], cell[96];
    if (chosen < 0) {
        printf("batch %d: no run at any lr reached the target (left out of the fit)\n", r->batches[b]);
        return;
    }
    sweep_lr_spell(r->lrs[chosen], lr, sizeof lr);
    describe_cell(&cells[chosen], cell, sizeof cell);
    printf("batch %d: lr %s (geometric-mean steps %s over %d run%s", r->batches[b], lr, cell, cells[chosen].runs,
           cells[chosen].runs == 1 ? "" : "s");
    for (int l = 0, first = 1; l < r->num_lrs; l++) {
        if (l == chosen) continue;
        sweep_lr_spell(r->lrs[l], lr, sizeof lr);
        describe_cell(&cells[l], cell, sizeof cell);
        printf("%s %s %s", first ? "; other lrs:" : ";", lr, cell);
        first = 0;
    }
    printf(")");
    if (r->has_interval)
        printf("; chosen in %.0f%% of the resamples",
               100.0 * r->choice_counts[b * r->num_lrs + chosen] / r->interval.resamples);
    printf("\n");
}

/* The warning for the batches whose chosen lr is lr `end` of the grid (0 or num_lrs - 1). */
static void warn_grid_end(const SweepResult *r, int end) {
    char list[64 * 12] = "";
    int count = 0;
    for (int b = 0; b < r->num_batches; b++) {
        if (r->chosen[b] != end) continue;
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%d", count++ ? ", " : "", r->batches[b]);
    }
    if (count == 0) return;
    char lr[48];
    sweep_lr_spell(r->lrs[end], lr, sizeof lr);
    bs_warn("batch-sweep: at batch%s %s the chosen lr is the %s of --lrs (%s): the best lr may lie outside --lrs; "
            "add %s ones", count == 1 ? "" : "es", list, end == 0 ? "smallest" : "largest", lr,
            end == 0 ? "smaller" : "larger");
}

void sweep_print_choice(const SweepResult *r) {
    printf("\nthe lr per batch: fewest runs not reaching the target, then the fewest geometric-mean steps, then the "
           "smaller lr\n");
    for (int b = 0; b < r->num_batches; b++) print_batch_choice(r, b);
    fflush(stdout); /* the warnings go to stderr: after the lines they qualify */
    if (r->num_lrs < 2) return; /* one lr is not a search */
    warn_grid_end(r, 0);
    warn_grid_end(r, r->num_lrs - 1);
}

void sweep_print_fit(const SweepResult *r) {
    const TradeoffFit *f = &r->fit;
    const double t = r->seq_len;
    printf("\nfit of (S/S_min - 1)(E/E_min - 1) = 1 over %d runs (least squares in log steps along each run's "
           "batch; rms residual %.3f):\n", r->runs_used, f->rms_log);
    if (r->has_interval) {
        const TradeoffInterval *c = &r->interval;
        printf("  S_min  = %.1f steps          [%.1f, %.1f]\n", f->s_min, c->s_min.lo, c->s_min.hi);
        printf("  E_min  = %.0f tokens        [%.0f, %.0f]\n", f->e_min, c->e_min.lo, c->e_min.hi);
        printf("  B_crit = %.2f sequences (%.0f tokens)  [%.2f, %.2f]\n", f->b_crit / t, f->b_crit, c->b_crit.lo / t,
               c->b_crit.hi / t);
        char skipped[96] = "";
        if (c->unfitted) snprintf(skipped, sizeof skipped, "; %d left fewer than two batches and were skipped", c->unfitted);
        printf("  [%.0f%% bootstrap interval: %d resamples of the %s%s%s]\n", 100 * c->level, c->resamples,
               r->num_lrs ? "runs within each batch and lr, the lr chosen again in each" : "seeds within each batch",
               c->unbracketed ? ", some with B_crit at the search's bound" : "", skipped);
    } else {
        printf("  S_min = %.1f steps, E_min = %.0f tokens, B_crit = %.2f sequences (%.0f tokens)\n", f->s_min,
               f->e_min, f->b_crit / t, f->b_crit);
        printf("  (no interval: one run per batch leaves nothing to resample; use --seeds 2 or more)\n");
    }
    fflush(stdout); /* the warnings below go to stderr: after the numbers they qualify */
    if (!f->bracketed)
        bs_warn("batch-sweep: B_crit fell on the search's bound: the batches measured do not locate it (all far "
                "below it or all far above it); widen --batches");
    else if (!r->within_batches)
        bs_warn("batch-sweep: B_crit %.2f sequences lies outside the batches measured: an extrapolation; widen "
                "--batches to include it", f->b_crit / t);
}

static json_t *number(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *interval(Interval i, double scale) { return json_pack("[o, o]", number(i.lo / scale), number(i.hi / scale)); }

static json_t *runs_json(const SweepResult *r) {
    json_t *runs = json_array();
    for (int i = 0; i < r->num_runs; i++) {
        const SweepRun *u = &r->runs[i];
        json_t *j = json_pack("{s:i, s:I, s:s, s:o, s:o, s:I, s:b, s:o, s:s}", "batch", u->batch, "seed",
                              (json_int_t)u->seed, "outcome", outcome_word(u->outcome), "steps", number(u->steps),
                              "tokens", number(u->tokens), "eval_step", (json_int_t)u->eval_step, "at_first_eval",
                              u->at_first_eval, "best_val_loss", number(u->best_val_loss), "metrics", u->metrics);
        if (u->outcome == RUN_FAILED) json_object_set_new(j, "exit_status", json_integer(u->exit_status));
        if (r->num_lrs) {
            json_object_set_new(j, "lr", json_real(u->lr));
            json_object_set_new(j, "chosen_lr", json_boolean(at_chosen_lr(r, i)));
        }
        json_array_append_new(runs, j);
    }
    return runs;
}

static json_t *fit_json(const SweepResult *r) {
    const TradeoffFit *f = &r->fit;
    const double t = r->seq_len;
    json_t *fit = json_pack("{s:o, s:o, s:o, s:o, s:o, s:b, s:b, s:i, s:s}", "s_min", number(f->s_min),
                            "e_min_tokens", number(f->e_min), "b_crit_tokens", number(f->b_crit), "b_crit_sequences",
                            number(f->b_crit / t), "rms_log_residual", number(f->rms_log), "bracketed", f->bracketed,
                            "within_batches", r->within_batches, "runs_used", r->runs_used, "method",
                            r->num_lrs ? "least squares of log S - log S_min(1 + B_crit/B) over the runs at each "
                                         "batch's chosen lr that reached the target; S_min in closed form, a grid "
                                         "and golden-section search over log B_crit"
                                       : "least squares of log S - log S_min(1 + B_crit/B) over the runs that "
                                         "reached the target; S_min in closed form, a grid and golden-section "
                                         "search over log B_crit");
    if (!r->has_interval) return fit;
    const TradeoffInterval *c = &r->interval;
    json_object_set_new(fit, "interval",
                        json_pack("{s:f, s:i, s:i, s:s, s:o, s:o, s:o, s:o}", "level", c->level, "resamples",
                                  c->resamples, "unbracketed_resamples", c->unbracketed, "method",
                                  r->num_lrs ? "bootstrap: the runs of each batch and lr resampled with replacement, "
                                               "the lr chosen per batch from the resampled runs, refitted; "
                                               "percentiles; resamples left with fewer than two batches skipped"
                                             : "bootstrap: the runs of each batch resampled with replacement, "
                                               "percentiles",
                                  "s_min", interval(c->s_min, 1), "e_min_tokens", interval(c->e_min, 1),
                                  "b_crit_tokens", interval(c->b_crit, 1), "b_crit_sequences",
                                  interval(c->b_crit, t)));
    if (r->num_lrs)
        json_object_set_new(json_object_get(fit, "interval"), "unfitted_resamples", json_integer(c->unfitted));
    return fit;
}

/* Per batch: the chosen lr (null: none), and every lr's standing. */
static json_t *choice_json(const SweepResult *r) {
    json_t *batches = json_array();
    for (int b = 0; b < r->num_batches; b++) {
        const int chosen = r->chosen[b];
        json_t *lrs = json_array();
        for (int l = 0; l < r->num_lrs; l++) {
            const LrCell *c = &r->cells[b * r->num_lrs + l];
            json_t *j = json_pack("{s:f, s:i, s:i, s:o}", "lr", r->lrs[l], "runs", c->runs, "not_reached", c->missed,
                                  "geomean_steps", number(exp(c->mean_log_steps)));
            if (r->has_interval)
                json_object_set_new(j, "resamples_chosen", json_integer(r->choice_counts[b * r->num_lrs + l]));
            json_array_append_new(lrs, j);
        }
        json_array_append_new(batches, json_pack("{s:i, s:o, s:o}", "batch", r->batches[b], "lr",
                                                 chosen >= 0 ? json_real(r->lrs[chosen]) : json_null(), "lrs", lrs));
    }
    return json_pack("{s:s, s:o}", "rule",
                     "per batch, the lr with the fewest runs not reaching the target, then the smallest geometric "
                     "mean of the steps of its runs that did, then the smaller lr; an lr none of whose runs reached "
                     "it is never chosen", "batches", batches);
}

void sweep_write_json(const SweepResult *r, const char *path) {
    const SweepSettings *s = r->settings;
    json_t *root = json_pack("{s:f, s:s, s:i, s:I, s:i, s:i, s:s, s:o}", "target_val_loss", s->target, "measure",
                             "validation loss at evaluation points; steps and tokens interpolated linearly in the "
                             "loss between the evaluations around the target", "max_steps", s->max_steps,
                             "eval_tokens", (json_int_t)s->eval_tokens, "seeds", r->seeds, "seq_len", r->seq_len,
                             "command", r->command, "runs", runs_json(r));
    if (r->num_lrs) {
        json_t *lrs = json_array();
        for (int l = 0; l < r->num_lrs; l++) json_array_append_new(lrs, json_real(r->lrs[l]));
        json_object_set_new(root, "lrs", lrs);
        json_object_set_new(root, "lr_choice", choice_json(r));
    }
    if (s->from)
        json_object_set_new(root, "from", json_pack("{s:s, s:I, s:f}", "checkpoint", s->from, "step",
                                                    (json_int_t)s->from_step, "tokens", s->from_tokens));
    json_object_set_new(root, "fit", r->fitted ? fit_json(r) : json_null());
    if (r->num_along > 0) json_object_set_new(root, "along", sweep_along_json(r->along, r->num_along, r->seq_len));
    if (r->bound) json_object_set_new(root, "schedule_bound", sweep_bound_json(r->bound));
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    if (!text) bs_die("batch-sweep: cannot encode %s", path);
    bs_write_file_atomic(path, text, strlen(text));
    free(text);
    json_decref(root);
}

void sweep_write_png(const SweepResult *r, const char *path) {
    double *x = bs_malloc(sizeof(double) * (size_t)(2 * r->num_runs + 2 * CURVE_POINTS));
    double *y = x + r->num_runs, *cx = y + r->num_runs, *cy = cx + CURVE_POINTS, lo = INFINITY, hi = 0;
    int n = 0;
    for (int i = 0; i < r->num_runs; i++) {
        if (!sweep_run_in_fit(r, i)) continue;
        x[n] = r->runs[i].steps, y[n] = r->runs[i].tokens;
        lo = fmin(lo, y[n] / x[n]), hi = fmax(hi, y[n] / x[n]), n++;
    }
    const TradeoffFit *f = &r->fit;
    for (int k = 0; k < CURVE_POINTS; k++) { /* batches from lo / 4 to hi x 4, evenly in log */
        double b = lo / 4 * pow(16 * hi / lo, (double)k / (CURVE_POINTS - 1));
        cx[k] = tradeoff_steps(f, b), cy[k] = cx[k] * b;
    }
    double knee_x = 2 * f->s_min, knee_y = 2 * f->e_min;
    char fit_label[160], knee_label[96];
    snprintf(fit_label, sizeof fit_label, "fit: S_min %.1f steps, E_min %.4g tokens", f->s_min, f->e_min);
    snprintf(knee_label, sizeof knee_label, "B = B_crit = %.2f sequences", f->b_crit / r->seq_len);
    char title[128], x_label[96];
    snprintf(title, sizeof title, "steps against tokens to validation loss %.4g", r->settings->target);
    snprintf(x_label, sizeof x_label, "optimizer steps S (log)");
    XYChart c = {title, x_label, "tokens E (log)", true, true,
                 {{r->num_lrs ? "runs at each batch's chosen lr (one point per seed)"
                              : "runs (one point per batch and seed)", x, y, n, true},
                  {fit_label, cx, cy, CURVE_POINTS, false},
                  {knee_label, &knee_x, &knee_y, 1, true}},
                 3};
    PngBytes png = xy_chart_png(&c);
    bs_write_file_atomic(path, png.data, png.len);
    free(png.data);
    free(x);
    chart_release_fonts();
}
