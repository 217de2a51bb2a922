/* shim_nvml.c - which processes hold a GPU, as NVML sees them: the seeds'
 * step 4 ("rule out the others") for an OOM that no setting fixes
 * (docs/advice.md).
 *
 * libnvidia-ml.so.1 is opened with dlopen when first needed and stays
 * loaded; the device is found by its PCI bus id (cuDeviceGetPCIBusId), as
 * CUDA and NVML number devices differently.  A process's memory reads
 * "unknown" when NVML will not say (another user's process), and its pid
 * is NVML's, which is the host's when the program runs in a container.
 *
 * Invariants: any failure writes nothing and changes nothing; NVML is
 * initialised and shut down around each use; at most FP_NVML_SHOWN
 * processes are named, the rest counted.
 */
#include "shim_nvml.h"
#include "fp_advise.h"
#include "fp_nvml.h"
#include "shim_real.h"
#include <dlfcn.h>
#include <unistd.h>

#define FP_NVML_MAX   64
#define FP_NVML_SHOWN 8

typedef struct nvml {
    fp_PFN_nvmlInit_v2 init;
    fp_PFN_nvmlShutdown shutdown;
    fp_PFN_nvmlDeviceGetHandleByPciBusId_v2 by_bus;
    fp_PFN_nvmlDeviceGetComputeRunningProcesses_v3 processes;
} nvml;

static int load(nvml *n)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return -1;
    n->init = (fp_PFN_nvmlInit_v2)fp_real_dlsym(lib, "nvmlInit_v2");
    n->shutdown = (fp_PFN_nvmlShutdown)fp_real_dlsym(lib, "nvmlShutdown");
    n->by_bus = (fp_PFN_nvmlDeviceGetHandleByPciBusId_v2)fp_real_dlsym(
        lib, "nvmlDeviceGetHandleByPciBusId_v2");
    n->processes = (fp_PFN_nvmlDeviceGetComputeRunningProcesses_v3)fp_real_dlsym(
        lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    return n->init && n->shutdown && n->by_bus && n->processes ? 0 : -1;
}

/* The compute processes on the device with this bus id: their count, or
 * -1 when NVML cannot say. */
static int list(const nvml *n, const char *bus, fp_nvmlProcessInfo *v, unsigned cap)
{
    if (n->init() != FP_NVML_SUCCESS)
        return -1;
    fp_nvmlDevice dev;
    unsigned count = cap;
    int ok =
        n->by_bus(bus, &dev) == FP_NVML_SUCCESS && n->processes(dev, &count, v) == FP_NVML_SUCCESS;
    n->shutdown();
    return ok ? (int)(count < cap ? count : cap) : -1;
}

static void put_one(fp_sink *s, const fp_nvmlProcessInfo *p, int first)
{
    fp_puts(s, first ? " pid " : ", pid ");
    fp_put_u64(s, p->pid);
    if ((pid_t)p->pid == getpid())
        fp_puts(s, " (this process)");
    fp_putc(s, ' ');
    if (p->usedGpuMemory == FP_NVML_VALUE_NOT_AVAILABLE) {
        fp_puts(s, "unknown");
    } else {
        fp_advise_put_mib(s, (size_t)p->usedGpuMemory);
    }
}

void fp_nvml_put_processes(CUdevice dev, fp_sink *s)
{
    static nvml n;
    static int loaded; /* 0 not tried, 1 loaded, -1 unavailable */
    char bus[64];
    if (!fp_real.cuDeviceGetPCIBusId ||
        fp_real.cuDeviceGetPCIBusId(bus, (int)sizeof bus, dev) != CUDA_SUCCESS)
        return;
    if (!loaded)
        loaded = load(&n) ? -1 : 1;
    fp_nvmlProcessInfo v[FP_NVML_MAX];
    int k = loaded == 1 ? list(&n, bus, v, FP_NVML_MAX) : -1;
    if (k <= 0)
        return;
    fp_puts(s, "fragpool: processes on this GPU (NVML):");
    for (int i = 0; i < k && i < FP_NVML_SHOWN; i++)
        put_one(s, &v[i], i == 0);
    if (k > FP_NVML_SHOWN) {
        fp_puts(s, ", and ");
        fp_put_u64(s, (uint64_t)(k - FP_NVML_SHOWN));
        fp_puts(s, " more");
    }
    fp_putc(s, '\n');
}
