/* gpt_device_stage.c: a pipeline stage's activation sets and tied head weights on a device (gpt_device_stage.h). */
#include "model/gpt_device_stage.h"

#include <stdlib.h>

int gpt_device_stage_open(GPTDeviceStage *s) {
    s->tokens_free = device_event_create(s->dev);
    return s->tokens_free ? 0 : -1;
}

int gpt_device_stage_tokens_wait(GPTDeviceStage *s, DeviceStream *compute, DeviceStream *copy) {
    if (s->num_sets == 0) return 0; /* one set: each step waits for its own work before the next upload */
    if (device_event_record(s->dev, compute, s->tokens_free) != 0) return -1;
    return device_stream_wait(s->dev, copy, s->tokens_free);
}

int gpt_device_stage_open_head(GPTDeviceStage *s, Device *dev, size_t wte_floats) {
    s->dev = dev;
    s->head_wte = device_alloc(dev, wte_floats * sizeof(float));
    s->head_dwte = s->head_wte ? device_alloc(dev, wte_floats * sizeof(float)) : NULL;
    return s->head_dwte ? 0 : -1;
}

int gpt_device_stage_open_head_bf16(GPTDeviceStage *s, size_t wte_floats) {
    if (!s->head_wte || s->head_wte_bf16) return 0;
    s->head_wte_bf16 = device_alloc(s->dev, wte_floats * sizeof(uint16_t));
    return s->head_wte_bf16 ? 0 : -1;
}

/* Room for sets [0, n]: -1 without host memory. */
static int grow(GPTDeviceStage *s, int n) {
    float **acts = realloc(s->acts, sizeof *acts * (size_t)(n + 1));
    if (acts) s->acts = acts;
    int32_t **tokens = acts ? realloc(s->tokens, sizeof *tokens * (size_t)(n + 1)) : NULL;
    if (tokens) s->tokens = tokens;
    return tokens ? 0 : -1;
}

int gpt_device_stage_set(GPTDeviceStage *s, int set, float *acts0, int32_t *tokens0, size_t acts_floats,
                         size_t token_count, float **acts, int32_t **tokens) {
    if (s->num_sets == 0) {
        if (grow(s, 0) != 0) return -1;
        s->acts[0] = acts0;
        s->tokens[0] = tokens0;
        s->num_sets = 1;
    }
    while (s->num_sets <= set) {
        if (grow(s, s->num_sets) != 0) return -1;
        s->acts[s->num_sets] = device_alloc(s->dev, acts_floats * sizeof(float));
        s->tokens[s->num_sets] = s->acts[s->num_sets] ? device_alloc(s->dev, token_count * sizeof(int32_t)) : NULL;
        if (!s->tokens[s->num_sets]) {
            device_free(s->dev, s->acts[s->num_sets]);
            return -1;
        }
        s->num_sets++;
    }
    *acts = s->acts[set];
    *tokens = s->tokens[set];
    return 0;
}

int32_t *gpt_device_stage_own_tokens(const GPTDeviceStage *s, int32_t *current) {
    return s->num_sets ? s->tokens[0] : current;
}

void gpt_device_stage_close(GPTDeviceStage *s) {
    for (int i = 1; i < s->num_sets; i++) {
        device_free(s->dev, s->acts[i]);
        device_free(s->dev, s->tokens[i]);
    }
    free(s->acts);
    free(s->tokens);
    device_free(s->dev, s->head_wte);
    device_free(s->dev, s->head_dwte);
    device_free(s->dev, s->head_wte_bf16);
    if (s->tokens_free) device_event_destroy(s->dev, s->tokens_free);
}
