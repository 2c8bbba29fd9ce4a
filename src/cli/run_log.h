/* run_log.h: the launcher's record of a job: every event as one line on
 * stderr ("batchscale run: <time> <event>: ...") and, with --log FILE, as
 * one JSON object per line carrying "event", "time" (Unix seconds),
 * "elapsed_s" (since the launcher started) and the event's own fields.
 * Deliberately not here: what the events are (cmd_run.c decides). */
#ifndef BS_CLI_RUN_LOG_H
#define BS_CLI_RUN_LOG_H

#include <jansson.h>
#include <stdio.h>

#include "core/error.h"

typedef struct {
    FILE *json;   /* NULL without --log */
    const char *path;
    double start; /* monotonic seconds at open */
} RunLog;

/* path "" or NULL: lines on stderr only. The file is appended to. */
void run_log_open(RunLog *log, const char *path);
void run_log_close(RunLog *log);
/* Logs one event: `fields` (a JSON object; consumed) to the file, the
 * formatted message to stderr. */
void run_log_event(RunLog *log, const char *event, json_t *fields, const char *fmt, ...) BS_PRINTF(4, 5);

#endif
