/* simdev/sim_control.c: the fpsim_* test-control API (fpsim.h).
 *
 * Not part of CUDA.  Each call loads the configuration first (as cuInit
 * would), so settings made before cuInit are kept by it.
 */
#include "sim.h"

static bool dev_ok(int dev)
{
    return dev >= 0 && dev < g_sim.ndev;
}

int fpsim_device_count(void)
{
    sim_setup();
    return g_sim.ndev;
}

int fpsim_set_capacity(int dev, size_t bytes)
{
    sim_setup();
    if (dev != -1 && !dev_ok(dev))
        return -1;
    for (int d = 0; d < g_sim.ndev; d++)
        if (dev == -1 || d == dev)
            sim_mem_set_capacity(d, bytes);
    return 0;
}

void fpsim_fail_nth(unsigned n)
{
    sim_setup();
    sim_mem_fail_nth(n);
}

int fpsim_stats(int dev, fpsim_counts *out)
{
    sim_setup();
    if (!dev_ok(dev) || out == NULL)
        return -1;
    sim_lock();
    sim_mem_stats(dev, out);
    const sim_device *d = &g_sim.dev[dev];
    out->streams_created = d->streams_created;
    out->streams_live = d->streams_live;
    out->streams_draining = d->streams_draining;
    out->ops_executed = d->ops_executed;
    out->device_syncs = d->device_syncs;
    sim_unlock();
    return 0;
}

int fpsim_reset_stats(int dev)
{
    sim_setup();
    if (dev != -1 && !dev_ok(dev))
        return -1;
    sim_lock();
    for (int d = 0; d < g_sim.ndev; d++) {
        if (dev != -1 && d != dev)
            continue;
        sim_mem_reset_stats(d);
        g_sim.dev[d].streams_created = 0;
        g_sim.dev[d].ops_executed = 0;
        g_sim.dev[d].device_syncs = 0;
    }
    sim_unlock();
    return 0;
}

int fpsim_range(unsigned long long ptr, unsigned long long *base, size_t *size)
{
    sim_setup();
    sim_alloc a;
    if (sim_mem_find((CUdeviceptr)ptr, &a) != CUDA_SUCCESS)
        return -1;
    *base = a.base;
    *size = a.size;
    return 0;
}

int fpsim_vmm_access(unsigned long long ptr, unsigned *devices)
{
    sim_setup();
    sim_alloc a;
    if (devices == NULL || sim_mem_find((CUdeviceptr)ptr, &a) != CUDA_SUCCESS ||
        a.kind != SIM_MEM_VMM)
        return -1;
    *devices = a.access;
    return 0;
}
