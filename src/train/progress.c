/* progress.c: progress line (see progress.h). */
#include "train/progress.h"

#include <stdarg.h>
#include <unistd.h>

void progress_init(Progress *p, FILE *out, int every) {
    p->out = out;
    p->tty = isatty(fileno(out));
    p->open_line = false;
    p->every = every > 0 ? every : 1;
}

void progress_format_eta(double s, char *buf, size_t n) {
    if (s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
    else snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

void progress_show(Progress *p, const char *fmt, ...) {
    if (p->tty) fputs("\r\033[K", p->out);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    if (p->tty) p->open_line = true;
    else fputc('\n', p->out);
    fflush(p->out);
}

void progress_step(Progress *p, long step, long total, double loss, double lr, double tokens_per_s, double ms,
                   double eta_s, const char *extra) {
    bool last = step == total;
    if (!p->tty && !last && step % p->every != 0 && step != 1) return;
    char eta[32];
    progress_format_eta(eta_s, eta, sizeof eta);
    progress_show(p, "step %5ld/%ld | loss %.4f | lr %.2e | %7.0f tok/s | %6.1f ms | ETA %s%s%s", step, total, loss,
                  lr, tokens_per_s, ms, eta, extra && *extra ? " | " : "", extra ? extra : "");
}

void progress_line(Progress *p, const char *fmt, ...) {
    if (p->open_line) fputc('\n', p->out);
    p->open_line = false;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    fputc('\n', p->out);
    fflush(p->out);
}

void progress_finish(Progress *p) {
    if (p->open_line) fputc('\n', p->out);
    p->open_line = false;
    fflush(p->out);
}
