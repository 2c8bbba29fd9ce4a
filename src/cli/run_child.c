/* run_child.c: one attempt of the launched command (see run_child.h). */
#define _GNU_SOURCE
#include "cli/run_child.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/timer.h"

static sigset_t launcher_signals(bool with_child) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    if (with_child) sigaddset(&set, SIGCHLD);
    return set;
}

void run_signals_block(void) {
    signal(SIGCHLD, SIG_DFL); /* an inherited SIG_IGN would reap children behind our back */
    sigset_t set = launcher_signals(true);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) bs_die("cannot block signals: %s", strerror(errno));
}

/* In the forked child: its environment, its signal mask, then the program.
 * An exec failure goes back to the parent through the close-on-exec pipe. */
static void become_child(char *const *words, int attempt, bool clear_fault, int report_fd) {
    char value[16];
    snprintf(value, sizeof value, "%d", attempt);
    setenv("BATCHSCALE_RESTART", value, 1);
    if (clear_fault) unsetenv("BATCHSCALE_CKPT_FAULT");
    sigset_t set = launcher_signals(true);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    execvp(words[0], words);
    int err = errno;
    if (write(report_fd, &err, sizeof err) != (ssize_t)sizeof err) _exit(126);
    _exit(127);
}

/* The signal that passes `sig` on to the child (see run_child.h). */
static int forwarded(int sig, bool first, bool mpi_launcher) {
    return first && mpi_launcher && (sig == SIGTERM || sig == SIGINT) ? SIGUSR1 : sig;
}

ChildResult run_child(char *const *words, int attempt, bool clear_fault, bool mpi_launcher) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) bs_die("cannot create a pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) bs_die("cannot fork to run %s: %s", words[0], strerror(errno));
    if (pid == 0) become_child(words, attempt, clear_fault, report[1]);
    close(report[1]);
    int err = 0;
    ssize_t got = read(report[0], &err, sizeof err); /* 0: exec succeeded and closed the pipe */
    close(report[0]);
    ChildResult r = {0, 0, 0};
    if (got == (ssize_t)sizeof err) {
        waitpid(pid, &r.status, 0);
        bs_die("cannot run '%s': %s", words[0], strerror(err));
    }
    sigset_t set = launcher_signals(true);
    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(&set, &info);
        if (sig < 0) {
            if (errno == EINTR) continue;
            bs_die("waiting for %s failed: %s", words[0], strerror(errno));
        }
        if (sig == SIGCHLD) {
            if (waitpid(pid, &r.status, WNOHANG) == pid) return r;
            continue;
        }
        bool first = r.stop_signal == 0;
        if (first) {
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            r.stop_signal = sig;
            r.stop_time = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
        }
        if (info.si_code != SI_KERNEL) kill(pid, forwarded(sig, first, mpi_launcher)); /* a terminal's reached it */
    }
}

int run_pause(double seconds) {
    sigset_t set = launcher_signals(false);
    double end = bs_now() + seconds;
    for (double left = seconds;; left = end - bs_now()) { /* polls once even for 0 s: a pending signal counts */
        if (left < 0) left = 0;
        struct timespec wait = {(time_t)left, (long)((left - floor(left)) * 1e9)};
        int sig = sigtimedwait(&set, NULL, &wait);
        if (sig > 0) return sig;
        if (left == 0) return 0;
    }
}

void run_describe_status(int status, char *out, unsigned n) {
    if (WIFEXITED(status)) snprintf(out, n, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, n, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(out, n, "wait status %d", status);
}
