/* lr_schedule.c: warm-up then cosine decay (see lr_schedule.h). */
#include "optim/lr_schedule.h"

#include <math.h>

double lr_at(const LrSchedule *s, double pos) {
    if (s->warmup > 0 && pos <= s->warmup) return s->max_lr * pos / s->warmup;
    if (pos >= s->total || s->total <= s->warmup) return s->min_lr;
    double ratio = (pos - s->warmup) / (s->total - s->warmup);
    return s->min_lr + (s->max_lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * ratio));
}
