/* tests/simdev/simdev_test.c - the shared helpers of the simdev tests
 * (simdev_test.h): host functions used as kernels, the counters, and the
 * start of every program.
 */
#include "simdev_test.h"

CUcontext g_ctx0;

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- host functions used as kernels --------------------------------------- */

void gate_fn(void *arg)
{
    gate *g = arg;
    while (!atomic_load(&g->open))
        sleep_ms(1);
    atomic_store(&g->ran, 1);
}

void slow_write_fn(void *arg)
{
    slow_write *w = arg;
    sleep_ms(w->ms);
    if (w->where != NULL)
        *w->where = w->value;
    atomic_store(&w->done, 1);
}

void observe_fn(void *arg)
{
    observe *o = arg;
    atomic_store(&o->seen, atomic_load(o->flag));
    atomic_store(&o->ran, 1);
}

void set_flag_fn(void *arg)
{
    sleep_ms(50);
    atomic_store((atomic_int *)arg, 1);
}

fpsim_counts stats(int dev)
{
    fpsim_counts c;
    assert_int_equal(fpsim_stats(dev, &c), 0);
    return c;
}

void simdev_env(void)
{
    setenv("FRAGPOOL_SIM_DEVICES", "2", 1);
    unsetenv("FRAGPOOL_SIM_CAPACITY_MB");
    unsetenv("FRAGPOOL_SIM_FAIL_NTH");
}

int simdev_setup(void **state)
{
    (void)state;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&g_ctx0, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(g_ctx0) != CUDA_SUCCESS)
        return -1;
    return 0;
}
