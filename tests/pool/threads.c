/* tests/pool/threads.c - 8 threads allocating and freeing on one pool with
 * a tight mock (OOMs and retries happen): no two live blocks overlap,
 * fp_pool_check holds after every operation of every thread, and the
 * counts add up at the end.
 */
#include "pool_test.h"

#define T_THREADS 8
#define T_OPS     20000
#define T_LIVE    64

typedef struct tsh {
    fp_pool *p;
    fp_pool_opts o;
    pthread_mutex_t mu; /* guards the live set and the error */
    uint64_t *addr;     /* every live block, all threads */
    size_t *len;
    size_t n;
    int failed;
    char err[512];
    long allocs, frees, ooms;
} tsh;

typedef struct targ {
    tsh *sh;
    int id;
} targ;

static void t_fail(tsh *sh, const char *what, long v)
{
    pthread_mutex_lock(&sh->mu);
    if (!sh->failed)
        snprintf(sh->err, sizeof sh->err, "%s (%ld)", what, v);
    sh->failed = 1;
    pthread_mutex_unlock(&sh->mu);
}

static void t_check(tsh *sh)
{
    char msg[400];
    msg[0] = 0;
    if (fp_pool_check(sh->p, msg, sizeof msg) != 0) {
        pthread_mutex_lock(&sh->mu);
        if (!sh->failed)
            snprintf(sh->err, sizeof sh->err, "fp_pool_check: %s", msg);
        sh->failed = 1;
        pthread_mutex_unlock(&sh->mu);
    }
}

static void t_insert(tsh *sh, uint64_t a, size_t len)
{
    pthread_mutex_lock(&sh->mu);
    for (size_t i = 0; i < sh->n; i++)
        if (a < sh->addr[i] + sh->len[i] && sh->addr[i] < a + len && !sh->failed) {
            snprintf(sh->err, sizeof sh->err, "overlap 0x%llx+%zu / 0x%llx+%zu",
                     (unsigned long long)a, len, (unsigned long long)sh->addr[i], sh->len[i]);
            sh->failed = 1;
        }
    sh->addr[sh->n] = a;
    sh->len[sh->n] = len;
    sh->n++;
    pthread_mutex_unlock(&sh->mu);
}

static void t_remove(tsh *sh, uint64_t a)
{
    pthread_mutex_lock(&sh->mu);
    for (size_t i = 0; i < sh->n; i++)
        if (sh->addr[i] == a) {
            sh->addr[i] = sh->addr[sh->n - 1];
            sh->len[i] = sh->len[sh->n - 1];
            sh->n--;
            break;
        }
    pthread_mutex_unlock(&sh->mu);
}

static void *t_main(void *arg)
{
    targ *ta = arg;
    tsh *sh = ta->sh;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(ta->id + 1);
    uint64_t live[T_LIVE];
    size_t req[T_LIVE];
    size_t n = 0;
    long allocs = 0, frees = 0, ooms = 0;
    for (int i = 0; i < T_OPS && !sh->failed; i++) {
        uint64_t r = rng_next(&rng);
        if (r % 1000 == 0) {
            if (fp_pool_empty_cache(sh->p) != 0)
                t_fail(sh, "empty_cache", 0);
        } else if (r % 1000 == 1) {
            fp_pool_stats s;
            fp_pool_get_stats(sh->p, &s);
            if (s.allocations[FP_ALL].current < (int64_t)n)
                t_fail(sh, "allocations below this thread's own", (long)n);
        } else if (n > 0 && (n == T_LIVE || (r >> 10) % 100 < 45)) {
            size_t k = (size_t)((r >> 20) % n);
            size_t sz = 0;
            if (fp_pool_owns(sh->p, live[k], &sz) != 1 || sz != req[k])
                t_fail(sh, "owns of a live block", (long)sz);
            t_remove(sh, live[k]);
            int rc = fp_pool_free(sh->p, live[k]);
            if (rc != 0)
                t_fail(sh, "free", rc);
            live[k] = live[--n];
            req[k] = req[n];
            frees++;
        } else {
            unsigned e = (unsigned)((r >> 8) % 23);
            size_t size = ((size_t)1 << e) + (size_t)((r >> 32) % ((uint64_t)1 << e));
            uint64_t a = 0;
            int rc = fp_pool_alloc(sh->p, size, &a);
            if (rc == 0) {
                t_insert(sh, a, ref_round(&sh->o, size));
                live[n] = a;
                req[n++] = size;
                allocs++;
            } else if (rc == ENOMEM) {
                ooms++;
            } else {
                t_fail(sh, "alloc", rc);
            }
        }
        t_check(sh);
    }
    while (n > 0) {
        n--;
        t_remove(sh, live[n]);
        if (fp_pool_free(sh->p, live[n]) != 0)
            t_fail(sh, "final free", 0);
        frees++;
        t_check(sh);
    }
    pthread_mutex_lock(&sh->mu);
    sh->allocs += allocs;
    sh->frees += frees;
    sh->ooms += ooms;
    pthread_mutex_unlock(&sh->mu);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    static tsh sh;
    memset(&sh, 0, sizeof sh);
    pthread_mutex_init(&sh.mu, NULL);
    sh.addr = calloc(T_THREADS * T_LIVE, sizeof *sh.addr);
    sh.len = calloc(T_THREADS * T_LIVE, sizeof *sh.len);
    assert_non_null(sh.addr);
    assert_non_null(sh.len);
    pool_fixture f;
    fixture_open(&f, NULL, 192 * MiB); /* tight enough for OOMs and retries */
    sh.p = f.p;
    sh.o = f.o;
    pthread_t th[T_THREADS];
    targ ta[T_THREADS];
    for (int i = 0; i < T_THREADS; i++) {
        ta[i] = (targ){&sh, i};
        EQ(pthread_create(&th[i], NULL, t_main, &ta[i]), 0);
    }
    for (int i = 0; i < T_THREADS; i++)
        pthread_join(th[i], NULL);
    check_pool(f.p);
    if (sh.failed)
        fail_msg("threads: %s", sh.err);
    mock_ok(&f.m);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_allocs, sh.allocs);
    EQ(s.num_frees, sh.frees);
    EQ(s.num_ooms, sh.ooms);
    EQ(s.allocations[FP_ALL].current, 0);
    EQ(s.requested_bytes[FP_ALL].current, 0);
    EQ(s.allocated_bytes[FP_ALL].current, 0);
    EQ(s.reserved_bytes[FP_ALL].current, (int64_t)f.m.live_bytes);
    EQ(s.num_reserve_calls, f.m.reserve_ok);
    EQ(s.num_release_calls, f.m.release_calls);
    TRUE(sh.allocs > T_THREADS * T_OPS / 4);
    print_message("threads: %ld allocs, %ld frees, %ld OOMs, %ju retries\n", sh.allocs, sh.frees,
                  sh.ooms, (uintmax_t)s.num_alloc_retries);
    empty_cache_ok(f.p);
    EQ(f.m.nlive, 0);
    fixture_close(&f);
    free(sh.addr);
    free(sh.len);
    pthread_mutex_destroy(&sh.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
