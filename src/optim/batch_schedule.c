/* batch_schedule.c: parsing and evaluating --batch-schedule (see batch_schedule.h). */
#include "optim/batch_schedule.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"

#define MAX_BATCH 1000000000L /* sequences; far beyond any real run, keeps the arithmetic in range */
#define MAX_TEXT 1024

/* Llama 3 405B (Dubey et al. 2024, 3.4.1): batch doubled after 252M and again
 * after 2.87T of 15.6T pre-training tokens. The fractions as ratios of integers: */
#define LLAMA3_FIRST_NUM 252ULL          /* 252M / 15.6T = 252 / 15,600,000 */
#define LLAMA3_FIRST_DEN 15600000ULL
#define LLAMA3_SECOND_NUM 287ULL         /* 2.87T / 15.6T = 287 / 1,560 */
#define LLAMA3_SECOND_DEN 1560ULL


/* The same, for a reason found in the schedule text itself. */
BS_PRINTF(4, 5) static bool fail(char *why, size_t why_size, const char *text, const char *fmt, ...) {
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return bs_reason(why, why_size, "batch_schedule", "the batch schedule '%s': %s", text, reason);
}

/* Parses a whole number with an optional decimal point and an optional unit
 * K, M, G or B, T (powers of 1000), exactly: "2.87T" is 2870000000000. */
static bool parse_amount(const char *field, uint64_t *out, const char *text, char *why, size_t why_size) {
    unsigned __int128 mantissa = 0, scale = 1, ten_pow = 1;
    int digits = 0;
    bool seen_point = false;
    const char *p = field;
    for (; *p; p++) {
        if (*p == '.' && !seen_point) {
            seen_point = true;
        } else if (isdigit((unsigned char)*p)) {
            if (++digits > 18) return fail(why, why_size, text, "'%s' has too many digits", field);
            mantissa = mantissa * 10 + (unsigned)(*p - '0');
            if (seen_point) ten_pow *= 10;
        } else {
            break;
        }
    }
    if (digits == 0) return fail(why, why_size, text, "'%s' is not a number", field);
    if (*p) {
        static const char units[] = "KMGT";
        char u = (char)toupper((unsigned char)*p);
        if (u == 'B') u = 'G'; /* Megatron writes billions as B: "250B" */
        const char *at = strchr(units, u);
        if (!at || p[1] != '\0')
            return fail(why, why_size, text, "unknown unit '%s' in '%s' (use K, M, G or B, T: powers of 1000)", p,
                        field);
        for (long k = at - units; k >= 0; k--) scale *= 1000;
    }
    unsigned __int128 scaled = mantissa * scale;
    if (scaled % ten_pow != 0) return fail(why, why_size, text, "'%s' is not a whole number", field);
    scaled /= ten_pow;
    if (scaled > UINT64_MAX / 2) return fail(why, why_size, text, "'%s' is too large", field);
    *out = (uint64_t)scaled;
    return true;
}

/* A batch size field: a whole number of sequences, at least 1. */
static bool parse_batch(const char *field, long *out, const char *text, char *why, size_t why_size) {
    uint64_t v;
    if (!parse_amount(field, &v, text, why, why_size)) return false;
    if (v == 0) return fail(why, why_size, text, "batch '%s' must be at least 1 sequence", field);
    if (v > (uint64_t)MAX_BATCH)
        return fail(why, why_size, text, "batch '%s' is larger than %ld sequences", field, MAX_BATCH);
    *out = (long)v;
    return true;
}

/* A token count field; `positive` rejects 0. */
static bool parse_tokens(const char *field, bool positive, uint64_t *out, const char *text, char *why,
                         size_t why_size) {
    if (!parse_amount(field, out, text, why, why_size)) return false;
    if (positive && *out == 0) return fail(why, why_size, text, "token count '%s' must be positive", field);
    return true;
}

/* Splits `rest` at ':' into exactly n fields (pointers into rest). */
static bool split_fields(char *rest, char **fields, int n) {
    for (int i = 0; i < n; i++) {
        fields[i] = rest;
        char *colon = rest ? strchr(rest, ':') : NULL;
        if (i < n - 1) {
            if (!colon) return false;
            *colon = '\0';
            rest = colon + 1;
        } else if (colon || !rest || !*rest) {
            return false;
        }
    }
    for (int i = 0; i < n; i++)
        if (!*fields[i]) return false;
    return true;
}

static bool parse_stages(char *list, BatchSchedule *s, const char *text, char *why, size_t why_size) {
    size_t len = strlen(list);
    if (len >= 2 && list[0] == '"' && list[len - 1] == '"') list[len - 1] = '\0', list++;
    s->num_stages = 0;
    char *save = NULL;
    for (char *stage = strtok_r(list, " ,", &save); stage; stage = strtok_r(NULL, " ,", &save)) {
        char *fields[2];
        char copy[128];
        snprintf(copy, sizeof copy, "%s", stage);
        if (!split_fields(stage, fields, 2))
            return fail(why, why_size, text, "stage '%s' is not TOKENS:BATCH", copy);
        if (s->num_stages == BATCH_MAX_STAGES)
            return fail(why, why_size, text, "more than %d stages", BATCH_MAX_STAGES);
        BatchStage *st = &s->stages[s->num_stages];
        if (!parse_tokens(fields[0], false, &st->tokens, text, why, why_size)) return false;
        if (!parse_batch(fields[1], &st->batch, text, why, why_size)) return false;
        if (s->num_stages == 0 && st->tokens != 0)
            return fail(why, why_size, text, "the first stage must start at 0 tokens (got '%s')", copy);
        if (s->num_stages > 0 && st->tokens <= st[-1].tokens)
            return fail(why, why_size, text, "threshold %llu of stage '%s' is not above the previous threshold %llu; "
                        "thresholds must increase", (unsigned long long)st->tokens, copy,
                        (unsigned long long)st[-1].tokens);
        s->num_stages++;
    }
    if (s->num_stages == 0) return fail(why, why_size, text, "step needs at least one stage, e.g. step:\"0:32 1M:64\"");
    return true;
}

bool batch_schedule_parse(const char *text, BatchSchedule *s, char *why, size_t why_size) {
    static const char *const usage = "use constant, ramp:START:INCREMENT:TOKENS, step:\"0:B0 T1:B1 ...\", "
                                     "exp:START:TOKENS, llama3 or llama3:T1:T2";
    memset(s, 0, sizeof *s);
    char buf[MAX_TEXT];
    if (strlen(text) >= sizeof buf) return fail(why, why_size, "...", "longer than %d characters", MAX_TEXT - 1);
    snprintf(buf, sizeof buf, "%s", text);
    char *colon = strchr(buf, ':');
    char *rest = colon ? colon + 1 : NULL;
    if (colon) *colon = '\0';
    char *f[3];
    if (strcmp(buf, "constant") == 0) {
        s->kind = BATCH_CONSTANT;
        if (rest) return fail(why, why_size, text, "constant takes no arguments");
    } else if (strcmp(buf, "ramp") == 0) {
        s->kind = BATCH_RAMP;
        if (!split_fields(rest, f, 3)) return fail(why, why_size, text, "expected ramp:START:INCREMENT:TOKENS");
        if (!parse_batch(f[0], &s->start, text, why, why_size) ||
            !parse_batch(f[1], &s->increment, text, why, why_size) ||
            !parse_tokens(f[2], true, &s->tokens, text, why, why_size))
            return false;
    } else if (strcmp(buf, "exp") == 0) {
        s->kind = BATCH_EXP;
        if (!split_fields(rest, f, 2)) return fail(why, why_size, text, "expected exp:START:TOKENS");
        if (!parse_batch(f[0], &s->start, text, why, why_size) ||
            !parse_tokens(f[1], true, &s->tokens, text, why, why_size))
            return false;
    } else if (strcmp(buf, "step") == 0) {
        s->kind = BATCH_STEP;
        if (!rest) return fail(why, why_size, text, "expected step:\"0:B0 T1:B1 ...\"");
        return parse_stages(rest, s, text, why, why_size);
    } else if (strcmp(buf, "llama3") == 0) {
        s->kind = BATCH_LLAMA3;
        if (!rest) return true;
        uint64_t *t = s->llama3_thresholds;
        if (!split_fields(rest, f, 2)) return fail(why, why_size, text, "expected llama3 or llama3:T1:T2");
        if (!parse_tokens(f[0], true, &t[0], text, why, why_size) ||
            !parse_tokens(f[1], true, &t[1], text, why, why_size))
            return false;
        if (t[1] <= t[0]) return fail(why, why_size, text, "T2 must be above T1; thresholds must increase");
    } else {
        return fail(why, why_size, text, "unknown schedule '%s'; %s", buf, usage);
    }
    return true;
}

/* Llama 3's thresholds as fractions of the token budget, each at least one
 * token above the previous so that every stage lasts at least one step. */
static void llama3_proportional(uint64_t total_tokens, uint64_t out[2]) {
    out[0] = (uint64_t)((unsigned __int128)total_tokens * LLAMA3_FIRST_NUM / LLAMA3_FIRST_DEN);
    out[1] = (uint64_t)((unsigned __int128)total_tokens * LLAMA3_SECOND_NUM / LLAMA3_SECOND_DEN);
    if (out[0] < 1) out[0] = 1;
    if (out[1] <= out[0]) out[1] = out[0] + 1;
}

bool batch_schedule_prepare(BatchSchedule *s, long final_batch, uint64_t total_tokens, char *why, size_t why_size) {
    if (final_batch < 1) return bs_reason(why, why_size, "global_batch", "the global batch must be at least 1");
    s->final_batch = final_batch;
    switch (s->kind) {
    case BATCH_CONSTANT: return true;
    case BATCH_RAMP:
        if (s->start >= final_batch)
            return bs_reason(why, why_size, "batch_schedule global_batch",
                             "the ramp batch schedule's START %ld must be below the global batch %ld", s->start,
                             final_batch);
        if ((final_batch - s->start) % s->increment != 0)
            return bs_reason(why, why_size, "batch_schedule global_batch",
                             "the ramp batch schedule: the global batch %ld minus START %ld is %ld, not a multiple of "
                             "INCREMENT %ld (Megatron's rule); change one of them",
                          final_batch, s->start, final_batch - s->start, s->increment);
        return true;
    case BATCH_EXP:
        if (s->start > final_batch)
            return bs_reason(why, why_size, "batch_schedule global_batch",
                             "the exp batch schedule's START %ld is above the global batch %ld", s->start, final_batch);
        return true;
    case BATCH_STEP: {
        long last = s->stages[s->num_stages - 1].batch;
        if (last != final_batch)
            return bs_reason(why, why_size, "batch_schedule global_batch",
                             "the step batch schedule ends at %ld sequences but the global batch is %ld; make them equal",
                          last, final_batch);
        return true;
    }
    case BATCH_LLAMA3: {
        if (final_batch < 4)
            return bs_reason(why, why_size, "batch_schedule global_batch",
                             "the llama3 batch schedule starts at a quarter of the global batch, so it needs a global "
                             "batch of at least 4 (got %ld)",
                          final_batch);
        uint64_t t[2] = {s->llama3_thresholds[0], s->llama3_thresholds[1]};
        if (t[0] == 0) {
            if (total_tokens == 0)
                return bs_reason(why, why_size, "batch_schedule",
                                 "the llama3 batch schedule without thresholds needs the run's token budget; give "
                                 "llama3:T1:T2");
            llama3_proportional(total_tokens, t);
        }
        s->num_stages = 3;
        s->stages[0] = (BatchStage){0, final_batch / 4};
        s->stages[1] = (BatchStage){t[0], final_batch / 2};
        s->stages[2] = (BatchStage){t[1], final_batch};
        return true;
    }
    }
    return true;
}

long batch_at(const BatchSchedule *s, uint64_t tokens_consumed) {
    const long G = s->final_batch;
    if (G < 1) bs_die("internal: batch_at before batch_schedule_prepare");
    switch (s->kind) {
    case BATCH_CONSTANT: return G;
    case BATCH_RAMP: {
        if (tokens_consumed > s->tokens) return G;
        uint64_t increments = (uint64_t)((G - s->start) / s->increment);
        /* floor(consumed / (TOKENS / increments)) without rounding */
        uint64_t done = (uint64_t)((unsigned __int128)tokens_consumed * increments / s->tokens);
        return s->start + (long)done * s->increment;
    }
    case BATCH_EXP: {
        long batch = s->start;
        for (uint64_t doublings = tokens_consumed / s->tokens; doublings > 0 && batch < G; doublings--) batch *= 2;
        return batch < G ? batch : G;
    }
    case BATCH_STEP:
    case BATCH_LLAMA3: {
        int k = 0;
        while (k + 1 < s->num_stages && s->stages[k + 1].tokens <= tokens_consumed) k++;
        return s->stages[k].batch;
    }
    }
    return G;
}

bool batch_round(long wanted, long granule, bool strict, long *realised, char *why, size_t why_size) {
    long r = wanted / granule * granule;
    if (r < granule) r = granule;
    *realised = r;
    if (r == wanted) {
        if (why_size) why[0] = '\0';
        return true;
    }
    if (strict)
        return bs_reason(why, why_size, "strict_batch micro_batch",
                         "strict batches: the batch schedule asks for %ld sequences, not a multiple of the micro-batch "
                         "x data-parallel ranks = %ld; change the schedule or allow rounding",
                         wanted, granule);
    bs_reason(why, why_size, "micro_batch strict_batch",
              "the batch schedule asks for %ld sequences, not a multiple of the micro-batch x data-parallel ranks = "
              "%ld; using %ld (shown once; strict batches make this an error)",
              wanted, granule, r);
    return true;
}
