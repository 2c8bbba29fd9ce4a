/* progress.c: progress line (see progress.h). */
#include "train/progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

void progress_init(Progress *p, int every) {
    p->tty = isatty(STDOUT_FILENO);
    p->open_line = false;
    p->every = every > 0 ? every : 1;
}

static void format_eta(double s, char *buf, size_t n) {
    if (s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
    else snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

void progress_step(Progress *p, long step, long total, double loss, double lr, double tokens_per_s, double ms,
                   double eta_s, const char *extra) {
    bool last = step == total;
    if (!p->tty && !last && step % p->every != 0 && step != 1) return;
    char eta[32];
    format_eta(eta_s, eta, sizeof eta);
    printf("%sstep %5ld/%ld | loss %.4f | lr %.2e | %7.0f tok/s | %6.1f ms | ETA %s%s%s", p->tty ? "\r\033[K" : "",
           step, total, loss, lr, tokens_per_s, ms, eta, extra && *extra ? " | " : "", extra ? extra : "");
    if (p->tty) {
        p->open_line = true;
    } else {
        printf("\n");
    }
    fflush(stdout);
}

void progress_line(Progress *p, const char *fmt, ...) {
    if (p->open_line) printf("\n");
    p->open_line = false;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

void progress_finish(Progress *p) {
    if (p->open_line) printf("\n");
    p->open_line = false;
    fflush(stdout);
}
