/* error.h: fatal errors and warnings with one clear line each.
 *
 * Every message is prefixed "batchscale: " and, inside an MPI job, with the
 * rank (read from the launcher's environment).
 *
 * bs_die exits with the current fatal status: BS_EXIT_USAGE while a command
 * reads its flags and sets itself up (the command cannot work as given, and
 * `batchscale run` never retries it), BS_EXIT_ERROR otherwise. In a job of
 * many processes comm/ installs a reporter that decides who prints the line
 * (rank 0 alone when every rank fails alike, else the failing rank, named)
 * without MPI_Abort; a clean-up slot lets a writer remove what it left half
 * done (a checkpoint's temporary directory). These three are process-wide
 * state, like the preemption flag (train/preempt.h): bs_die, called from
 * anywhere, has no other way to reach them. This file does not know MPI. */
#ifndef BS_CORE_ERROR_H
#define BS_CORE_ERROR_H

#include <stddef.h>

#if defined(__GNUC__)
#define BS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define BS_NORETURN __attribute__((noreturn))
#else
#define BS_PRINTF(a, b)
#define BS_NORETURN
#endif

/* Rank of this process in the launcher's world, or -1 outside mpirun. */
int bs_launcher_rank(void);
int bs_launcher_size(void);

/* Exit statuses (README, Operations: "Exit statuses and errors under mpirun"); 75 is train/preempt.h's. */
#define BS_EXIT_ERROR 1 /* a failure while working: `batchscale run` restarts the job */
#define BS_EXIT_USAGE 2 /* a flag, a combination, the layout or an input cannot work: never retried */

/* The status bs_die exits with from now on; returns the previous one. */
int bs_die_status(int status);

/* In a job of many processes: prints the fatal message (or leaves it to
 * another rank) before bs_die exits with `status`; NULL: print it here. */
typedef void (*BsFatalReporter)(const char *msg, int status, void *ctx);
void bs_set_fatal_reporter(BsFatalReporter fn, void *ctx);
/* Run by bs_die before it reports (NULL: none); one slot. */
typedef void (*BsFatalCleanup)(void *ctx);
void bs_set_fatal_cleanup(BsFatalCleanup fn, void *ctx);
/* "batchscale: error: msg", with "[rank R] " when with_rank inside a job. */
void bs_print_error(const char *msg, int with_rank);

BS_NORETURN void bs_die(const char *fmt, ...) BS_PRINTF(1, 2);
void bs_warn(const char *fmt, ...) BS_PRINTF(1, 2);
/* Prints an error line without exiting (for callers that end the job otherwise). */
void bs_error(const char *fmt, ...) BS_PRINTF(1, 2);

/* malloc/calloc that die with the requested size on failure. */
void *bs_malloc(size_t bytes);
void *bs_calloc(size_t count, size_t size);

#endif
