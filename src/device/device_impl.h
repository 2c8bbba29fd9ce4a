/* device_impl.h: what an implementation of the device seam provides (a
 * table of operations) and the state every device shares; read by device.c,
 * sim and cuda, never by the seam's users. */
#ifndef BS_DEVICE_DEVICE_IMPL_H
#define BS_DEVICE_DEVICE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;
    void (*close)(Device *d);
    void *(*alloc)(Device *d, size_t n);
    void (*free)(Device *d, void *p);
    DeviceStream *(*stream_create)(Device *d);
    void (*stream_destroy)(Device *d, DeviceStream *s);
    DeviceEvent *(*event_create)(Device *d);
    void (*event_destroy)(Device *d, DeviceEvent *e);
    int (*copy)(Device *d, DeviceStream *s, void *dst, const void *src, size_t n, DeviceCopyKind kind);
    int (*zero)(Device *d, DeviceStream *s, void *p, size_t n);
    int (*event_record)(Device *d, DeviceStream *s, DeviceEvent *e);
    int (*stream_wait)(Device *d, DeviceStream *s, DeviceEvent *e);
    int (*launch)(Device *d, DeviceStream *s, const DeviceCall *call);
    int (*stream_sync)(Device *d, DeviceStream *s);
    int (*sync)(Device *d);
    void *(*host_alloc)(Device *d, size_t n);
    void (*host_free)(Device *d, void *p);
    void *(*native_stream)(Device *d, DeviceStream *s);
    int (*event_done)(Device *d, DeviceEvent *e);
    int (*gpu_count)(Device *d);
    int (*capture_begin)(Device *d, DeviceStream *s);
    DeviceGraph *(*capture_end)(Device *d, DeviceStream *s);
    int (*graph_launch)(Device *d, DeviceStream *s, DeviceGraph *g);
    void (*graph_free)(Device *d, DeviceGraph *g);
} DeviceOps;

/* Every implementation's device begins with this. */
struct Device {
    const DeviceOps *ops;
    char error[256];
    uint64_t copied[3]; /* bytes queued by device_copy, per DeviceCopyKind (device_bytes_copied) */
    DeviceInfo info;    /* set when the device opens (device_info) */
    size_t memory_peak; /* the most device memory in use after an allocation (sim: its own count; cuda: cudaMemGetInfo) */
};

/* Sets d's reason (printf-style) and returns -1. */
int device_fail(Device *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

Device *device_sim_open(const DeviceOptions *options, char *reason, size_t reason_size);
#ifdef BS_HAVE_CUDA
Device *device_cuda_open(int gpu, char *reason, size_t reason_size);
const char *device_cuda_build_info(void);
/* graph_cuda.cu */
int cuda_capture_begin(Device *d, DeviceStream *s);
DeviceGraph *cuda_capture_end(Device *d, DeviceStream *s);
int cuda_graph_launch(Device *d, DeviceStream *s, DeviceGraph *g);
void cuda_graph_free(Device *d, DeviceGraph *g);
#endif

#ifdef __cplusplus
}
#endif

#endif
