/* simdev/sim_proc.c: cuGetProcAddress, the runtime's way into the driver.
 *
 * A table of {base name, CUDA version that introduced the signature,
 * function, per-thread variant and its version}.  A lookup picks the row
 * with the newest version <= cudaVersion; with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM it returns that row's
 * _ptsz/_ptds variant when there is one (and it is old enough), else the
 * row's own function.  CU_GET_PROC_ADDRESS_DEFAULT means legacy: the
 * driver cannot know how its caller was compiled.
 *
 * The library is linked with -Bsymbolic, so the addresses below are this
 * library's own functions even when a preloaded shim exports the same
 * names - as the real driver behaves.
 *
 * Results: a name that is not in the table gives CUDA_ERROR_NOT_FOUND,
 * *pfn = NULL and SYMBOL_NOT_FOUND; a name whose rows are all newer than
 * cudaVersion gives CUDA_ERROR_NOT_FOUND and VERSION_NOT_SUFFICIENT; a
 * cudaVersion newer than the driver (13000) gives CUDA_ERROR_INVALID_VALUE.
 * Old 32-bit-pointer signatures (e.g. the v1 cuMemAlloc of 2000) are not
 * provided.  cuGetExportTable is deliberately absent.
 */
#include "sim.h"

#include <string.h>

typedef struct proc_entry {
    const char *name; /* base name, as asked for */
    int version;      /* CUDA version of this signature */
    void *fn;         /* legacy default-stream function */
    int pt_version;   /* version of the per-thread variant, 0: none */
    void *pt_fn;      /* per-thread variant */
} proc_entry;

#define E(n, v, f)                                                                                 \
    {                                                                                              \
        n, v, (void *)(f), 0, NULL                                                                 \
    }
#define P(n, v, f, pv, pf)                                                                         \
    {                                                                                              \
        n, v, (void *)(f), pv, (void *)(pf)                                                        \
    }

static const proc_entry kProcs[] = {
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuGetErrorName", 6000, cuGetErrorName),
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceGetPCIBusId", 4000, cuDeviceGetPCIBusId),
    E("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    E("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    E("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    E("cuDevicePrimaryCtxSetFlags", 7000, cuDevicePrimaryCtxSetFlags),
    E("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuCtxCreate", 3020, cuCtxCreate_v2),
    E("cuCtxDestroy", 2000, cuCtxDestroy),
    E("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    E("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    E("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    E("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    E("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),
    E("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    E("cuCtxGetStreamPriorityRange", 5050, cuCtxGetStreamPriorityRange),
    E("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    E("cuMemFree", 3020, cuMemFree_v2),
    E("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    E("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    E("cuMemFreeHost", 2000, cuMemFreeHost),
    E("cuMemHostAlloc", 2020, cuMemHostAlloc),
    E("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    E("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    E("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    E("cuMemHostUnregister", 4000, cuMemHostUnregister),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    P("cuMemAllocAsync", 11020, cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz),
    P("cuMemFreeAsync", 11020, cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz),
    E("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    E("cuMemAddressReserve", 10020, cuMemAddressReserve),
    E("cuMemAddressFree", 10020, cuMemAddressFree),
    E("cuMemCreate", 10020, cuMemCreate),
    E("cuMemRelease", 10020, cuMemRelease),
    E("cuMemMap", 10020, cuMemMap),
    E("cuMemUnmap", 10020, cuMemUnmap),
    E("cuMemSetAccess", 10020, cuMemSetAccess),
    E("cuMemGetAccess", 10020, cuMemGetAccess),
    E("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    E("cuPointerSetAttribute", 6000, cuPointerSetAttribute),
    E("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    E("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    E("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    E("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    E("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    E("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    E("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    E("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    E("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    E("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    E("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    E("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    E("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    E("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    P("cuMemcpy", 4000, cuMemcpy, 7000, cuMemcpy_ptds),
    P("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, 7000, cuMemcpyHtoD_v2_ptds),
    P("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, 7000, cuMemcpyDtoH_v2_ptds),
    P("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, 7000, cuMemcpyDtoD_v2_ptds),
    P("cuMemcpyAsync", 4000, cuMemcpyAsync, 7000, cuMemcpyAsync_ptsz),
    P("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, 7000, cuMemcpyHtoDAsync_v2_ptsz),
    P("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, 7000, cuMemcpyDtoHAsync_v2_ptsz),
    P("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, 7000, cuMemcpyDtoDAsync_v2_ptsz),
    P("cuMemsetD8", 3020, cuMemsetD8_v2, 7000, cuMemsetD8_v2_ptds),
    P("cuMemsetD32", 3020, cuMemsetD32_v2, 7000, cuMemsetD32_v2_ptds),
    P("cuMemsetD8Async", 3020, cuMemsetD8Async, 7000, cuMemsetD8Async_ptsz),
    P("cuMemsetD32Async", 3020, cuMemsetD32Async, 7000, cuMemsetD32Async_ptsz),
    E("cuStreamCreate", 2000, cuStreamCreate),
    E("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    P("cuStreamGetPriority", 5050, cuStreamGetPriority, 7000, cuStreamGetPriority_ptsz),
    P("cuStreamGetFlags", 5050, cuStreamGetFlags, 7000, cuStreamGetFlags_ptsz),
    E("cuStreamDestroy", 2000, cuStreamDestroy),
    E("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    P("cuStreamSynchronize", 2000, cuStreamSynchronize, 7000, cuStreamSynchronize_ptsz),
    P("cuStreamQuery", 2000, cuStreamQuery, 7000, cuStreamQuery_ptsz),
    P("cuStreamWaitEvent", 3020, cuStreamWaitEvent, 7000, cuStreamWaitEvent_ptsz),
    P("cuLaunchHostFunc", 10000, cuLaunchHostFunc, 10000, cuLaunchHostFunc_ptsz),
    P("cuStreamBeginCapture", 10000, cuStreamBeginCapture, 10000, cuStreamBeginCapture_ptsz),
    P("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, 10010, cuStreamBeginCapture_v2_ptsz),
    P("cuStreamEndCapture", 10000, cuStreamEndCapture, 10000, cuStreamEndCapture_ptsz),
    P("cuStreamIsCapturing", 10000, cuStreamIsCapturing, 10000, cuStreamIsCapturing_ptsz),
    P("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo_ptsz),
    P("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2, 11030,
      cuStreamGetCaptureInfo_v2_ptsz),
    P("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3, 12030,
      cuStreamGetCaptureInfo_v3_ptsz),
    E("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    E("cuGraphDestroy", 10000, cuGraphDestroy),
    E("cuGraphCreate", 10000, cuGraphCreate),
    E("cuGraphAddNode", 12020, cuGraphAddNode),
    E("cuGraphAddNode", 12030, cuGraphAddNode_v2),
    E("cuGraphAddMemsetNode", 10000, cuGraphAddMemsetNode),
    E("cuGraphAddMemcpyNode", 10000, cuGraphAddMemcpyNode),
    E("cuGraphNodeSetParams", 12020, cuGraphNodeSetParams),
    E("cuGraphExecNodeSetParams", 12020, cuGraphExecNodeSetParams),
    E("cuGraphInstantiate", 11040, cuGraphInstantiateWithFlags),
    E("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    P("cuGraphLaunch", 10000, cuGraphLaunch, 10000, cuGraphLaunch_ptsz),
    E("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    E("cuCtxRecordEvent", 12050, cuCtxRecordEvent),
    E("cuCtxWaitEvent", 12050, cuCtxWaitEvent),
    E("cuEventCreate", 2000, cuEventCreate),
    P("cuEventRecord", 2000, cuEventRecord, 7000, cuEventRecord_ptsz),
    P("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags, 11010, cuEventRecordWithFlags_ptsz),
    E("cuEventQuery", 2000, cuEventQuery),
    E("cuEventSynchronize", 2000, cuEventSynchronize),
    E("cuEventDestroy", 2000, cuEventDestroy),
    E("cuEventDestroy", 4000, cuEventDestroy_v2),
    E("cuEventElapsedTime", 2000, cuEventElapsedTime),
    E("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    E("cuGetProcAddress", 11030, cuGetProcAddress),
    E("cuGetProcAddress", 12000, cuGetProcAddress_v2),
};

/* Newest row for name with version <= v; *seen: the name exists at all. */
static const proc_entry *find_row(const char *name, int v, bool *seen)
{
    const proc_entry *best = NULL;
    *seen = false;
    for (size_t i = 0; i < sizeof kProcs / sizeof kProcs[0]; i++) {
        const proc_entry *e = &kProcs[i];
        if (strcmp(e->name, name) != 0)
            continue;
        *seen = true;
        if (e->version <= v && (best == NULL || e->version > best->version))
            best = e;
    }
    return best;
}

static void set_status(CUdriverProcAddressQueryResult *st, CUdriverProcAddressQueryResult v)
{
    if (st != NULL)
        *st = v;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    const cuuint64_t known =
        CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if (pfn != NULL)
        *pfn = NULL;
    if (symbol == NULL || pfn == NULL || (flags & ~known) != 0 || cudaVersion > SIM_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    bool seen = false;
    const proc_entry *e = find_row(symbol, cudaVersion, &seen);
    if (e == NULL) {
        set_status(symbolStatus, seen ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
        return CUDA_ERROR_NOT_FOUND;
    }
    bool pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && e->pt_fn != NULL &&
              e->pt_version <= cudaVersion;
    *pfn = pt ? e->pt_fn : e->fn;
    set_status(symbolStatus, CU_GET_PROC_ADDRESS_SUCCESS);
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
