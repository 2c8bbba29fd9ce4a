/* gpt_device_stage.h: what a pipeline stage adds to model/gpt_device.c's
 * state (internal to it): activation sets beyond the model's own (a
 * schedule keeps several micro-batches' activations alive; set 0 is the
 * allocation gpt_device_create made, sets 1.. are made at first use and kept)
 * and, on a last stage without the embeddings, its copy of the tied output
 * weights and their gradient (as gpt.h's head_wte and head_dwte), in bf16
 * mode with the copy's bf16 bits (the head's product operand, as the
 * model's params_bf16 for its own weights). */
#ifndef BS_MODEL_GPT_DEVICE_STAGE_H
#define BS_MODEL_GPT_DEVICE_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

typedef struct {
    Device *dev;
    float **acts;     /* per set: its activations (set 0: the model's own) */
    int32_t **tokens; /* per set: its inputs, targets and document starts */
    int num_sets;
    float *head_wte, *head_dwte; /* last stage without the embeddings (else NULL) */
    uint16_t *head_wte_bf16;     /* bf16 mode on such a stage: head_wte rounded (else NULL) */
    /* recorded on the compute stream before a set's tokens are replaced: a
     * backward queued earlier on the set may not have read them yet */
    DeviceEvent *tokens_free;
} GPTDeviceStage;

/* The event above (s->dev set first), -1 with the reason in device_error. */
int gpt_device_stage_open(GPTDeviceStage *s);
/* The copy stream's work queued from now on waits for the compute stream's so far. */
int gpt_device_stage_tokens_wait(GPTDeviceStage *s, DeviceStream *compute, DeviceStream *copy);
/* The head's copy of the tied weights (wte_floats each), -1 with the reason in device_error. */
int gpt_device_stage_open_head(GPTDeviceStage *s, Device *dev, size_t wte_floats);
/* bf16 mode: room for head_wte_bf16 where the stage has the head's copy; -1 with the reason in device_error. */
int gpt_device_stage_open_head_bf16(GPTDeviceStage *s, size_t wte_floats);
/* Set `set`'s buffers (*acts of acts_floats, *tokens of token_count), made
 * when first asked for; set 0 is acts0 / tokens0. -1 when the device has no room. */
int gpt_device_stage_set(GPTDeviceStage *s, int set, float *acts0, int32_t *tokens0, size_t acts_floats,
                         size_t token_count, float **acts, int32_t **tokens);
/* The model's own set-0 tokens (the one to free), or `current` when no set was made. */
int32_t *gpt_device_stage_own_tokens(const GPTDeviceStage *s, int32_t *current);
/* Frees the sets it made and the head's buffers. */
void gpt_device_stage_close(GPTDeviceStage *s);

#endif
