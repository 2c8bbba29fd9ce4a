/* sweep_run.h: one run of `batchscale batch-sweep` (cli/cmd_batch_sweep.c):
 * the sweep's train command with this run's global batch, seed, step cap,
 * target and metrics file, launched as a child process (mpirun and its
 * ranks when the command is an mpirun one, cli/run_child.h), and the steps
 * and tokens it took to reach the target validation loss, read back from its
 * metrics.
 *
 * The target is the validation loss at the evaluation points, not the
 * training loss: it is measured on the same held-out batches for every run,
 * whereas a step's training loss is measured on that step's batch, whose
 * size is the thing being varied (a smaller batch's loss is noisier, so an
 * EMA of it crosses a threshold at a point that depends on the batch), and
 * an EMA lags by about 1/(1 - beta) steps, the same steps at every batch,
 * which biases S_min. The trainer stops itself at the first evaluation at or
 * below the target (--target-val-loss). Steps to the target are
 * interpolated linearly in the validation loss between that evaluation and
 * the one before (tokens likewise), so the evaluation interval (--eval-tokens)
 * does not quantise S. A run that reaches the target at its first evaluation
 * has no evaluation before it in the metrics (step 0's is only printed): its
 * steps are that evaluation's, an upper bound, flagged (sweep/crossing.h
 * interpolates; this reads the metrics). With --lrs the run
 * also gets its own --lr and a scaled --min-lr (cli/sweep_lr.h), and its
 * metrics are runs/batchB_lrX_seedK.jsonl (X: sweep_lr_spell's spelling);
 * without, runs/batchB_seedK.jsonl. Deliberately not here: the grid, the fit
 * and the output. */
#ifndef BS_CLI_SWEEP_RUN_H
#define BS_CLI_SWEEP_RUN_H

#include <stdbool.h>

#include "cli/run_command.h"

typedef struct {
    double target;         /* validation loss */
    int max_steps;         /* the cap: the child's --steps */
    long long eval_tokens; /* evaluation interval in tokens, unless the command gives --eval-every */
    int seq_len;           /* the command's --seq-len (for the evaluation interval) */
    const char *runs_dir;  /* each run's metrics file goes here */
    double base_lr, base_min_lr; /* with --lrs: the command's --lr and --min-lr (NaN: none) */
    const char *from;  /* --from: every run continues this checkpoint (NULL: from scratch) */
    long from_step;    /* its step and tokens: steps and tokens are counted from them */
    double from_tokens;
} SweepSettings;

typedef enum { RUN_REACHED, RUN_NOT_REACHED, RUN_FAILED } RunOutcome;

typedef struct {
    int batch; /* sequences */
    long seed;
    double lr;    /* with --lrs: this run's --lr; else NaN (the command's) */
    int lr_index; /* with --lrs: lr's index in the ascending grid; else 0 */
    RunOutcome outcome;
    double steps, tokens; /* RUN_REACHED: to the target, interpolated */
    long eval_step;       /* the evaluation that reached it; else the last step in the metrics */
    bool at_first_eval;   /* reached at the first evaluation: steps is an upper bound */
    double best_val_loss; /* the lowest evaluated (NaN: none) */
    int seq_len;          /* tokens per sequence, from the metrics */
    int exit_status;      /* RUN_FAILED: the child's exit status (128 + signal if killed) */
    char metrics[4200];
} SweepRun;

/* The child's --eval-every for a batch: eval_tokens / (batch x seq_len) steps, at least 1. */
int sweep_eval_every(const SweepSettings *s, int batch);

/* Runs one grid point (lr: NaN for the command's own) and fills `out`. Dies if the run fails before writing any metrics (the
 * command itself is wrong, so every run would), or if the sweep is interrupted. */
void sweep_run(const RunCommand *base, const SweepSettings *s, int batch, double lr, long seed, SweepRun *out);

/* The same run read at another validation loss (batch-sweep --along): its steps and tokens to `loss`,
 * interpolated as for the target, from its metrics; a failed run stays failed. */
void sweep_run_at(const SweepRun *run, const SweepSettings *s, double loss, SweepRun *out);

#endif
