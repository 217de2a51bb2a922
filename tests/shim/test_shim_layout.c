/* test_shim_layout.c - deferred reuse costs no memory.
 *
 * A variable-shape workload (long-lived weights, then steps whose
 * activation sizes change every step, freed in reverse, with work still
 * queued on a busy stream and 64 idle non-blocking streams alive, as
 * PyTorch's stream pool leaves them) runs through cuMemAlloc/cuMemFree
 * under the shim.  The same sequence goes through a private pool with
 * frees that take effect at once (the synchronous model that `fragpool
 * replay` runs).  The device's peak bytes in use must equal the model's
 * peak reserved: deferral changes no placement, in virtual-memory segments
 * (the default; the model counts pages) and in classic ones
 * (expandable_segments:False).  Run under every policy:
 * deferred (default), free_policy:sync, and deferred on a driver without
 * context events (FRAGPOOL_SIM_DRIVER_VERSION=12040).
 */
#include "shim_test.h"
#include "fp_pool.h"
#include "fpsim.h"
#include <stdlib.h>
#include <unistd.h>

enum { kIdleStreams = 64, kSteps = 40, kLayers = 12, kLive = 3 * kLayers + 8 };

/* ---- the model: a pool whose backend hands out address space only ----- */

static uint64_t next_addr = 1ull << 40;

static int m_reserve(void *ud, size_t size, uint64_t *addr)
{
    (void)ud;
    *addr = next_addr;
    next_addr += (size + (2u << 20)) & ~(uint64_t)((2u << 20) - 1);
    return 0;
}

static int m_release(void *ud, uint64_t addr, size_t size)
{
    (void)ud, (void)addr, (void)size;
    return 0;
}

/* Virtual-memory segments (the default): the pool counts its pages. */
static size_t m_granularity(void *ud)
{
    (void)ud;
    return 2u << 20;
}

static int m_reserve_va(void *ud, size_t size, size_t align, uint64_t *addr)
{
    (void)align;
    return m_reserve(ud, size, addr);
}

static int m_pages(void *ud, uint64_t addr, size_t size)
{
    (void)ud, (void)addr, (void)size;
    return 0;
}

static int m_unmap(void *ud, uint64_t addr, size_t size, uint64_t freed_at)
{
    (void)freed_at;
    return m_pages(ud, addr, size);
}

/* ---- the workload -------------------------------------------------------- */

typedef struct ops {
    fp_pool *model;
    CUstream busy;
    uint64_t rng;
    unsigned steps_done;
} ops;

static uint64_t rnd(ops *o)
{
    o->rng ^= o->rng << 13, o->rng ^= o->rng >> 7, o->rng ^= o->rng << 17;
    return o->rng;
}

static void slow(void *arg)
{
    (void)arg;
    usleep(300);
}

typedef struct both {
    CUdeviceptr dev;
    uint64_t model;
} both;

static both alloc_both(ops *o, size_t n)
{
    both b;
    CU(cuMemAlloc_v2(&b.dev, n));
    assert_int_equal(fp_pool_alloc(o->model, n, &b.model), 0);
    return b;
}

static void free_both(ops *o, both b)
{
    CU(cuMemFree_v2(b.dev));
    assert_int_equal(fp_pool_free(o->model, b.model), 0);
}

/* One step: activations whose size follows a sequence length drawn anew,
 * queued behind slow work, then freed in reverse with more work queued. */
static void step(ops *o)
{
    size_t seq = 128 + (size_t)(rnd(o) % 1920);
    both act[kLive];
    int n = 0;
    for (int l = 0; l < kLayers; l++) {
        act[n++] = alloc_both(o, seq * 2048 * 2);      /* hidden states  */
        act[n++] = alloc_both(o, seq * seq / 4 + 512); /* attention      */
        act[n++] = alloc_both(o, 700 + rnd(o) % 9000); /* small temporaries */
        if (l % 3 == 0)
            CU(cuLaunchHostFunc(o->busy, slow, NULL));
    }
    while (n > 0) {
        free_both(o, act[--n]);
        if (n % 5 == 0)
            CU(cuLaunchHostFunc(o->busy, slow, NULL));
    }
    o->steps_done++;
}

static void peak_matches_the_model(void **state)
{
    (void)state;
    CUdevice dev;
    CUcontext ctx;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CUstream idle[kIdleStreams];
    for (int i = 0; i < kIdleStreams; i++)
        CU(cuStreamCreate(&idle[i], CU_STREAM_NON_BLOCKING));
    ops o = {.rng = 0x9e3779b97f4a7c15ull};
    CU(cuStreamCreate(&o.busy, CU_STREAM_NON_BLOCKING));
    fp_pool_opts opts;
    fp_pool_opts_default(&opts);
    opts.device_total = (size_t)16 << 30; /* the simulated device's */
    fp_backend be = {.reserve = m_reserve, .release = m_release};
    if (!fp_test_classic()) {
        be.granularity = m_granularity;
        be.reserve_va = m_reserve_va;
        be.free_va = m_release;
        be.map = m_pages;
        be.unmap = m_unmap;
    }
    assert_int_equal(fp_pool_create(&opts, &be, &o.model), 0);
    assert_int_equal(fpsim_reset_stats(0), 0);
    both weights[8];
    for (int i = 0; i < 8; i++)
        weights[i] = alloc_both(&o, (size_t)(3 + i) << 20);
    for (int s = 0; s < kSteps; s++)
        step(&o);
    fpsim_counts c;
    assert_int_equal(fpsim_stats(0, &c), 0);
    fp_pool_stats m;
    fp_pool_get_stats(o.model, &m);
    print_message("peak in use on the device %llu B, the model's peak reserved %lld B\n",
                  c.bytes_peak, (long long)m.reserved_bytes[FP_ALL].peak);
    assert_int_equal(c.bytes_peak, (unsigned long long)m.reserved_bytes[FP_ALL].peak);
    for (int i = 0; i < 8; i++)
        free_both(&o, weights[i]);
    CU(cuStreamSynchronize(o.busy));
    for (int i = 0; i < kIdleStreams; i++)
        CU(cuStreamDestroy_v2(idle[i]));
    CU(cuStreamDestroy_v2(o.busy));
    fp_pool_destroy(o.model, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(peak_matches_the_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
