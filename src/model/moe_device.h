/* moe_device.h: the MoE layers of a GPT on a device (model/moe.h's MLP,
 * dropless; expert parallelism through moe_device_exchange.h): the router, dispatch and combine through the
 * DK_MOE_* kernels (device/moe_math.h), each expert's MLP through the
 * device's products and GELU over its rows, the losses' gradients from the
 * micro-step's statistics, which stay on the device for backward and cross
 * to the host as one small copy per layer (MoeStats: the trainer's aux and z
 * losses, loads, bias update). gpt_device.c calls it for the layers with the
 * MoE MLP (gpt_layer_is_moe); the parameters are the flat layout's router
 * and experts tensors. A forward syncs its stream once, for the experts'
 * row counts (the products' shapes). Errors: -1 with device_error. */
#ifndef BS_MODEL_MOE_DEVICE_H
#define BS_MODEL_MOE_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"
#include "comm/device_comm.h"
#include "device/device.h"
#include "model/gpt.h"

typedef struct MoeDevice MoeDevice;

/* Why cfg's MoE layers do not run on a device (capacity dropping), NULL when they do. */
const char *moe_device_unsupported(const GPTConfig *cfg);
/* The MoE layers of cfg for rows tokens per micro-batch; NULL (device_error) when the device has no room. */
MoeDevice *moe_device_create(Device *dev, const GPTConfig *cfg, size_t rows);
void moe_device_free(MoeDevice *m);
/* The selection biases (layers x E, gpt.h's moe_bias) to the device on s
 * (bias untouched until s syncs): before a step and before an evaluation
 * (the bias update changes them after each step). */
int moe_device_set_bias(MoeDevice *m, DeviceStream *s, const float *bias);
/* A step begins: the losses' weight (1 / micro-steps) is set and the step's
 * statistics zeroed. group
 * (NULL or one rank: none): the data-parallel ranks each training forward's
 * statistics are summed over (one all-reduce of MoeStats per layer, on the
 * host, as gpt.h's moe_dp), so the losses are over the micro-step's
 * data-parallel batch. */
void moe_device_begin_step(MoeDevice *m, double loss_weight, Comm *group);
/* Expert parallelism (gpt_ep_size(cfg) > 1, before the first forward): this
 * rank computes its experts (cfg's shard) for the group's rows, exchanged
 * over ep_group (the counts, on the host) and rows (the rows, on the device). */
void moe_device_set_expert_group(MoeDevice *m, Comm *ep_group, DeviceComm *rows);
/* Whether the next forwards train (their statistics summed and kept) or evaluate. */
void moe_device_set_training(MoeDevice *m, bool training);
/* out (N,C) = moe(x (N,C)) of layer l, its statistics kept for backward and copied to the host. */
int moe_device_forward(MoeDevice *m, DeviceStream *s, int l, float *out, const float *x, const float *router_w,
                       const float *experts);
/* dx (N,C) written, drouter_w and dexperts += from dout (N,C), as moe_backward with the forward's statistics. */
int moe_device_backward(MoeDevice *m, DeviceStream *s, int l, float *dx, float *drouter_w, float *dexperts,
                        const float *dout, const float *x, const float *router_w, const float *experts);
/* After a training micro-step's sync: its statistics and weighted losses added to the step's. */
void moe_device_add_micro_step(MoeDevice *m);
/* The step's statistics of layer l (zero for a dense layer) and weighted losses, as gpt.h's moe_step, moe_aux, moe_z. */
const MoeStats *moe_device_step_stats(const MoeDevice *m, int l);
void moe_device_step_losses(const MoeDevice *m, double *aux, double *z);

#endif
