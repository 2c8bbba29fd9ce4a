/* classifier_sim.c: sim's fused classifier (DK_CLASSIFIER): each row's
 * online statistics in one read, its loss, then its gradient in place
 * (classifier_math.h), one row after another. */
#include <string.h>

#include "device/classifier_math.h"
#include "device/sim_kernels.h"

void sim_classifier(const XentArgs *a) {
    for (int i = 0; i < a->N; i++) {
        float *row = a->logits + (size_t)i * a->Vp;
        if (a->targets[i] < 0) { /* a masked target: no loss, no gradient */
            a->losses[i] = 0;
            if (a->dloss != 0) memset(row, 0, sizeof(float) * (size_t)a->Vp);
            continue;
        }
        const SoftmaxStat st = km_classifier_stat(a, i, 0, 1);
        a->losses[i] = km_xent_loss(st.s, row[a->targets[i]], st.m);
        if (a->dloss != 0) km_classifier_grad(a, i, st, 0, 1);
    }
}
