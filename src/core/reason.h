/* reason.h: a library's error names the quantities it is about, never a flag.
 *
 * A library says why something cannot work in its own words ("the
 * tensor-parallel degree 3 does not divide the 4 attention heads") and names
 * the quantities the reason is about as subject keys ("tp heads"). Only cli/
 * knows which command-line flag sets a quantity: it installs a namer, and a
 * reason made here ends with the flags the user gave, " (flags: --tp,
 * --heads)". Without a namer (a library's own tests, a quantity no flag sets)
 * the reason stands alone. Like error.h's reporter, the namer is one
 * process-wide slot: bs_die_about is called from deep inside a library and has
 * no other way to reach the command's flag table. */
#ifndef BS_CORE_REASON_H
#define BS_CORE_REASON_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

/* The flag that sets quantity `key` in this command, or NULL where none does. */
typedef const char *(*BsSubjectNamer)(const char *key, void *ctx);
void bs_set_subject_namer(BsSubjectNamer fn, void *ctx);

/* Writes the reason (printf-style) into why[why_size], followed by the flags of
 * the space-separated subject keys when a namer knows them. Returns false, so
 * a check can `return bs_reason(...)`. */
bool bs_reason(char *why, size_t why_size, const char *subjects, const char *fmt, ...) BS_PRINTF(4, 5);

/* bs_die with the reason and its subjects' flags, as bs_reason words them. */
BS_NORETURN void bs_die_about(const char *subjects, const char *fmt, ...) BS_PRINTF(2, 3);

#endif
