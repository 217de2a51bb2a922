/* test_shim_threads.c - the pools' front end (pool/pool_front.c, the
 * per-thread caches) through the shim on the simulated device, with 2 and
 * 4 threads, through cuMemAlloc and through cuMemAllocAsync on each
 * thread's own stream.
 *
 * A client (this program run again with "client N async") starts N
 * threads that each keep 32 live blocks (512 B .. 32 KiB, log-uniform)
 * and, all at once, free one and allocate one in a random slot, PAIRS
 * times.  Each block is written with its thread's own pattern (thread,
 * slot, generation) at both ends when it is handed out, and read back
 * before its free: a block handed out to two threads at once, or reused
 * while its owner still holds it, fails the check and the client's exit
 * status.  Its JSON summary then shows what the caches did:
 *  - at least 90% of the frees and a majority of the allocations took no
 *    pool lock ("lockless_frees", "lockless_allocs" of "thread_cache");
 *  - the caches counted every thread that allocated.
 * One thread (the parent's own shim, summary off) never joins a front end:
 * covered by test_pool_front and by the single-thread placement checks.
 */
#include "child_run.h"
#include "fp_cuda.h"
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { LIVE = 32, PAIRS = 3000, DOUBLINGS = 6, MAX_THREADS = 8 };

static CUcontext ctx;
static bool async_mode;
static pthread_barrier_t start;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t random_size(uint64_t *s)
{
    double u = (double)(rnd(s) >> 11) / 9007199254740992.0;
    return (size_t)(512.0 * exp2(u * DOUBLINGS)) & ~(size_t)15;
}

typedef struct slot {
    CUdeviceptr p;
    size_t size;
    uint64_t tag;
} slot;

/* Writes tag at both ends of the block. */
static int stamp(const slot *b)
{
    uint64_t v[2] = {b->tag, ~b->tag};
    return cuMemcpyHtoD_v2(b->p, v, sizeof v) || cuMemcpyHtoD_v2(b->p + b->size - 16, v, sizeof v);
}

/* 0 when both ends still hold the block's tag. */
static int intact(const slot *b)
{
    uint64_t v[2] = {0, 0}, w[2] = {0, 0};
    if (cuMemcpyDtoH_v2(v, b->p, sizeof v) || cuMemcpyDtoH_v2(w, b->p + b->size - 16, sizeof w))
        return 1;
    return v[0] != b->tag || v[1] != ~b->tag || w[0] != b->tag || w[1] != ~b->tag;
}

static int take(slot *b, uint64_t *seed, CUstream s, uint64_t tag)
{
    b->size = random_size(seed);
    b->tag = tag;
    int bad = async_mode ? cuMemAllocAsync(&b->p, b->size, s) : cuMemAlloc_v2(&b->p, b->size);
    if (!bad && s)
        bad = cuStreamSynchronize(s);
    return bad || stamp(b);
}

static int give(const slot *b, CUstream s)
{
    if (intact(b))
        return 2; /* another thread wrote into a block this one holds */
    return async_mode ? cuMemFreeAsync(b->p, s) != 0 : cuMemFree_v2(b->p) != 0;
}

static void *worker(void *arg)
{
    uint64_t me = (uint64_t)(uintptr_t)arg, seed = 0x9E3779B97F4A7C15ull * me + 1, gen = 0;
    slot b[LIVE];
    CUstream s = NULL;
    int bad = cuCtxSetCurrent(ctx) != 0;
    if (async_mode && cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
        bad = 1;
    for (int i = 0; i < LIVE && !bad; i++)
        bad = take(&b[i], &seed, s, me << 48 | gen++);
    pthread_barrier_wait(&start);
    for (int i = 0; i < PAIRS && !bad; i++) {
        int j = (int)(rnd(&seed) % LIVE);
        bad = give(&b[j], s);
        bad = bad ? bad : take(&b[j], &seed, s, me << 48 | gen++);
    }
    for (int i = 0; i < LIVE; i++)
        if (!bad)
            bad = give(&b[i], s);
    if (s) {
        cuStreamSynchronize(s);
        cuStreamDestroy_v2(s);
    }
    return (void *)(uintptr_t)bad;
}

/* Exits 0 when every block came back intact; prints the pairs made. */
static int client(int n)
{
    CUdevice dev;
    pthread_t t[MAX_THREADS];
    if (n < 1 || n > MAX_THREADS || cuInit(0) || cuDeviceGet(&dev, 0) ||
        cuDevicePrimaryCtxRetain(&ctx, dev))
        return 10;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad = bad ? bad : (int)(uintptr_t)r;
    }
    pthread_barrier_destroy(&start);
    printf("pairs %d\n", n * (LIVE + PAIRS));
    return bad ? 20 + bad : 0;
}

/* The number after "key": in the "thread_cache" group of a JSON summary. */
static long long cache_count(const char *json, const char *key)
{
    const char *g = strstr(json, "\"thread_cache\":{");
    assert_non_null(g);
    const char *at = strstr(g, key);
    assert_non_null(at);
    return strtoll(at + strlen(key), NULL, 10);
}

static void run_client(int threads, bool async)
{
    char dir[] = "/tmp/fp-threads-XXXXXX", conf[640], self[4096], path[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/s.json", dir);
    snprintf(conf, sizeof conf,
             "FRAGPOOL_CONF=debug_check:1,thread_cache_mb:8,summary_format:json,summary:%s", path);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    static const char *const drop[] = {"FRAGPOOL_CONF=", NULL};
    const char *add[] = {conf, NULL};
    char **env = fp_t_hold(fp_t_child_env(drop, add));
    char arg[16];
    snprintf(arg, sizeof arg, "%d", threads);
    char *argv[] = {self, (char *)"client", arg, (char *)(async ? "async" : "sync"), NULL};
    int out = fp_t_temp_fd("/tmp/fp-threads-out-"), st = 0;
    pid_t pid = fp_t_spawn_wait(self, argv, env, out, -1, 240, &st);
    assert_true(pid > 0);
    const char *said = fp_t_slurp_fd(out);
    close(out);
    const char *json = access(path, F_OK) == 0 ? fp_t_slurp_path(path) : NULL;
    unlink(path);
    rmdir(dir);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("client (%d threads, %s) failed: status %d (21: a call failed, 22: a block "
                 "was not intact); it said: %s",
                 threads, async ? "async" : "sync", st, said);
    int pairs = 0;
    assert_int_equal(sscanf(said, "pairs %d", &pairs), 1);
    assert_non_null(json);
    long long frees = cache_count(json, "\"lockless_frees\":");
    long long allocs = cache_count(json, "\"lockless_allocs\":");
    print_message("%d threads, %s: %lld of %d frees and %lld of %d allocations without the "
                  "pool's lock\n",
                  threads, async ? "async" : "sync", frees, pairs, allocs, pairs);
    assert_true(cache_count(json, "\"threads\":") >= threads);
    assert_true(frees * 10 >= (long long)pairs * 9);
    assert_true(allocs * 2 > (long long)pairs);
}

static void two_threads(void **state)
{
    (void)state;
    run_client(2, false);
}

static void four_threads(void **state)
{
    (void)state;
    run_client(4, false);
}

static void two_threads_async(void **state)
{
    (void)state;
    run_client(2, true);
}

static void four_threads_async(void **state)
{
    (void)state;
    run_client(4, true);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "client") == 0) {
        async_mode = strcmp(argv[3], "async") == 0;
        return client(atoi(argv[2]));
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(two_threads, fp_t_release_held),
        cmocka_unit_test_teardown(four_threads, fp_t_release_held),
        cmocka_unit_test_teardown(two_threads_async, fp_t_release_held),
        cmocka_unit_test_teardown(four_threads_async, fp_t_release_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
