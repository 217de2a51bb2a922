/* fake_nvml.c - a stand-in libnvidia-ml.so.1 for test_shim_nvml: the four
 * NVML calls the shim makes (base/fp_nvml.h), misbehaving as FAKE_NVML
 * says, read at each call:
 *   (unset)  3 processes, this one first, one of unknown memory;
 *   many     100 processes: a buffer smaller than that gets
 *            NVML_ERROR_INSUFFICIENT_SIZE with the count needed;
 *   hang     the process query never returns;
 *   crash    the process query dies of SIGSEGV.
 */
#include "fp_nvml.h"
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

API fp_nvmlReturn nvmlInit_v2(void)
{
    return FP_NVML_SUCCESS;
}

API fp_nvmlReturn nvmlShutdown(void)
{
    return FP_NVML_SUCCESS;
}

API fp_nvmlReturn nvmlDeviceGetHandleByPciBusId_v2(const char *bus, fp_nvmlDevice *dev)
{
    *dev = (fp_nvmlDevice)(uintptr_t)(strlen(bus) + 1);
    return FP_NVML_SUCCESS;
}

API fp_nvmlReturn nvmlDeviceGetComputeRunningProcesses_v3(fp_nvmlDevice dev, unsigned *count,
                                                          fp_nvmlProcessInfo *v)
{
    (void)dev;
    const char *mode = getenv("FAKE_NVML");
    unsigned n = mode && !strcmp(mode, "many") ? 100 : 3;
    if (mode && !strcmp(mode, "hang"))
        for (;;)
            pause();
    if (mode && !strcmp(mode, "crash"))
        raise(SIGSEGV);
    if (*count < n) {
        *count = n;
        return FP_NVML_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++)
        v[i] = (fp_nvmlProcessInfo){.pid = i ? 40000 + i : (unsigned)getppid(), /* the asker */
                                    .usedGpuMemory = i == 2 ? FP_NVML_VALUE_NOT_AVAILABLE
                                                            : (unsigned long long)(i + 1) << 20};
    *count = n;
    return FP_NVML_SUCCESS;
}
