/* straggler.c: median and straggler (see straggler.h). */
#include "train/straggler.h"

#include <string.h>

double straggler_median(const double *times, int n, double *scratch) {
    memcpy(scratch, times, sizeof(double) * (size_t)n);
    for (int i = 1; i < n; i++) /* insertion sort: worlds here are small */
        for (int j = i; j > 0 && scratch[j] < scratch[j - 1]; j--) {
            double t = scratch[j];
            scratch[j] = scratch[j - 1];
            scratch[j - 1] = t;
        }
    return scratch[(n - 1) / 2];
}

int straggler_find(const double *times, int n, double median, double threshold) {
    int slowest = -1;
    for (int i = 0; i < n; i++)
        if (times[i] > median * (1 + threshold) && (slowest < 0 || times[i] > times[slowest])) slowest = i;
    return slowest;
}
