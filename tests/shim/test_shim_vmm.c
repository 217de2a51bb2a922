/* test_shim_vmm.c - virtual-memory segments under the shim
 * (expandable_segments:True) on the simulated device.
 *
 * Run by ctest under several configurations; argv[1] picks the cases:
 *   (none)  the shared ResNet trace through cuMemAlloc/cuMemFree holds at
 *           most 1.05x its peak allocated (the simulated device's own peak
 *           of physical bytes), every block's ends keep what was written;
 *           many alloc/free rounds keep every live block intact; a VMM
 *           block gets a fragpool IPC handle (no driver one exists); an
 *           allocation during stream capture passes over a fresh free; the
 *           single-device peer path (enabling access to itself is refused
 *           by the driver and changes nothing).
 *   cap     under max_reserved_mb:64 a request needs idle pages of a
 *           freed block: they are unmapped and mapped again, the device
 *           never holds more than the cap, and live data stays intact;
 *           the same during stream capture (no wait allowed: pages kept).
 *   own     with own_segment_mb:2, a 4 MiB block is exportable.
 *   peers   two devices: after cuCtxEnablePeerAccess(ctx0) from ctx1,
 *           device 1 may use every page of ctx0's pool, mapped before or
 *           after.
 *   page    vmm_page_mb:3 (not a multiple of 2 MiB): still serves; ctest
 *           checks the one line that says so.  Also run with
 *           vmm_page_mb:20000 and vmm_reserve_mb:67108865 (more than the
 *           16 GiB device allows): clamped, one line, still serves.
 *   headroom, headroom_off  a 128 MiB device, vmm_headroom_mb:32 or off:
 *           a map that would leave less than 32 MiB free takes idle pages
 *           back first; off, the pool maps on.
 * The summary JSON of the default and cap runs is checked by ctest too
 * (map/unmap/reclaim counts, host waits before unmap).
 */
#include "shim_test.h"
#include "fp_trace.h"
#include "fpsim.h"
#include <stdio.h>
#include <stdlib.h>

#define MIB ((size_t)1 << 20)

static void init(void)
{
    CUdevice dev;
    CUcontext ctx;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
}

static unsigned long long device_peak(void)
{
    fpsim_counts c;
    assert_int_equal(fpsim_stats(0, &c), 0);
    return c.bytes_peak;
}

/* ---- marks: a block's first and last 8 bytes say who it is ----------- */

static void mark(CUdeviceptr p, size_t size, uint64_t who)
{
    CU(cuMemcpyHtoD_v2(p, &who, sizeof who));
    if (size >= 16)
        CU(cuMemcpyHtoD_v2(p + size - 8, &who, sizeof who));
}

static void check_mark(CUdeviceptr p, size_t size, uint64_t who)
{
    uint64_t a = 0, b = who;
    CU(cuMemcpyDtoH_v2(&a, p, sizeof a));
    if (size >= 16)
        CU(cuMemcpyDtoH_v2(&b, p + size - 8, sizeof b));
    assert_int_equal(a, who);
    assert_int_equal(b, who);
}

/* ---- the trace ---------------------------------------------------------- */

typedef struct slot {
    uint64_t id;
    CUdeviceptr p;
    size_t size;
    int used;
} slot;

typedef struct table {
    slot *v;
    size_t cap;
} table;

static slot *find(table *t, uint64_t id, int insert)
{
    for (size_t i = (id * 0x9e3779b97f4a7c15ull) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (t->v[i].used == 1 && t->v[i].id == id)
            return &t->v[i];
        if (t->v[i].used == 0)
            return insert ? &t->v[i] : NULL;
    }
}

static size_t round512(size_t n)
{
    return (n + 511) / 512 * 512;
}

static void trace_holds_near_peak_allocated(void **state)
{
    (void)state;
    fp_trace tr;
    char err[256];
    int rc = fp_trace_load(FP_TEST_DATA "/resnet50_varres.csv.gz", &tr, err, sizeof err);
    if (rc)
        fail_msg("%s", err);
    table t = {.cap = 1 << 17};
    t.v = calloc(t.cap, sizeof *t.v);
    assert_non_null(t.v);
    init();
    fpsim_reset_stats(0);
    size_t live = 0, peak = 0, allocs = 0;
    for (size_t i = 0; i < tr.n; i++) {
        const fp_tracer_event *e = &tr.ev[i];
        if (e->op == 'a') {
            slot *s = find(&t, e->id, 1);
            assert_int_equal(s->used, 0);
            CU(cuMemAlloc_v2(&s->p, e->size));
            *s = (slot){.id = e->id, .p = s->p, .size = e->size, .used = 1};
            mark(s->p, e->size, e->id);
            live += round512(e->size);
            peak = live > peak ? live : peak;
            allocs++;
        } else if (e->op == 'f') {
            slot *s = find(&t, e->id, 0);
            if (!s)
                continue;
            check_mark(s->p, s->size, s->id);
            CU(cuMemFree_v2(s->p));
            live -= round512(s->size);
            s->used = 2; /* a tombstone keeps later probes going */
        }
    }
    unsigned long long held = device_peak();
    printf("trace: %zu allocations, peak allocated %.1f MiB, device peak %.1f MiB (%.4fx)\n",
           allocs, peak / (double)MIB, held / (double)MIB, (double)held / (double)peak);
    assert_true(peak > 1000 * MIB); /* the trace really ran */
    assert_true((double)held <= 1.05 * (double)peak);
    for (size_t i = 0; i < t.cap; i++)
        if (t.v[i].used == 1)
            CU(cuMemFree_v2(t.v[i].p));
    free(t.v);
    fp_trace_free(&tr);
}

/* ---- content over many rounds ------------------------------------------- */

enum { kBlocks = 48, kRounds = 60 };

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static void fill(CUdeviceptr p, size_t n, unsigned v)
{
    CU(cuMemsetD32_v2(p, v, n / 4));
}

static void check_fill(CUdeviceptr p, size_t n, unsigned v)
{
    unsigned *h = malloc(n);
    assert_non_null(h);
    CU(cuMemcpyDtoH_v2(h, p, n));
    for (size_t i = 0; i < n / 4; i++)
        if (h[i] != v)
            fail_msg("word %zu of a %zu B block: %#x, wrote %#x", i, n, h[i], v);
    free(h);
}

static void content_survives_rounds(void **state)
{
    (void)state;
    init();
    CUdeviceptr p[kBlocks] = {0};
    size_t n[kBlocks];
    unsigned v[kBlocks];
    for (int r = 0; r < kRounds; r++) {
        for (int k = 0; k < kBlocks; k++) {
            if (p[k] && rnd() % 2) {
                check_fill(p[k], n[k], v[k]);
                CU(cuMemFree_v2(p[k]));
                p[k] = 0;
            }
            if (!p[k]) { /* small (< 1 MiB) and large sizes, 4 B multiples */
                n[k] = rnd() % 3 ? (rnd() % (1 << 18) + 1) * 4 : (rnd() % (6 << 18) + 1) * 4;
                v[k] = (unsigned)rnd();
                CU(cuMemAlloc_v2(&p[k], n[k]));
                fill(p[k], n[k], v[k]);
            }
        }
    }
    for (int k = 0; k < kBlocks; k++) {
        check_fill(p[k], n[k], v[k]);
        CU(cuMemFree_v2(p[k]));
    }
}

/* ---- graph capture ---------------------------------------------------------- */

/* While a stream is captured no fence can be made: a block freed since
 * the last one is passed over (a fresh range is mapped: a host call, fine
 * during capture), and the freed memory is handed out again after. */
static void capture_passes_over_fresh_frees(void **state)
{
    (void)state;
    init();
    CUstream s;
    CUgraph g;
    CUdeviceptr a, b, c;
    CU(cuStreamCreate(&s, 0));
    CU(cuMemAlloc_v2(&a, 4 * MIB));
    fill(a, 4 * MIB, 0xa);
    CU(cuMemFree_v2(a));
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cuMemAlloc_v2(&b, 4 * MIB));
    CU(cuStreamEndCapture(s, &g));
    assert_true(b + 4 * MIB <= a || b >= a + 4 * MIB);
    fill(b, 4 * MIB, 0xb);
    CU(cuMemAlloc_v2(&c, 4 * MIB)); /* no capture: a's block, made safe */
    assert_int_equal(c, a);
    fill(c, 4 * MIB, 0xc);
    check_fill(b, 4 * MIB, 0xb);
    CU(cuGraphDestroy(g));
    CU(cuMemFree_v2(b));
    CU(cuMemFree_v2(c));
    CU(cuStreamDestroy(s));
}

/* ---- IPC and peers -------------------------------------------------------- */

/* A virtual-memory block has no driver IPC handle: it gets a fragpool
 * handle (test_shim_ipc, under the default, opens it in another process). */
static void vmm_block_gets_fragpool_handle(void **state)
{
    (void)state;
    init();
    CUdeviceptr p;
    CUipcMemHandle h;
    CU(cuMemAlloc_v2(&p, 4 * MIB));
    CU(cuIpcGetMemHandle(&h, p));
    assert_memory_equal(h.reserved, "fragpool", 8);
    CU(cuMemFree_v2(p));
}

/* own_segment_mb:2: the big block is classic memory of its own and gets
 * the driver's handle; the small one is virtual memory. */
static void own_segment_is_exportable(void **state)
{
    (void)state;
    init();
    CUdeviceptr big, small;
    CUipcMemHandle h;
    CU(cuMemAlloc_v2(&big, 4 * MIB));
    CU(cuMemAlloc_v2(&small, MIB / 2));
    CU(cuIpcGetMemHandle(&h, big));
    assert_true(memcmp(h.reserved, "fragpool", 8) != 0);
    CU(cuIpcGetMemHandle(&h, small));
    assert_memory_equal(h.reserved, "fragpool", 8);
    CU(cuMemFree_v2(small));
    CU(cuMemFree_v2(big));
}

/* One device: peer access to itself is the driver's to refuse; memory
 * mapped before and after still works. */
static void peer_access_single_device(void **state)
{
    (void)state;
    init();
    CUcontext ctx;
    CUdeviceptr a, b;
    CU(cuCtxGetCurrent(&ctx));
    CU(cuMemAlloc_v2(&a, 3 * MIB));
    fill(a, 3 * MIB, 0x5a5a5a5a);
    assert_int_equal(cuCtxEnablePeerAccess(ctx, 0), CUDA_ERROR_INVALID_DEVICE);
    CU(cuMemAlloc_v2(&b, 5 * MIB));
    fill(b, 5 * MIB, 0x1234);
    check_fill(a, 3 * MIB, 0x5a5a5a5a);
    check_fill(b, 5 * MIB, 0x1234);
    CU(cuMemFree_v2(a));
    CU(cuMemFree_v2(b));
}

/* The simulated driver's own view (cuMemGetAccess answers for a pooled
 * block as for a cudaMalloc: 0). */
static unsigned long long access_of(int dev, CUdeviceptr p)
{
    unsigned devices = 0;
    assert_int_equal(fpsim_vmm_access(p, &devices), 0);
    return (devices >> dev) & 1u ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : 0;
}

/* Two devices: device 1 enables access to context 0's memory; pages of
 * context 0's pool mapped before gain device 1's access then, pages mapped
 * after get it at once; a second enable is the driver's "already enabled";
 * context 1's own pages are not granted to device 0. */
static void peer_access_every_range(void **state)
{
    (void)state;
    CUdevice d1;
    CUcontext c0, c1;
    init();
    CU(cuCtxGetCurrent(&c0));
    CU(cuDeviceGet(&d1, 1));
    CU(cuDevicePrimaryCtxRetain(&c1, d1));
    CUdeviceptr small, large, later, own1;
    CU(cuMemAlloc_v2(&small, 4096));
    CU(cuMemAlloc_v2(&large, 12 * MIB));
    assert_int_equal(access_of(0, large), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    assert_int_equal(access_of(1, large), 0);
    assert_int_equal(access_of(1, small), 0);
    CU(cuCtxSetCurrent(c1));
    CU(cuMemAlloc_v2(&own1, 4 * MIB));
    CU(cuCtxEnablePeerAccess(c0, 0));
    assert_int_equal(access_of(1, large), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    assert_int_equal(access_of(1, large + 11 * MIB), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    assert_int_equal(access_of(1, small), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    assert_int_equal(access_of(0, own1), 0);
    assert_int_equal(cuCtxEnablePeerAccess(c0, 0), 704);
    CU(cuCtxSetCurrent(c0));
    CU(cuMemAlloc_v2(&later, 30 * MIB));
    assert_int_equal(access_of(1, later + 29 * MIB), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CU(cuMemFree_v2(small));
    CU(cuMemFree_v2(large));
    CU(cuMemFree_v2(later));
    CU(cuCtxSetCurrent(c1));
    CU(cuMemFree_v2(own1));
}

/* ---- reclaim under a cap --------------------------------------------------- */

static void reclaim_under_cap(void **state)
{
    (void)state;
    init();
    fpsim_reset_stats(0);
    CUdeviceptr a, l, b, c;
    CU(cuMemAlloc_v2(&a, 30 * MIB));
    CU(cuMemAlloc_v2(&l, 10 * MIB));
    fill(a, 30 * MIB, 0xaaaa);
    fill(l, 10 * MIB, 0x1111);
    CU(cuMemFree_v2(a));             /* its 30 MiB stay mapped, idle */
    CU(cuMemAlloc_v2(&b, 40 * MIB)); /* fits only past l: needs a's pages */
    fill(b, 40 * MIB, 0xbbbb);
    check_fill(l, 10 * MIB, 0x1111);
    CU(cuMemFree_v2(b));
    CU(cuMemAlloc_v2(&c, 28 * MIB)); /* back in a's hole: pages again */
    fill(c, 28 * MIB, 0xcccc);
    check_fill(l, 10 * MIB, 0x1111);
    check_fill(c, 28 * MIB, 0xcccc);
    unsigned long long held = device_peak();
    printf("cap: device peak %.1f MiB under a 64 MiB cap\n", held / (double)MIB);
    assert_true(held <= 64 * MIB);
    CUdeviceptr x;
    assert_int_equal(cuMemAlloc_v2(&x, 60 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
    CU(cuMemFree_v2(c));
    CU(cuMemFree_v2(l));
}

/* Reclaim while a stream is captured: no host wait is allowed, so the
 * pages stay mapped (kept) until a later map reuses them or their range
 * goes; the data of every live block stays intact throughout. */
static void reclaim_during_capture_keeps_pages(void **state)
{
    (void)state;
    init();
    CUstream s;
    CUgraph g;
    CUdeviceptr a, l, b, c;
    CU(cuStreamCreate(&s, 0));
    CU(cuMemAlloc_v2(&a, 30 * MIB));
    CU(cuMemAlloc_v2(&l, 10 * MIB));
    fill(l, 10 * MIB, 0x2222);
    CU(cuMemFree_v2(a));
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cuMemAlloc_v2(&b, 40 * MIB));
    CU(cuStreamEndCapture(s, &g));
    fpsim_counts k;
    assert_int_equal(fpsim_stats(0, &k), 0);
    printf("capture: device holds %.0f MiB for 50 MiB live\n", k.bytes_in_use / (double)MIB);
    assert_true(k.bytes_in_use <= 80 * MIB); /* at most a's 30 MiB kept over the cap */
    fill(b, 40 * MIB, 0x3333);
    check_fill(l, 10 * MIB, 0x2222);
    CU(cuMemAlloc_v2(&c, 12 * MIB)); /* a's hole: kept pages reused */
    fill(c, 12 * MIB, 0x4444);
    check_fill(b, 40 * MIB, 0x3333);
    check_fill(l, 10 * MIB, 0x2222);
    check_fill(c, 12 * MIB, 0x4444);
    CU(cuGraphDestroy(g));
    CU(cuMemFree_v2(b));
    CU(cuMemFree_v2(c));
    CU(cuMemFree_v2(l));
    CU(cuStreamDestroy(s));
}

/* ---- headroom left for the driver ------------------------------------------ */

/* A 128 MiB device.  a (40 MiB) and l (10 MiB) mapped, a freed; b (60
 * MiB) fits only past l, on new pages.  With vmm_headroom_mb:32 the
 * device would keep 18 MiB free: 14 MiB of a's idle pages go first, and
 * 32 MiB stay free for the driver.  With it off the pool maps on and the
 * device keeps 18 MiB.  Live data stays intact either way. */
static void headroom_case(size_t want_in_use)
{
    init();
    fpsim_reset_stats(0);
    CUdeviceptr a, l, b;
    CU(cuMemAlloc_v2(&a, 40 * MIB));
    CU(cuMemAlloc_v2(&l, 10 * MIB));
    fill(l, 10 * MIB, 0x5555);
    CU(cuMemFree_v2(a));
    CU(cuMemAlloc_v2(&b, 60 * MIB));
    fill(b, 60 * MIB, 0x6666);
    check_fill(l, 10 * MIB, 0x5555);
    fpsim_counts k;
    assert_int_equal(fpsim_stats(0, &k), 0);
    printf("headroom: the device holds %.0f MiB of 128\n", k.bytes_in_use / (double)MIB);
    assert_int_equal(k.bytes_in_use, want_in_use);
    CU(cuMemFree_v2(b));
    CU(cuMemFree_v2(l));
}

static void headroom_kept_for_the_driver(void **state)
{
    (void)state;
    headroom_case(96 * MIB);
}

static void headroom_off_fills_on(void **state)
{
    (void)state;
    headroom_case(110 * MIB);
}

static void odd_page_still_serves(void **state)
{
    (void)state;
    init();
    CUdeviceptr p;
    CU(cuMemAlloc_v2(&p, 5 * MIB));
    fill(p, 5 * MIB, 0x77);
    check_fill(p, 5 * MIB, 0x77);
    CU(cuMemFree_v2(p));
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    const struct CMUnitTest base[] = {
        cmocka_unit_test(trace_holds_near_peak_allocated),
        cmocka_unit_test(content_survives_rounds),
        cmocka_unit_test(vmm_block_gets_fragpool_handle),
        cmocka_unit_test(capture_passes_over_fresh_frees),
        cmocka_unit_test(peer_access_single_device),
    };
    const struct CMUnitTest cap[] = {cmocka_unit_test(reclaim_under_cap),
                                     cmocka_unit_test(reclaim_during_capture_keeps_pages)};
    const struct CMUnitTest own[] = {cmocka_unit_test(own_segment_is_exportable)};
    const struct CMUnitTest page[] = {cmocka_unit_test(odd_page_still_serves)};
    const struct CMUnitTest peers[] = {cmocka_unit_test(peer_access_every_range)};
    const struct CMUnitTest headroom[] = {cmocka_unit_test(headroom_kept_for_the_driver)};
    const struct CMUnitTest headroom_off[] = {cmocka_unit_test(headroom_off_fills_on)};
    if (!strcmp(mode, "headroom"))
        return cmocka_run_group_tests(headroom, NULL, NULL);
    if (!strcmp(mode, "headroom_off"))
        return cmocka_run_group_tests(headroom_off, NULL, NULL);
    if (!strcmp(mode, "peers"))
        return cmocka_run_group_tests(peers, NULL, NULL);
    if (!strcmp(mode, "cap"))
        return cmocka_run_group_tests(cap, NULL, NULL);
    if (!strcmp(mode, "own"))
        return cmocka_run_group_tests(own, NULL, NULL);
    if (!strcmp(mode, "page"))
        return cmocka_run_group_tests(page, NULL, NULL);
    return cmocka_run_group_tests(base, NULL, NULL);
}
