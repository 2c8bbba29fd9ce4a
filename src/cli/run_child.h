/* run_child.h: runs one attempt of the launched command and waits for it,
 * passing SIGINT, SIGTERM and SIGUSR1 on, with nothing but fork, exec and
 * waitpid.
 *
 * The launcher blocks SIGINT, SIGTERM, SIGUSR1 and SIGCHLD for its whole
 * life (run_signals_block) and takes them with sigwaitinfo/sigtimedwait, so
 * it keeps no state in signal handlers. A signal sent to the launcher alone
 * (kill, a batch scheduler) is forwarded to the child; a terminal's Ctrl-C
 * already reaches the child, which shares the launcher's process group, and
 * is not sent twice. An MPI launcher child (mpirun) gets the first SIGTERM
 * or SIGINT as SIGUSR1: OpenMPI's mpirun answers SIGTERM by killing its
 * ranks one second later (odls_base_sigkill_timeout), too soon for them to
 * finish a step and checkpoint, but forwards SIGUSR1 to every rank, which
 * the trainer takes as the same request to stop (train/preempt.h); a second
 * signal goes on as it is. Deliberately not here: deciding whether to
 * restart. */
#ifndef BS_CLI_RUN_CHILD_H
#define BS_CLI_RUN_CHILD_H

#include <stdbool.h>

/* Blocks SIGINT, SIGTERM, SIGUSR1 and SIGCHLD in the launcher (children get
 * the launcher's original mask back). */
void run_signals_block(void);

typedef struct {
    int status;       /* waitpid status */
    int stop_signal;  /* the first SIGINT, SIGTERM or SIGUSR1 received while it ran, else 0 */
    double stop_time; /* when it came (Unix time, as a file's modification time) */
} ChildResult;

/* Runs words[0] (searched in PATH) with words as argv, with the environment
 * variable BATCHSCALE_RESTART set to `attempt` and, if clear_fault,
 * BATCHSCALE_CKPT_FAULT removed; mpi_launcher: the child is mpirun (its
 * first SIGTERM or SIGINT is sent as SIGUSR1). Dies if the program cannot be
 * started. */
ChildResult run_child(char *const *words, int attempt, bool clear_fault, bool mpi_launcher);

/* Waits `seconds`; returns the SIGINT, SIGTERM or SIGUSR1 that cut the wait short, else 0. */
int run_pause(double seconds);

/* "exit status N" or "killed by signal N (NAME)". */
void run_describe_status(int status, char *out, unsigned n);

#endif
