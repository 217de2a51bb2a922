/* test_shim_defer.c - stream safety of deferred reuse, on the simulated
 * device (whose streams run on worker threads, so work really is still
 * in flight after the host moves on).
 *
 * The race: slow work on a non-blocking stream still reads block A; A is
 * freed; B is allocated and written on another stream.  B may well be A's
 * memory (the free returned at once and best fit hands A out again), but
 * the write must not land before the slow work is done: the work sees A
 * intact, and B ends up holding B's bytes.  The same when the slow stream
 * is destroyed with that work still queued, before or after the free (the
 * driver's destroy does not wait).  Also: same-stream reuse after
 * cuMemFreeAsync, and reuse with no fence after cuCtxSynchronize; the
 * per-thread default stream of one thread is not another's (one handle,
 * two streams); memory freed before a fence a stream waited for comes
 * back on that stream with no second fence, and still safely; several
 * threads reusing at the same moment (one fence covering the others, who
 * wait for it or queue behind it) are as safe as one.  Run
 * with free_policy:deferred (the default), with free_policy:sync, and
 * deferred on a driver without context events.
 */
#include "shim_test.h"
#include "fpsim.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

static CUcontext ctx;
static int sync_policy;
static int reused_in_flight; /* trials where B was A while A's work ran */
static int ordered;          /* deferred with context events: the device orders */

typedef struct slow_read {
    const unsigned char *a; /* the simulated device's memory is host memory */
    size_t n;
    unsigned char want;
    atomic_int go, done, intact;
} slow_read;

/* Holds its stream until the test says go (at most 10 s), so that the work
 * is certainly still queued where the test needs it to be, then reads. */
static void slow_reader(void *arg)
{
    slow_read *r = arg;
    for (int ms = 0; ms < 10000 && !atomic_load(&r->go); ms++)
        usleep(1000);
    usleep(2000);
    int ok = 1;
    for (size_t i = 0; i < r->n; i += 61)
        ok &= r->a[i] == r->want;
    atomic_store(&r->intact, ok);
    atomic_store(&r->done, 1);
}

static int setup(void **state)
{
    (void)state;
    const char *conf = getenv("FRAGPOOL_CONF");
    sync_policy = conf && strstr(conf, "free_policy:sync") != NULL;
    CUdevice dev;
    int version = 0;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx) || cuDriverGetVersion(&version))
        return -1;
    ordered = !sync_policy && version >= 12050; /* else the host waits first */
    return 0;
}

static int overlaps(CUdeviceptr a, size_t na, CUdeviceptr b, size_t nb)
{
    return a < b + nb && b < a + na;
}

/* B, written with y on another stream, holds y once all is done. */
static void holds(CUdeviceptr b, size_t n, unsigned char y)
{
    const unsigned char *p = (const unsigned char *)(uintptr_t)b;
    for (size_t i = 0; i < n; i += 4093)
        assert_int_equal(p[i], y);
}

/* B came back as A's memory while the slow work could still read A. */
static void note_reuse(CUdeviceptr a, CUdeviceptr b, size_t n, int early)
{
    if (early && overlaps(a, n, b, n))
        reused_in_flight++;
}

/* Lets the slow work go where the host would otherwise wait for it: at a
 * free that synchronizes, or at a reuse that does (no context events). */
static void release_before(slow_read *r, int waits)
{
    if (waits)
        atomic_store(&r->go, 1);
}

static void one_trial(CUstream slow, CUstream other, size_t n, unsigned char x)
{
    CUdeviceptr a, b;
    CU(cuMemAlloc_v2(&a, n));
    CU(cuMemsetD8_v2(a, x, n));
    slow_read r = {.a = (const unsigned char *)(uintptr_t)a, .n = n, .want = x};
    CU(cuLaunchHostFunc(slow, slow_reader, &r));
    release_before(&r, sync_policy);
    CU(cuMemFree_v2(a));
    if (!sync_policy) /* the free did not wait for the device */
        assert_int_equal(cuStreamQuery(slow), CUDA_ERROR_NOT_READY);
    release_before(&r, !ordered);
    CU(cuMemAlloc_v2(&b, n));
    note_reuse(a, b, n, !atomic_load(&r.done));
    CU(cuMemsetD8Async(b, (unsigned char)~x, n, other));
    atomic_store(&r.go, 1); /* queued first, the write must still wait */
    CU(cuStreamSynchronize(other));
    CU(cuStreamSynchronize(slow));
    assert_true(atomic_load(&r.intact));
    holds(b, n, (unsigned char)~x);
    CU(cuMemFree_v2(b));
}

static void race_nonblocking(void **state)
{
    (void)state;
    CUstream slow, other;
    CU(cuStreamCreate(&slow, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    reused_in_flight = 0;
    for (int t = 0; t < 40; t++)
        one_trial(slow, other, (size_t)(4096u << (t % 12)), (unsigned char)(t + 1));
    CU(cuStreamDestroy_v2(slow));
    CU(cuStreamDestroy_v2(other));
    if (ordered) /* else B never meets A's work: the host waited first */
        assert_true(reused_in_flight > 0);
}

static void race_blocking_and_legacy(void **state)
{
    (void)state;
    CUstream slow;
    CU(cuStreamCreate(&slow, CU_STREAM_DEFAULT));
    for (int t = 0; t < 20; t++)
        one_trial(slow, CU_STREAM_LEGACY, (size_t)(8192u << (t % 10)), (unsigned char)(t + 7));
    for (int t = 0; t < 10; t++)
        one_trial(CU_STREAM_LEGACY, slow, 65536, (unsigned char)(t + 3));
    CU(cuStreamDestroy_v2(slow));
}

/* Small frees made between A's free and B's allocation. */
enum { kSealEvery = 16 };

/* one_trial with a slow stream of its own that is destroyed, work still
 * queued, before the free of A (destroy_first) or just after it, and
 * kSealEvery small frees after that: the fence made for B must still
 * cover the destroyed stream's work.  An event recorded behind the slow
 * work tells when it is over.  r is static: a failed assertion leaves the
 * trial with the reader queued. */
static void destroyed_trial(int destroy_first, CUstream other, size_t n, unsigned char x)
{
    static slow_read r;
    CUstream slow;
    CUevent over;
    CUdeviceptr a, b, small[kSealEvery];
    for (int i = 0; i < kSealEvery; i++) /* allocated now: later it could wait */
        CU(cuMemAlloc_v2(&small[i], 512));
    CU(cuStreamCreate(&slow, CU_STREAM_NON_BLOCKING));
    CU(cuEventCreate(&over, CU_EVENT_DISABLE_TIMING));
    CU(cuMemAlloc_v2(&a, n));
    CU(cuMemsetD8_v2(a, x, n));
    r = (slow_read){.a = (const unsigned char *)(uintptr_t)a, .n = n, .want = x};
    CU(cuLaunchHostFunc(slow, slow_reader, &r));
    CU(cuEventRecord(over, slow));
    release_before(&r, sync_policy);
    if (destroy_first)
        CU(cuStreamDestroy_v2(slow));
    CU(cuMemFree_v2(a));
    if (!destroy_first)
        CU(cuStreamDestroy_v2(slow));
    for (int i = 0; i < kSealEvery; i++)
        CU(cuMemFree_v2(small[i]));
    if (sync_policy) /* the free synchronized the device, destroyed streams too */
        assert_true(atomic_load(&r.done));
    else /* neither the destroy nor the frees waited */
        assert_int_equal(cuEventQuery(over), CUDA_ERROR_NOT_READY);
    release_before(&r, !ordered);
    CU(cuMemAlloc_v2(&b, n));
    note_reuse(a, b, n, !atomic_load(&r.done));
    CU(cuMemsetD8Async(b, (unsigned char)~x, n, other));
    atomic_store(&r.go, 1);
    CU(cuStreamSynchronize(other));
    CU(cuEventSynchronize(over));
    assert_true(atomic_load(&r.intact));
    holds(b, n, (unsigned char)~x);
    CU(cuEventDestroy_v2(over));
    CU(cuMemFree_v2(b));
}

/* 22 MiB: a segment of its own (requests of 10 MiB and more get one of
 * their size), larger than the 20 MiB segments the tests above leave
 * cached.  So B has no block to come from but A's. */
static void race_destroyed_stream(void **state)
{
    (void)state;
    CUstream other;
    CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    reused_in_flight = 0;
    for (int destroy_first = 1; destroy_first >= 0; destroy_first--)
        for (int t = 0; t < 20; t++)
            destroyed_trial(destroy_first, other, (size_t)22 << 20, (unsigned char)(t + 11));
    CU(cuStreamDestroy_v2(other));
    if (ordered)
        assert_int_equal(reused_in_flight, 40);
}

static void same_stream_reuse(void **state)
{
    (void)state;
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b;
    CU(cuMemAllocAsync(&a, 3 << 20, s));
    CU(cuMemFreeAsync(a, s));
    CU(cuMemAllocAsync(&b, 3 << 20, s));
    if (!sync_policy)
        assert_int_equal(b, a); /* stream order makes this safe at once */
    CU(cuMemFreeAsync(b, s));
    CU(cuStreamSynchronize(s));
    CU(cuStreamDestroy_v2(s));
}

/* Thread A frees a block on its per-thread default stream while slow work
 * there still reads it; thread B allocates on its own per-thread default
 * stream (the same handle, another stream) and writes: the write must
 * wait for A's work.  A stays alive until then (its exit would drain its
 * stream). */
typedef struct pt_trial {
    size_t n;
    unsigned char x;
    CUdeviceptr a;
    slow_read r;
    atomic_int freed, leave;
} pt_trial;

static void *pt_thread_a(void *arg)
{
    pt_trial *t = arg;
    if (cuCtxSetCurrent(ctx) || cuMemAllocAsync(&t->a, t->n, CU_STREAM_PER_THREAD) ||
        cuMemsetD8Async(t->a, t->x, t->n, CU_STREAM_PER_THREAD) ||
        cuStreamSynchronize(CU_STREAM_PER_THREAD))
        return NULL;
    t->r = (slow_read){.a = (const unsigned char *)(uintptr_t)t->a, .n = t->n, .want = t->x};
    if (cuLaunchHostFunc(CU_STREAM_PER_THREAD, slow_reader, &t->r) ||
        cuMemFreeAsync(t->a, CU_STREAM_PER_THREAD))
        t->a = 0;
    atomic_store(&t->freed, 1);
    for (int ms = 0; ms < 20000 && !atomic_load(&t->leave); ms++)
        usleep(1000);
    return NULL;
}

static void per_thread_streams(void **state)
{
    (void)state;
    int met = 0;
    for (int i = 0; i < 8; i++) {
        static pt_trial t;
        t = (pt_trial){.n = (size_t)(24 + i) << 20, .x = (unsigned char)(i + 40)};
        pthread_t a;
        assert_int_equal(pthread_create(&a, NULL, pt_thread_a, &t), 0);
        for (int ms = 0; ms < 20000 && !atomic_load(&t.freed); ms++)
            usleep(1000);
        assert_true(t.a != 0);
        release_before(&t.r, sync_policy || !ordered);
        CUdeviceptr b;
        CU(cuMemAllocAsync(&b, t.n, CU_STREAM_PER_THREAD));
        met += b == t.a && !atomic_load(&t.r.done);
        CU(cuMemsetD8Async(b, (unsigned char)~t.x, t.n, CU_STREAM_PER_THREAD));
        atomic_store(&t.r.go, 1);
        CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
        atomic_store(&t.leave, 1);
        assert_int_equal(pthread_join(a, NULL), 0);
        assert_true(atomic_load(&t.r.done) && atomic_load(&t.r.intact));
        holds(b, t.n, (unsigned char)~t.x);
        CU(cuMemFreeAsync(b, CU_STREAM_PER_THREAD));
        CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    }
    if (ordered)
        assert_true(met > 0); /* the case was met: A's block, its work still queued */
}

/* ---- several threads reusing at once -------------------------------------- */

#define TT_THREADS 4
#define TT_TRIALS  12

typedef struct tt_arg {
    int k;
    pthread_barrier_t *start;
    atomic_int *broken, *early;
} tt_arg;

/* One thread's trial: its block A read by slow work on its own stream, A
 * freed, all threads reusing at once (one fence covers several: the
 * others wait for it or queue behind it), B written on another stream. */
static int tt_trial(tt_arg *t, CUstream slow, CUstream other, size_t n, unsigned char x)
{
    CUdeviceptr a, b;
    if (cuMemAlloc_v2(&a, n) || cuMemsetD8_v2(a, x, n))
        return 1;
    slow_read r = {.a = (const unsigned char *)(uintptr_t)a, .n = n, .want = x};
    if (cuLaunchHostFunc(slow, slow_reader, &r))
        return 1;
    if (sync_policy || !ordered)
        atomic_store(&r.go, 1); /* the host waits somewhere: let the work finish */
    if (cuMemFree_v2(a))
        return 1;
    pthread_barrier_wait(t->start);
    if (cuMemAlloc_v2(&b, n))
        return 1;
    if (overlaps(a, n, b, n) && !atomic_load(&r.done))
        atomic_fetch_add(t->early, 1);
    int err = cuMemsetD8Async(b, (unsigned char)~x, n, other) != CUDA_SUCCESS;
    atomic_store(&r.go, 1);
    err |= cuStreamSynchronize(other) || cuStreamSynchronize(slow);
    err |= !atomic_load(&r.intact);
    const unsigned char *p = (const unsigned char *)(uintptr_t)b;
    for (size_t i = 0; i < n; i += 4093)
        err |= p[i] != (unsigned char)~x;
    return err | (cuMemFree_v2(b) != CUDA_SUCCESS);
}

static void *tt_thread(void *arg)
{
    tt_arg *t = arg;
    CUstream slow, other;
    if (cuCtxSetCurrent(ctx) || cuStreamCreate(&slow, CU_STREAM_NON_BLOCKING) ||
        cuStreamCreate(&other, CU_STREAM_NON_BLOCKING)) {
        atomic_fetch_add(t->broken, 1);
        for (int i = 0; i < TT_TRIALS; i++) /* keep the barrier's count */
            pthread_barrier_wait(t->start);
        return NULL;
    }
    for (int i = 0; i < TT_TRIALS; i++) {
        size_t n = ((size_t)(t->k + 1) << 20) + ((size_t)i << 12); /* a size of its own */
        if (tt_trial(t, slow, other, n, (unsigned char)(16 * t->k + i + 1)))
            atomic_fetch_add(t->broken, 1);
    }
    cuStreamDestroy_v2(slow);
    cuStreamDestroy_v2(other);
    return NULL;
}

/* TT_THREADS threads race as above at the same moments: no write lands
 * while the work queued before the free still reads. */
static void threads_reuse_at_once(void **state)
{
    (void)state;
    pthread_barrier_t start;
    atomic_int broken = 0, early = 0;
    assert_int_equal(pthread_barrier_init(&start, NULL, TT_THREADS), 0);
    pthread_t th[TT_THREADS];
    tt_arg args[TT_THREADS];
    for (int k = 0; k < TT_THREADS; k++) {
        args[k] = (tt_arg){k, &start, &broken, &early};
        assert_int_equal(pthread_create(&th[k], NULL, tt_thread, &args[k]), 0);
    }
    for (int k = 0; k < TT_THREADS; k++)
        assert_int_equal(pthread_join(th[k], NULL), 0);
    pthread_barrier_destroy(&start);
    assert_int_equal(atomic_load(&broken), 0);
    if (ordered) /* the case was met: a block back while its old work ran */
        assert_true(atomic_load(&early) > 0);
}

/* Two blocks freed while slow work reads both; cuMemAllocAsync on another
 * stream takes the first (a fence that stream waits for, covering both
 * frees), then the second (no fence of its own: the stream already waits).
 * Both writes must land after the reads. */
static void stream_wait_covers(void **state)
{
    (void)state;
    CUstream slow, other;
    CU(cuStreamCreate(&slow, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 8; i++) {
        static slow_read r1, r2;
        size_t n1 = (size_t)(40 + i) << 20, n2 = (size_t)(60 + i) << 20;
        unsigned char x = (unsigned char)(i + 90);
        CUdeviceptr a1, a2, b1, b2;
        CU(cuMemAlloc_v2(&a1, n1));
        CU(cuMemAlloc_v2(&a2, n2));
        CU(cuMemsetD8_v2(a1, x, n1));
        CU(cuMemsetD8_v2(a2, x, n2));
        r1 = (slow_read){.a = (const unsigned char *)(uintptr_t)a1, .n = n1, .want = x};
        r2 = (slow_read){.a = (const unsigned char *)(uintptr_t)a2, .n = n2, .want = x};
        CU(cuLaunchHostFunc(slow, slow_reader, &r1));
        CU(cuLaunchHostFunc(slow, slow_reader, &r2));
        release_before(&r1, sync_policy);
        release_before(&r2, sync_policy);
        CU(cuMemFree_v2(a1));
        CU(cuMemFree_v2(a2));
        release_before(&r1, !ordered);
        release_before(&r2, !ordered);
        CU(cuMemAllocAsync(&b1, n1, other));
        CU(cuMemAllocAsync(&b2, n2, other));
        CU(cuMemsetD8Async(b1, (unsigned char)~x, n1, other));
        CU(cuMemsetD8Async(b2, (unsigned char)~x, n2, other));
        atomic_store(&r1.go, 1);
        atomic_store(&r2.go, 1);
        CU(cuStreamSynchronize(other));
        CU(cuStreamSynchronize(slow));
        assert_true(atomic_load(&r1.intact) && atomic_load(&r2.intact));
        holds(b1, n1, (unsigned char)~x);
        holds(b2, n2, (unsigned char)~x);
        CU(cuMemFreeAsync(b1, other));
        CU(cuMemFreeAsync(b2, other));
        CU(cuStreamSynchronize(other));
    }
    CU(cuStreamDestroy_v2(slow));
    CU(cuStreamDestroy_v2(other));
}

/* After the program's own cuCtxSynchronize, memory freed before the last
 * allocation that preceded it comes back with no fence and no
 * synchronization of fragpool's (a free since then may have come after
 * the synchronization began: that one gets a fence). */
static void synchronize_covers(void **state)
{
    (void)state;
    CUdeviceptr a, b, x;
    fpsim_counts before, after;
    CU(cuMemAlloc_v2(&a, 300u << 20)); /* a size no other block has */
    CU(cuMemFree_v2(a));
    CU(cuMemAlloc_v2(&x, 512));
    CU(cuCtxSynchronize());
    assert_int_equal(fpsim_stats(0, &before), 0);
    CU(cuMemAlloc_v2(&b, 300u << 20));
    assert_int_equal(fpsim_stats(0, &after), 0);
    assert_int_equal(b, a); /* the freed block came back, no new segment */
    assert_int_equal(after.alloc_calls, before.alloc_calls);
    assert_int_equal(after.device_syncs, before.device_syncs);
    CU(cuMemFree_v2(b));
    CU(cuMemFree_v2(x));
}

static void double_free_of_deferred(void **state)
{
    (void)state;
    CUdeviceptr a;
    CU(cuMemAlloc_v2(&a, 1 << 20));
    CU(cuMemFree_v2(a));
    assert_int_equal(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);
}

/* An invalid stream handle gets the driver's own error, before the pool
 * does anything: nothing is allocated, and a block stays allocated. */
static void bad_stream_handle(void **state)
{
    (void)state;
    CUstream bogus = (CUstream)(uintptr_t)0xdead0;
    CUdeviceptr a = 0, b = 0;
    CUresult r = cuMemAllocAsync(&b, 1 << 20, bogus);
    assert_int_not_equal(r, CUDA_SUCCESS);
    CU(cuMemAlloc_v2(&a, 1 << 20));
    assert_int_equal(cuMemFreeAsync(a, bogus), r);
    CU(cuMemsetD8_v2(a, 7, 1 << 20)); /* still ours */
    CU(cuMemFree_v2(a));
    assert_int_equal(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE); /* freed once */
}

/* An idle device, 8 MiB freed and asked for again 200 times: the same
 * block each time, with no device synchronization under the deferred
 * policy when the driver has context events (a fence each time instead),
 * and no growth at all. */
static void idle_loop(void **state)
{
    (void)state;
    fpsim_counts before, after;
    CU(cuCtxSynchronize());
    CUdeviceptr first;
    CU(cuMemAlloc_v2(&first, 8u << 20));
    CU(cuMemFree_v2(first));
    assert_int_equal(fpsim_stats(0, &before), 0);
    for (int i = 0; i < 200; i++) {
        CUdeviceptr p;
        CU(cuMemAlloc_v2(&p, 8u << 20));
        assert_int_equal(p, first);
        CU(cuMemsetD8_v2(p, (unsigned char)i, 8u << 20));
        CU(cuMemFree_v2(p));
    }
    assert_int_equal(fpsim_stats(0, &after), 0);
    assert_int_equal(after.alloc_calls, before.alloc_calls);
    if (ordered)
        assert_int_equal(after.device_syncs - before.device_syncs, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(race_nonblocking),        cmocka_unit_test(race_blocking_and_legacy),
        cmocka_unit_test(race_destroyed_stream),   cmocka_unit_test(same_stream_reuse),
        cmocka_unit_test(per_thread_streams),      cmocka_unit_test(threads_reuse_at_once),
        cmocka_unit_test(stream_wait_covers),      cmocka_unit_test(synchronize_covers),
        cmocka_unit_test(double_free_of_deferred), cmocka_unit_test(idle_loop),
        cmocka_unit_test(bad_stream_handle),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
