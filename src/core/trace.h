/* trace.h: a timeline of named intervals (forward, backward, each
 * collective, optimizer) written as Chrome trace-event JSON, which Perfetto
 * and chrome://tracing open. One Trace per process; the trainer gathers the
 * ranks' events into one file with one track per rank. Recording is off
 * unless enabled, and then costs one array append per interval. */
#ifndef BS_CORE_TRACE_H
#define BS_CORE_TRACE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char name[32];
    char category[12];
    double start, end; /* seconds, bs_now() clock */
} TraceEvent;

typedef struct Trace {
    bool enabled;
    TraceEvent *events;
    size_t count, capacity;
} Trace;

void trace_init(Trace *t, bool enabled);
void trace_free(Trace *t);
void trace_add(Trace *t, const char *name, const char *category, double start, double end);
/* The events as comma-separated JSON objects with pid = tid = rank and
 * timestamps in microseconds from `origin` (caller frees). */
char *trace_events_json(const Trace *t, int rank, double origin);

#endif
