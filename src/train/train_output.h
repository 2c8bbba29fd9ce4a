/* train_output.h: what a training job produces besides its steps: the
 * validation loss, text samples, the model and adapter files, the trace.
 * Each is a collective where it gathers (every rank calls it). */
#ifndef BS_TRAIN_TRAIN_OUTPUT_H
#define BS_TRAIN_TRAIN_OUTPUT_H

#include "train/trainer_state.h"

/* The mean validation loss over --val-batches batches (NaN: no validation data). */
double train_evaluate(Trainer *tr);
/* A sample from the model as it is, printed on rank 0 (with --sample-tokens and a tokenizer). */
void train_print_sample(Trainer *tr);
/* --save-model, --out, --save-adapters. */
void train_export_models(Trainer *tr);
/* --trace: every data-parallel rank's events into one file (rank 0). */
void train_write_trace(Trainer *tr, double origin);

#endif
