/* trace.c: interval recording and Chrome trace-event JSON (see trace.h). */
#include "core/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void trace_init(Trace *t, bool enabled) {
    memset(t, 0, sizeof *t);
    t->enabled = enabled;
}

void trace_free(Trace *t) {
    free(t->events);
    memset(t, 0, sizeof *t);
}

void trace_add(Trace *t, const char *name, const char *category, double start, double end) {
    if (!t || !t->enabled) return;
    if (t->count == t->capacity) {
        t->capacity = t->capacity ? 2 * t->capacity : 1024;
        TraceEvent *grown = realloc(t->events, t->capacity * sizeof(TraceEvent));
        if (!grown) bs_die("out of memory recording the trace");
        t->events = grown;
    }
    TraceEvent *e = &t->events[t->count++];
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->category, sizeof e->category, "%s", category);
    e->start = start;
    e->end = end;
}

char *trace_events_json(const Trace *t, int rank, double origin) {
    size_t cap = 128 + t->count * 160, len = 0;
    char *out = bs_malloc(cap);
    len += (size_t)snprintf(out + len, cap - len,
                            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                            rank, rank, rank);
    for (size_t i = 0; i < t->count; i++) {
        const TraceEvent *e = &t->events[i];
        len += (size_t)snprintf(out + len, cap - len,
                                ",{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f}",
                                e->name, e->category, rank, rank, (e->start - origin) * 1e6, (e->end - e->start) * 1e6);
    }
    return out;
}
