/* cmd_run.c: `batchscale run [options] -- COMMAND`: restarts a training job
 * after a failure, on top of mpirun (no transport or launcher of its own).
 *
 * COMMAND is a normal job, `mpirun -np N ... batchscale train ... --ckpt-dir
 * DIR` (or --out DIR, whose checkpoints are in DIR/ckpt). The launcher runs
 * it and waits. A rank that dies makes mpirun end the others and exit
 * non-zero; a rank that hangs makes the others time out (train
 * --comm-timeout) and abort, so the launcher itself never needs a timer.
 * After a failure it logs the time, the newest complete checkpoint and the
 * work lost since it, and runs the command again with `--resume latest` (only
 * once a checkpoint exists), up to --max-restarts times. A job that exits 2
 * (BS_EXIT_USAGE: a flag, a combination, the layout, an input file) is not
 * restarted: the same command would fail the same way.
 *
 * Restarted commands differ from the first in three ways, all logged: they
 * resume; they drop --debug-inject-fault and the BATCHSCALE_CKPT_FAULT variable
 * (a test's injected fault models a failure that happened once, and the
 * restart models the repaired job); and they see BATCHSCALE_RESTART=<attempt>
 * in their environment (0 on the first launch).
 *
 * Elastic rule (--elastic): an attempt that fails before writing a new
 * complete checkpoint made no progress. After --shrink-after such failures
 * in a row at the same size, a rank "cannot come back", and the next attempt
 * runs on fewer processes: the largest count n < N, n >= --min-ranks, for
 * which the global batch is a whole number of micro-batches
 * (global % (micro x n) == 0). The trainer then accumulates
 * global / (micro x n) micro-steps, so the global batch, the data order and
 * the update are unchanged. That needs --global-batch and --micro-batch in
 * the train command (without --global-batch the trainer would take micro x
 * ranks, which changes with the size, and refuse the checkpoint).
 *
 * Preemption (train/preempt.h): a job whose ranks were asked to stop
 * finishes its step, checkpoints and exits 75 (PREEMPT_EXIT_CODE). When
 * that happens without the launcher being signalled (a scheduler signalled
 * the ranks), the launcher resumes it from that checkpoint at once, and it
 * counts as no failure (not against --max-restarts). A SIGTERM, SIGINT or
 * SIGUSR1 sent to the launcher itself is passed on (to mpirun as SIGUSR1,
 * see run_child.h); the job checkpoints and ends, and the launcher exits
 * with its status (75) without restarting, so that the scheduler can requeue
 * it; also when mpirun, signalled as well, reports 1, as long as a complete
 * checkpoint was written after the signal. A launch that finds a complete
 * checkpoint already (a requeued job, a repeated command) resumes from it:
 * --resume latest is added.
 *
 * Deliberately not here: health checks of machines, growing a job again,
 * and a watchdog of its own (the trainer's --comm-timeout is the one). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "ckpt/ckpt.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/run_child.h"
#include "cli/run_command.h"
#include "cli/run_log.h"
#include "core/error.h"
#include "core/io.h"
#include "train/preempt.h"

typedef struct {
    int max_restarts, min_ranks, shrink_after;
    bool elastic;
    double restart_delay;
    const char *log;
} RunOptions;

typedef struct {
    long step;      /* -1: no complete checkpoint */
    double written; /* Unix time its manifest was written */
} CkptPoint;

static double wall_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The newest checkpoint in ckpt_dir whose manifest reads and whose files
 * verify: the one `--resume latest` takes. */
static CkptPoint newest_checkpoint(const char *ckpt_dir) {
    CkptPoint best = {-1, 0};
    DIR *d = opendir(ckpt_dir);
    if (!d) return best;
    long steps[CKPT_MAX_FILES];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < CKPT_MAX_FILES) {
        long s;
        char tail;
        if (sscanf(e->d_name, "step_%ld%c", &s, &tail) == 1) steps[n++] = s;
    }
    closedir(d);
    CkptManifest *m = bs_malloc(sizeof *m);
    for (;;) {
        int top = -1;
        for (int i = 0; i < n; i++)
            if (steps[i] >= 0 && (top < 0 || steps[i] > steps[top])) top = i;
        if (top < 0) break;
        char dir[4096], manifest[4200], why[600];
        ckpt_step_dir(dir, sizeof dir, ckpt_dir, steps[top]);
        steps[top] = -1;
        snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
        struct stat st;
        if (stat(manifest, &st) == 0 && ckpt_try_read_manifest(dir, m, why, sizeof why) &&
            ckpt_verify(dir, m, why, sizeof why)) {
            best.step = m->step;
            best.written = (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
            break;
        }
    }
    free(m);
    return best;
}

static json_t *step_json(long step) { return step >= 0 ? json_integer(step) : json_null(); }

static const char *step_text(long step, char *buf, size_t n) {
    if (step < 0) snprintf(buf, n, "none (starts over)");
    else snprintf(buf, n, "step %ld", step);
    return buf;
}

/* A train option holding a count, or 0 if absent or not a count. */
static long command_count(const RunCommand *cmd, const char *name) {
    const char *text = run_command_get(cmd, name);
    double v;
    return text && parse_count(text, &v) && v >= 1 ? (long)v : 0;
}

/* The elastic rule's next size (see the header comment); 0 if none. */
static int smaller_size(const RunCommand *cmd, int ranks, int min_ranks) {
    long global = command_count(cmd, "global-batch"), micro = command_count(cmd, "micro-batch");
    for (int n = ranks - 1; n >= min_ranks && n >= 1; n--)
        if (global % (micro * n) == 0) return n;
    return 0;
}

static void check_elastic(const RunCommand *cmd, const RunOptions *o) {
    int ranks = run_command_ranks(cmd);
    if (ranks < 1) bs_die("run --elastic: the command must give mpirun a process count (-np N) to reduce");
    if (o->min_ranks > ranks) bs_die("run: --min-ranks %d is more than the job's %d processes", o->min_ranks, ranks);
    if (!command_count(cmd, "global-batch") || !command_count(cmd, "micro-batch"))
        bs_die("run --elastic: give the train command --global-batch and --micro-batch explicitly: the global batch "
               "must not change with the number of processes (the trainer accumulates to keep it)");
}

/* Bad usage dies with one line before any warning. */
static void check_command(const RunCommand *cmd, const RunOptions *o, char *ckpt_dir, size_t n) {
    if (cmd->train_at < 0)
        bs_die("run: the command must run `batchscale train` (no word 'train' after a batchscale executable in it)");
    const char *dir = run_command_get(cmd, "ckpt-dir"), *out = run_command_get(cmd, "out");
    if (dir && *dir) snprintf(ckpt_dir, n, "%s", dir);
    else if (out && *out) snprintf(ckpt_dir, n, "%s/ckpt", out);
    else bs_die("run: the train command needs --ckpt-dir DIR (or --out DIR) so that a restart can resume");
    if (o->elastic) check_elastic(cmd, o);
    const char *every = run_command_get(cmd, "ckpt-every");
    if (!every || atoi(every) == 0)
        bs_warn("run: the train command has no --ckpt-every: it checkpoints only at its end, so a restart starts over");
}

static int exit_code(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

/* The job's course across attempts. */
typedef struct {
    int ranks;       /* mpirun's process count (0: not an mpirun command) */
    int failures;    /* attempts that failed (a preemption that checkpointed is none) */
    int no_progress; /* failures in a row without a new checkpoint */
    double lost_total;
    CkptPoint before; /* the newest checkpoint when the attempt started */
} RunState;

static bool preempted(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == PREEMPT_EXIT_CODE; }

/* The launcher itself was told to stop: the job has been passed the signal
 * and has ended; no restart. It stopped cleanly if it says so (75) or if a
 * complete checkpoint was written after the signal: a scheduler that
 * signals every process (SLURM's scancel) reaches mpirun too, and mpirun
 * then exits 1 whatever its ranks did. */
static int stop_requested(const ChildResult *r, CkptPoint now, RunLog *log) {
    char how[128], at[64];
    run_describe_status(r->status, how, sizeof how);
    bool clean = preempted(r->status) || (now.step >= 0 && now.written >= r->stop_time);
    run_log_event(log, "interrupted",
                  json_pack("{s:i, s:s, s:b, s:o}", "signal", r->stop_signal, "status", how, "preempted", clean,
                            "ckpt_step", step_json(now.step)),
                  "stopped by signal %d (%s)%s; last complete checkpoint: %s; not restarting", r->stop_signal, how,
                  clean ? ": the job finished its step and checkpointed" : "", step_text(now.step, at, sizeof at));
    return clean ? PREEMPT_EXIT_CODE : exit_code(r->status);
}

/* A failed attempt: logs it; returns -1 to restart (on fewer ranks after the
 * elastic rule's failures), else the exit status to give up with. */
static int after_failure(RunCommand *cmd, const RunOptions *o, RunState *s, int attempt, const ChildResult *r,
                         CkptPoint now, double started, RunLog *log) {
    char how[128], at[64];
    run_describe_status(r->status, how, sizeof how);
    double since = now.step >= 0 && now.written > started ? now.written : started;
    double lost = wall_now() - since;
    bool progress = now.step > s->before.step;
    s->lost_total += lost;
    s->no_progress = progress ? 0 : s->no_progress + 1;
    run_log_event(log, "failure",
                  json_pack("{s:i, s:i, s:s, s:i, s:o, s:f, s:b}", "attempt", attempt, "ranks", s->ranks, "status",
                            how, "exit_code", exit_code(r->status), "ckpt_step", step_json(now.step), "lost_s", lost,
                            "progress", progress),
                  "attempt %d on %d ranks failed (%s); last complete checkpoint: %s; %.1f s of work lost since it",
                  attempt, s->ranks, how, step_text(now.step, at, sizeof at), lost);
    if (WIFEXITED(r->status) && WEXITSTATUS(r->status) == BS_EXIT_USAGE) {
        run_log_event(log, "give-up", json_pack("{s:i}", "exit_code", BS_EXIT_USAGE),
                      "exit %d is a usage or configuration error: restarting cannot help", BS_EXIT_USAGE);
        return BS_EXIT_USAGE;
    }
    if (s->failures++ == o->max_restarts) {
        run_log_event(log, "give-up", json_pack("{s:i}", "restarts", attempt), "no restarts left (--max-restarts %d)",
                      o->max_restarts);
        return exit_code(r->status);
    }
    if (!o->elastic || s->no_progress < o->shrink_after) return -1;
    int next = smaller_size(cmd, s->ranks, o->min_ranks);
    if (next == 0) {
        run_log_event(log, "give-up", json_pack("{s:i, s:i}", "ranks", s->ranks, "min_ranks", o->min_ranks),
                      "%d failures in a row without progress on %d ranks, and no smaller size from --min-ranks %d up "
                      "keeps the global batch", s->no_progress, s->ranks, o->min_ranks);
        return exit_code(r->status);
    }
    run_log_event(log, "shrink", json_pack("{s:i, s:i, s:i}", "from_ranks", s->ranks, "to_ranks", next,
                                           "failures_without_progress", s->no_progress),
                  "%d failures in a row without a new checkpoint on %d ranks: continuing on %d", s->no_progress,
                  s->ranks, next);
    run_command_set_ranks(cmd, next);
    if (run_command_get(cmd, "dp")) {
        char value[16];
        snprintf(value, sizeof value, "%d", next);
        run_command_set(cmd, "dp", value);
    }
    s->ranks = next;
    s->no_progress = 0;
    return -1;
}

/* The next attempt's command: resumes from the newest checkpoint, without the injected fault. */
static void prepare_restart(RunCommand *cmd, const RunOptions *o, const RunState *s, int attempt, CkptPoint now,
                            RunLog *log) {
    char at[64];
    if (now.step >= 0) run_command_set(cmd, "resume", "latest");
    run_command_remove(cmd, "debug-inject-fault");
    char *text = run_command_text(cmd);
    run_log_event(log, "restart",
                  json_pack("{s:i, s:i, s:o, s:f, s:s}", "attempt", attempt + 1, "ranks", s->ranks, "from_step",
                            step_json(now.step), "delay_s", o->restart_delay, "command", text),
                  "attempt %d on %d ranks from checkpoint %s in %g s", attempt + 1, s->ranks,
                  step_text(now.step, at, sizeof at), o->restart_delay);
    free(text);
}

/* Runs the job to success or until the restarts are spent; returns the exit status. */
static int supervise(RunCommand *cmd, const RunOptions *o, const char *ckpt_dir, RunLog *log) {
    RunState s = {run_command_ranks(cmd), 0, 0, 0, newest_checkpoint(ckpt_dir)};
    if (s.before.step >= 0 && !run_command_get(cmd, "resume"))
        run_command_set(cmd, "resume", "latest"); /* a requeued or repeated job continues */
    char *text = run_command_text(cmd), at[64];
    run_log_event(log, "start", json_pack("{s:i, s:o, s:s}", "ranks", s.ranks, "from_step",
                                          step_json(s.before.step), "command", text),
                  "%d ranks, checkpoint %s: %s", s.ranks, step_text(s.before.step, at, sizeof at), text);
    free(text);
    for (int attempt = 0;; attempt++) {
        double started = wall_now();
        ChildResult r = run_child(cmd->words, attempt, attempt > 0, s.ranks > 0);
        if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) {
            run_log_event(log, "done",
                          json_pack("{s:i, s:i, s:f}", "restarts", attempt, "ranks", s.ranks, "lost_s", s.lost_total),
                          "the job finished after %d restart%s on %d ranks; %.1f s of work lost to failures", attempt,
                          attempt == 1 ? "" : "s", s.ranks, s.lost_total);
            return 0;
        }
        CkptPoint now = newest_checkpoint(ckpt_dir);
        if (r.stop_signal) return stop_requested(&r, now, log);
        if (preempted(r.status) && now.step > s.before.step) {
            run_log_event(log, "preempted", json_pack("{s:i, s:i, s:o}", "attempt", attempt, "exit_code",
                                                      PREEMPT_EXIT_CODE, "ckpt_step", step_json(now.step)),
                          "attempt %d was preempted (exit %d) and checkpointed at %s: resuming", attempt,
                          PREEMPT_EXIT_CODE, step_text(now.step, at, sizeof at));
            s.no_progress = 0;
        } else {
            int status = after_failure(cmd, o, &s, attempt, &r, now, started, log);
            if (status >= 0) return status;
        }
        prepare_restart(cmd, o, &s, attempt, now, log);
        int sig = run_pause(o->restart_delay);
        if (sig) {
            run_log_event(log, "interrupted", json_pack("{s:i}", "signal", sig), "stopped by signal %d before the "
                          "restart", sig);
            return 128 + sig;
        }
        s.before = now;
    }
}

int cmd_run(int argc, char **argv) {
    RunOptions o = {3, 1, 2, false, 1.0, ""};
    const OptionSpec specs[] = {
        {"max-restarts", OPT_INT, &o.max_restarts, 0, 1e6, "K", "restarts after failures before giving up", NULL, NULL},
        {"elastic", OPT_FLAG, &o.elastic, OPT_NO_RANGE, "", "continue on fewer processes when a rank cannot come back", NULL, NULL},
        {"min-ranks", OPT_INT, &o.min_ranks, 1, 1 << 20, "N", "--elastic: never fewer processes than this", NULL, NULL},
        {"shrink-after", OPT_INT, &o.shrink_after, 1, 1e6, "N",
         "--elastic: failures in a row without a new checkpoint before shrinking", NULL, NULL},
        {"restart-delay", OPT_DOUBLE, &o.restart_delay, 0, 86400, "SECONDS", "wait before each restart", NULL, NULL},
        {"log", OPT_STRING, &o.log, OPT_NO_RANGE, "FILE", "append every event as a JSON line to FILE", NULL, NULL},
    };
    int split = 1;
    while (split < argc && strcmp(argv[split], "--") != 0) split++;
    if (!options_parse(specs, (int)(sizeof specs / sizeof specs[0]), split, argv,
                       "usage: batchscale run [options] -- mpirun -np N ... batchscale train ... --ckpt-dir DIR "
                       "--ckpt-every S\n\nRuns a training job and restarts it from its newest complete checkpoint "
                       "when it fails\n(a rank killed or stalled), optionally on fewer processes (--elastic)."))
        return 0;
    int before = bs_die_status(BS_EXIT_USAGE); /* until the job starts: a command that cannot work as given */
    if (split + 1 >= argc)
        bs_die("run: give the job's command after --, e.g. batchscale run -- mpirun -np 2 batchscale train "
               "--ckpt-dir DIR --ckpt-every 50 ...");
    RunCommand cmd;
    run_command_init(&cmd, argc - split - 1, argv + split + 1);
    char ckpt_dir[4096];
    check_command(&cmd, &o, ckpt_dir, sizeof ckpt_dir);
    bs_die_status(before);
    run_signals_block();
    RunLog log;
    run_log_open(&log, o.log);
    int status = supervise(&cmd, &o, ckpt_dir, &log);
    run_log_close(&log);
    run_command_free(&cmd);
    return status;
}
