/* lr_scaling.c: linear and square-root learning-rate scaling (see lr_scaling.h). */
#include "optim/lr_scaling.h"
#include "core/reason.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const rule_names[] = {"none", "linear", "sqrt"};

bool lr_scaling_parse(const char *name, LrScaling *rule, char *why, size_t why_size) {
    for (int r = 0; r < (int)(sizeof rule_names / sizeof rule_names[0]); r++) {
        if (strcmp(name, rule_names[r]) == 0) {
            *rule = (LrScaling)r;
            return true;
        }
    }
    return bs_reason(why, why_size, "lr_scaling", "the learning-rate scaling rule must be none, linear or sqrt (got '%s')",
                     name);
}

double lr_scaling_factor(LrScaling rule, long batch, long base_batch) {
    double k = (double)batch / (double)base_batch;
    switch (rule) {
    case LR_SCALING_NONE: return 1.0;
    case LR_SCALING_LINEAR: return k;
    case LR_SCALING_SQRT: return sqrt(k);
    }
    return 1.0;
}
