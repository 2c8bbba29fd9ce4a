/* plan_subjects.h: the planner's tests see the flags of a library reason's
 * subjects (core/reason.h) as `batchscale plan` names them: every plan
 * subject key is its flag's name with '-' for '_' (cli/subject_flags.c's plan
 * table; library_reasons checks each key is there, plan_cli the lines the
 * command prints). The tests link the planner alone, not cli/. */
#ifndef BS_TESTS_PLAN_SUBJECTS_H
#define BS_TESTS_PLAN_SUBJECTS_H

#include <stdio.h>

#include "core/reason.h"

static const char *plan_subject_flag(const char *key, void *ctx) {
    char *flag = ctx; /* a buffer of 64: the reason copies the flag before asking again */
    int n = snprintf(flag, 64, "--%s", key);
    for (int i = 2; i < n && i < 63; i++)
        if (flag[i] == '_') flag[i] = '-';
    return flag;
}

static inline void plan_name_subjects(void) {
    static char flag[64];
    bs_set_subject_namer(plan_subject_flag, flag);
}

#endif
