/* device.c: the device seam's entry points: open the implementation asked
 * for, then pass each call through its table (device_impl.h). */
#include "device/device.h"

#include <stdarg.h>
#include <stdio.h>

#include "device/device_impl.h"

Device *device_open(DeviceKind kind, const DeviceOptions *options, char *reason, size_t reason_size) {
    if (kind == DEVICE_SIM) return device_sim_open(options, reason, reason_size);
#ifdef BS_HAVE_CUDA
    return device_cuda_open(options ? options->gpu : 0, reason, reason_size);
#else
    snprintf(reason, reason_size, "CUDA is not built into this batchscale (rebuild with nvcc present or -DBS_CUDA=ON)");
    return NULL;
#endif
}

const char *device_cuda_build(void) {
#ifdef BS_HAVE_CUDA
    return device_cuda_build_info();
#else
    return "not built in";
#endif
}

int device_fail(Device *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->error, sizeof d->error, fmt, ap);
    va_end(ap);
    return -1;
}

void device_close(Device *d) {
    if (d) d->ops->close(d);
}
const char *device_name(const Device *d) { return d->ops->name; }
const char *device_error(const Device *d) { return d->error; }
const DeviceInfo *device_info(const Device *d) { return &d->info; }
void *device_alloc(Device *d, size_t n) { return d->ops->alloc(d, n); }
void device_free(Device *d, void *p) {
    if (p) d->ops->free(d, p);
}
DeviceStream *device_stream_create(Device *d) { return d->ops->stream_create(d); }
void device_stream_destroy(Device *d, DeviceStream *s) {
    if (s) d->ops->stream_destroy(d, s);
}
DeviceEvent *device_event_create(Device *d) { return d->ops->event_create(d); }
void device_event_destroy(Device *d, DeviceEvent *e) {
    if (e) d->ops->event_destroy(d, e);
}
int device_copy(Device *d, DeviceStream *s, void *dst, const void *src, size_t n, DeviceCopyKind kind) {
    if ((unsigned)kind <= COPY_DEVICE_TO_DEVICE) d->copied[kind] += n;
    return d->ops->copy(d, s, dst, src, n, kind);
}
uint64_t device_bytes_copied(const Device *d, DeviceCopyKind kind) {
    return (unsigned)kind <= COPY_DEVICE_TO_DEVICE ? d->copied[kind] : 0;
}
int device_zero(Device *d, DeviceStream *s, void *p, size_t n) { return d->ops->zero(d, s, p, n); }
int device_event_record(Device *d, DeviceStream *s, DeviceEvent *e) { return d->ops->event_record(d, s, e); }
int device_stream_wait(Device *d, DeviceStream *s, DeviceEvent *e) { return d->ops->stream_wait(d, s, e); }
int device_launch(Device *d, DeviceStream *s, const DeviceCall *call) {
    if ((unsigned)call->kernel >= DK_COUNT) return device_fail(d, "unknown device kernel %d", (int)call->kernel);
    return d->ops->launch(d, s, call);
}
int device_stream_sync(Device *d, DeviceStream *s) { return d->ops->stream_sync(d, s); }
int device_sync(Device *d) { return d->ops->sync(d); }
void *device_host_alloc(Device *d, size_t n) { return d->ops->host_alloc(d, n); }
void device_host_free(Device *d, void *p) {
    if (p) d->ops->host_free(d, p);
}
void *device_native_stream(Device *d, DeviceStream *s) { return d->ops->native_stream(d, s); }
int device_event_done(Device *d, DeviceEvent *e) { return e ? d->ops->event_done(d, e) : 1; }
int device_gpu_count(Device *d) { return d->ops->gpu_count(d); }
size_t device_memory_peak(const Device *d) { return d->memory_peak; }
