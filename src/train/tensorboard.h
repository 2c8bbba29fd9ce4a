/* tensorboard.h: TensorBoard event files (--tensorboard DIR): scalars by
 * tag and step, as TensorFlow's summary writer records them.
 *
 * The file, DIR/events.out.tfevents.SECONDS.HOST.PID, is a TFRecord stream:
 * each record is a little-endian uint64 length, the masked CRC-32C of those
 * 8 bytes, the payload, and the payload's masked CRC-32C (core/crc32c.h).
 * Each payload is an `Event` protobuf (tensorflow/core/util/event.proto):
 * the first carries file_version "brain.Event:2", each one after it a
 * `Summary` of `Value`s with a tag and a simple_value (float).
 *
 * The protobufs are encoded by hand (protobuf's wire format: varint keys,
 * fixed64 doubles, fixed32 floats, length-delimited strings and messages):
 * three messages and six fields, fewer lines than the .proto file, the
 * generated protobuf-c code and the build step it would need. The test
 * (tests/test_ops_tensorboard.py) reads the files back with TensorBoard's
 * own reader, so Google's decoder checks this encoder. Rank 0 writes; what
 * is not written when a run dies is at most the last step's record. */
#ifndef BS_TRAIN_TENSORBOARD_H
#define BS_TRAIN_TENSORBOARD_H

#include <stddef.h>
#include <stdio.h>

#include "core/crc32c.h"

typedef struct {
    FILE *file;
    Crc32cTable crc;
    unsigned char *buf; /* the Summary being built: values added since the last flush */
    size_t len, cap;
    long step;
} TensorBoard;

/* Creates DIR and a new event file in it (dies with one line if it cannot). */
void tensorboard_open(TensorBoard *tb, const char *dir);
/* Starts the values of step `step`. */
void tensorboard_begin(TensorBoard *tb, long step);
/* One scalar of the current step (a non-finite value is skipped). */
void tensorboard_scalar(TensorBoard *tb, const char *tag, double value);
/* Writes the current step's Event (with the wall time) and flushes the file. */
void tensorboard_end(TensorBoard *tb);
void tensorboard_close(TensorBoard *tb);

#endif
