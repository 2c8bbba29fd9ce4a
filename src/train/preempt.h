/* preempt.h: stopping cleanly when the job is asked to. A scheduler warns a
 * job before it kills it: SLURM sends SIGTERM (or, with --signal=USR1@120,
 * SIGUSR1 two minutes ahead), Kubernetes SIGTERM and then SIGKILL after the
 * pod's terminationGracePeriodSeconds, a terminal SIGINT. Each of them only
 * raises a flag here; the trainer carries the flag in the step's one
 * all-gather (step_stats.h), so every rank sees the same "stop" after the
 * same step whichever ranks were signalled, finishes that step, writes a
 * checkpoint, prints one line and exits with PREEMPT_EXIT_CODE, from which
 * `batchscale run` resumes. A second SIGINT while a stop is pending exits at
 * once (status 130) without a checkpoint.
 *
 * The flag is the one piece of process-wide state in the project: a signal
 * handler can reach nothing else. Deliberately not here: deciding when to
 * stop (the trainer), restarting (cli/cmd_run.c). */
#ifndef BS_TRAIN_PREEMPT_H
#define BS_TRAIN_PREEMPT_H

/* EX_TEMPFAIL of sysexits.h: "a temporary failure; the user is invited to
 * retry". Distinct from 0 (done), 1 (an error) and 128+N (killed by signal N). */
#define PREEMPT_EXIT_CODE 75

/* Catches SIGTERM, SIGUSR1 and SIGINT from now on. */
void preempt_catch(void);
/* Puts the default actions back (the job is over). */
void preempt_release(void);
/* The first of those signals received since preempt_catch, else 0. */
int preempt_signal(void);
/* "SIGTERM", "SIGUSR1", "SIGINT" or "signal N". */
const char *preempt_signal_name(int sig, char *buf, unsigned n);

#endif
