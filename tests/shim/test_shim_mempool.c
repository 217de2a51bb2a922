/* test_shim_mempool.c - the stream-ordered pool API under fragpool, on the
 * simulated device: a program asking the device's default pool how much
 * it holds (cuMemPoolGetAttribute) gets the truth while fragpool serves
 * cuMemAllocAsync from its own pools.
 *
 * Cases: USED_MEM_CURRENT is the exact sum of the live requested bytes,
 * drops at cuMemFreeAsync before the stream has run (slow work queued),
 * ignores a cuMemAlloc block freed with cuMemFreeAsync and follows a
 * cuMemAllocAsync block freed with cuMemFree; the highs and their reset
 * (0 resets, anything else is the driver's CUDA_ERROR_INVALID_VALUE); the
 * driver's errors for a NULL value, an unknown attribute, a bad pool come
 * back unchanged; the default threshold keeps the cache over a sync, a
 * threshold set by the program trims it at the next stream, event or
 * context sync; cuMemPoolTrimTo(0) lowers reserved to no less than used;
 * cuDeviceSetMemPool back to the default pool keeps fragpool serving (the
 * simulated device has only default pools, so the rule that another
 * current pool goes to the driver is not reachable here); a context
 * destroyed with blocks live takes them out of the numbers; eight threads
 * allocating and freeing asynchronously leave the sum exact (a reader
 * asking meanwhile); fork() while threads allocate and contexts come and
 * go: no child hangs (a child frees an inherited block through the
 * table's lock), and a child gets the driver's answer.  Run with virtual-memory segments (the default) and classic ones.
 */
#include "shim_test.h"
#include "fpsim.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static CUcontext ctx;
static CUdevice dev;
static CUmemoryPool pool;

static int setup(void **state)
{
    (void)state;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx) || cuDeviceGetDefaultMemPool(&pool, dev))
        return -1;
    return 0;
}

static uint64_t attr(CUmemPool_attribute a)
{
    uint64_t v = 0xdeadbeef;
    CU(cuMemPoolGetAttribute(pool, a, &v));
    return v;
}

static uint64_t used(void)
{
    return attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
}

static uint64_t reserved(void)
{
    return attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
}

static void set_attr(CUmemPool_attribute a, uint64_t v)
{
    CU(cuMemPoolSetAttribute(pool, a, &v));
}

/* The simulated driver served none of them itself. */
static unsigned long long driver_async_allocs(void)
{
    fpsim_counts c;
    assert_int_equal(fpsim_stats(0, &c), 0);
    return c.async_alloc_calls;
}

static void hooked(void **state)
{
    (void)state;
    const char *names[] = {"cuMemPoolGetAttribute", "cuMemPoolSetAttribute", "cuMemPoolTrimTo",
                           "cuDeviceSetMemPool",    "cuStreamSynchronize",   "cuEventSynchronize"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *fn = NULL;
        CU(cuGetProcAddress(names[i], &fn, 12000, 0));
        assert_true(in_fragpool(fn));
    }
}

static void used_exact(void **state)
{
    (void)state;
    const size_t sizes[] = {1000, 3 * MIB + 7, 12345, 40 * MIB, 512, 1};
    enum { N = sizeof sizes / sizeof *sizes };
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    unsigned long long calls = driver_async_allocs();
    uint64_t u0 = used(), sum = 0;
    CUdeviceptr p[N];
    for (int i = 0; i < N; i++) {
        CU(cuMemAllocAsync(&p[i], sizes[i], s));
        sum += sizes[i];
        assert_int_equal(used(), u0 + sum);
    }
    assert_true(reserved() >= used());
    assert_int_equal(driver_async_allocs(), calls); /* fragpool served them all */
    for (int i = 0; i < N; i++) {
        CU(cuMemFreeAsync(p[i], s));
        sum -= sizes[i];
        assert_int_equal(used(), u0 + sum);
    }
    CU(cuStreamSynchronize(s));
    assert_int_equal(used(), u0);
    CU(cuStreamDestroy_v2(s));
}

static void sleep_50ms(void *arg)
{
    (void)arg;
    usleep(50000);
}

static void drops_at_free_call(void **state)
{
    (void)state;
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    uint64_t u0 = used();
    CUdeviceptr p;
    CU(cuMemAllocAsync(&p, 5 * MIB, s));
    CU(cuLaunchHostFunc(s, sleep_50ms, NULL));
    CU(cuMemFreeAsync(p, s));
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY); /* the free has not run */
    assert_int_equal(used(), u0);
    CU(cuStreamSynchronize(s));
    CU(cuStreamDestroy_v2(s));
}

static void mixed_frees(void **state)
{
    (void)state;
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    uint64_t u0 = used();
    CUdeviceptr a, b;
    CU(cuMemAlloc_v2(&a, 2 * MIB)); /* not stream-ordered: not counted */
    assert_int_equal(used(), u0);
    CU(cuMemFreeAsync(a, s));
    assert_int_equal(used(), u0);
    CU(cuMemAllocAsync(&b, 6 * MIB + 1, s)); /* counted, freed with cuMemFree */
    assert_int_equal(used(), u0 + 6 * MIB + 1);
    CU(cuStreamSynchronize(s));
    CU(cuMemFree_v2(b));
    assert_int_equal(used(), u0);
    assert_int_equal(cuMemFree_v2(b), CUDA_ERROR_INVALID_VALUE); /* twice: nothing more */
    assert_int_equal(used(), u0);
    CU(cuStreamDestroy_v2(s));
}

static void highs(void **state)
{
    (void)state;
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    set_attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0);
    uint64_t u0 = used();
    assert_int_equal(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), u0);
    CUdeviceptr a, b;
    CU(cuMemAllocAsync(&a, 8 * MIB, s));
    CU(cuMemAllocAsync(&b, 4 * MIB, s));
    assert_int_equal(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), u0 + 12 * MIB);
    CU(cuMemFreeAsync(a, s));
    assert_int_equal(used(), u0 + 4 * MIB);
    assert_int_equal(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), u0 + 12 * MIB);
    uint64_t v = 5; /* only 0 resets */
    assert_int_equal(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), u0 + 12 * MIB);
    set_attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0);
    assert_int_equal(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), u0 + 4 * MIB);
    uint64_t rh = attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH);
    assert_true(rh >= reserved() && rh >= u0 + 12 * MIB);
    set_attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0);
    assert_int_equal(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), reserved());
    CU(cuMemFreeAsync(b, s));
    CU(cuStreamSynchronize(s));
    CU(cuStreamDestroy_v2(s));
}

static void driver_errors(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemPoolGetAttribute(pool, (CUmemPool_attribute)99, &v),
                     CUDA_ERROR_INVALID_VALUE);
    CUmemoryPool bad = (CUmemoryPool)(uintptr_t)0x1000;
    assert_int_equal(cuMemPoolGetAttribute(bad, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemPoolSetAttribute(bad, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemPoolTrimTo(bad, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(attr(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0); /* the driver's default */
    int reuse = 0;
    CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    assert_int_equal(reuse, 1); /* the driver's own */
}

/* Leaves idle memory behind: n blocks of size, allocated then freed. */
static void churn(CUstream s, int n, size_t size)
{
    CUdeviceptr p[16];
    for (int i = 0; i < n; i++)
        CU(cuMemAllocAsync(&p[i], size, s));
    for (int i = 0; i < n; i++)
        CU(cuMemFreeAsync(p[i], s));
}

static void threshold_trims(void **state)
{
    (void)state;
    CUstream s;
    CUevent ev;
    CU(cuStreamCreate(&s, 0));
    CU(cuEventCreate(&ev, 0));
    for (int kind = 0; kind < 3; kind++) {
        churn(s, 4, 30 * MIB);
        CU(cuStreamSynchronize(s)); /* the default threshold: fragpool keeps its cache */
        uint64_t before = reserved();
        assert_true(before >= used() + 100 * MIB);
        set_attr(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 16 * MIB);
        assert_int_equal(reserved(), before); /* nothing before a synchronization */
        if (kind == 0) {
            CU(cuStreamSynchronize(s));
        } else if (kind == 1) {
            CU(cuEventRecord(ev, s));
            CU(cuEventSynchronize(ev));
        } else {
            CU(cuCtxSynchronize());
        }
        uint64_t after = reserved();
        print_message("sync kind %d: reserved %llu -> %llu MiB\n", kind,
                      (unsigned long long)(before / MIB), (unsigned long long)(after / MIB));
        assert_true(after <= before - 100 * MIB);
        assert_true(after >= used());
        set_attr(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, UINT64_MAX); /* keep everything */
        churn(s, 4, 30 * MIB);
        uint64_t kept = reserved();
        CU(cuStreamSynchronize(s));
        assert_int_equal(reserved(), kept);
    }
    CU(cuEventDestroy_v2(ev));
    CU(cuStreamDestroy_v2(s));
}

static void trim_to_zero(void **state)
{
    (void)state;
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    CUdeviceptr keep;
    CU(cuMemAllocAsync(&keep, 3 * MIB, s));
    churn(s, 4, 30 * MIB);
    uint64_t before = reserved();
    CU(cuMemPoolTrimTo(pool, SIZE_MAX)); /* keep everything */
    assert_int_equal(reserved(), before);
    CU(cuMemPoolTrimTo(pool, 0));
    uint64_t after = reserved();
    print_message("cuMemPoolTrimTo(0): reserved %llu -> %llu MiB, used %llu bytes\n",
                  (unsigned long long)(before / MIB), (unsigned long long)(after / MIB),
                  (unsigned long long)used());
    assert_true(after <= before - 100 * MIB);
    assert_true(after >= used() && used() >= 3 * MIB);
    CU(cuMemFreeAsync(keep, s));
    CU(cuStreamSynchronize(s));
    CU(cuStreamDestroy_v2(s));
}

static void current_pool(void **state)
{
    (void)state;
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    CU(cuDeviceSetMemPool(dev, pool)); /* the default again: still fragpool's */
    CUmemoryPool cur = NULL;
    CU(cuDeviceGetMemPool(&cur, dev));
    assert_ptr_equal(cur, pool);
    assert_int_equal(cuDeviceSetMemPool(dev, (CUmemoryPool)(uintptr_t)0x1000),
                     CUDA_ERROR_INVALID_VALUE); /* refused: nothing changes */
    unsigned long long calls = driver_async_allocs();
    uint64_t u0 = used();
    CUdeviceptr p;
    CU(cuMemAllocAsync(&p, 7 * MIB, s));
    assert_int_equal(driver_async_allocs(), calls);
    assert_int_equal(used(), u0 + 7 * MIB);
    CU(cuMemFreeAsync(p, s));
    assert_int_equal(used(), u0);
    CU(cuStreamSynchronize(s));
    CU(cuStreamDestroy_v2(s));
}

/* A context destroyed with stream-ordered blocks live: the driver freed
 * them with it, and they leave the numbers. */
static void context_gone(void **state)
{
    (void)state;
    uint64_t u0 = used();
    CUcontext c;
    CUstream s;
    CU(cuCtxCreate_v2(&c, 0, dev));
    CU(cuStreamCreate(&s, 0));
    CUdeviceptr p, q;
    CU(cuMemAllocAsync(&p, 5 * MIB, s));
    CU(cuMemAllocAsync(&q, 1000, s));
    assert_int_equal(used(), u0 + 5 * MIB + 1000);
    CU(cuStreamSynchronize(s));
    CU(cuCtxDestroy_v2(c));
    assert_int_equal(used(), u0);
    CU(cuCtxSetCurrent(ctx));
}

/* ---- threads --------------------------------------------------------------- */

enum { kThreads = 8, kRounds = 400, kKept = 3 };

typedef struct worker {
    unsigned seed;
    CUdeviceptr kept[kKept];
    size_t kept_size[kKept];
    int failed;
} worker;

static atomic_bool readers_stop;

static void *work(void *arg)
{
    worker *w = arg;
    CUstream s;
    if (cuCtxSetCurrent(ctx) || cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) {
        w->failed = 1;
        return NULL;
    }
    CUdeviceptr live[kKept] = {0};
    size_t size[kKept] = {0};
    for (int r = 0; r < kRounds && !w->failed; r++) {
        int k = (int)(rand_r(&w->seed) % kKept);
        if (live[k] && cuMemFreeAsync(live[k], s) != CUDA_SUCCESS)
            w->failed = 1;
        size[k] = 1 + rand_r(&w->seed) % (3 * MIB);
        if (cuMemAllocAsync(&live[k], size[k], s) != CUDA_SUCCESS)
            w->failed = 1;
    }
    for (int k = 0; k < kKept; k++) {
        w->kept[k] = live[k];
        w->kept_size[k] = size[k];
    }
    if (cuStreamSynchronize(s) || cuStreamDestroy_v2(s))
        w->failed = 1;
    return NULL;
}

static void *read_numbers(void *arg)
{
    (void)arg;
    while (!atomic_load(&readers_stop)) {
        uint64_t v;
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v);
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v);
        usleep(100);
    }
    return NULL;
}

static void threads(void **state)
{
    (void)state;
    uint64_t u0 = used();
    worker w[kThreads];
    pthread_t t[kThreads], reader;
    atomic_store(&readers_stop, false);
    assert_int_equal(pthread_create(&reader, NULL, read_numbers, NULL), 0);
    for (int i = 0; i < kThreads; i++) {
        w[i] = (worker){.seed = 7u * (unsigned)i + 1};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    uint64_t sum = 0;
    for (int i = 0; i < kThreads; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failed, 0);
        for (int k = 0; k < kKept; k++)
            sum += w[i].kept_size[k];
    }
    atomic_store(&readers_stop, true);
    pthread_join(reader, NULL);
    assert_int_equal(used(), u0 + sum);
    assert_true(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH) >= u0 + sum);
    for (int i = 0; i < kThreads; i++)
        for (int k = 0; k < kKept; k++)
            CU(cuMemFreeAsync(w[i].kept[k], NULL));
    assert_int_equal(used(), u0);
    CU(cuCtxSynchronize());
}

/* ---- fork ------------------------------------------------------------------- */

enum { kForks = 20, kForkThreads = 2, kHeld = 1000 };

static atomic_bool churn_stop;

/* Contexts come and go: each destroy walks the table of stream-ordered
 * blocks (long, with kHeld of them live) asking the pools, so that a fork
 * often comes while the table's lock is held. */
static void *ctx_churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&churn_stop)) {
        CUcontext c;
        if (cuCtxCreate_v2(&c, 0, dev) == CUDA_SUCCESS)
            cuCtxDestroy_v2(c);
    }
    return NULL;
}

static void *churn_async(void *arg)
{
    (void)arg;
    CUstream s;
    if (cuCtxSetCurrent(ctx) || cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
        return NULL;
    unsigned seed = 3;
    while (!atomic_load(&churn_stop)) {
        CUdeviceptr p;
        if (cuMemAllocAsync(&p, 1 + rand_r(&seed) % MIB, s) == CUDA_SUCCESS)
            cuMemFreeAsync(p, s);
    }
    cuStreamSynchronize(s);
    cuStreamDestroy_v2(s);
    return NULL;
}

/* The child's CUDA is refused by the driver (as natively); fragpool passes
 * that answer on, and a free of an inherited block goes through its
 * locks without hanging. */
static void child_body(CUdeviceptr inherited, uint64_t parent_used)
{
    uint64_t v = 0, r = 0;
    CUresult c = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v);
    if (c == CUDA_SUCCESS &&
        (v < parent_used || cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r) ||
         r < v))
        _exit(2);
    if (c != CUDA_SUCCESS && c != CUDA_ERROR_NOT_INITIALIZED)
        _exit(3);
    c = cuMemFree_v2(inherited);
    if (c != CUDA_SUCCESS && c != CUDA_ERROR_NOT_INITIALIZED)
        _exit(4);
    _exit(0);
}

static int reap(pid_t pid)
{
    int status = 0;
    for (int ms = 0; ms < 10000; ms++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

static void fork_child(void **state)
{
    (void)state;
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    CUdeviceptr held, *many = malloc(kHeld * sizeof *many);
    assert_non_null(many);
    for (int i = 0; i < kHeld; i++)
        CU(cuMemAllocAsync(&many[i], 512, s));
    CU(cuMemAllocAsync(&held, 9 * MIB, s));
    uint64_t u = used();
    pthread_t t[kForkThreads + 1];
    atomic_store(&churn_stop, false);
    for (int i = 0; i < kForkThreads; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn_async, NULL), 0);
    assert_int_equal(pthread_create(&t[kForkThreads], NULL, ctx_churn, NULL), 0);
    int hung = 0, failed = 0, forks = 0;
    for (; forks < kForks && !hung; forks++) { /* a hang ends the case */
        pid_t pid = fork();
        if (pid == 0)
            child_body(held, 9 * MIB + kHeld * 512);
        assert_true(pid > 0);
        int rc = reap(pid);
        hung += rc == -1;
        failed += rc != 0 && rc != -1;
    }
    atomic_store(&churn_stop, true);
    for (int i = 0; i <= kForkThreads; i++)
        pthread_join(t[i], NULL);
    print_message("%d children: %d hung, %d failed\n", forks, hung, failed);
    assert_int_equal(hung, 0);
    assert_int_equal(failed, 0);
    assert_int_equal(used(), u); /* the children's frees were theirs */
    for (int i = 0; i < kHeld; i++)
        CU(cuMemFreeAsync(many[i], s));
    free(many);
    CU(cuMemFreeAsync(held, s));
    CU(cuStreamSynchronize(s));
    CU(cuStreamDestroy_v2(s));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hooked),
        cmocka_unit_test(used_exact),
        cmocka_unit_test(drops_at_free_call),
        cmocka_unit_test(mixed_frees),
        cmocka_unit_test(highs),
        cmocka_unit_test(driver_errors),
        cmocka_unit_test(threshold_trims),
        cmocka_unit_test(trim_to_zero),
        cmocka_unit_test(current_pool),
        cmocka_unit_test(context_gone),
        cmocka_unit_test(threads),
        cmocka_unit_test(fork_child),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
