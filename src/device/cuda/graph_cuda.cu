/* graph_cuda.cu: the device seam's graphs on CUDA (device.h): stream capture
 * (global mode: a capture-unsafe call anywhere in the process fails rather
 * than being left out of the graph) into a cudaGraph_t, instantiated once and
 * launched on a stream. cuBLASLt's products are captured like any launch: the
 * workspace is the one allocated when the device opened, so nothing is
 * allocated during a capture. */
#include <cuda_runtime.h>
#include <stdlib.h>

#include "device/device_impl.h"

struct DeviceGraph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

static int graph_check(Device *d, cudaError_t e, const char *what) {
    return e == cudaSuccess ? 0 : device_fail(d, "cuda: %s: %s", what, cudaGetErrorString(e));
}

extern "C" int cuda_capture_begin(Device *d, DeviceStream *s) {
    return graph_check(d, cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeGlobal),
                       "cudaStreamBeginCapture");
}

extern "C" DeviceGraph *cuda_capture_end(Device *d, DeviceStream *s) {
    DeviceGraph *g = (DeviceGraph *)calloc(1, sizeof *g);
    cudaGraph_t graph = NULL;
    int rc = graph_check(d, cudaStreamEndCapture((cudaStream_t)s, &graph), "cudaStreamEndCapture");
    if (!rc && !g) rc = device_fail(d, "out of host memory");
    if (!rc) rc = graph_check(d, cudaGraphInstantiate(&g->exec, graph, 0), "cudaGraphInstantiate");
    if (rc) {
        if (graph) cudaGraphDestroy(graph);
        free(g);
        return NULL;
    }
    g->graph = graph;
    return g;
}

extern "C" int cuda_graph_launch(Device *d, DeviceStream *s, DeviceGraph *g) {
    return graph_check(d, cudaGraphLaunch(g->exec, (cudaStream_t)s), "cudaGraphLaunch");
}

extern "C" void cuda_graph_free(Device *d, DeviceGraph *g) {
    graph_check(d, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    graph_check(d, cudaGraphExecDestroy(g->exec), "cudaGraphExecDestroy");
    graph_check(d, cudaGraphDestroy(g->graph), "cudaGraphDestroy");
    free(g);
}
