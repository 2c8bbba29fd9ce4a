/* crossing.c: where a run reached a loss (see crossing.h). */
#include "sweep/crossing.h"

#include <math.h>

void sweep_crossing_start(SweepCrossing *c, double target) {
    *c = (SweepCrossing){.target = target, .before = {NAN, NAN, NAN}, .at = {NAN, NAN, NAN}, .best_loss = NAN};
}

void sweep_crossing_add(SweepCrossing *c, SweepEval e) {
    if (c->reached || !isfinite(e.loss)) return;
    if (!(c->best_loss <= e.loss)) c->best_loss = e.loss;
    if (e.loss <= c->target) c->reached = true, c->at = e;
    else c->before = e;
}

void sweep_crossing_point(const SweepCrossing *c, double *steps, double *tokens, bool *at_first_eval) {
    const SweepEval *before = &c->before, *at = &c->at;
    *at_first_eval = isnan(before->step);
    double share = *at_first_eval ? 1 : (before->loss - c->target) / (before->loss - at->loss);
    *steps = *at_first_eval ? at->step : before->step + share * (at->step - before->step);
    *tokens = *at_first_eval ? at->tokens : before->tokens + share * (at->tokens - before->tokens);
}
