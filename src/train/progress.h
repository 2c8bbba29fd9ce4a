/* progress.h: the live progress line: training's (step, loss, lr, tokens/s,
 * ms/step, ETA) and any other command's (prepare's bytes and tokens). On a
 * terminal the line is redrawn in place; otherwise each shown state is a line
 * of its own, and training prints one every `every` steps so logs stay
 * readable. Deciding how often to redraw by time is the caller's. */
#ifndef BS_TRAIN_PROGRESS_H
#define BS_TRAIN_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct {
    FILE *out;      /* stdout (training) or stderr (prepare) */
    bool tty;       /* out is a terminal: redraw in place */
    bool open_line; /* a redrawn line is on screen and needs a newline first */
    int every;
} Progress;

/* every: the steps between lines when out is not a terminal (training). */
void progress_init(Progress *p, FILE *out, int every);
/* Shows a status line (printf-style, no newline): redrawn in place on a
 * terminal, a line of its own otherwise. */
void progress_show(Progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void progress_step(Progress *p, long step, long total, double loss, double lr, double tokens_per_s, double ms,
                   double eta_s, const char *extra);
/* Prints a whole line (evaluation, sample, checkpoint) without breaking the bar. */
void progress_line(Progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void progress_finish(Progress *p);
/* s seconds as "1h02m" or "3m07s" (negative: 0). */
void progress_format_eta(double s, char *buf, size_t n);

#endif
