/* test_shim_trace_threads.c - the replay models threads (issue 43): a
 * trace recorded from an 8-thread run with the pools' front end on
 * (thread_cache_mb:8) replays to that run's peak reserved, to the byte.
 *
 * A client (this program again, "client async|sync") starts 8 threads
 * that each keep 24 live blocks (512 B .. 4 MiB, log-uniform, and one in
 * 64 of 8 to 39 MiB, past what a cache holds) and replace a random one,
 * 1,200 + 150 x thread times, so that threads leave (their caches go
 * back) while others still run.  One free in eight hands the block to a
 * shared box instead, and one pair in eight frees a block from the box:
 * frees of other threads' blocks.  Through cuMemAlloc/cuMemFree, or
 * cuMemAllocAsync/cuMemFreeAsync on each thread's own stream.  It runs
 * under the shim with trace:PATH and a JSON summary, in both segment
 * modes (expandable_segments True and False).  Then this test loads the
 * trace (fp_trace_load) and checks:
 *  - it names 9 threads (the main thread frees the box's rest), and the
 *    caches ('j' rows, thread_cache 8 MiB);
 *  - the caches worked in the run (allocations and frees without the
 *    pool's lock);
 *  - fp_replay of it gives the run's peak reserved, its reserve calls, and
 *    the same front-end counts (allocations and frees served by a cache,
 *    flushes before growth and the bytes they returned): the replay drove
 *    the same caches the same way;
 *  - `tune` on it: the first row's min budget replays clean and 2 MiB less
 *    does not, and its peak reserved is the replay's at that setting;
 *  - the OOM advice at 2 MiB under what the run's own setting needs
 *    proposes a setting whose replay at that budget runs clean (or says
 *    that none fits, when none does).
 * Without the thread column, the 'j' rows or the order lock the peaks and
 * counts differ (the replay would be one thread's).
 */
#include "child_run.h"
#include "fp_advise.h"
#include "fp_conf.h"
#include "fp_cuda.h"
#include "fp_jread.h"
#include "fp_trace.h"
#include "fp_tune.h"
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { THREADS = 8, LIVE = 24, PAIRS = 1200, BOX = 64 };
#define MiB ((size_t)1 << 20)

static CUcontext ctx;
static bool async_mode;
static pthread_barrier_t start;
static pthread_mutex_t box_lock = PTHREAD_MUTEX_INITIALIZER;
static CUdeviceptr box[BOX];
static int nbox;

/* ---- the client ------------------------------------------------------------ */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t random_size(uint64_t *s)
{
    if (rnd(s) % 64 == 0)
        return (size_t)(8 + rnd(s) % 32) * MiB;
    double u = (double)(rnd(s) >> 11) / 9007199254740992.0;
    return (size_t)(512.0 * exp2(u * 13));
}

static int alloc_one(CUdeviceptr *p, size_t size, CUstream s)
{
    return async_mode ? cuMemAllocAsync(p, size, s) != 0 : cuMemAlloc_v2(p, size) != 0;
}

static int free_one(CUdeviceptr p, CUstream s)
{
    return async_mode ? cuMemFreeAsync(p, s) != 0 : cuMemFree_v2(p) != 0;
}

/* p to the box, for another thread to free; false when it is full. */
static bool post(CUdeviceptr p)
{
    pthread_mutex_lock(&box_lock);
    bool ok = nbox < BOX;
    if (ok)
        box[nbox++] = p;
    pthread_mutex_unlock(&box_lock);
    return ok;
}

/* A block from the box, or 0. */
static CUdeviceptr fetch(void)
{
    pthread_mutex_lock(&box_lock);
    CUdeviceptr p = nbox ? box[--nbox] : 0;
    pthread_mutex_unlock(&box_lock);
    return p;
}

static void *worker(void *arg)
{
    uint64_t me = (uint64_t)(uintptr_t)arg, seed = 0x9E3779B97F4A7C15ull * me + 7;
    CUdeviceptr b[LIVE];
    CUstream s = NULL;
    int bad = cuCtxSetCurrent(ctx) != 0;
    if (async_mode && cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
        bad = 1;
    for (int i = 0; i < LIVE && !bad; i++)
        bad = alloc_one(&b[i], random_size(&seed), s);
    pthread_barrier_wait(&start);
    int pairs = PAIRS + (int)me * 150;
    for (int i = 0; i < pairs && !bad; i++) {
        int j = (int)(rnd(&seed) % LIVE);
        uint64_t r = rnd(&seed) % 8;
        if (!(r == 0 && post(b[j])))
            bad = free_one(b[j], s);
        CUdeviceptr o = r == 1 ? fetch() : 0;
        if (o && !bad)
            bad = free_one(o, s);
        if (!bad)
            bad = alloc_one(&b[j], random_size(&seed), s);
    }
    for (int i = 0; i < LIVE && !bad; i++)
        bad = free_one(b[i], s);
    if (s) {
        cuStreamSynchronize(s);
        cuStreamDestroy_v2(s);
    }
    return (void *)(uintptr_t)bad;
}

static int client(void)
{
    CUdevice dev;
    pthread_t t[THREADS];
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return 10;
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad = bad ? bad : (int)(uintptr_t)r;
    }
    for (CUdeviceptr p; (p = fetch()) != 0;) /* the box's rest: a thread that never allocated */
        bad = bad ? bad : free_one(p, NULL);
    pthread_barrier_destroy(&start);
    return bad ? 20 : 0;
}

/* ---- the test ---------------------------------------------------------------- */

enum { NTOK = 8192 };
static fp_jtok toks[NTOK];
static fp_trace trace; /* freed by the teardown */

static int release(void **state)
{
    fp_t_release_held(state);
    fp_trace_free(&trace);
    return 0;
}

static int64_t jint(const fp_jdoc *d, const char *path)
{
    int64_t v = -1;
    int t = fp_jdoc_path(d, path);
    if (t < 0 || fp_jdoc_int(d, t, &v))
        fail_msg("JSON summary: no integer at %s", path);
    return v;
}

/* Runs the client with conf; its summary parsed into d, its trace into
 * `trace`. */
static void record(bool async, const char *segs, fp_jdoc *d)
{
    char dir[] = "/tmp/fp-trth-XXXXXX", conf[768], self[4096], sum[256], csv[256];
    assert_non_null(mkdtemp(dir));
    snprintf(sum, sizeof sum, "%s/s.json", dir);
    snprintf(csv, sizeof csv, "%s/t.csv", dir);
    snprintf(conf, sizeof conf,
             "FRAGPOOL_CONF=debug_check:1,thread_cache_mb:8,expandable_segments:%s,trace:%s,"
             "summary_format:json,summary:%s",
             segs, csv, sum);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    static const char *const drop[] = {"FRAGPOOL_CONF=", NULL};
    const char *add[] = {conf, NULL};
    char **env = fp_t_hold(fp_t_child_env(drop, add));
    char *argv[] = {self, (char *)"client", (char *)(async ? "async" : "sync"), NULL};
    int out = fp_t_temp_fd("/tmp/fp-trth-out-"), st = 0;
    pid_t pid = fp_t_spawn_wait(self, argv, env, out, -1, 240, &st);
    assert_true(pid > 0);
    const char *said = fp_t_slurp_fd(out);
    close(out);
    char *json = fp_t_slurp_path(sum);
    char err[512];
    int loaded = fp_trace_load(csv, &trace, err, sizeof err);
    unlink(sum);
    unlink(csv);
    rmdir(dir);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("client (%s, expandable_segments:%s) failed: status %d; it said: %s",
                 async ? "async" : "sync", segs, st, said);
    if (loaded)
        fail_msg("the trace: %s", err);
    assert_non_null(json);
    size_t errpos = 0;
    if (fp_jdoc_parse(d, json, strlen(json), toks, NTOK, &errpos))
        fail_msg("summary does not parse at byte %zu", errpos);
}

static void opts_of(const char *segs, fp_pool_opts *o)
{
    fp_tune_setting s;
    char text[64];
    snprintf(text, sizeof text, "expandable_segments:%s", segs);
    assert_int_equal(fp_tune_setting_init(&s, text), 0);
    *o = s.opts;
}

/* tune's first row: its min budget runs clean, 2 MiB less does not. */
static void tune_holds(void)
{
    fp_tune_params tp = {.threads = 2, .gc_top = 1};
    fp_tune_row *rows;
    size_t n;
    assert_int_equal(fp_tune_run(&trace, &tp, &rows, &n), 0);
    assert_true(n > 0 && rows[0].min_budget > 0);
    fp_replay_result r;
    assert_int_equal(fp_replay(&trace, &rows[0].set.opts, 0, &r, NULL), 0);
    assert_int_equal((size_t)r.stats.reserved_bytes[FP_ALL].peak, rows[0].peak_reserved);
    assert_int_equal(fp_replay(&trace, &rows[0].set.opts, rows[0].min_budget, &r, NULL), 0);
    assert_int_equal(r.ooms, 0);
    assert_int_equal(fp_replay(&trace, &rows[0].set.opts, rows[0].min_budget - 2 * MiB, &r, NULL),
                     0);
    assert_true(r.ooms > 0);
    print_message("tune: %s: peak reserved %zu, min budget %zu\n",
                  rows[0].set.conf[0] ? rows[0].set.conf : "(defaults)", rows[0].peak_reserved,
                  rows[0].min_budget);
    free(rows);
}

/* The advice at 2 MiB less than the run's own setting needs (tune's
 * search: that setting OOMs there) names a setting that replays clean in
 * it, or says none fits. */
static void advice_holds(const char *segs)
{
    fp_conf c;
    char text[64];
    fp_conf_default(&c);
    snprintf(text, sizeof text, "expandable_segments:%s", segs);
    assert_int_equal(fp_conf_parse_as(text, "test", 0, &c, NULL, NULL), 0);
    fp_tune_setting cur;
    fp_tune_row row;
    assert_int_equal(fp_tune_setting_init(&cur, text), 0);
    fp_tune_params tp = {.threads = 1}; /* not NULL: fp_tune_eval reads p->stop_above's address */
    assert_int_equal(fp_tune_eval(&trace, &cur, &tp, &row), 0);
    assert_true(row.min_budget > 2 * MiB);
    size_t budget = row.min_budget - 2 * MiB;
    fp_replay_result r;
    assert_int_equal(fp_replay(&trace, &cur.opts, budget, &r, NULL), 0);
    assert_true(r.ooms > 0);
    fp_advice v;
    fp_advice_req req = {.budget = budget, .current = &c, .threads = 2};
    assert_int_equal(fp_advise(&trace, &req, &v), 0);
    print_message("advice at %zu: kind %d, '%s', need %zu\n", budget, v.kind, v.conf, v.need);
    assert_true(v.kind == FP_ADVICE_FIX || v.kind == FP_ADVICE_NONE_FITS);
    if (v.kind == FP_ADVICE_NONE_FITS) {
        assert_true(v.best_need > budget);
        return;
    }
    fp_tune_setting s;
    assert_int_equal(fp_tune_setting_init_over(&s, v.conf, &c), 0);
    assert_true(v.need <= budget);
    assert_int_equal(fp_replay(&trace, &s.opts, budget, &r, NULL), 0);
    assert_int_equal(r.ooms, 0);
}

static void replays_run(bool async, const char *segs)
{
    fp_jdoc d;
    record(async, segs, &d);
    assert_int_equal(trace.threads, THREADS + 1); /* and the main thread, which only frees */
    assert_int_equal(trace.thread_cache, 8 * MiB);
    int64_t run_allocs = jint(&d, "devices.0.thread_cache.lockless_allocs");
    int64_t run_frees = jint(&d, "devices.0.thread_cache.lockless_frees");
    assert_true(run_allocs > 0 && run_frees > 0);
    fp_pool_opts o;
    opts_of(segs, &o);
    fp_replay_result r;
    fp_pool *p;
    assert_int_equal(fp_replay(&trace, &o, 0, &r, &p), 0);
    fp_front_counts fc;
    fp_pool_front_counts(p, &fc);
    fp_pool_destroy(p, 1);
    int64_t peak = jint(&d, "devices.0.reserved.peak");
    print_message("%s, expandable_segments:%s: %zu events; peak reserved: run %lld, replay %lld; "
                  "reserve calls %lld / %llu; without the pool's lock: %lld / %llu allocations, "
                  "%lld / %llu frees; flushes %lld / %llu\n",
                  async ? "async" : "sync", segs, trace.n, (long long)peak,
                  (long long)r.stats.reserved_bytes[FP_ALL].peak,
                  (long long)jint(&d, "devices.0.reserve_calls"),
                  (unsigned long long)r.stats.num_reserve_calls, (long long)run_allocs,
                  (unsigned long long)fc.allocs, (long long)run_frees, (unsigned long long)fc.frees,
                  (long long)jint(&d, "devices.0.thread_cache.flushes"),
                  (unsigned long long)fc.flushes);
    assert_int_equal(r.stats.reserved_bytes[FP_ALL].peak, peak);
    assert_int_equal(r.stats.num_reserve_calls, jint(&d, "devices.0.reserve_calls"));
    assert_int_equal(fc.threads, jint(&d, "devices.0.thread_cache.threads"));
    assert_int_equal(fc.allocs, run_allocs);
    assert_int_equal(fc.frees, run_frees);
    assert_int_equal(fc.flushes, jint(&d, "devices.0.thread_cache.flushes"));
    assert_int_equal(fc.returned, jint(&d, "devices.0.thread_cache.returned_bytes"));
    assert_int_equal(r.ooms + r.bad_frees + r.dup_allocs, 0);
    tune_holds();
    advice_holds(segs);
}

static void sync_vmm(void **state)
{
    (void)state;
    replays_run(false, "True");
}

static void sync_classic(void **state)
{
    (void)state;
    replays_run(false, "False");
}

static void async_vmm(void **state)
{
    (void)state;
    replays_run(true, "True");
}

static void async_classic(void **state)
{
    (void)state;
    replays_run(true, "False");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "client") == 0) {
        async_mode = strcmp(argv[2], "async") == 0;
        return client();
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(sync_vmm, release),
        cmocka_unit_test_teardown(sync_classic, release),
        cmocka_unit_test_teardown(async_vmm, release),
        cmocka_unit_test_teardown(async_classic, release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
