/* error.h: fatal errors and warnings with one clear line each.
 *
 * Every message is prefixed "batchscale: " and, inside an MPI job, with the
 * rank (read from the launcher's environment, so no state is kept here).
 * bs_die exits with status 1; the comm layer registers an atexit hook that
 * aborts the whole MPI job, so one rank's error never leaves others hanging.
 * This file does not know about MPI. */
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

BS_NORETURN void bs_die(const char *fmt, ...) BS_PRINTF(1, 2);
void bs_warn(const char *fmt, ...) BS_PRINTF(1, 2);
/* Prints an error line without exiting (for callers that end the job otherwise). */
void bs_error(const char *fmt, ...) BS_PRINTF(1, 2);

/* malloc/calloc that die with the requested size on failure. */
void *bs_malloc(size_t bytes);
void *bs_calloc(size_t count, size_t size);

#endif
