/* run_log.c: the launcher's event log (see run_log.h). */
#include "cli/run_log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#include "core/io.h"
#include "core/timer.h"

void run_log_open(RunLog *log, const char *path) {
    log->json = path && *path ? bs_fopen(path, "ab") : NULL;
    log->path = path;
    log->start = bs_now();
}

void run_log_close(RunLog *log) {
    if (log->json) bs_fclose_synced(log->json, log->path);
    log->json = NULL;
}

void run_log_event(RunLog *log, const char *event, json_t *fields, const char *fmt, ...) {
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    char when[32];
    struct tm local;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&wall.tv_sec, &local));
    char message[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fprintf(stderr, "batchscale run: %s %s: %s\n", when, event, message);
    fflush(stderr);
    if (log->json) {
        json_object_set_new(fields, "event", json_string(event));
        json_object_set_new(fields, "time", json_real((double)wall.tv_sec + 1e-9 * (double)wall.tv_nsec));
        json_object_set_new(fields, "elapsed_s", json_real(bs_now() - log->start));
        char *line = json_dumps(fields, JSON_COMPACT | JSON_SORT_KEYS);
        fprintf(log->json, "%s\n", line);
        fflush(log->json);
        free(line);
    }
    json_decref(fields);
}
