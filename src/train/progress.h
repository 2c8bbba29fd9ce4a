/* progress.h: the live progress line (step, loss, lr, tokens/s, ms/step, ETA).
 * On a terminal it is redrawn in place; otherwise one line is printed every
 * `every` steps so logs stay readable. */
#ifndef BS_TRAIN_PROGRESS_H
#define BS_TRAIN_PROGRESS_H

#include <stdbool.h>

typedef struct {
    bool tty;
    bool open_line; /* a redrawn line is on screen and needs a newline first */
    int every;
} Progress;

void progress_init(Progress *p, int every);
void progress_step(Progress *p, long step, long total, double loss, double lr, double tokens_per_s, double ms,
                   double eta_s, const char *extra);
/* Prints a whole line (evaluation, sample, checkpoint) without breaking the bar. */
void progress_line(Progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void progress_finish(Progress *p);

#endif
