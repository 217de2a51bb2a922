/* simdev/sim_core.c: setup, configuration, devices, and the context calls
 * that end or wait for a context's work.
 *
 * Configuration is read from the environment exactly once (pthread_once),
 * by cuInit or by the first fpsim_* call:
 *   FRAGPOOL_SIM_DEVICES      number of devices, 0..8 (default 1)
 *   FRAGPOOL_SIM_CAPACITY_MB  capacity of each device in MiB (default 16384)
 *   FRAGPOOL_SIM_FAIL_NTH     the N-th device allocation fails once (0: off)
 *   FRAGPOOL_SIM_DRIVER_VERSION  what cuDriverGetVersion says (default and
 *                             most 13000); below 12050 there are no
 *                             context events, as in older drivers
 *   FRAGPOOL_SIM_VMM          0: no virtual memory management (default 1)
 *   FRAGPOOL_SIM_VMM_RDMA     0: cuMemCreate refuses gpuDirectRDMACapable
 *                             and GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
 *                             reads 0 (default 1, as an H200)
 * A bad value is reported on stderr with the accepted form and the default
 * is kept.
 *
 * Contexts (sim_ctx.c keeps them and the current-context stack): releasing
 * or resetting a primary context, destroying a created one, waits for the
 * work of its device, retires its streams and frees its memory.
 *
 * fork: the child of a process that called cuInit cannot use CUDA, as with
 * the real driver: cuInit and every call that checks initialization fail
 * with CUDA_ERROR_NOT_INITIALIZED (nothing waits for the parent's work).
 */
#include "sim.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* ---- configuration ------------------------------------------------------- */

/* Reads an unsigned decimal in [lo, hi] from the environment. */
static unsigned long long env_number(const char *name, unsigned long long def,
                                     unsigned long long lo, unsigned long long hi)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return def;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    bool ok = v[0] >= '0' && v[0] <= '9' && errno == 0 && *end == '\0';
    if (ok && x >= lo && x <= hi)
        return x;
    sim_warn("%s=\"%s\" is not valid (expected an integer in %llu..%llu); "
             "using %llu",
             name, v, lo, hi, def);
    return def;
}

static void fork_prepare(void)
{
    sim_lock();
    sim_mem_fork_lock(true);
}
static void fork_parent(void)
{
    sim_mem_fork_lock(false);
    sim_unlock();
}

/* As with the real driver, a child cannot use the CUDA state it inherited
 * (nor start afresh): once the parent has initialized, every call of the
 * child fails with CUDA_ERROR_NOT_INITIALIZED, and none waits for the
 * parent's work, whose worker threads the child does not have. */
static void fork_child(void)
{
    sim_mem_fork_lock(false);
    sim_share_fork_child();
    pthread_cond_init(&g_sim.progress, NULL);
    sim_stream_fork_child();
    if (atomic_load(&g_sim.initialized)) {
        g_sim.forked = true;
        atomic_store(&g_sim.initialized, false);
    }
    sim_unlock();
}

static int g_driver_version = SIM_DRIVER_VERSION;

int sim_driver_version(void)
{
    sim_setup();
    return g_driver_version;
}

static void setup_once(void)
{
    int ndev = (int)env_number("FRAGPOOL_SIM_DEVICES", 1, 0, SIM_MAX_DEVICES);
    size_t mb = env_number("FRAGPOOL_SIM_CAPACITY_MB", 16384, 1, 1ULL << 24);
    unsigned nth = (unsigned)env_number("FRAGPOOL_SIM_FAIL_NTH", 0, 0, UINT_MAX);
    g_driver_version = (int)env_number("FRAGPOOL_SIM_DRIVER_VERSION", SIM_DRIVER_VERSION, 2000,
                                       SIM_DRIVER_VERSION);
    g_sim.ndev = ndev;
    g_sim.vmm = env_number("FRAGPOOL_SIM_VMM", 1, 0, 1) != 0;
    g_sim.vmm_rdma = env_number("FRAGPOOL_SIM_VMM_RDMA", 1, 0, 1) != 0;
    g_sim.fence_us = (unsigned)env_number("FRAGPOOL_SIM_FENCE_US", 0, 0, 1000000);
    for (int d = 0; d < ndev; d++) {
        g_sim.dev[d].primary.dev = d;
        g_sim.dev[d].primary.primary = true;
        g_sim.dev[d].legacy = sim_stream_new(d, NULL, SIM_STREAM_LEGACY, 0, 0);
    }
    sim_share_setup();
    sim_mem_setup(ndev, mb << 20, nth);
    sim_stream_setup();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void sim_setup(void)
{
    pthread_once(&g_once, setup_once);
}

/* ---- initialization and devices ------------------------------------------ */

CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_setup();
    if (g_sim.forked)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (g_sim.ndev == 0)
        return CUDA_ERROR_NO_DEVICE;
    atomic_store(&g_sim.initialized, true);
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = sim_driver_version();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && count == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *count = g_sim.ndev;
    return rc;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && device == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = sim_check_dev(ordinal);
    if (rc == CUDA_SUCCESS)
        *device = ordinal;
    return rc;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    static const char kName[] = "fragpool simulated device";
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (name == NULL || len <= 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = sim_check_dev(dev);
    if (rc == CUDA_SUCCESS)
        snprintf(name, (size_t)len, "%s", kName);
    return rc;
}

/* A PCI bus id of the form the driver gives ("0000:BB:00.0"), one bus per
 * simulated device, so that NVML can be asked about it (the shim's OOM
 * report does; tests put a stand-in libnvidia-ml.so.1 in front). */
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (pciBusId == NULL || len <= 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = sim_check_dev(dev);
    if (rc == CUDA_SUCCESS)
        snprintf(pciBusId, (size_t)len, "0000:%02X:00.0", 0x10 + (unsigned)dev);
    return rc;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    static const char kPrefix[8] = "fpsimd-"; /* 7 chars + NUL */
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && uuid == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = sim_check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t who = sim_share_identity(); /* one GPU per process, or per shared file */
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    memcpy(uuid->bytes, kPrefix, 7);
    memcpy(uuid->bytes + 7, &who, sizeof who);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid(uuid, dev);
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && bytes == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = sim_check_dev(dev);
    if (rc == CUDA_SUCCESS)
        sim_mem_info(dev, NULL, bytes);
    return rc;
}

/* Attribute values of an H100/H200-class part (compute capability 9.0).
 * Note: TEXTURE_ALIGNMENT (14) is 512 and is the pitch cuMemAllocPitch
 * rounds to; TEXTURE_PITCH_ALIGNMENT (51) is 32 as on real Hopper parts. */
static const struct {
    int attr;
    int value;
} kAttrs[] = {
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
    {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
    {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1980000},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, SIM_PITCH_ALIGN},
    {CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1},
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
    {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
    {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1},
    {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 2619000},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120},
    {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 52428800},
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
    {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
    {CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536},
    {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
    {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1}, /* FRAGPOOL_SIM_VMM */
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 1},
    /* GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: FRAGPOOL_SIM_VMM_RDMA;
     * MEM_DECOMPRESS_ALGORITHM_MASK 0: no decompression engine (an H200) */
};

/* 0 with *out set, or -1 for an attribute outside the enum's range.
 * Attributes in range but not listed read as 0. */
int sim_attr_value(CUdevice_attribute attr, int dev, int *out)
{
    if ((int)attr < 1 || (int)attr > 255)
        return -1;
    *out = 0;
    if (attr == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)
        *out = dev + 1;
    for (size_t i = 0; i < sizeof kAttrs / sizeof kAttrs[0]; i++)
        if (kAttrs[i].attr == (int)attr)
            *out = kAttrs[i].value;
    if (attr == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
        *out = g_sim.vmm;
    if (attr == CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED)
        *out = g_sim.vmm && g_sim.vmm_rdma;
    return 0;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && pi == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = sim_check_dev(dev);
    if (rc == CUDA_SUCCESS && sim_attr_value(attrib, dev, pi) != 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    return rc;
}

/* ---- contexts: teardown --------------------------------------------------- */

/* Frees everything a dying context owns (lock held; drops it inside). */
static void ctx_teardown(sim_ctx *c)
{
    sim_device_sync(c->dev);
    sim_ctx_retire_streams(c);
    sim_mem_release_ctx(c);
}

/* ---- contexts: primary ----------------------------------------------------- */

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = sim_check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    sim_ctx *p = &g_sim.dev[dev].primary;
    if (p->retain == 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--p->retain == 0) {
        p->active = false;
        ctx_teardown(p);
    }
    sim_unlock();
    return rc;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUresult rc = sim_check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    sim_ctx *p = &g_sim.dev[dev].primary;
    if (p->active) {
        p->active = false;
        ctx_teardown(p);
    }
    p->retain = 0;
    p->flags = 0;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

/* ---- contexts: created ------------------------------------------------------ */

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_ctx *c = (sim_ctx *)ctx;
    sim_lock();
    if (c == NULL || !sim_ctx_known(c) || c->primary) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        c->active = false;
        c->destroyed = true;
        ctx_teardown(c);
    }
    sim_unlock();
    if (rc == CUDA_SUCCESS)
        sim_ctx_forget_current(c);
    return rc;
}

CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

/* ---- contexts: synchronize ------------------------------------------------- */

CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_ctx *c = NULL;
    sim_lock();
    rc = sim_ctx_from_handle(ctx, &c);
    if (rc == CUDA_SUCCESS)
        rc = sim_capture_unsafe_check();
    if (rc == CUDA_SUCCESS)
        rc = sim_capture_conflict(c->dev, false, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (rc == CUDA_SUCCESS)
        sim_device_sync(c->dev);
    if (rc == CUDA_SUCCESS)
        sim_pool_synced(c->dev);
    sim_unlock();
    return rc;
}

CUresult cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

/* The driver's rules: flags must be 0; the current context gains access
 * to the memory of peerContext's device (not its own, and once). */
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_ctx *c = NULL, *peer = NULL;
    sim_lock();
    rc = sim_ctx_current_locked(&c);
    if (rc == CUDA_SUCCESS)
        rc = peerContext ? sim_ctx_from_handle(peerContext, &peer) : CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS && peer->dev == c->dev)
        rc = CUDA_ERROR_INVALID_DEVICE;
    if (rc == CUDA_SUCCESS && (c->peers >> peer->dev) & 1)
        rc = (CUresult)704; /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED */
    if (rc == CUDA_SUCCESS)
        c->peers |= 1u << peer->dev;
    sim_unlock();
    return rc;
}
