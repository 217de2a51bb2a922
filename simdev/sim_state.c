/* simdev/sim_state.c: the simulator's shared state and its lock (a leaf).
 *
 * g_sim (sim.h) holds the devices, contexts, streams, events, captures and
 * graphs; everything in it is under g_sim.lock (lock 1 in sim.h) except
 * initialized (atomic) and what sim_setup (sim_core.c) writes once before
 * any device can be used.  This file calls no other file of simdev/.
 */
#include "sim.h"

#include <stdarg.h>
#include <stdio.h>

sim_state g_sim = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .progress = PTHREAD_COND_INITIALIZER,
};

void sim_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fragpool-sim: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void sim_lock(void)
{
    pthread_mutex_lock(&g_sim.lock);
}
void sim_unlock(void)
{
    pthread_mutex_unlock(&g_sim.lock);
}

CUresult sim_check_init(void)
{
    return atomic_load(&g_sim.initialized) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult sim_check_dev(CUdevice dev)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    return (dev >= 0 && dev < g_sim.ndev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
