/* sweep_lr.c: the learning-rate grid of the batch sweep (see sweep_lr.h). */
#include "cli/sweep_lr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static int ascending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int sweep_lrs_parse(const char *text, double *lrs) {
    int n = 0;
    const char *at = text;
    if (!*text) bs_die("batch-sweep: --lrs is empty: give learning rates separated by commas, e.g. --lrs 1e-3,2e-3,4e-3");
    while (*at) {
        char *end;
        double lr = strtod(at, &end);
        if (end == at || (*end && *end != ','))
            bs_die("batch-sweep: --lrs '%s': each entry must be a number, separated by commas (e.g. --lrs "
                   "1e-3,2e-3,4e-3)", text);
        if (!(lr > 0) || !isfinite(lr))
            bs_die("batch-sweep: --lrs '%s': %.*s is not a positive finite learning rate", text, (int)(end - at), at);
        for (int i = 0; i < n; i++)
            if (lrs[i] == lr) bs_die("batch-sweep: --lrs '%s': %g is given twice", text, lr);
        if (n == SWEEP_MAX_LRS)
            bs_die("batch-sweep: --lrs '%s': at most %d learning rates (each one multiplies the runs)", text,
                   SWEEP_MAX_LRS);
        lrs[n++] = lr;
        at = *end ? end + 1 : end;
        if (*end && !*at) bs_die("batch-sweep: --lrs '%s' ends with a comma", text);
    }
    qsort(lrs, (size_t)n, sizeof *lrs, ascending);
    return n;
}

/* A positive finite number spelled whole, else NaN. */
static double positive(const char *text) {
    char *end;
    double v = strtod(text, &end);
    return end != text && !*end && v > 0 && isfinite(v) ? v : NAN;
}

void sweep_lr_base(const RunCommand *cmd, double *lr, double *min_lr) {
    const char *lr_text = run_command_get(cmd, "lr"), *min_text = run_command_get(cmd, "min-lr");
    if (!lr_text)
        bs_die("batch-sweep: --lrs replaces the train command's --lr, and it gives none: add --lr to the train "
               "command (e.g. --lr 2e-3 --min-lr 2e-3 for a constant one; a --config file's lr does not count)");
    *lr = positive(lr_text);
    if (isnan(*lr)) bs_die("batch-sweep: --lrs: the train command's --lr '%s' is not a positive number", lr_text);
    *min_lr = NAN;
    if (!min_text) return;
    char *end;
    *min_lr = strtod(min_text, &end);
    if (end == min_text || *end || !(*min_lr >= 0) || !isfinite(*min_lr))
        bs_die("batch-sweep: --lrs: the train command's --min-lr '%s' is not a number from 0 up", min_text);
}

void sweep_lr_spell(double x, char *text, size_t size) {
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(text, size, "%.*g", digits, x);
        if (strtod(text, NULL) == x) return;
    }
}

void sweep_lr_apply(RunCommand *cmd, double base_lr, double min_lr, double lr) {
    char text[64];
    sweep_lr_spell(lr, text, sizeof text);
    run_command_set(cmd, "lr", text);
    if (isnan(min_lr)) return;
    sweep_lr_spell(min_lr / base_lr * lr, text, sizeof text); /* exactly lr when min_lr == base_lr */
    run_command_set(cmd, "min-lr", text);
}
