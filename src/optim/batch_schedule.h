/* batch_schedule.h: the global batch size as a function of tokens consumed
 * (the --batch-schedule flag), and its rounding to whole accumulation steps.
 *
 * Units: batch sizes are in sequences; thresholds and ramp lengths are in
 * tokens (suffixes K, M, G or B, T: powers of 1000, e.g. 2M, 1G, 2.87T).
 * Since every step consumes whole sequences, Megatron's sample counts are
 * these token counts divided by the sequence length, and the ramp gives the
 * same batches as Megatron's --rampup-batch-size START INCREMENT TOKENS/seq_len.
 *
 *   constant                      the final batch G (--global-batch) throughout
 *   ramp:START:INCREMENT:TOKENS   Megatron's ramp-up: increments = (G - START) / INCREMENT
 *                                 must be a whole number; batch = G once consumed > TOKENS,
 *                                 else START + floor(consumed / (TOKENS / increments)) * INCREMENT
 *                                 (in exact integer arithmetic, where Megatron divides in floating point)
 *   step:"0:B0 T1:B1 T2:B2 ..."   piecewise constant: batch Bk from Tk tokens on (stages
 *                                 separated by spaces or commas; the first starts at 0,
 *                                 thresholds increase, the last batch is G)
 *   exp:START:TOKENS              START, doubled every TOKENS tokens, capped at G
 *   llama3                        Llama 3 405B's recipe: G/4, then G/2 from T1, then G from T2,
 *   llama3:T1:T2                  with T1:T2 given, or else at Llama 3's fractions of the run's
 *                                 token budget: 252M / 15.6T and 2.87T / 15.6T (Dubey et al.
 *                                 2024, section 3.4.1; at least 1 token and increasing)
 *
 * A stage starts at the first step that begins with at least its threshold
 * consumed. The schedule has no state beyond its definition: the batch is a
 * function of tokens consumed, so a run resumed mid-ramp continues the same
 * sequence of batch sizes. Deliberately not here: the adaptive schedule
 * (it depends on measured gradient noise, not only on tokens) and the
 * learning-rate rule (lr_scaling.h). */
#ifndef BS_OPTIM_BATCH_SCHEDULE_H
#define BS_OPTIM_BATCH_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { BATCH_CONSTANT, BATCH_RAMP, BATCH_STEP, BATCH_EXP, BATCH_LLAMA3 } BatchScheduleKind;

#define BATCH_MAX_STAGES 32

typedef struct {
    uint64_t tokens; /* the stage starts once this many tokens are consumed */
    long batch;      /* sequences */
} BatchStage;

typedef struct {
    BatchScheduleKind kind;
    long start;          /* ramp, exp: first batch (sequences) */
    long increment;      /* ramp: sequences added per increment */
    uint64_t tokens;     /* ramp: its length; exp: tokens per doubling */
    uint64_t llama3_thresholds[2]; /* llama3:T1:T2; 0 = Llama 3's fractions of the budget */
    int num_stages;      /* step, and llama3 once prepared */
    BatchStage stages[BATCH_MAX_STAGES];
    long final_batch;    /* G, set by batch_schedule_prepare */
} BatchSchedule;

/* Parses a --batch-schedule string. False with a one-line reason naming
 * --batch-schedule (malformed, unknown unit, zero batch, thresholds that do
 * not increase). */
bool batch_schedule_parse(const char *text, BatchSchedule *s, char *why, size_t why_size);

/* Ties a parsed schedule to the final global batch G (sequences) and the run's
 * token budget (used only by `llama3` without thresholds) and checks the two
 * agree (Megatron's divisibility, START <= G, a step schedule ending at G).
 * False with a one-line reason otherwise. Call once before batch_at. */
bool batch_schedule_prepare(BatchSchedule *s, long final_batch, uint64_t total_tokens, char *why, size_t why_size);

/* The global batch in sequences for the step that starts with
 * `tokens_consumed` tokens already trained on. */
long batch_at(const BatchSchedule *s, uint64_t tokens_consumed);

/* The batch is realised by the number of accumulation micro-steps, so it must
 * be a multiple of granule = micro_batch x data-parallel ranks. *realised is
 * the largest multiple not above `wanted`, and at least one granule. Returns
 * true with why = "" when wanted is already a multiple; when it is not:
 * without strict, true with a one-line warning in why (the trainer shows it
 * once); with strict, false with a one-line error naming --strict-batch. */
bool batch_round(long wanted, long granule, bool strict, long *realised, char *why, size_t why_size);

#endif
