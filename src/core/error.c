/* error.c: one-line fatal errors and warnings (see error.h). */
#define _GNU_SOURCE /* a recursive mutex: a clean-up that fails dies inside bs_die */
#include "core/error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int env_int(const char *const *names, int fallback) {
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return fallback;
}

int bs_launcher_rank(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", NULL};
    return env_int(names, -1);
}

int bs_launcher_size(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
    return env_int(names, 1);
}

static void print_line(const char *kind, const char *msg, int with_rank) {
    int rank = bs_launcher_rank();
    if (with_rank && rank >= 0 && bs_launcher_size() > 1)
        fprintf(stderr, "batchscale: [rank %d] %s%s\n", rank, kind, msg);
    else
        fprintf(stderr, "batchscale: %s%s\n", kind, msg);
    fflush(stderr);
}

static void vreport(const char *kind, const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    print_line(kind, msg, 1);
}

void bs_print_error(const char *msg, int with_rank) { print_line("error: ", msg, with_rank); }

/* What bs_die does besides printing (see error.h). The lock is never
 * released by a dying thread: another thread's error waits for the exit. */
static struct {
    pthread_mutex_t lock;
    int status;
    BsFatalReporter reporter;
    void *reporter_ctx;
    BsFatalCleanup cleanup;
    void *cleanup_ctx;
} fatal = {PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP, BS_EXIT_ERROR, NULL, NULL, NULL, NULL};

int bs_die_status(int status) {
    pthread_mutex_lock(&fatal.lock);
    int before = fatal.status;
    fatal.status = status;
    pthread_mutex_unlock(&fatal.lock);
    return before;
}

void bs_set_fatal_reporter(BsFatalReporter fn, void *ctx) {
    pthread_mutex_lock(&fatal.lock);
    fatal.reporter = fn;
    fatal.reporter_ctx = ctx;
    pthread_mutex_unlock(&fatal.lock);
}

void bs_set_fatal_cleanup(BsFatalCleanup fn, void *ctx) {
    pthread_mutex_lock(&fatal.lock);
    fatal.cleanup = fn;
    fatal.cleanup_ctx = ctx;
    pthread_mutex_unlock(&fatal.lock);
}

void bs_die(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&fatal.lock);
    BsFatalCleanup cleanup = fatal.cleanup;
    fatal.cleanup = NULL; /* a failure inside the clean-up does not run it again */
    if (cleanup) cleanup(fatal.cleanup_ctx);
    if (fatal.reporter) fatal.reporter(msg, fatal.status, fatal.reporter_ctx);
    else bs_print_error(msg, 1);
    exit(fatal.status);
}

void bs_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("warning: ", fmt, ap);
    va_end(ap);
}

void bs_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("error: ", fmt, ap);
    va_end(ap);
}

void *bs_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) bs_die("out of memory allocating %zu bytes", bytes);
    return p;
}

void *bs_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) bs_die("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}
