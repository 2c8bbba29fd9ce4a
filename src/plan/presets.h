/* presets.h: named model shapes and accelerators, with their sources in
 * docs/PLANNER.md. Lookups are case-insensitive. */
#ifndef BS_PLAN_PRESETS_H
#define BS_PLAN_PRESETS_H

#include <stdbool.h>
#include <stddef.h>

#include "plan/hardware.h"
#include "plan/model.h"

typedef struct {
    ModelShape shape;
    double batch_tokens; /* global batch the model was (or is usually) trained with */
    double train_tokens; /* tokens it was trained on */
} ModelPreset;

bool model_preset(const char *name, ModelPreset *out);
bool hardware_preset(const char *name, Hardware *out);
/* Comma-separated names, for error messages and --help. */
void model_preset_names(char *buf, size_t n);
void hardware_preset_names(char *buf, size_t n);

#endif
