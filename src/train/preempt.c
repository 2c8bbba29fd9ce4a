/* preempt.c: the stop flag set by SIGTERM, SIGUSR1 and SIGINT (see preempt.h). */
#include "train/preempt.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t received; /* the first stop signal, 0 until one comes */

static const int STOP_SIGNALS[] = {SIGTERM, SIGUSR1, SIGINT};
#define NUM_STOP_SIGNALS (int)(sizeof STOP_SIGNALS / sizeof STOP_SIGNALS[0])

static void on_stop_signal(int sig) {
    if (received && sig == SIGINT) { /* Ctrl-C twice: the user does not want to wait */
        static const char msg[] = "\nsecond SIGINT: exiting at once, no checkpoint\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        _exit(128 + SIGINT);
    }
    if (!received) received = sig;
}

static void set_action(void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a blocking read or MPI wait carries on; the flag is read between steps */
    for (int i = 0; i < NUM_STOP_SIGNALS; i++) sigaction(STOP_SIGNALS[i], &sa, NULL);
}

void preempt_catch(void) {
    received = 0;
    set_action(on_stop_signal);
}

void preempt_release(void) { set_action(SIG_DFL); }

int preempt_signal(void) { return received; }

const char *preempt_signal_name(int sig, char *buf, unsigned n) {
    const char *name = sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT" : NULL;
    if (name) snprintf(buf, n, "%s", name);
    else snprintf(buf, n, "signal %d", sig);
    return buf;
}
