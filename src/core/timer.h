/* timer.h: monotonic wall-clock seconds for step timing and traces. */
#ifndef BS_CORE_TIMER_H
#define BS_CORE_TIMER_H

#include <time.h>

static inline double bs_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
