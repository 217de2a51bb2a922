/* test_shim_capture.c - graph captures under the shim, on the simulated
 * device, against what the driver alone does:
 *  - failed_ends: an end-capture call that fails (no graph pointer, a
 *    stream that only joined, the wrong thread) leaves the capture under
 *    way: a reuse after it makes no fence inside it, and the capture
 *    still ends with a graph;
 *  - abandoned_*: a capture whose stream is destroyed, or whose context
 *    is destroyed or reset, is over: 200 allocate/free rounds of 32 MiB
 *    then reuse the pool's cache (the driver is asked at most 4 times);
 *  - relaxed_reuse: during a relaxed capture, 30 MiB freed and 30 MiB
 *    asked again fit a 64 MiB device, as without fragpool, and the
 *    capture stays valid (classic segments: the freed segment goes back
 *    with cuMemFree, which waits for the device as it would natively).
 *    Virtual-memory segments cannot unmap pages during a capture (no wait
 *    may break it), so there the request fails with
 *    CUDA_ERROR_OUT_OF_MEMORY, and the capture stays valid (docs/vmm.md);
 *  - relaxed_oom_message: a request that cannot be served during a
 *    relaxed capture reports its real size and the bytes reserved;
 *  - global_refuses / thread_local_refuses: cuMemAlloc during a capture
 *    whose mode forbids it returns what the driver returns
 *    (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture is then
 *    invalidated), though the cache could serve it; a thread the mode
 *    allows is served.
 * The capacity of device 0 is set before each case's context exists.
 */
#include "shim_test.h"
#include "fpsim.h"
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static CUdevice dev;

static unsigned long long sim(int what)
{
    fpsim_counts c;
    assert_int_equal(fpsim_stats(0, &c), 0);
    return what ? c.alloc_calls : c.bytes_in_use;
}

/* A fresh context (so a fresh pool), current, on a device of cap bytes. */
static CUcontext fresh_context(size_t cap)
{
    assert_int_equal(fpsim_set_capacity(0, cap), 0);
    CUcontext ctx;
    CU(cuCtxCreate_v2(&ctx, 0, dev));
    return ctx;
}

static void drop_context(CUcontext ctx)
{
    CU(cuCtxDestroy_v2(ctx));
    assert_int_equal(sim(0), 0);
    assert_int_equal(fpsim_set_capacity(0, (size_t)16 << 30), 0);
}

/* A block freed just now (not yet covered by a fence). */
static void free_fresh(size_t size)
{
    CUdeviceptr p;
    CU(cuMemAlloc_v2(&p, size));
    CU(cuMemFree_v2(p));
}

static void end_ok(CUstream s)
{
    CUgraph g = NULL;
    CU(cuStreamEndCapture(s, &g));
    assert_non_null(g);
    CU(cuGraphDestroy(g));
}

/* ---- failed ends ------------------------------------------------------------ */

static void *end_elsewhere(void *arg)
{
    CUgraph g = NULL;
    return (void *)(intptr_t)cuStreamEndCapture((CUstream)arg, &g);
}

static void failed_ends(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context((size_t)1 << 30);
    CUstream s, t;
    CUevent ev;
    CUdeviceptr p;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CU(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cuEventRecord(ev, s));
    CU(cuStreamWaitEvent(t, ev, 0)); /* t joins the capture */
    free_fresh(MiB);
    assert_int_equal(cuStreamEndCapture(s, NULL), CUDA_ERROR_INVALID_VALUE);
    CUgraph g = NULL;
    assert_int_equal(cuStreamEndCapture(t, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    CU(cuMemAlloc_v2(&p, MiB)); /* no fence may be made now */
    CU(cuMemFree_v2(p));
    end_ok(s);
    /* a thread-local capture ended from another thread: the wrong thread */
    free_fresh(MiB);
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    pthread_t th;
    void *r;
    assert_int_equal(pthread_create(&th, NULL, end_elsewhere, s), 0);
    pthread_join(th, &r);
    assert_int_equal((intptr_t)r, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU(cuThreadExchangeStreamCaptureMode(&m)); /* this thread may allocate */
    CU(cuMemAlloc_v2(&p, MiB));
    CU(cuMemFree_v2(p));
    CU(cuThreadExchangeStreamCaptureMode(&m));
    end_ok(s);
    CU(cuEventDestroy_v2(ev));
    CU(cuStreamDestroy_v2(t));
    CU(cuStreamDestroy_v2(s));
    drop_context(ctx);
}

/* ---- captures that never end ------------------------------------------------ */

/* 200 rounds of 32 MiB on a 256 MiB device: served from the cache, the
 * driver asked at most 4 times, nothing fails. */
static void rounds_reuse(void)
{
    unsigned long long calls = sim(1);
    int failed = 0;
    for (int i = 0; i < 200; i++) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, 32 * MiB) != CUDA_SUCCESS) {
            failed++;
            continue;
        }
        CU(cuMemFree_v2(p));
    }
    print_message("200 rounds: %d failed, %llu driver allocations\n", failed, sim(1) - calls);
    assert_int_equal(failed, 0);
    assert_true(sim(1) - calls <= 4);
}

static void abandoned_stream(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context(256 * MiB);
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuStreamDestroy_v2(s)); /* the capture ends with its stream */
    rounds_reuse();
    drop_context(ctx);
}

static void abandoned_context(void **state)
{
    (void)state;
    assert_int_equal(fpsim_set_capacity(0, 256 * MiB), 0);
    CUcontext other, ctx;
    CUstream s;
    CU(cuCtxCreate_v2(&other, 0, dev));
    CU(cuStreamCreate(&s, 0));
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuCtxDestroy_v2(other)); /* error recovery: the context goes */
    ctx = fresh_context(256 * MiB);
    rounds_reuse();
    drop_context(ctx);
}

static void abandoned_reset(void **state)
{
    (void)state;
    assert_int_equal(fpsim_set_capacity(0, 256 * MiB), 0);
    CUcontext primary;
    CUstream s;
    CU(cuDevicePrimaryCtxRetain(&primary, dev));
    CU(cuCtxPushCurrent_v2(primary));
    CU(cuStreamCreate(&s, 0));
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuDevicePrimaryCtxReset_v2(dev)); /* cudaDeviceReset: no retain left */
    CUcontext ctx = fresh_context(256 * MiB);
    rounds_reuse();
    drop_context(ctx);
    CUcontext popped;
    CU(cuCtxPopCurrent_v2(&popped));
}

/* ---- relaxed captures --------------------------------------------------------- */

/* Runs cuMemAlloc_v2(size) with stderr in a file: its result, the block
 * in *p, and the text in *msg (caller frees). */
static CUresult alloc_logged_p(size_t size, CUdeviceptr *p, char **msg);

/* a freed during the capture cannot be reused then.  Classic: its segment
 * goes back to the driver and the request is served.  Virtual memory: its
 * pages stay mapped until the device is done with them, so the request
 * fails, and the message counts those 30 MiB as fragpool's, not as
 * memory outside the pool. */
static void relaxed_reuse(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context(64 * MiB);
    CUstream s;
    CUdeviceptr a, c, b = 0;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuMemAlloc_v2(&a, 30 * MiB));
    CU(cuMemAlloc_v2(&c, 30 * MiB));
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cuMemFree_v2(a));
    char *msg;
    CUresult r = alloc_logged_p(30 * MiB, &b, &msg); /* the driver's memory suffices */
    printf("%s", msg);
    assert_int_equal(r, fp_test_classic() ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
    if (r != CUDA_SUCCESS) {
        assert_non_null(strstr(msg, "30.00 MiB reserved by fragpool"));
        assert_non_null(strstr(msg, "fragpool: and 30 MiB more of fragpool's: pages given "
                                    "back during the stream capture"));
        assert_null(strstr(msg, "outside the pool: 30 MiB"));
    }
    free(msg);
    end_ok(s);
    if (r == CUDA_SUCCESS)
        CU(cuMemFree_v2(b));
    CU(cuMemFree_v2(c));
    CU(cuStreamDestroy_v2(s));
    drop_context(ctx);
}

static CUresult alloc_logged_p(size_t size, CUdeviceptr *out, char **msg)
{
    char name[] = "/tmp/fp-capture-stderr-XXXXXX";
    int fd = mkstemp(name), saved = dup(2);
    assert_true(fd >= 0 && saved >= 0);
    unlink(name);
    fflush(stderr);
    dup2(fd, 2);
    CUresult r = cuMemAlloc_v2(out, size);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    *msg = calloc(1, (size_t)n + 1);
    assert_non_null(*msg);
    assert_int_equal(pread(fd, *msg, (size_t)n, 0), n);
    close(fd);
    return r;
}

/* The same, for a block the caller does not keep. */
static CUresult alloc_logged(size_t size, char **msg)
{
    CUdeviceptr p = 0;
    return alloc_logged_p(size, &p, msg);
}

/* A 40 MiB segment holds y and z (20 MiB each), w has one of 20 MiB: 4 MiB
 * of 64 are left.  z freed during the capture cannot be reused then, and
 * no whole segment is idle: the OOM reports 20 MiB asked, 60 reserved. */
static void relaxed_oom_message(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context(64 * MiB);
    CUstream s;
    CUdeviceptr x, y, z, w;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuMemAlloc_v2(&x, 40 * MiB));
    CU(cuMemFree_v2(x));
    CU(cuMemAlloc_v2(&y, 20 * MiB));
    CU(cuMemAlloc_v2(&z, 20 * MiB));
    CU(cuMemAlloc_v2(&w, 20 * MiB));
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cuMemFree_v2(z));
    char *msg;
    CUresult r = alloc_logged(20 * MiB, &msg);
    printf("%s", msg);
    assert_int_equal(r, CUDA_ERROR_OUT_OF_MEMORY);
    assert_non_null(strstr(msg, "Tried to allocate 20.00 MiB"));
    assert_non_null(strstr(msg, fp_test_classic() ? "60.00 MiB reserved by fragpool"
                                                  : "40.00 MiB reserved by fragpool"));
    free(msg);
    end_ok(s); /* the failure did not touch the capture */
    CU(cuMemFree_v2(y));
    CU(cuMemFree_v2(w));
    CU(cuStreamDestroy_v2(s));
    drop_context(ctx);
}

/* ---- modes that forbid cuMemAlloc ----------------------------------------------- */

static void *alloc_elsewhere(void *arg)
{
    (void)arg;
    CUdeviceptr p;
    CUresult r = cuMemAlloc_v2(&p, MiB);
    if (r == CUDA_SUCCESS)
        r = cuMemFree_v2(p);
    return (void *)(intptr_t)r;
}

static void *with_ctx(void *arg)
{
    if (cuCtxSetCurrent(arg) != CUDA_SUCCESS)
        return (void *)(intptr_t)CUDA_ERROR_INVALID_CONTEXT;
    return alloc_elsewhere(NULL);
}

static CUresult on_thread_with(CUcontext ctx)
{
    pthread_t th;
    void *r;
    assert_int_equal(pthread_create(&th, NULL, with_ctx, ctx), 0);
    pthread_join(th, &r);
    return (CUresult)(intptr_t)r;
}

static void global_refuses(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context((size_t)1 << 30);
    CUstream s;
    CUdeviceptr p = 0;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuMemAlloc_v2(&p, MiB)); /* the cache could serve the next */
    CU(cuMemFree_v2(p));
    CU(cuCtxSynchronize());
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(cuMemAlloc_v2(&p, MiB), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph g = NULL;
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    /* any thread in global mode is refused; one in relaxed mode is not */
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(on_thread_with(ctx), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU(cuThreadExchangeStreamCaptureMode(&m));
    CU(cuMemAlloc_v2(&p, MiB));
    CU(cuMemFree_v2(p));
    CU(cuThreadExchangeStreamCaptureMode(&m));
    end_ok(s);
    CU(cuStreamDestroy_v2(s));
    drop_context(ctx);
}

static void thread_local_refuses(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context((size_t)1 << 30);
    CUstream s;
    CUdeviceptr p = 0;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuMemAlloc_v2(&p, MiB));
    CU(cuMemFree_v2(p));
    CU(cuCtxSynchronize());
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU(on_thread_with(ctx)); /* other threads are not concerned */
    assert_int_equal(cuMemAlloc_v2(&p, MiB), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph g = NULL;
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CU(cuStreamDestroy_v2(s));
    drop_context(ctx);
}

static int setup(void **state)
{
    (void)state;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS)
        return -1;
    return in_fragpool((const void *)cuStreamDestroy_v2) ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(failed_ends),       cmocka_unit_test(abandoned_stream),
        cmocka_unit_test(abandoned_context), cmocka_unit_test(abandoned_reset),
        cmocka_unit_test(relaxed_reuse),     cmocka_unit_test(relaxed_oom_message),
        cmocka_unit_test(global_refuses),    cmocka_unit_test(thread_local_refuses),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
