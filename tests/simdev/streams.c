/* tests/simdev/streams.c - streams and events of the simulated driver:
 * asynchronous work and events in stream order, cuStreamWaitEvent, the
 * legacy and per-thread default streams, stream-ordered allocation, stream
 * destruction with work in flight (it returns at once, the work still
 * runs, a context teardown waits for it), and threads submitting at once.
 */
#include "simdev_test.h"

/* ---- streams ---------------------------------------------------------------------- */

static void test_stream_async_and_events(void **state)
{
    (void)state;
    CUstream s = NULL;
    CUevent start = NULL, end = NULL;
    CUdeviceptr d = 0;
    int out = 0;
    gate g = {0};
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    OK(cuEventCreate(&end, CU_EVENT_DEFAULT));
    OK(cuEventQuery(end)); /* never recorded */
    OK(cuMemAlloc_v2(&d, sizeof(int)));
    OK(cuMemsetD32_v2(d, 0, 1));
    slow_write w = {.ms = 50, .where = (int *)(uintptr_t)d, .value = 42};
    OK(cuEventRecord(start, s));
    OK(cuLaunchHostFunc(s, gate_fn, &g));
    OK(cuLaunchHostFunc(s, slow_write_fn, &w));
    OK(cuMemcpyDtoHAsync_v2(&out, d, sizeof out, s));
    OK(cuEventRecord(end, s));
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    assert_int_equal(cuEventQuery(end), CUDA_ERROR_NOT_READY);
    OK(cuEventSynchronize(start)); /* earlier work completes, later waits */
    sleep_ms(20);
    assert_int_equal(cuEventQuery(end), CUDA_ERROR_NOT_READY); /* gate shut */
    assert_int_equal(atomic_load(&w.done), 0);
    atomic_store(&g.open, 1);
    OK(cuEventSynchronize(end));
    assert_int_equal(out, 42);
    OK(cuStreamQuery(s));
    float ms = 0;
    OK(cuEventElapsedTime(&ms, start, end));
    assert_true(ms >= 45.0f);
    OK(cuEventDestroy_v2(start));
    OK(cuEventDestroy_v2(end));
    assert_int_equal(cuEventQuery(end), CUDA_ERROR_INVALID_HANDLE);
    OK(cuStreamDestroy_v2(s));
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
    OK(cuMemFree_v2(d));
}

typedef struct order_probe {
    CUevent e[8];
    atomic_int stop;
    atomic_int violations;
} order_probe;

static void *order_poller(void *arg)
{
    order_probe *p = arg;
    while (!atomic_load(&p->stop))
        for (int i = 1; i < 8; i++)
            if (cuEventQuery(p->e[i]) == CUDA_SUCCESS && cuEventQuery(p->e[i - 1]) != CUDA_SUCCESS)
                atomic_fetch_add(&p->violations, 1);
    return NULL;
}

static void test_events_in_stream_order(void **state)
{
    (void)state;
    CUstream s = NULL;
    order_probe p = {0};
    slow_write w[8];
    OK(cuStreamCreate(&s, 0));
    for (int i = 0; i < 8; i++) {
        OK(cuEventCreate(&p.e[i], CU_EVENT_DISABLE_TIMING));
        w[i] = (slow_write){.ms = 5};
    }
    gate g = {0};
    /* record everything first: a never-recorded event counts as complete */
    OK(cuLaunchHostFunc(s, gate_fn, &g));
    for (int i = 0; i < 8; i++) {
        OK(cuLaunchHostFunc(s, slow_write_fn, &w[i]));
        OK(cuEventRecord(p.e[i], s));
    }
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, order_poller, &p), 0);
    atomic_store(&g.open, 1);
    OK(cuStreamSynchronize(s));
    atomic_store(&p.stop, 1);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&p.violations), 0);
    float ms;
    assert_int_equal(cuEventElapsedTime(&ms, p.e[0], p.e[1]), CUDA_ERROR_INVALID_HANDLE);
    for (int i = 0; i < 8; i++)
        OK(cuEventDestroy_v2(p.e[i]));
    OK(cuStreamDestroy_v2(s));
}

static void test_stream_wait_event(void **state)
{
    (void)state;
    CUstream a = NULL, b = NULL;
    CUevent e = NULL;
    gate g = {0};
    atomic_int flag = 0;
    observe o = {.flag = &flag};
    OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    OK(cuLaunchHostFunc(a, gate_fn, &g));
    OK(cuLaunchHostFunc(a, set_flag_fn, &flag));
    OK(cuEventRecord(e, a));
    OK(cuStreamWaitEvent(b, e, 0));
    OK(cuLaunchHostFunc(b, observe_fn, &o));
    assert_int_equal(cuStreamQuery(b), CUDA_ERROR_NOT_READY); /* gate shut */
    atomic_store(&g.open, 1);
    OK(cuStreamSynchronize(b));
    assert_int_equal(atomic_load(&o.seen), 1);
    assert_int_equal(cuStreamWaitEvent(b, e, 2), CUDA_ERROR_INVALID_VALUE);
    OK(cuEventDestroy_v2(e));
    OK(cuStreamDestroy_v2(a));
    OK(cuStreamDestroy_v2(b));
}

static void test_legacy_stream_semantics(void **state)
{
    (void)state;
    CUstream blocking = NULL, nonblocking = NULL;
    atomic_int a = 0, b = 0, c = 0;
    gate g = {0};
    observe oa = {.flag = &a}, ob = {.flag = &b}, oc = {.flag = &c};
    OK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    OK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
    /* legacy work waits for earlier work of blocking streams ... */
    OK(cuLaunchHostFunc(blocking, set_flag_fn, &a));
    OK(cuLaunchHostFunc(NULL, observe_fn, &oa));
    /* ... but not for non-blocking streams */
    OK(cuLaunchHostFunc(nonblocking, gate_fn, &g));
    OK(cuLaunchHostFunc(nonblocking, set_flag_fn, &b));
    OK(cuLaunchHostFunc(CU_STREAM_LEGACY, observe_fn, &ob));
    OK(cuStreamSynchronize(NULL));
    assert_int_equal(atomic_load(&oa.seen), 1);
    assert_int_equal(atomic_load(&ob.ran), 1);
    assert_int_equal(atomic_load(&ob.seen), 0);
    assert_int_equal(atomic_load(&g.ran), 0); /* still blocked */
    /* work on a blocking stream waits for earlier legacy work */
    OK(cuLaunchHostFunc(NULL, set_flag_fn, &c));
    OK(cuLaunchHostFunc(blocking, observe_fn, &oc));
    OK(cuStreamSynchronize(blocking));
    assert_int_equal(atomic_load(&oc.seen), 1);
    /* a synchronous copy waits for earlier blocking-stream work */
    CUdeviceptr d = 0;
    int out = 0;
    OK(cuMemAlloc_v2(&d, sizeof(int)));
    OK(cuMemsetD32_v2(d, 0, 1));
    slow_write w = {.ms = 50, .where = (int *)(uintptr_t)d, .value = 7};
    OK(cuLaunchHostFunc(blocking, slow_write_fn, &w));
    OK(cuMemcpyDtoH_v2(&out, d, sizeof out));
    assert_int_equal(out, 7);
    /* cuMemFree synchronizes the whole device, non-blocking streams too */
    fpsim_counts c0 = stats(0);
    atomic_store(&g.open, 1);
    OK(cuMemFree_v2(d));
    assert_int_equal(atomic_load(&b), 1);
    assert_int_equal(stats(0).device_syncs, c0.device_syncs + 1);
    OK(cuStreamDestroy_v2(blocking));
    OK(cuStreamDestroy_v2(nonblocking));
}

static void test_per_thread_stream(void **state)
{
    (void)state;
    gate g = {0};
    atomic_int flag = 0;
    observe o = {.flag = &flag};
    CUdeviceptr d = 0;
    unsigned flags = 99;
    OK(cuLaunchHostFunc_ptsz(NULL, gate_fn, &g));
    assert_int_equal(cuStreamQuery_ptsz(NULL), CUDA_ERROR_NOT_READY);
    assert_int_equal(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
    OK(cuStreamGetFlags_ptsz(NULL, &flags));
    assert_int_equal(flags, 0);
    /* the per-thread stream is blocking: legacy work waits for it */
    OK(cuLaunchHostFunc_ptsz(NULL, set_flag_fn, &flag));
    OK(cuLaunchHostFunc(NULL, observe_fn, &o));
    atomic_store(&g.open, 1);
    OK(cuStreamSynchronize(NULL));
    assert_int_equal(atomic_load(&o.seen), 1);
    OK(cuStreamSynchronize_ptsz(NULL));
    OK(cuMemAllocAsync_ptsz(&d, 256, NULL));
    OK(cuMemsetD8Async_ptsz(d, 1, 256, NULL));
    OK(cuMemFreeAsync_ptsz(d, NULL));
    OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
}

static void test_stream_ordered_alloc(void **state)
{
    (void)state;
    CUstream s = NULL;
    CUdeviceptr d = 0;
    gate g = {0};
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    fpsim_counts c0 = stats(0);
    OK(cuMemAllocAsync(&d, 3000, s));
    OK(cuMemsetD8Async(d, 0x5a, 3000, s));
    OK(cuLaunchHostFunc(s, gate_fn, &g));
    OK(cuMemFreeAsync(d, s));
    fpsim_counts c1 = stats(0);
    assert_int_equal(c1.async_alloc_calls, c0.async_alloc_calls + 1);
    assert_int_equal(c1.live_allocations, c0.live_allocations + 1); /* pending */
    assert_int_equal(cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemFreeAsync(d, s), CUDA_ERROR_INVALID_VALUE);
    atomic_store(&g.open, 1);
    OK(cuStreamSynchronize(s));
    fpsim_counts c2 = stats(0);
    assert_int_equal(c2.live_allocations, c0.live_allocations);
    assert_int_equal(c2.bytes_in_use, c0.bytes_in_use);
    assert_int_equal(c2.async_free_calls, c0.async_free_calls + 1);
    /* cuMemFree of a stream-ordered allocation does not synchronize */
    OK(cuMemAllocAsync(&d, 100, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemFree_v2(d));
    assert_int_equal(stats(0).device_syncs, c2.device_syncs);
    OK(cuStreamDestroy_v2(s));
}

/* Polls until device dev has no draining stream left: their workers reap
 * them after the last queued operation.  False after about 10 s. */
static bool drained(int dev)
{
    for (int i = 0; i < 10000; i++) {
        if (stats(dev).streams_draining == 0)
            return true;
        sleep_ms(1);
    }
    return false;
}

/* Like the real driver, cuStreamDestroy returns at once; the queued work
 * still runs, in order, and an event recorded before completes later. */
static void test_stream_destroy_returns(void **state)
{
    (void)state;
    CUstream s = NULL;
    CUevent e = NULL;
    CUdeviceptr d = 0, a = 0;
    int prio = 1, lo = 1, hi = 1, out = 0, back = 0;
    unsigned flags = 0;
    OK(cuCtxGetStreamPriorityRange(&lo, &hi));
    OK(cuStreamCreateWithPriority(&s, 0, -100));
    OK(cuStreamGetPriority(s, &prio));
    assert_int_equal(prio, hi);
    OK(cuEventCreate(&e, CU_EVENT_DEFAULT));
    OK(cuMemAlloc_v2(&d, sizeof(int)));
    slow_write w = {.ms = 100, .where = (int *)(uintptr_t)d, .value = 42};
    fpsim_counts c0 = stats(0);
    OK(cuMemAllocAsync(&a, sizeof(int), s));
    OK(cuLaunchHostFunc(s, slow_write_fn, &w));       /* d = 42 */
    OK(cuMemcpyDtoDAsync_v2(a, d, sizeof(int), s));   /* a = 42 */
    OK(cuMemsetD32Async(d, 7, 1, s));                 /* d = 7 */
    OK(cuMemcpyDtoHAsync_v2(&out, a, sizeof out, s)); /* out = 42 */
    OK(cuMemFreeAsync(a, s));
    OK(cuEventRecord(e, s));
    OK(cuStreamDestroy_v2(s));
    assert_int_equal(atomic_load(&w.done), 0); /* did not wait */
    fpsim_counts c1 = stats(0);
    assert_int_equal(c1.streams_live, c0.streams_live - 1);
    assert_int_equal(c1.streams_draining, c0.streams_draining + 1);
    assert_int_equal(c1.live_allocations, c0.live_allocations + 1); /* a */
    /* the handle is invalid at once */
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuStreamGetFlags(s, &flags), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuLaunchHostFunc(s, slow_write_fn, &w), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuMemsetD32Async(d, 1, 1, s), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuEventRecord(e, s), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
    /* the event recorded before the destroy completes after the work */
    assert_int_equal(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    OK(cuEventSynchronize(e));
    assert_int_equal(atomic_load(&w.done), 1);
    assert_int_equal(out, 42);
    OK(cuMemcpyDtoH_v2(&back, d, sizeof back));
    assert_int_equal(back, 7);
    OK(cuEventQuery(e));
    assert_true(drained(0));
    assert_int_equal(stats(0).live_allocations, c0.live_allocations);
    /* an idle stream goes at once, with nothing to drain */
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuLaunchHostFunc(s, slow_write_fn, &(slow_write){.ms = 0}));
    OK(cuStreamSynchronize(s));
    OK(cuStreamDestroy_v2(s));
    assert_int_equal(stats(0).streams_draining, c0.streams_draining);
    OK(cuEventDestroy_v2(e));
    OK(cuMemFree_v2(d));
    assert_int_equal(cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuStreamCreate(&s, 4), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchHostFunc((CUstream)&w, slow_write_fn, &w), CUDA_ERROR_INVALID_HANDLE);
}

/* Device-wide waits and legacy ordering still see a destroyed stream's
 * queued work. */
static void test_destroyed_stream_syncs(void **state)
{
    (void)state;
    CUstream s = NULL, b = NULL;
    CUevent e = NULL;
    CUdeviceptr d = 0;
    slow_write w1 = {.ms = 100}, w2 = {.ms = 100};
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuLaunchHostFunc(s, slow_write_fn, &w1));
    OK(cuStreamDestroy_v2(s));
    assert_int_equal(atomic_load(&w1.done), 0);
    OK(cuCtxSynchronize());
    assert_int_equal(atomic_load(&w1.done), 1);
    /* cuMemFree synchronizes the device, destroyed streams included */
    OK(cuMemAlloc_v2(&d, 64));
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuLaunchHostFunc(s, slow_write_fn, &w2));
    OK(cuStreamDestroy_v2(s));
    assert_int_equal(atomic_load(&w2.done), 0);
    OK(cuMemFree_v2(d));
    assert_int_equal(atomic_load(&w2.done), 1);
    /* legacy work, and a wait on its event, wait for a destroyed blocking
   * stream; the destroy itself returns with the gate still shut */
    gate g = {0};
    atomic_int flag = 0;
    observe ol = {.flag = &flag}, ow = {.flag = &flag};
    OK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    OK(cuLaunchHostFunc(s, gate_fn, &g));
    OK(cuLaunchHostFunc(s, set_flag_fn, &flag));
    OK(cuEventRecord(e, s));
    OK(cuStreamDestroy_v2(s));
    assert_int_equal(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
    OK(cuLaunchHostFunc(NULL, observe_fn, &ol));
    OK(cuStreamWaitEvent(b, e, 0));
    OK(cuLaunchHostFunc(b, observe_fn, &ow));
    sleep_ms(20);
    assert_int_equal(atomic_load(&ol.ran) + atomic_load(&ow.ran), 0);
    atomic_store(&g.open, 1);
    OK(cuStreamSynchronize(NULL));
    OK(cuStreamSynchronize(b));
    assert_int_equal(atomic_load(&ol.seen), 1);
    assert_int_equal(atomic_load(&ow.seen), 1);
    OK(cuEventDestroy_v2(e));
    OK(cuStreamDestroy_v2(b));
    assert_true(drained(0));
}

enum { kDrainStreams = 8 };

/* Queues slow work on kDrainStreams new streams of the current context and
 * destroys them at once. */
static void destroy_busy_streams(slow_write w[kDrainStreams])
{
    for (int i = 0; i < kDrainStreams; i++) {
        CUstream s = NULL;
        w[i] = (slow_write){.ms = 10 * (i + 1)};
        OK(cuStreamCreate(&s, i % 2 ? CU_STREAM_NON_BLOCKING : 0));
        OK(cuLaunchHostFunc(s, slow_write_fn, &w[i]));
        OK(cuStreamDestroy_v2(s));
    }
    assert_int_equal(atomic_load(&w[kDrainStreams - 1].done), 0);
}

static void assert_all_ran(slow_write w[kDrainStreams])
{
    for (int i = 0; i < kDrainStreams; i++)
        assert_int_equal(atomic_load(&w[i].done), 1);
}

/* Tearing a context down waits for its destroyed, still draining streams. */
static void test_destroyed_streams_ctx_teardown(void **state)
{
    (void)state;
    CUcontext made = NULL, p1 = NULL;
    slow_write w[kDrainStreams];
    fpsim_counts d0 = stats(1);
    OK(cuCtxCreate_v2(&made, 0, 1));
    destroy_busy_streams(w);
    assert_true(stats(1).streams_draining > d0.streams_draining);
    OK(cuCtxDestroy_v2(made));
    assert_all_ran(w);
    assert_int_equal(stats(1).streams_draining, d0.streams_draining);
    /* the same for a primary context reset */
    OK(cuDevicePrimaryCtxRetain(&p1, 1));
    OK(cuCtxPushCurrent_v2(p1));
    destroy_busy_streams(w);
    OK(cuCtxPopCurrent_v2(NULL));
    OK(cuDevicePrimaryCtxReset_v2(1));
    assert_all_ran(w);
    fpsim_counts d1 = stats(1);
    assert_int_equal(d1.streams_draining, d0.streams_draining);
    assert_int_equal(d1.streams_live, d0.streams_live);
}

/* ---- threads ------------------------------------------------------------------------- */

enum { kThreads = 8, kRounds = 150 };

typedef struct worker_arg {
    int id;
    int dev;
    int failures;
} worker_arg;

static int worker_round(CUstream s, unsigned *seed, int round)
{
    size_t n = 64 + (size_t)(rand_r(seed) % 20000);
    CUdeviceptr d = 0;
    unsigned char *buf = malloc(n);
    int bad = buf == NULL;
    bool async = round % 2 == 0;
    if (!bad)
        bad |= (async ? cuMemAllocAsync(&d, n, s) : cuMemAlloc_v2(&d, n)) != 0;
    if (!bad) {
        bad |= cuMemsetD8Async(d, (unsigned char)round, n, s) != CUDA_SUCCESS;
        bad |= cuMemcpyDtoHAsync_v2(buf, d, n, s) != CUDA_SUCCESS;
        bad |= cuStreamSynchronize(s) != CUDA_SUCCESS;
        bad |= buf[0] != (unsigned char)round || buf[n - 1] != (unsigned char)round;
        bad |= (async ? cuMemFreeAsync(d, s) : cuMemFree_v2(d)) != CUDA_SUCCESS;
    }
    free(buf);
    return bad;
}

static void *worker_main(void *arg)
{
    worker_arg *w = arg;
    CUcontext ctx = NULL;
    CUstream s = NULL;
    unsigned seed = (unsigned)w->id * 7919u + 1;
    if (cuDevicePrimaryCtxRetain(&ctx, w->dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
        cuStreamCreate(&s, w->id % 2 ? CU_STREAM_NON_BLOCKING : 0) != 0) {
        w->failures = 1;
        return NULL;
    }
    for (int r = 0; r < kRounds; r++)
        w->failures += worker_round(w->id % 3 == 0 ? CU_STREAM_PER_THREAD : s, &seed, r);
    w->failures += cuStreamDestroy_v2(s) != CUDA_SUCCESS;
    w->failures += cuDevicePrimaryCtxRelease_v2(w->dev) != CUDA_SUCCESS;
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t t[kThreads];
    worker_arg w[kThreads];
    CUcontext keep = NULL;
    OK(cuDevicePrimaryCtxRetain(&keep, 1)); /* keep device 1 alive */
    fpsim_counts c0 = stats(0), d0 = stats(1);
    for (int i = 0; i < kThreads; i++) {
        w[i] = (worker_arg){.id = i, .dev = i % 2};
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < kThreads; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    fpsim_counts c1 = stats(0), d1 = stats(1);
    assert_int_equal(c1.live_allocations, c0.live_allocations);
    assert_int_equal(c1.bytes_in_use, c0.bytes_in_use);
    assert_int_equal(d1.live_allocations, d0.live_allocations);
    assert_int_equal(c1.alloc_calls, c0.alloc_calls + kThreads / 2 * kRounds);
    OK(cuDevicePrimaryCtxRelease_v2(1));
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    simdev_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_async_and_events),
        cmocka_unit_test(test_events_in_stream_order),
        cmocka_unit_test(test_stream_wait_event),
        cmocka_unit_test(test_legacy_stream_semantics),
        cmocka_unit_test(test_per_thread_stream),
        cmocka_unit_test(test_stream_ordered_alloc),
        cmocka_unit_test(test_stream_destroy_returns),
        cmocka_unit_test(test_destroyed_stream_syncs),
        cmocka_unit_test(test_destroyed_streams_ctx_teardown),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests_name("simdev streams", tests, simdev_setup, NULL);
}
