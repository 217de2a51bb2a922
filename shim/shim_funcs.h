/* shim_funcs.h - the one list of driver functions the shim touches.
 *
 * FP_HOOKED_FUNCS: the functions that fragpool replaces.  Each has a
 * wrapper of the same name and signature in one interposer file
 * (shim_mem.c, shim_ctx_api.c, shim_capture.c, shim_ipc.c, shim_host_api.c,
 * shim_ranges.c, shim_gnodes.c, shim_mempool.c, shim_hooks.c), and shim_hooks.c
 * hands that wrapper out where a program looks the driver's own up.
 * FP_FORWARDED_FUNCS: the functions the shim only calls.
 * FP_REAL_FUNCS: both; shim_real.c resolves every one from libcuda.so.1.
 *
 * Invariant: a name is in exactly one of the two lists.  Adding a hooked
 * function is one line here plus its wrapper; nothing else changes.
 */
#ifndef FP_SHIM_FUNCS_H
#define FP_SHIM_FUNCS_H

/* The lists keep their grouping: the formatter leaves them alone. */
// clang-format off
#define FP_HOOKED_FUNCS(X)                                                  \
    X(cuGetProcAddress) X(cuGetProcAddress_v2)                              \
    X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemAllocPitch_v2)                  \
    X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz)                              \
    X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuMemGetInfo_v2)             \
    X(cuMemAllocManaged) X(cuMemAllocHost_v2) X(cuMemHostAlloc)             \
    X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz)              \
    X(cuMemCreate) X(cuMemAddressReserve) X(cuMemMap)                       \
    X(cuCtxDestroy_v2) X(cuDevicePrimaryCtxReset_v2)                        \
    X(cuDevicePrimaryCtxRelease_v2) X(cuCtxSynchronize)                     \
    X(cuCtxDestroy) X(cuDevicePrimaryCtxReset) X(cuDevicePrimaryCtxRelease) \
    X(cuStreamBeginCapture) X(cuStreamBeginCapture_ptsz)                    \
    X(cuStreamBeginCapture_v2) X(cuStreamBeginCapture_v2_ptsz)              \
    X(cuStreamBeginCaptureToGraph) X(cuStreamBeginCaptureToGraph_ptsz)      \
    X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz)                        \
    X(cuStreamDestroy) X(cuStreamDestroy_v2)                                \
    X(cuThreadExchangeStreamCaptureMode)                                    \
    X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcOpenMemHandle_v2)     \
    X(cuIpcCloseMemHandle)                                                  \
    /* pinned host memory: shim_host_api.c */                               \
    X(cuMemFreeHost) X(cuMemHostGetFlags) X(cuMemHostGetDevicePointer_v2)   \
    /* address ranges: shim_ranges.c */                                     \
    X(cuPointerGetAttribute) X(cuPointerGetAttributes)                      \
    X(cuMemGetAddressRange_v2) X(cuMemRetainAllocationHandle)               \
    X(cuMemGetAccess) X(cuPointerSetAttribute)                              \
    /* graph nodes with a NULL context: shim_gnodes.c */                    \
    X(cuGraphAddNode) X(cuGraphAddNode_v2) X(cuGraphNodeSetParams)          \
    X(cuGraphExecNodeSetParams) X(cuGraphAddMemsetNode)                     \
    X(cuGraphAddMemcpyNode)                                                 \
    /* the stream-ordered pools: shim_mempool.c */                          \
    X(cuMemPoolGetAttribute) X(cuMemPoolSetAttribute) X(cuMemPoolTrimTo)    \
    X(cuDeviceSetMemPool) X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz) \
    X(cuEventSynchronize)                                                   \
    /* virtual-memory segments: shim_ctx_api.c */                           \
    X(cuCtxEnablePeerAccess)

#define FP_FORWARDED_FUNCS(X)                                               \
    X(cuGetErrorString) X(cuCtxGetCurrent) X(cuCtxGetDevice)                \
    X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuDeviceTotalMem_v2)     \
    X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId)       \
    X(cuDeviceGetUuid) /* lending: the GPU's identity, shim_lend.c */         \
    X(cuStreamIsCapturing) X(cuStreamIsCapturing_ptsz)                      \
    X(cuDevicePrimaryCtxGetState) X(cuDevicePrimaryCtxRetain)               \
    X(cuEventCreate) X(cuDriverGetVersion)                                  \
    X(cuCtxRecordEvent) X(cuCtxWaitEvent) X(cuStreamWaitEvent)             \
    X(cuDeviceGetDefaultMemPool) /* shim_mempool.c */                       \
    /* pinned host memory: shim_host.c */                                   \
    X(cuEventQuery)                                                         \
    /* virtual-memory segments: shim_pages.c, shim_ctx_api.c */               \
    X(cuCtxGetDevice_v2) X(cuMemGetAllocationGranularity) X(cuMemSetAccess) \
    X(cuMemUnmap) X(cuMemRelease) X(cuMemAddressFree)                       \
    /* IPC of virtual-memory blocks: shim_pages.c, shim_ipc_vmm.c */          \
    X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle)
// clang-format on

#define FP_REAL_FUNCS(X) FP_HOOKED_FUNCS(X) FP_FORWARDED_FUNCS(X)

#endif
