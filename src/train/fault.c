/* fault.c: injected faults (see fault.h). */
#include "train/fault.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/reason.h"

static FaultKind fault_kind(const char *word) {
    static const struct { const char *word; FaultKind kind; } kinds[] = {
        {"stall", FAULT_STALL}, {"exit", FAULT_EXIT}, {"nan", FAULT_NAN}, {"nans", FAULT_NANS}, {"slow", FAULT_SLOW}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(word, kinds[i].word) == 0) return kinds[i].kind;
    return FAULT_NONE;
}

/* nan and nans take an optional fourth field, the layer whose gradient gets the NaN. */
void fault_parse(FaultPlan *f, const char *spec) {
    *f = (FaultPlan){.spec = spec, .kind = FAULT_NONE, .layer = -1};
    if (!spec || !*spec) return;
    char word[16], tail;
    int rank, used = 0;
    double value;
    bool ok = sscanf(spec, "%15[a-z]:%d:%lf%n", word, &rank, &value, &used) == 3;
    FaultKind kind = ok ? fault_kind(word) : FAULT_NONE;
    bool nan_kind = kind == FAULT_NAN || kind == FAULT_NANS;
    ok = kind != FAULT_NONE;
    if (ok && spec[used] != '\0') /* :LAYER */
        ok = nan_kind && sscanf(spec + used, ":%d%c", &f->layer, &tail) == 1 && f->layer >= 0;
    if (!ok)
        bs_die_about("inject_fault", "the injected fault must be stall|exit:RANK:STEP, nan|nans:RANK:STEP[:LAYER] or "
                     "slow:RANK:FACTOR (got '%s')", spec);
    f->kind = kind;
    f->rank = rank;
    f->step = (int)value;
    f->factor = value;
}

void fault_check_rank(const FaultPlan *f, int world) {
    if (f->kind != FAULT_NONE && (f->rank < 0 || f->rank >= world))
        bs_die_about("inject_fault", "the injected fault %s: rank %d does not exist (%d process%s)", f->spec, f->rank,
                     world, world == 1 ? "" : "es");
}

void fault_target_nan(FaultPlan *f, const FaultLayout *l) {
    fault_check_rank(f, l->world);
    int stage = f->rank / l->tp % l->pp, first = l->stage_first[stage], n = l->stage_layers[stage];
    if (f->layer < 0) {
        f->block = first + 1;
        return;
    }
    if (f->layer >= l->num_layers)
        bs_die_about("inject_fault", "the injected fault %s: layer %d does not exist (%d layers)", f->spec, f->layer,
                     l->num_layers);
    if (f->layer < first || f->layer >= first + n)
        bs_die_about("inject_fault", "the injected fault %s: rank %d holds layers [%d, %d), not layer %d", f->spec,
                     f->rank, first, first + n, f->layer);
    f->block = f->layer + 1;
}

void fault_maybe_stop(const FaultPlan *f, int rank, long step) {
    if ((f->kind != FAULT_EXIT && f->kind != FAULT_STALL) || rank != f->rank || step != f->step) return;
    if (f->kind == FAULT_EXIT) raise(SIGKILL);
    for (;;) pause();
}

bool fault_nan_now(const FaultPlan *f, int rank, long step) {
    if (rank != f->rank) return false;
    return (f->kind == FAULT_NAN && step == f->step) || (f->kind == FAULT_NANS && step >= f->step);
}

double fault_slow_down(const FaultPlan *f, int rank, double compute) {
    if (f->kind != FAULT_SLOW || rank != f->rank || f->factor <= 1) return 0;
    double extra = (f->factor - 1) * compute;
    struct timespec ts = {(time_t)extra, (long)((extra - (double)(time_t)extra) * 1e9)};
    nanosleep(&ts, NULL);
    return extra;
}
