/* device.h: the device seam: where the engine's buffers live and its kernels
 * run, behind one interface with two implementations.
 *
 * - cuda: cudart streams and events, the kernels of src/device/cuda/, and
 *   cuBLASLt products (built in when CMake finds nvcc: BS_CUDA).
 * - sim: the same seam on the host, for tests. Work queued on a stream runs
 *   only at a synchronisation, in a shuffled (seeded) order that keeps each
 *   stream's order and every event wait, and new allocations are filled with
 *   NaN (every byte 0xff), so a missing wait or a read of memory nobody wrote
 *   shows up as a wrong or NaN result on a CPU.
 *
 * Copies and launches are asynchronous on a stream; a host buffer given to a
 * copy must stay untouched until a synchronisation that covers it. Errors
 * come back as -1 (or NULL) with a one-line reason in device_error(); the
 * seam knows no flag names. */
#ifndef BS_DEVICE_DEVICE_H
#define BS_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "device/device_kernels.h"

typedef enum { DEVICE_CUDA, DEVICE_SIM } DeviceKind;

typedef struct {
    uint64_t seed;       /* sim: the seed of the order queued work runs in */
    size_t memory_limit; /* sim: the simulated device's memory in bytes (0: as much as the host gives) */
    int gpu;             /* cuda: which GPU, modulo the GPUs this process sees (the node-local rank as it is) */
} DeviceOptions;

typedef struct Device Device;
/* What a device is, for reports and the planner's calibration. */
typedef struct {
    char name[96];         /* cuda: the GPU's name; sim: "sim (the host)" */
    size_t memory_bytes;   /* cuda: the GPU's memory; sim: its limit, else 0 (the host's) */
    int multiprocessors;   /* cuda: streaming multiprocessors; sim: 0 */
} DeviceInfo;
typedef struct DeviceStream DeviceStream;
typedef struct DeviceEvent DeviceEvent;
typedef struct DeviceGraph DeviceGraph;

typedef enum { COPY_HOST_TO_DEVICE, COPY_DEVICE_TO_HOST, COPY_DEVICE_TO_DEVICE } DeviceCopyKind;

/* The device, or NULL with the reason in reason (cuda: not built in, no GPU). */
Device *device_open(DeviceKind kind, const DeviceOptions *options, char *reason, size_t reason_size);
void device_close(Device *d);
/* "cuda" or "sim" */
const char *device_name(const Device *d);
const DeviceInfo *device_info(const Device *d);
/* The last error's one-line reason ("" if none). */
const char *device_error(const Device *d);

/* n bytes of device memory (sim: filled with NaN), NULL with a reason when
 * the device has no room; free waits for all work queued on the device. */
void *device_alloc(Device *d, size_t n);
void device_free(Device *d, void *p);

DeviceStream *device_stream_create(Device *d);
void device_stream_destroy(Device *d, DeviceStream *s);
DeviceEvent *device_event_create(Device *d);
void device_event_destroy(Device *d, DeviceEvent *e);

int device_copy(Device *d, DeviceStream *s, void *dst, const void *src, size_t n, DeviceCopyKind kind);
/* The bytes device_copy queued of that kind since the device opened (what
 * crosses between host and device: tests and metrics count it). */
uint64_t device_bytes_copied(const Device *d, DeviceCopyKind kind);
/* n bytes of device memory at p set to 0 */
int device_zero(Device *d, DeviceStream *s, void *p, size_t n);
/* e completes when the work queued on s so far has run */
int device_event_record(Device *d, DeviceStream *s, DeviceEvent *e);
/* work queued on s after this waits for e's latest record (none: no wait) */
int device_stream_wait(Device *d, DeviceStream *s, DeviceEvent *e);
/* One of the engine's kernels (device_kernels.h) on s. */
int device_launch(Device *d, DeviceStream *s, const DeviceCall *call);
int device_stream_sync(Device *d, DeviceStream *s);
int device_sync(Device *d);

/* Host memory for staging copies (cuda: pinned, so copies run at full speed
 * and asynchronously; sim: plain), NULL with a reason; free waits for all work
 * queued on the device. */
void *device_host_alloc(Device *d, size_t n);
void device_host_free(Device *d, void *p);
/* For a library that queues its own work on a stream (NCCL, in comm/): the
 * stream's native handle (cuda: its cudaStream_t; sim: NULL). */
void *device_native_stream(Device *d, DeviceStream *s);
/* 1 when e's latest record has run (or e was never recorded), 0 while it is
 * pending, -1 on an error; never blocks (sim: runs the queued work first). */
int device_event_done(Device *d, DeviceEvent *e);
/* GPUs this process sees (sim: 0). */
int device_gpu_count(Device *d);
/* The most device memory in use since the device opened, in bytes, as it
 * stood after each allocation: sim, its count of its allocations; cuda, the
 * GPU's memory less its free memory (cudaMemGetInfo: the CUDA context,
 * cuBLASLt's workspaces and anything else on the GPU included). */
size_t device_memory_peak(const Device *d);

/* Graphs (cuda: stream capture into a CUDA graph). Between capture_begin and
 * capture_end the work queued on s, and on every stream that joins it by
 * waiting on an event recorded on s (or on a joined stream) inside the
 * capture, is recorded instead of run; each joined stream must be joined back
 * (s waits on an event recorded last on it) before the end. Inside a capture
 * nothing may synchronise, allocate, free, or wait on an event recorded
 * outside it: -1 with the reason. A launch replays the work exactly as
 * captured on s: each kernel's scalars and pointers as they were then, and a
 * copy's host memory read or written again at each replay (pinned memory
 * from device_host_alloc, which the host fills before launching). So any
 * value that changes between replays must live in device memory, refreshed
 * by a copy queued before the launch. */
int device_capture_begin(Device *d, DeviceStream *s);
/* The captured graph, or NULL with the reason (the capture ends either way). */
DeviceGraph *device_capture_end(Device *d, DeviceStream *s);
int device_graph_launch(Device *d, DeviceStream *s, DeviceGraph *g);
/* waits for all work queued on the device */
void device_graph_free(Device *d, DeviceGraph *g);

/* "built in (sm_80, sm_90a; CUDA 13.0)" or "not built in": --version's line. */
const char *device_cuda_build(void);

#endif
