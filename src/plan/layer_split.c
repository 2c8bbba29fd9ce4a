/* layer_split.c: a framework's fixed placement of layers on pipeline
 * stages (see layer_split.h). */
#include "plan/layer_split.h"

#include <stdio.h>

bool layer_split_even(const LayerSplit *s, int layers, int pp, int v, int *first, int *middle, int *last, char *why,
                      size_t n) {
    if (pp == 1) {
        *first = *middle = *last = layers;
        return true;
    }
    bool ends = s->first > 0 || s->last > 0;
    if (!ends) {
        if (layers % pp) {
            snprintf(why, n, "--layer-split even: %d layers do not divide into --pp %d stages: give --first-stage-layers and --last-stage-layers, or use --layer-split balanced",
                     layers, pp);
            return false;
        }
        *first = *middle = *last = layers / pp;
        if (v > 1 && *middle % v) {
            snprintf(why, n, "--layer-split even: %d layers per stage do not divide into --virtual-stages %d chunks", *middle, v);
            return false;
        }
        return true;
    }
    if (s->first <= 0 || s->last <= 0) {
        snprintf(why, n, "--layer-split even: give both --first-stage-layers and --last-stage-layers, or neither");
        return false;
    }
    int rest = layers - s->first - s->last, middle_stages = pp - 2;
    bool whole = rest >= 0 &&
                 (middle_stages == 0 ? rest == 0 : rest >= middle_stages && rest % middle_stages == 0);
    if (!whole) {
        snprintf(why, n, "--first-stage-layers %d and --last-stage-layers %d leave %d of the %d layers, which do not divide into the %d middle stages of --pp %d",
                 s->first, s->last, rest, layers, middle_stages, pp);
        return false;
    }
    *first = s->first;
    *last = s->last;
    *middle = middle_stages > 0 ? rest / middle_stages : 0;
    return true;
}
