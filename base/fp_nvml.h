/* base/fp_nvml.h: the few NVML declarations fragpool uses, written from
 * NVIDIA's public NVML API reference (no NVIDIA header is included).  The
 * shim loads libnvidia-ml.so.1 with dlopen, only after an out-of-memory
 * failure that no setting fixes, to name the other processes on the GPU
 * (shim/shim_nvml.c).  Values and layouts are ABI.
 */
#ifndef FP_NVML_H
#define FP_NVML_H

typedef int fp_nvmlReturn; /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct fp_nvmlDevice_st *fp_nvmlDevice;
#define FP_NVML_SUCCESS             0
#define FP_NVML_INSUFFICIENT_SIZE   7       /* infoCount then holds the count needed */
#define FP_NVML_VALUE_NOT_AVAILABLE (~0ull) /* usedGpuMemory unknown (no permission) */

/* nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v3 fills it. */
typedef struct fp_nvmlProcessInfo {
    unsigned int pid;
    unsigned long long usedGpuMemory; /* bytes */
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} fp_nvmlProcessInfo;
_Static_assert(sizeof(fp_nvmlProcessInfo) == 24, "nvmlProcessInfo_t: 24 bytes");

typedef fp_nvmlReturn (*fp_PFN_nvmlInit_v2)(void);
typedef fp_nvmlReturn (*fp_PFN_nvmlShutdown)(void);
typedef fp_nvmlReturn (*fp_PFN_nvmlDeviceGetHandleByPciBusId_v2)(const char *pciBusId,
                                                                 fp_nvmlDevice *device);
typedef fp_nvmlReturn (*fp_PFN_nvmlDeviceGetComputeRunningProcesses_v3)(fp_nvmlDevice device,
                                                                        unsigned int *infoCount,
                                                                        fp_nvmlProcessInfo *infos);

#endif
