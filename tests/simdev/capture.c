/* tests/simdev/capture.c - stream capture in the simulated driver: the
 * basics, what is illegal while capturing, capture and other threads, and
 * fork/join of captured streams through events.
 */
#include "simdev_test.h"

/* ---- capture ---------------------------------------------------------------------- */

static void test_capture_basics(void **state)
{
    (void)state;
    CUstream s = NULL;
    CUgraph graph = NULL;
    CUdeviceptr ga = 0, gb = 0, base = 0;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    cuuint64_t id = 0;
    atomic_int flag = 0;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    assert_int_equal(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    OK(cuStreamIsCapturing(s, &st));
    assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    assert_int_equal(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED),
                     CUDA_ERROR_ILLEGAL_STATE);
    OK(cuStreamIsCapturing(s, &st));
    assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    OK(cuStreamGetCaptureInfo(s, &st, &id));
    assert_true(id != 0);
    fpsim_counts c0 = stats(0);
    OK(cuLaunchHostFunc(s, set_flag_fn, &flag)); /* captured, not run */
    OK(cuMemAllocAsync(&ga, 1000, s));           /* graph allocation */
    OK(cuMemAllocAsync(&gb, 1000, s));
    OK(cuMemFreeAsync(gb, s)); /* freed inside the graph */
    assert_int_equal(cuMemGetAddressRange_v2(&base, NULL, gb), CUDA_ERROR_NOT_FOUND);
    OK(cuMemGetAddressRange_v2(&base, NULL, ga));
    fpsim_counts c1 = stats(0);
    assert_int_equal(c1.async_alloc_calls, c0.async_alloc_calls + 2);
    assert_int_equal(c1.live_allocations, c0.live_allocations + 1);
    CUdeviceptr plain = 0;
    OK(cuMemAlloc_v2(&plain, 64)); /* relaxed: allowed */
    OK(cuStreamEndCapture(s, &graph));
    assert_non_null(graph);
    assert_int_equal(cuStreamEndCapture(s, &graph), CUDA_ERROR_ILLEGAL_STATE);
    OK(cuStreamSynchronize(s));
    assert_int_equal(atomic_load(&flag), 0);
    OK(cuGraphDestroy(graph));
    OK(cuMemFree_v2(ga)); /* graph memory frees */
    OK(cuMemFree_v2(plain));
    assert_int_equal(stats(0).live_allocations, c0.live_allocations);
    OK(cuStreamDestroy_v2(s));
}

static void test_capture_rules(void **state)
{
    (void)state;
    CUstream s = NULL;
    CUgraph graph = (CUgraph)1;
    CUdeviceptr p = 0;
    CUstreamCaptureStatus st;
    OK(cuStreamCreate(&s, CU_STREAM_DEFAULT)); /* blocking */
    /* a global capture forbids cuMemAlloc and is invalidated by it */
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(cuMemAlloc_v2(&p, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    OK(cuStreamIsCapturing(s, &st));
    assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    assert_int_equal(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    assert_null(graph);
    /* legacy work would depend on the capturing blocking stream */
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    assert_int_equal(cuStreamIsCapturing(NULL, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    assert_int_equal(cuMemsetD8_v2(0, 0, 0), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    assert_int_equal(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    /* synchronizing a capturing stream is not allowed */
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    assert_int_equal(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    /* thread mode exchange */
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    OK(cuThreadExchangeStreamCaptureMode(&mode));
    assert_int_equal(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(cuMemAlloc_v2(&p, 64)); /* this thread: relaxed */
    OK(cuMemFree_v2(p));
    OK(cuThreadExchangeStreamCaptureMode(&mode));
    OK(cuStreamEndCapture(s, &graph));
    OK(cuGraphDestroy(graph));
    assert_int_equal(cuGraphDestroy(graph), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamDestroy_v2(s));
}

typedef struct other_thread {
    CUcontext ctx;
    CUresult rc;
    CUstream s;
} other_thread;

static void *alloc_elsewhere(void *arg)
{
    other_thread *o = arg;
    CUdeviceptr p = 0;
    cuCtxSetCurrent(o->ctx);
    o->rc = cuMemAlloc_v2(&p, 64);
    if (o->rc == CUDA_SUCCESS)
        cuMemFree_v2(p);
    return NULL;
}

static void *end_elsewhere(void *arg)
{
    other_thread *o = arg;
    CUgraph g = NULL;
    cuCtxSetCurrent(o->ctx);
    o->rc = cuStreamEndCapture(o->s, &g);
    return NULL;
}

static CUresult run_in_thread(void *(*fn)(void *), other_thread *o)
{
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fn, o), 0);
    pthread_join(t, NULL);
    return o->rc;
}

static void test_capture_threads(void **state)
{
    (void)state;
    CUstream s = NULL;
    CUgraph graph = NULL;
    other_thread o = {.ctx = g_ctx0};
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    o.s = s;
    /* a thread-local capture does not restrict other threads */
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    OK(run_in_thread(alloc_elsewhere, &o));
    assert_int_equal(run_in_thread(end_elsewhere, &o), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    OK(cuStreamEndCapture(s, &graph));
    OK(cuGraphDestroy(graph));
    /* a global capture does, and is invalidated */
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(run_in_thread(alloc_elsewhere, &o), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    OK(cuStreamDestroy_v2(s));
}

static void test_capture_fork_join(void **state)
{
    (void)state;
    CUstream a = NULL, b = NULL;
    CUevent fork = NULL, join = NULL;
    CUgraph graph = NULL;
    CUstreamCaptureStatus st;
    OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    OK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    OK(cuStreamBeginCapture_v2(a, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(cuEventRecord(fork, a));
    assert_int_equal(cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
    OK(cuStreamWaitEvent(b, fork, 0)); /* b joins */
    OK(cuStreamIsCapturing(b, &st));
    assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUdeviceptr g = 0;
    OK(cuMemAllocAsync(&g, 128, b)); /* graph alloc via b */
    OK(cuEventRecord(join, b));
    OK(cuStreamWaitEvent(a, join, 0));
    assert_int_equal(cuStreamEndCapture(b, &graph), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    OK(cuStreamEndCapture(a, &graph));
    OK(cuStreamIsCapturing(b, &st));
    assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
    OK(cuEventQuery(fork));
    OK(cuGraphDestroy(graph));
    OK(cuMemFree_v2(g));
    OK(cuEventDestroy_v2(fork));
    OK(cuEventDestroy_v2(join));
    OK(cuStreamDestroy_v2(a));
    OK(cuStreamDestroy_v2(b));
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    simdev_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_basics),
        cmocka_unit_test(test_capture_rules),
        cmocka_unit_test(test_capture_threads),
        cmocka_unit_test(test_capture_fork_join),
    };
    return cmocka_run_group_tests_name("simdev capture", tests, simdev_setup, NULL);
}
