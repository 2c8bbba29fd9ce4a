/* progress.c: progress line (see progress.h). */
#include "train/progress.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Started by an MPI launcher: OpenMPI's mpirun, or a PMI one (MPICH's
 * Hydra, srun). Not PMIX_RANK: OpenMPI sets it in a process of its own too
 * (a singleton, no mpirun). */
static bool under_mpi_launcher(void) { return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_RANK"); }

/* The parent process's descriptor fd is a terminal: a path under /dev/pts
 * or a /dev/tty* (read from /proc; false where /proc cannot tell). */
static bool parent_fd_is_terminal(int fd) {
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/%ld/fd/%d", (long)getppid(), fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return false;
    target[n] = '\0';
    return strncmp(target, "/dev/pts/", 9) == 0 || strncmp(target, "/dev/tty", 8) == 0;
}

/* Whether the reader of `out` is a terminal. OpenMPI gives every rank a
 * pseudo-terminal as its standard output whatever mpirun's own output is
 * (`mpirun ... > log` still shows isatty true in the rank), so under a
 * launcher the terminal must be the launcher's too: the parent's descriptor
 * (mpirun itself for ranks on mpirun's host; on other hosts the parent is a
 * daemon that is not on a terminal, so those print plain lines). TERM=dumb
 * is no terminal for redrawing. */
static bool output_is_terminal(FILE *out) {
    int fd = fileno(out);
    if (!isatty(fd)) return false;
    const char *term = getenv("TERM");
    if (term && strcmp(term, "dumb") == 0) return false;
    return !under_mpi_launcher() || parent_fd_is_terminal(fd);
}

void progress_init(Progress *p, FILE *out, int every) {
    p->out = out;
    p->tty = output_is_terminal(out);
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
