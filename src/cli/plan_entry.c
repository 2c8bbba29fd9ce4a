/* plan_entry.c: `batchscale plan` as a library call (plan_entry.h). */
#define _GNU_SOURCE
#include "cli/plan_entry.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"

typedef struct {
    char *data;
    size_t len, cap;
} Buffer;

static int append(Buffer *b, const char *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) return -1;
        b->data = grown, b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* The child: the command with its stdout and stderr on the pipes; never returns. */
static void run_child(int argc, const char *const *argv, int out_fd, int err_fd) {
    if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0) _exit(127);
    char **copy = calloc((size_t)argc + 1, sizeof *copy);
    for (int i = 0; copy && i < argc; i++) copy[i] = strdup(argv[i]);
    int status = copy ? cmd_plan(argc, copy) : 127;
    fflush(stdout);
    fflush(stderr);
    _exit(status);
}

/* Reads both pipes to their ends (poll: neither side can fill and block). */
static int drain(int out_fd, int err_fd, Buffer *out, Buffer *err) {
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    Buffer *into[2] = {out, err};
    int open_fds = 2;
    char chunk[65536];
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(fds[i].fd, chunk, sizeof chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else if (append(into[i], chunk, (size_t)n) < 0) {
                for (int j = 0; j < 2; j++) /* the child then ends on SIGPIPE */
                    if (fds[j].fd >= 0) close(fds[j].fd);
                return -1;
            }
        }
    }
    return 0;
}

int bs_plan_run(int argc, const char *const *argv, char **out, char **err) {
    int out_pipe[2], err_pipe[2];
    *out = *err = NULL;
    if (pipe(out_pipe) < 0) return -1;
    if (pipe(err_pipe) < 0) {
        close(out_pipe[0]), close(out_pipe[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(out_pipe[0]), close(out_pipe[1]), close(err_pipe[0]), close(err_pipe[1]);
        return -1;
    }
    if (pid == 0) {
        close(out_pipe[0]), close(err_pipe[0]);
        run_child(argc, argv, out_pipe[1], err_pipe[1]);
    }
    close(out_pipe[1]), close(err_pipe[1]);
    Buffer o = {0}, e = {0};
    int drained = drain(out_pipe[0], err_pipe[0], &o, &e);
    int wstatus;
    while (waitpid(pid, &wstatus, 0) < 0)
        if (errno != EINTR) return -1;
    *out = o.data ? o.data : strdup("");
    *err = e.data ? e.data : strdup("");
    if (drained < 0) return -1;
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

void bs_plan_free(char *text) { free(text); }
