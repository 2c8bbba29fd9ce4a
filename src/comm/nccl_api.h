/* nccl_api.h: the NCCL functions comm/ calls, loaded with dlopen when a
 * group creates its NCCL communicator, not linked: linking libnccl (and
 * relocating it at start-up) would cost every process, CPU runs included,
 * its memory and start-up time, as cuBLASLt's did (device/cuda/cublaslt_api.h).
 * A missing library is a reason, as a missing GPU is. BATCHSCALE_NCCL, when
 * set, names the library file to load instead (another NCCL build; the GPU
 * check names a file that is not there to see the missing library's line).
 * Only comm/ includes nccl.h (as only comm/ includes mpi.h). */
#ifndef BS_COMM_NCCL_API_H
#define BS_COMM_NCCL_API_H

#include <nccl.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/dynamic_library.h"

typedef struct {
    void *library;
    __typeof__(&ncclGetUniqueId) GetUniqueId;
    __typeof__(&ncclCommInitRank) CommInitRank;
    __typeof__(&ncclCommDestroy) CommDestroy;
    __typeof__(&ncclCommAbort) CommAbort;
    __typeof__(&ncclCommGetAsyncError) CommGetAsyncError;
    __typeof__(&ncclGetErrorString) GetErrorString;
    __typeof__(&ncclGetLastError) GetLastError;
    __typeof__(&ncclAllReduce) AllReduce;
    __typeof__(&ncclReduceScatter) ReduceScatter;
    __typeof__(&ncclAllGather) AllGather;
    __typeof__(&ncclBroadcast) Broadcast;
    __typeof__(&ncclSend) Send;
    __typeof__(&ncclRecv) Recv;
    __typeof__(&ncclGroupStart) GroupStart;
    __typeof__(&ncclGroupEnd) GroupEnd;
} NcclApi;

/* Opens the libnccl of the major version this was built with (or $BATCHSCALE_NCCL); false with the reason. */
static inline bool nccl_load(NcclApi *api, char *reason, size_t reason_size) {
#define BS_NCCL_STR2(x) #x
#define BS_NCCL_STR(x) BS_NCCL_STR2(x)
    const char *chosen = getenv("BATCHSCALE_NCCL");
    const char *name = chosen && chosen[0] ? chosen : "libnccl.so." BS_NCCL_STR(NCCL_MAJOR);
    if (!(api->library = dynamic_library_open(name, reason, reason_size))) return false;
#define BS_NCCL_SYMBOL(field)                                                                                 \
    if (!(*(void **)&api->field = dynamic_library_symbol(&api->library, name, "nccl" #field, reason, reason_size))) \
        return false;
    BS_NCCL_SYMBOL(GetUniqueId) BS_NCCL_SYMBOL(CommInitRank) BS_NCCL_SYMBOL(CommDestroy) BS_NCCL_SYMBOL(CommAbort)
    BS_NCCL_SYMBOL(CommGetAsyncError) BS_NCCL_SYMBOL(GetErrorString) BS_NCCL_SYMBOL(GetLastError)
    BS_NCCL_SYMBOL(AllReduce) BS_NCCL_SYMBOL(ReduceScatter) BS_NCCL_SYMBOL(AllGather) BS_NCCL_SYMBOL(Broadcast)
    BS_NCCL_SYMBOL(Send) BS_NCCL_SYMBOL(Recv) BS_NCCL_SYMBOL(GroupStart) BS_NCCL_SYMBOL(GroupEnd)
#undef BS_NCCL_SYMBOL
    return true;
}

#endif
