/* reason.c: a reason in a library's words, with the flags cli/ names for its subjects (see reason.h). */
#include "core/reason.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static struct {
    pthread_mutex_t lock;
    BsSubjectNamer fn;
    void *ctx;
} namer = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL};

void bs_set_subject_namer(BsSubjectNamer fn, void *ctx) {
    pthread_mutex_lock(&namer.lock);
    namer.fn = fn;
    namer.ctx = ctx;
    pthread_mutex_unlock(&namer.lock);
}

/* Appends the flags of the subjects the namer knows, as reason.h shows; nothing for none. */
static void append_flags(char *out, size_t size, const char *subjects) {
    pthread_mutex_lock(&namer.lock);
    BsSubjectNamer fn = namer.fn;
    void *ctx = namer.ctx;
    pthread_mutex_unlock(&namer.lock);
    if (!fn || !subjects) return;
    size_t used = strlen(out);
    int named = 0;
    for (const char *p = subjects; *p;) {
        size_t len = strcspn(p, " ");
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(len < sizeof key ? len : sizeof key - 1), p);
        const char *flag = len ? fn(key, ctx) : NULL;
        if (flag && used < size)
            used += (size_t)snprintf(out + used, size - used, "%s%s", named++ ? ", " : " (flags: ", flag);
        p += len + (p[len] == ' ');
    }
    if (named && used < size) snprintf(out + used, size - used, ")");
}

static void vreason(char *why, size_t why_size, const char *subjects, const char *fmt, va_list ap) {
    if (!why || !why_size) return;
    vsnprintf(why, why_size, fmt, ap);
    append_flags(why, why_size, subjects);
}

bool bs_reason(char *why, size_t why_size, const char *subjects, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreason(why, why_size, subjects, fmt, ap);
    va_end(ap);
    return false;
}

void bs_die_about(const char *subjects, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vreason(msg, sizeof msg, subjects, fmt, ap);
    va_end(ap);
    bs_die("%s", msg);
}
