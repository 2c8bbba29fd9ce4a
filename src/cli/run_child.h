/* run_child.h: runs one attempt of the launched command and waits for it,
 * passing SIGINT and SIGTERM on, with nothing but fork, exec and waitpid.
 *
 * The launcher blocks SIGINT, SIGTERM and SIGCHLD for its whole life
 * (run_signals_block) and takes them with sigwaitinfo/sigtimedwait, so it
 * keeps no state in signal handlers. A signal sent to the launcher alone
 * (kill, a batch scheduler) is forwarded to the child; a terminal's Ctrl-C
 * already reaches the child, which shares the launcher's process group, and
 * is not sent twice. Deliberately not here: deciding whether to restart. */
#ifndef BS_CLI_RUN_CHILD_H
#define BS_CLI_RUN_CHILD_H

#include <stdbool.h>

/* Blocks SIGINT, SIGTERM and SIGCHLD in the launcher (children get the
 * launcher's original mask back). */
void run_signals_block(void);

typedef struct {
    int status;       /* waitpid status */
    int stop_signal;  /* SIGINT or SIGTERM received while it ran, else 0 */
} ChildResult;

/* Runs words[0] (searched in PATH) with words as argv, with the environment
 * variable BATCHSCALE_RESTART set to `attempt` and, if clear_fault,
 * BATCHSCALE_CKPT_FAULT removed. Dies if the program cannot be started. */
ChildResult run_child(char *const *words, int attempt, bool clear_fault);

/* Waits `seconds`; returns the SIGINT or SIGTERM that cut the wait short, else 0. */
int run_pause(double seconds);

/* "exit status N" or "killed by signal N (NAME)". */
void run_describe_status(int status, char *out, unsigned n);

#endif
