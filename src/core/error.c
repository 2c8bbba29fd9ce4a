/* error.c: one-line fatal errors and warnings (see error.h). */
#include "core/error.h"

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

static void vreport(const char *kind, const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    int rank = bs_launcher_rank();
    if (rank >= 0 && bs_launcher_size() > 1)
        fprintf(stderr, "batchscale: [rank %d] %s%s\n", rank, kind, msg);
    else
        fprintf(stderr, "batchscale: %s%s\n", kind, msg);
    fflush(stderr);
}

void bs_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("error: ", fmt, ap);
    va_end(ap);
    exit(1);
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
