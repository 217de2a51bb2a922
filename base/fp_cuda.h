/* base/fp_cuda.h: fragpool's own declarations of the CUDA driver API.
 *
 * fragpool never includes NVIDIA headers.  Everything here is written from
 * the public CUDA Driver API reference (types, enum values, signatures);
 * only the subset used by the shim, the simulated device (simdev/) and the
 * tests is declared.  Numeric values are ABI: they must match the real
 * driver exactly, so change them only against the public documentation.
 *
 * Functions are listed once, in X-macro tables (FP_CUDA_FUNCS and
 * FP_CUDA_FUNCS_PT), from which both the prototypes and the function-pointer
 * typedefs (fp_PFN_<exported name>) are generated, so the two can never
 * disagree.  The names are the exported ABI names (cuMemAlloc_v2, not the
 * cuMemAlloc macro of the official header).
 *
 * Define FP_CUDA_NO_PROTOTYPES before including to get types and typedefs
 * only.
 */
#ifndef FP_CUDA_H
#define FP_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Scalar and handle types ------------------------------------------ */
typedef unsigned long long CUdeviceptr; /* device address, 64-bit */
typedef int CUdevice;                   /* device ordinal */
typedef unsigned long long cuuint64_t;
typedef struct CUctx_st *CUcontext;                /* opaque */
typedef struct CUstream_st *CUstream;              /* opaque */
typedef struct CUevent_st *CUevent;                /* opaque */
typedef struct CUgraph_st *CUgraph;                /* opaque */
typedef struct CUgraphNode_st *CUgraphNode;        /* opaque */
typedef struct CUgraphEdgeData_st CUgraphEdgeData; /* only used by pointer */
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;
typedef struct CUmemPoolHandle_st *CUmemoryPool;           /* opaque */
typedef unsigned long long CUmemGenericAllocationHandle;   /* VMM handle */
typedef struct CUmemAllocationProp_st CUmemAllocationProp; /* only used by pointer */
typedef void (*CUhostFn)(void *userData);
/* Legacy IPC: an opaque 64-byte handle, passed by value. */
#define CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
    char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;

/* ---- graphs built node by node (cuGraphAddNode and the typed adders) ---- */
typedef struct CUgraphExec_st *CUgraphExec; /* opaque */
typedef struct CUarray_st *CUarray;         /* opaque; never used here */
typedef enum CUgraphNodeType_enum {         /* subset */
                                    CU_GRAPH_NODE_TYPE_KERNEL = 0,
                                    CU_GRAPH_NODE_TYPE_MEMCPY = 1,
                                    CU_GRAPH_NODE_TYPE_MEMSET = 2,
                                    CU_GRAPH_NODE_TYPE_HOST = 3,
                                    CU_GRAPH_NODE_TYPE_EMPTY = 5
} CUgraphNodeType;
/* cuGraphAddMemsetNode's parameters (v1: no context; the adder takes one). */
typedef struct CUDA_MEMSET_NODE_PARAMS_st {
    CUdeviceptr dst;
    size_t pitch; /* unused when height is 1 */
    unsigned int value;
    unsigned int elementSize; /* 1, 2 or 4 */
    size_t width;             /* elements per row */
    size_t height;            /* rows */
} CUDA_MEMSET_NODE_PARAMS;
/* cuGraphAddNode's memset parameters: v1 plus the context to run in. */
typedef struct CUDA_MEMSET_NODE_PARAMS_v2_st {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize;
    size_t width;
    size_t height;
    struct CUctx_st *ctx; /* NULL: the driver picks one */
} CUDA_MEMSET_NODE_PARAMS_v2;
/* cuMemcpy3D's description of a copy (memory types: CUmemorytype). */
typedef struct CUDA_MEMCPY3D_st {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    int srcMemoryType; /* CUmemorytype */
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    int dstMemoryType; /* CUmemorytype */
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;
/* cuGraphAddNode's memcpy parameters. */
typedef struct CUDA_MEMCPY_NODE_PARAMS_st {
    int flags;                /* must be 0 */
    int reserved;             /* must be 0 */
    struct CUctx_st *copyCtx; /* NULL: the driver picks one */
    CUDA_MEMCPY3D copyParams;
} CUDA_MEMCPY_NODE_PARAMS;
/* cuGraphAddNode's tagged union: 256 bytes, the members fragpool reads. */
typedef struct CUgraphNodeParams_st {
    CUgraphNodeType type;
    int reserved0[3];
    union {
        long long reserved1[29];
        CUDA_MEMCPY_NODE_PARAMS memcpy;
        CUDA_MEMSET_NODE_PARAMS_v2 memset;
    } u; /* anonymous in NVIDIA's header: same layout */
    long long reserved2;
} CUgraphNodeParams;
#ifndef __cplusplus
_Static_assert(sizeof(CUDA_MEMCPY3D) == 200, "CUDA_MEMCPY3D is 200 bytes in the ABI");
_Static_assert(sizeof(CUgraphNodeParams) == 256, "CUgraphNodeParams is 256 bytes in the ABI");
#endif

/* Special stream handles (not pointers to anything). */
#define CU_STREAM_LEGACY     ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* ---- CUresult ---------------------------------------------------------- */
typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712, /* pinned host memory */
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,     /* pinned host memory */
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_PERMITTED = 800,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_MERGE = 902,
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
    CUDA_ERROR_CAPTURED_EVENT = 907,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

/* ---- Enumerations ------------------------------------------------------ */
typedef enum CUdevice_attribute_enum { /* subset */
                                       CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
                                       CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
                                       CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
                                       CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
                                       CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5,
                                       CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6,
                                       CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
                                       CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
                                       CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY = 9,
                                       CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
                                       CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11,
                                       CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12,
                                       CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
                                       CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT = 14,
                                       CU_DEVICE_ATTRIBUTE_GPU_OVERLAP = 15,
                                       CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
                                       CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT = 17,
                                       CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
                                       CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
                                       CU_DEVICE_ATTRIBUTE_COMPUTE_MODE = 20,
                                       CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS = 31,
                                       CU_DEVICE_ATTRIBUTE_ECC_ENABLED = 32,
                                       CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
                                       CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
                                       CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
                                       CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
                                       CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
                                       CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
                                       CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40,
                                       CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
                                       CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
                                       CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT = 51,
                                       CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
                                       CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
                                       CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED = 78,
                                       CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR =
                                           81,
                                       CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
                                       CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83,
                                       CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD = 84,
                                       CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS = 88,
                                       CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 89,
                                       CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED = 90,
                                       CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
                                       CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED =
                                           102,
                                       CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED =
                                           103,
                                       CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED =
                                           110,
                                       CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
                                       CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
                                       CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK = 136
} CUdevice_attribute;

typedef enum CUpointer_attribute_enum {                                   /* subset */
                                        CU_POINTER_ATTRIBUTE_CONTEXT = 1, /* CUcontext */
                                        CU_POINTER_ATTRIBUTE_MEMORY_TYPE =
                                            2, /* unsigned int (CUmemorytype) */
                                        CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3, /* CUdeviceptr */
                                        CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,   /* void * */
                                        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS =
                                            6, /* unsigned int (bool) */
                                        CU_POINTER_ATTRIBUTE_BUFFER_ID = 7, /* unsigned long long */
                                        CU_POINTER_ATTRIBUTE_IS_MANAGED =
                                            8, /* unsigned int (bool) */
                                        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9, /* int */
                                        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE =
                                            10, /* unsigned int */
                                        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR =
                                            11,                               /* CUdeviceptr */
                                        CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12, /* size_t */
                                        CU_POINTER_ATTRIBUTE_MAPPED = 13, /* unsigned int (bool) */
                                        CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES =
                                            14, /* unsigned long long (bitmask) */
                                        CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE =
                                            15,                                   /* unsigned int */
                                        CU_POINTER_ATTRIBUTE_ACCESS_FLAGS = 16,   /* unsigned int */
                                        CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17, /* CUmemoryPool */
                                        CU_POINTER_ATTRIBUTE_MAPPING_SIZE = 18,   /* size_t */
                                        CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR =
                                            19, /* CUdeviceptr */
                                        CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID =
                                            20, /* unsigned long long */
                                        CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE =
                                            21 /* unsigned int (bool) */
} CUpointer_attribute;

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4
} CUmemorytype;

typedef enum CUstreamCaptureStatus_enum {
    CU_STREAM_CAPTURE_STATUS_NONE = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUstreamCaptureMode_enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2
} CUstreamCaptureMode;

typedef enum CUdriverProcAddressQueryResult_enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* ---- Flags --------------------------------------------------------------- */
/* cuGetProcAddress flags */
#define CU_GET_PROC_ADDRESS_DEFAULT                   0x0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM             0x1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 0x2
/* stream flags */
#define CU_STREAM_DEFAULT      0x0
#define CU_STREAM_NON_BLOCKING 0x1
/* event flags */
#define CU_EVENT_DEFAULT         0x0
#define CU_EVENT_BLOCKING_SYNC   0x1
#define CU_EVENT_DISABLE_TIMING  0x2
#define CU_EVENT_INTERPROCESS    0x4
#define CU_EVENT_RECORD_DEFAULT  0x0
#define CU_EVENT_RECORD_EXTERNAL 0x1
#define CU_EVENT_WAIT_DEFAULT    0x0
#define CU_EVENT_WAIT_EXTERNAL   0x1
/* cuIpcOpenMemHandle flags */
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
/* CUmemAllocationProp.allocFlags.usage */
#define CU_MEM_CREATE_USAGE_HW_DECOMPRESS 0x2
/* cuMemHostAlloc flags */
#define CU_MEMHOSTALLOC_PORTABLE      0x01
#define CU_MEMHOSTALLOC_DEVICEMAP     0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04
/* ---- pinned host memory: cuMemHostRegister flags ---- */
#define CU_MEMHOSTREGISTER_PORTABLE  0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_MEMHOSTREGISTER_IOMEMORY  0x04
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08
/* cuMemAllocManaged flags */
#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_MEM_ATTACH_HOST   0x2
#define CU_MEM_ATTACH_SINGLE 0x4
/* context flags */
#define CU_CTX_SCHED_AUTO          0x00
#define CU_CTX_SCHED_SPIN          0x01
#define CU_CTX_SCHED_YIELD         0x02
#define CU_CTX_SCHED_BLOCKING_SYNC 0x04
#define CU_CTX_SCHED_MASK          0x07
#define CU_CTX_MAP_HOST            0x08
#define CU_CTX_LMEM_RESIZE_TO_MAX  0x10
#define CU_CTX_FLAGS_MASK          0xFF

/* ---- Functions ----------------------------------------------------------- */
/* X(exported_name, (parameter list)); every function returns CUresult. */
#define FP_CUDA_FUNCS(X)                                                                           \
    X(cuGetErrorString, (CUresult error, const char **pStr))                                       \
    X(cuGetErrorName, (CUresult error, const char **pStr))                                         \
    X(cuInit, (unsigned int Flags))                                                                \
    X(cuDriverGetVersion, (int *driverVersion))                                                    \
    X(cuDeviceGet, (CUdevice * device, int ordinal))                                               \
    X(cuDeviceGetCount, (int *count))                                                              \
    X(cuDeviceGetName, (char *name, int len, CUdevice dev))                                        \
    X(cuDeviceGetPCIBusId, (char *pciBusId, int len, CUdevice dev))                                \
    X(cuDeviceGetUuid, (CUuuid * uuid, CUdevice dev))                                              \
    X(cuDeviceGetUuid_v2, (CUuuid * uuid, CUdevice dev))                                           \
    X(cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev))                                         \
    X(cuDeviceGetAttribute, (int *pi, CUdevice_attribute attrib, CUdevice dev))                    \
    X(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev))                                  \
    X(cuDevicePrimaryCtxRelease, (CUdevice dev))                                                   \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev))                                                \
    X(cuDevicePrimaryCtxReset, (CUdevice dev))                                                     \
    X(cuDevicePrimaryCtxReset_v2, (CUdevice dev))                                                  \
    X(cuDevicePrimaryCtxSetFlags, (CUdevice dev, unsigned int flags))                              \
    X(cuDevicePrimaryCtxSetFlags_v2, (CUdevice dev, unsigned int flags))                           \
    X(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int *flags, int *active))                \
    X(cuCtxCreate_v2, (CUcontext * pctx, unsigned int flags, CUdevice dev))                        \
    X(cuCtxDestroy, (CUcontext ctx))                                                               \
    X(cuCtxDestroy_v2, (CUcontext ctx))                                                            \
    X(cuCtxPushCurrent, (CUcontext ctx))                                                           \
    X(cuCtxPushCurrent_v2, (CUcontext ctx))                                                        \
    X(cuCtxPopCurrent, (CUcontext * pctx))                                                         \
    X(cuCtxPopCurrent_v2, (CUcontext * pctx))                                                      \
    X(cuCtxSetCurrent, (CUcontext ctx))                                                            \
    X(cuCtxGetCurrent, (CUcontext * pctx))                                                         \
    X(cuCtxGetDevice, (CUdevice * device))                                                         \
    X(cuCtxGetDevice_v2, (CUdevice * device, CUcontext ctx))                                       \
    X(cuCtxSynchronize, (void))                                                                    \
    X(cuCtxSynchronize_v2, (CUcontext ctx))                                                        \
    X(cuCtxGetStreamPriorityRange, (int *leastPriority, int *greatestPriority))                    \
    X(cuMemGetInfo_v2, (size_t * free, size_t * total))                                            \
    X(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize))                                        \
    X(cuMemAllocPitch_v2, (CUdeviceptr * dptr, size_t * pPitch, size_t WidthInBytes,               \
                           size_t Height, unsigned int ElementSizeBytes))                          \
    X(cuMemFree_v2, (CUdeviceptr dptr))                                                            \
    X(cuMemGetAddressRange_v2, (CUdeviceptr * pbase, size_t * psize, CUdeviceptr dptr))            \
    X(cuMemAllocHost_v2, (void **pp, size_t bytesize))                                             \
    X(cuMemHostAlloc, (void **pp, size_t bytesize, unsigned int Flags))                            \
    X(cuMemFreeHost, (void *p))                                                                    \
    X(cuMemHostGetDevicePointer_v2, (CUdeviceptr * pdptr, void *p, unsigned int Flags))            \
    X(cuMemAllocManaged, (CUdeviceptr * dptr, size_t bytesize, unsigned int flags))                \
    X(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream))                    \
    X(cuMemAllocFromPoolAsync,                                                                     \
      (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream))                  \
    X(cuMemCreate, (CUmemGenericAllocationHandle * handle, size_t size,                            \
                    const CUmemAllocationProp *prop, unsigned long long flags))                    \
    X(cuMemAddressReserve, (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr,    \
                            unsigned long long flags))                                             \
    X(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, \
                 unsigned long long flags))                                                        \
    X(cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream))                                        \
    X(cuIpcGetMemHandle, (CUipcMemHandle * pHandle, CUdeviceptr dptr))                             \
    X(cuIpcOpenMemHandle, (CUdeviceptr * pdptr, CUipcMemHandle handle, unsigned int Flags))        \
    X(cuIpcOpenMemHandle_v2, (CUdeviceptr * pdptr, CUipcMemHandle handle, unsigned int Flags))     \
    X(cuIpcCloseMemHandle, (CUdeviceptr dptr))                                                     \
    X(cuPointerGetAttribute, (void *data, CUpointer_attribute attribute, CUdeviceptr ptr))         \
    X(cuPointerGetAttributes,                                                                      \
      (unsigned int numAttributes, CUpointer_attribute *attributes, void **data, CUdeviceptr ptr)) \
    X(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount))                              \
    X(cuMemcpyHtoD_v2, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount))             \
    X(cuMemcpyDtoH_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount))                   \
    X(cuMemcpyDtoD_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount))           \
    X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream))       \
    X(cuMemcpyHtoDAsync_v2,                                                                        \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream))            \
    X(cuMemcpyDtoHAsync_v2,                                                                        \
      (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))                  \
    X(cuMemcpyDtoDAsync_v2,                                                                        \
      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))          \
    X(cuMemsetD8_v2, (CUdeviceptr dstDevice, unsigned char uc, size_t N))                          \
    X(cuMemsetD32_v2, (CUdeviceptr dstDevice, unsigned int ui, size_t N))                          \
    X(cuMemsetD8Async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream))      \
    X(cuMemsetD32Async, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream))      \
    X(cuStreamCreate, (CUstream * phStream, unsigned int Flags))                                   \
    X(cuStreamCreateWithPriority, (CUstream * phStream, unsigned int flags, int priority))         \
    X(cuStreamGetPriority, (CUstream hStream, int *priority))                                      \
    X(cuStreamGetFlags, (CUstream hStream, unsigned int *flags))                                   \
    X(cuStreamDestroy, (CUstream hStream))                                                         \
    X(cuStreamDestroy_v2, (CUstream hStream))                                                      \
    X(cuStreamSynchronize, (CUstream hStream))                                                     \
    X(cuStreamQuery, (CUstream hStream))                                                           \
    X(cuStreamWaitEvent, (CUstream hStream, CUevent hEvent, unsigned int Flags))                   \
    X(cuCtxRecordEvent, (CUcontext hCtx, CUevent hEvent))                                          \
    X(cuCtxWaitEvent, (CUcontext hCtx, CUevent hEvent))                                            \
    X(cuStreamBeginCaptureToGraph,                                                                 \
      (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,                          \
       const CUgraphEdgeData *dependencyData, size_t numDependencies, CUstreamCaptureMode mode))   \
    X(cuLaunchHostFunc, (CUstream hStream, CUhostFn fn, void *userData))                           \
    X(cuStreamBeginCapture, (CUstream hStream))                                                    \
    X(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode))                       \
    X(cuStreamEndCapture, (CUstream hStream, CUgraph * phGraph))                                   \
    X(cuStreamIsCapturing, (CUstream hStream, CUstreamCaptureStatus * captureStatus))              \
    X(cuStreamGetCaptureInfo,                                                                      \
      (CUstream hStream, CUstreamCaptureStatus * captureStatus_out, cuuint64_t * id_out))          \
    X(cuStreamGetCaptureInfo_v2,                                                                   \
      (CUstream hStream, CUstreamCaptureStatus * captureStatus_out, cuuint64_t * id_out,           \
       CUgraph * graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out))    \
    X(cuStreamGetCaptureInfo_v3,                                                                   \
      (CUstream hStream, CUstreamCaptureStatus * captureStatus_out, cuuint64_t * id_out,           \
       CUgraph * graph_out, const CUgraphNode **dependencies_out,                                  \
       const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out))                         \
    X(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode * mode))                             \
    X(cuGraphDestroy, (CUgraph hGraph))                                                            \
    X(cuEventCreate, (CUevent * phEvent, unsigned int Flags))                                      \
    X(cuEventRecord, (CUevent hEvent, CUstream hStream))                                           \
    X(cuEventRecordWithFlags, (CUevent hEvent, CUstream hStream, unsigned int flags))              \
    X(cuEventQuery, (CUevent hEvent))                                                              \
    X(cuEventSynchronize, (CUevent hEvent))                                                        \
    X(cuEventDestroy, (CUevent hEvent))                                                            \
    X(cuEventDestroy_v2, (CUevent hEvent))                                                         \
    X(cuEventElapsedTime, (float *pMilliseconds, CUevent hStart, CUevent hEnd))                    \
    X(cuEventElapsedTime_v2, (float *pMilliseconds, CUevent hStart, CUevent hEnd))                 \
    X(cuGetProcAddress, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags))       \
    X(cuGetProcAddress_v2, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,     \
                            CUdriverProcAddressQueryResult *symbolStatus))

/* Per-thread default-stream variants (_ptds: synchronous calls, _ptsz:
 * stream calls).  A NULL stream means the calling thread's default stream;
 * each has the signature of the function it is named after. */
#define FP_CUDA_FUNCS_PT(X)                                                                        \
    X(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount))                         \
    X(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount))        \
    X(cuMemcpyDtoH_v2_ptds, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount))              \
    X(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount))      \
    X(cuMemsetD8_v2_ptds, (CUdeviceptr dstDevice, unsigned char uc, size_t N))                     \
    X(cuMemsetD32_v2_ptds, (CUdeviceptr dstDevice, unsigned int ui, size_t N))                     \
    X(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream))  \
    X(cuMemcpyHtoDAsync_v2_ptsz,                                                                   \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream))            \
    X(cuMemcpyDtoHAsync_v2_ptsz,                                                                   \
      (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))                  \
    X(cuMemcpyDtoDAsync_v2_ptsz,                                                                   \
      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))          \
    X(cuMemsetD8Async_ptsz, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)) \
    X(cuMemsetD32Async_ptsz, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)) \
    X(cuMemAllocAsync_ptsz, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream))               \
    X(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream))                                   \
    X(cuMemAllocFromPoolAsync_ptsz,                                                                \
      (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream))                  \
    X(cuStreamGetPriority_ptsz, (CUstream hStream, int *priority))                                 \
    X(cuStreamGetFlags_ptsz, (CUstream hStream, unsigned int *flags))                              \
    X(cuStreamSynchronize_ptsz, (CUstream hStream))                                                \
    X(cuStreamQuery_ptsz, (CUstream hStream))                                                      \
    X(cuStreamWaitEvent_ptsz, (CUstream hStream, CUevent hEvent, unsigned int Flags))              \
    X(cuLaunchHostFunc_ptsz, (CUstream hStream, CUhostFn fn, void *userData))                      \
    X(cuStreamBeginCapture_ptsz, (CUstream hStream))                                               \
    X(cuStreamBeginCapture_v2_ptsz, (CUstream hStream, CUstreamCaptureMode mode))                  \
    X(cuStreamEndCapture_ptsz, (CUstream hStream, CUgraph * phGraph))                              \
    X(cuStreamBeginCaptureToGraph_ptsz,                                                            \
      (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,                          \
       const CUgraphEdgeData *dependencyData, size_t numDependencies, CUstreamCaptureMode mode))   \
    X(cuStreamIsCapturing_ptsz, (CUstream hStream, CUstreamCaptureStatus * captureStatus))         \
    X(cuStreamGetCaptureInfo_ptsz,                                                                 \
      (CUstream hStream, CUstreamCaptureStatus * captureStatus_out, cuuint64_t * id_out))          \
    X(cuStreamGetCaptureInfo_v2_ptsz,                                                              \
      (CUstream hStream, CUstreamCaptureStatus * captureStatus_out, cuuint64_t * id_out,           \
       CUgraph * graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out))    \
    X(cuStreamGetCaptureInfo_v3_ptsz,                                                              \
      (CUstream hStream, CUstreamCaptureStatus * captureStatus_out, cuuint64_t * id_out,           \
       CUgraph * graph_out, const CUgraphNode **dependencies_out,                                  \
       const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out))                         \
    X(cuEventRecord_ptsz, (CUevent hEvent, CUstream hStream))                                      \
    X(cuEventRecordWithFlags_ptsz, (CUevent hEvent, CUstream hStream, unsigned int flags))

/* ---- virtual memory management (VMM segments) ----------------
 * The types of cuMemCreate/cuMemMap/cuMemSetAccess, from the public driver
 * API reference, and the VMM functions not in FP_CUDA_FUNCS. */
typedef enum CUmemAllocationType_enum {
    CU_MEM_ALLOCATION_TYPE_INVALID = 0,
    CU_MEM_ALLOCATION_TYPE_PINNED = 1
} CUmemAllocationType;
typedef enum CUmemAllocationHandleType_enum {
    CU_MEM_HANDLE_TYPE_NONE = 0,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
} CUmemAllocationHandleType;
typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID = 0,
    CU_MEM_LOCATION_TYPE_DEVICE = 1
} CUmemLocationType;
typedef enum CUmemAccess_flags_enum {
    CU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
    CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
} CUmemAccess_flags;
typedef enum CUmemAllocationGranularity_flags_enum {
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
} CUmemAllocationGranularity_flags;
typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;
struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
};
typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    CUmemAccess_flags flags;
} CUmemAccessDesc;

#define FP_CUDA_FUNCS_VMM(X)                                                                       \
    X(cuMemUnmap, (CUdeviceptr ptr, size_t size))                                                  \
    X(cuMemRelease, (CUmemGenericAllocationHandle handle))                                         \
    X(cuMemAddressFree, (CUdeviceptr ptr, size_t size))                                            \
    X(cuMemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))   \
    X(cuMemGetAccess, (unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)) \
    X(cuMemGetAllocationGranularity, (size_t * granularity, const CUmemAllocationProp *prop,       \
                                      CUmemAllocationGranularity_flags option))                    \
    X(cuCtxEnablePeerAccess, (CUcontext peerContext, unsigned int Flags))
/* CUresult values of peer access (the driver API reference). */
#define FP_CUDA_PEER_ALREADY_ENABLED ((CUresult)704)
/* Shareable handles of VMM memory (a POSIX file descriptor on Linux). */
#define FP_CUDA_FUNCS_SHARE(X)                                                                     \
    X(cuMemExportToShareableHandle,                                                                \
      (void *shareableHandle, CUmemGenericAllocationHandle handle,                                 \
       CUmemAllocationHandleType handleType, unsigned long long flags))                            \
    X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle * handle, void *osHandle,      \
                                       CUmemAllocationHandleType shHandleType))
/* What the driver says about the VMM allocation behind an address, and
 * the one settable pointer attribute. */
#define FP_CUDA_FUNCS_ATTR(X)                                                                      \
    X(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle * handle, void *addr))            \
    X(cuPointerSetAttribute, (const void *value, CUpointer_attribute attribute, CUdeviceptr ptr))
/* ---- end of the VMM block ---------------------------------------------- */

/* ---- graphs built node by node, instantiated and launched ---------------- */
#define FP_CUDA_FUNCS_GRAPH(X)                                                                     \
    X(cuGraphCreate, (CUgraph * phGraph, unsigned int flags))                                      \
    X(cuGraphAddNode, (CUgraphNode * phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, \
                       size_t numDependencies, CUgraphNodeParams *nodeParams))                     \
    X(cuGraphAddNode_v2, (CUgraphNode * phGraphNode, CUgraph hGraph,                               \
                          const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,  \
                          size_t numDependencies, CUgraphNodeParams *nodeParams))                  \
    X(cuGraphAddMemsetNode,                                                                        \
      (CUgraphNode * phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,                 \
       size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx))        \
    X(cuGraphAddMemcpyNode,                                                                        \
      (CUgraphNode * phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,                 \
       size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx))                    \
    X(cuGraphNodeSetParams, (CUgraphNode hNode, CUgraphNodeParams * nodeParams))                   \
    X(cuGraphExecNodeSetParams,                                                                    \
      (CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams * nodeParams))                 \
    X(cuGraphInstantiateWithFlags,                                                                 \
      (CUgraphExec * phGraphExec, CUgraph hGraph, unsigned long long flags))                       \
    X(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream))                                   \
    X(cuGraphLaunch_ptsz, (CUgraphExec hGraphExec, CUstream hStream))                              \
    X(cuGraphExecDestroy, (CUgraphExec hGraphExec))

/* ---- the stream-ordered pools (cuMemAllocAsync's) ----------------------- */
typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,   /* int */
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,         /* int */
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3, /* int */
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,                 /* cuuint64_t */
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,              /* cuuint64_t */
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,                 /* cuuint64_t, reset: 0 */
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,                  /* cuuint64_t */
    CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8                      /* cuuint64_t, reset: 0 */
} CUmemPool_attribute;
#define FP_CUDA_FUNCS_POOL(X)                                                                      \
    X(cuDeviceGetDefaultMemPool, (CUmemoryPool * pool_out, CUdevice dev))                          \
    X(cuDeviceGetMemPool, (CUmemoryPool * pool, CUdevice dev))                                     \
    X(cuDeviceSetMemPool, (CUdevice dev, CUmemoryPool pool))                                       \
    X(cuMemPoolGetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *value))           \
    X(cuMemPoolSetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *value))           \
    X(cuMemPoolTrimTo, (CUmemoryPool pool, size_t minBytesToKeep))

/* ---- pinned host memory: the calls beyond cuMemHostAlloc ---- */
#define FP_CUDA_FUNCS_HOST(X)                                                                      \
    X(cuMemHostGetFlags, (unsigned int *pFlags, void *p))                                          \
    X(cuMemHostRegister_v2, (void *p, size_t bytesize, unsigned int Flags))                        \
    X(cuMemHostUnregister, (void *p))

/* Function-pointer typedefs: fp_PFN_cuMemAlloc_v2 etc. */
#define FP_CUDA_DECLARE_PFN(name, params) typedef CUresult(*fp_PFN_##name) params;
FP_CUDA_FUNCS(FP_CUDA_DECLARE_PFN)
FP_CUDA_FUNCS_PT(FP_CUDA_DECLARE_PFN)
FP_CUDA_FUNCS_VMM(FP_CUDA_DECLARE_PFN)
FP_CUDA_FUNCS_HOST(FP_CUDA_DECLARE_PFN)
FP_CUDA_FUNCS_SHARE(FP_CUDA_DECLARE_PFN)
FP_CUDA_FUNCS_POOL(FP_CUDA_DECLARE_PFN)
FP_CUDA_FUNCS_ATTR(FP_CUDA_DECLARE_PFN)
FP_CUDA_FUNCS_GRAPH(FP_CUDA_DECLARE_PFN)
#undef FP_CUDA_DECLARE_PFN

#ifndef FP_CUDA_NO_PROTOTYPES
/* The driver API is exported with default visibility even though the
 * project builds with -fvisibility=hidden. */
#ifndef FP_CUDA_API
#define FP_CUDA_API __attribute__((visibility("default")))
#endif
#define FP_CUDA_DECLARE_PROTO(name, params) FP_CUDA_API CUresult name params;
FP_CUDA_FUNCS(FP_CUDA_DECLARE_PROTO)
FP_CUDA_FUNCS_PT(FP_CUDA_DECLARE_PROTO)
FP_CUDA_FUNCS_VMM(FP_CUDA_DECLARE_PROTO)
FP_CUDA_FUNCS_HOST(FP_CUDA_DECLARE_PROTO)
FP_CUDA_FUNCS_SHARE(FP_CUDA_DECLARE_PROTO)
FP_CUDA_FUNCS_POOL(FP_CUDA_DECLARE_PROTO)
FP_CUDA_FUNCS_ATTR(FP_CUDA_DECLARE_PROTO)
FP_CUDA_FUNCS_GRAPH(FP_CUDA_DECLARE_PROTO)
#undef FP_CUDA_DECLARE_PROTO
#endif

#ifdef __cplusplus
}
#endif
#endif /* FP_CUDA_H */
