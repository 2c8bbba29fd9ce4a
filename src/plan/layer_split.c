/* layer_split.c: a framework's fixed placement of layers on pipeline
 * stages (see layer_split.h). */
#include "plan/layer_split.h"

#include <stdio.h>

#include "core/reason.h"

bool layer_split_even(const LayerSplit *s, int layers, int pp, int v, int *first, int *middle, int *last, char *why,
                      size_t n) {
    if (pp == 1) {
        *first = *middle = *last = layers;
        return true;
    }
    bool ends = s->first > 0 || s->last > 0;
    if (!ends) {
        if (layers % pp) {
            return bs_reason(why, n, "layer_split pp first_stage_layers last_stage_layers", "an even layer split: %d layers do not divide into %d pipeline stages: give the first and last stages' layers, or split balanced",
                             layers, pp);
        }
        *first = *middle = *last = layers / pp;
        if (v > 1 && *middle % v) {
            return bs_reason(why, n, "layer_split virtual_stages", "an even layer split: %d layers per stage do not divide into %d virtual stages", *middle, v);
        }
        return true;
    }
    if (s->first <= 0 || s->last <= 0) {
        return bs_reason(why, n, "layer_split first_stage_layers last_stage_layers", "an even layer split: give both the first and the last stage's layers, or neither");
    }
    int rest = layers - s->first - s->last, middle_stages = pp - 2;
    bool whole = rest >= 0 &&
                 (middle_stages == 0 ? rest == 0 : rest >= middle_stages && rest % middle_stages == 0);
    if (!whole) {
        return bs_reason(why, n, "first_stage_layers last_stage_layers pp", "%d first-stage and %d last-stage layers leave %d of the %d layers, which do not divide into the %d middle stages of %d",
                         s->first, s->last, rest, layers, middle_stages, pp);
    }
    *first = s->first;
    *last = s->last;
    *middle = middle_stages > 0 ? rest / middle_stages : 0;
    return true;
}
