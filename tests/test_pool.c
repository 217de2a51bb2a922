/* test_pool.c - the tests of pool/ against a mock backend.
 *
 * What is pinned: the size rules (rounding, roundup_power2_divisions,
 * segment sizes), best fit with its address tie-break, each split rule at
 * its boundary, each max_split rule, merging (and none across segments),
 * release-and-retry in its three steps, the cap, the GC, every stats field
 * after a known sequence, empty_cache, invalid frees, fp_pool_owns,
 * fp_pool_walk, destroy, threads, and a randomized run of 110,000
 * operations cross-checked against an independent model.
 *
 * Every pool call is followed by fp_pool_check (check()).  The mock backend
 * hands out increasing, 2 MiB-aligned, never reused addresses, and flags any
 * release that does not name exactly one live reservation, and any reserve
 * of a size that no rule can produce (0, or not a multiple of 2 MiB).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "fp_pool.h"

#define KiB FP_KIB
#define MiB FP_MIB
#define GiB FP_GIB

/* ---- failure reporting ------------------------------------------------- */

static char g_where[160]; /* phase and operation of the randomized test */

#define EQ(a, b) eq_((uintmax_t)(a), (uintmax_t)(b), #a, #b, __FILE__, __LINE__)
static void eq_(uintmax_t a, uintmax_t b, const char *sa, const char *sb,
                const char *file, int line)
{
    if (a != b)
        fail_msg("%s:%d: %s%s: %s == %ju (%jd, 0x%jx), expected %s == %ju "
                 "(%jd, 0x%jx)", file, line, g_where, g_where[0] ? "" : "-",
                 sa, a, (intmax_t)a, a, sb, b, (intmax_t)b, b);
}

#define TRUE(c) true_((c) != 0, #c, __FILE__, __LINE__)
static void true_(int ok, const char *what, const char *file, int line)
{
    if (!ok)
        fail_msg("%s:%d: %s: not true: %s", file, line, g_where, what);
}

/* The checker, after every pool operation. */
static void check(fp_pool *p)
{
    char msg[512];
    msg[0] = 0;
    int rc = fp_pool_check(p, msg, sizeof msg);
    if (rc != 0)
        fail_msg("fp_pool_check failed (%d) %s: %s", rc, g_where, msg);
}

static uint64_t rng_next(uint64_t *s) /* xorshift64* */
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void nap(void) /* lets a clock-based GC age tell two frees apart */
{
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* ---- the mock backend ------------------------------------------------- */

#define MOCK_BASE 0x7f0000000000ull
#define SEG_ALIGN (2 * MiB)

typedef struct mseg {
    uint64_t addr; /* start of a live reservation */
    size_t size;   /* its size                    */
} mseg;

typedef struct mock {
    pthread_mutex_t mu;
    uint64_t next;       /* next free address (before alignment)       */
    size_t capacity;     /* bytes it can hold at once; SIZE_MAX: no end */
    size_t live_bytes;   /* bytes reserved and not released            */
    mseg *live;          /* live reservations, by address              */
    size_t nlive, caplive;
    int fail_next;       /* refuse this many reserves ...               */
    int fail_err;        /* ... with this errno                          */
    uint64_t injected;   /* refusals handed out through fail_next        */
    uint64_t reserve_calls, reserve_ok, release_calls, sync_calls;
    uint64_t reserved_total, released_total;
    uint64_t bad_reserve, bad_release; /* pool errors seen */
} mock;

static size_t mock_find(const mock *m, uint64_t addr) /* index or nlive */
{
    size_t lo = 0, hi = m->nlive;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->live[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->nlive && m->live[lo].addr == addr ? lo : m->nlive;
}

static int mock_reserve(void *ctx, size_t size, uint64_t *addr)
{
    mock *m = ctx;
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    m->reserve_calls++;
    if (m->fail_next > 0) {
        m->fail_next--;
        m->injected++;
        rc = m->fail_err;
    } else if (size == 0 || size % SEG_ALIGN != 0) {
        m->bad_reserve++;
        rc = EINVAL;
    } else if (size > m->capacity || m->live_bytes > m->capacity - size) {
        rc = ENOMEM;
    } else {
        uint64_t a = (m->next + SEG_ALIGN - 1) & ~(uint64_t)(SEG_ALIGN - 1);
        if (a < m->next || size > UINT64_MAX - a) {
            rc = ENOMEM;
        } else {
            if (m->nlive == m->caplive) {
                m->caplive = m->caplive ? 2 * m->caplive : 64;
                m->live = realloc(m->live, m->caplive * sizeof *m->live);
                if (!m->live)
                    abort();
            }
            m->live[m->nlive++] = (mseg){a, size}; /* addresses only grow */
            m->next = a + size;
            m->live_bytes += size;
            m->reserve_ok++;
            m->reserved_total += size;
            *addr = a;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int mock_release(void *ctx, uint64_t addr, size_t size)
{
    mock *m = ctx;
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    m->release_calls++;
    size_t i = mock_find(m, addr);
    if (i == m->nlive || m->live[i].size != size) {
        m->bad_release++;
        rc = EINVAL;
    } else {
        memmove(&m->live[i], &m->live[i + 1],
                (m->nlive - i - 1) * sizeof *m->live);
        m->nlive--;
        m->live_bytes -= size;
        m->released_total += size;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int mock_sync(void *ctx)
{
    mock *m = ctx;
    pthread_mutex_lock(&m->mu);
    m->sync_calls++;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

static void mock_init(mock *m, size_t capacity)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->next = MOCK_BASE;
    m->capacity = capacity;
    m->fail_err = ENOMEM;
}

static void mock_fini(mock *m)
{
    free(m->live);
    m->live = NULL;
    pthread_mutex_destroy(&m->mu);
}

static void mock_ok(const mock *m)
{
    EQ(m->bad_reserve, 0);
    EQ(m->bad_release, 0);
}

/* ---- a pool on a mock ------------------------------------------------- */

typedef struct fx {
    mock m;
    fp_backend be;
    fp_pool_opts o;
    fp_pool *p;
} fx;

static void fx_open(fx *f, const fp_pool_opts *o, size_t capacity)
{
    memset(f, 0, sizeof *f);
    mock_init(&f->m, capacity);
    f->be.ctx = &f->m;
    f->be.reserve = mock_reserve;
    f->be.release = mock_release;
    f->be.synchronize = mock_sync;
    if (o)
        f->o = *o;
    else
        fp_pool_opts_default(&f->o);
    EQ(fp_pool_create(&f->o, &f->be, &f->p), 0);
    assert_non_null(f->p);
    check(f->p);
}

static void fx_close(fx *f)
{
    check(f->p);
    fp_pool_destroy(f->p, 0);
    f->p = NULL;
    mock_ok(&f->m);
    EQ(f->m.nlive, 0);
    EQ(f->m.live_bytes, 0);
    mock_fini(&f->m);
}

static fp_pool_opts opts_ms(size_t max_split)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.max_split_size = max_split;
    return o;
}

/* Pool calls, each followed by the checker. */
static uint64_t A(fp_pool *p, size_t size)
{
    uint64_t a = 0;
    int rc = fp_pool_alloc(p, size, &a);
    check(p);
    if (rc != 0)
        fail_msg("fp_pool_alloc(%zu) = %d", size, rc);
    TRUE(a != 0);
    return a;
}

static int Atry(fp_pool *p, size_t size, uint64_t *a)
{
    *a = 0;
    int rc = fp_pool_alloc(p, size, a);
    check(p);
    return rc;
}

static void F(fp_pool *p, uint64_t a)
{
    int rc = fp_pool_free(p, a);
    check(p);
    if (rc != 0)
        fail_msg("fp_pool_free(0x%llx) = %d", (unsigned long long)a, rc);
}

static void E(fp_pool *p)
{
    EQ(fp_pool_empty_cache(p), 0);
    check(p);
}

static fp_pool_stats S(fp_pool *p)
{
    fp_pool_stats s;
    memset(&s, 0, sizeof s);
    fp_pool_get_stats(p, &s);
    check(p);
    return s;
}

static int OWNS(fp_pool *p, uint64_t a, size_t *size)
{
    *size = 12345; /* must be overwritten */
    int r = fp_pool_owns(p, a, size);
    check(p);
    return r;
}

static int owns(fp_pool *p, uint64_t a)
{
    size_t sz;
    return OWNS(p, a, &sz);
}

static size_t idle(fp_pool *p)
{
    size_t n = fp_pool_idle_bytes(p);
    check(p);
    return n;
}

/* ---- walking ----------------------------------------------------------- */

typedef struct wseg {
    uint64_t addr;
    size_t size;
    int small;
    size_t first, n; /* its blocks in wdump.blk */
} wseg;

typedef struct wdump {
    wseg *seg;
    size_t nseg, capseg;
    fp_block_info *blk;
    size_t nblk, capblk;
} wdump;

static void walk_cb(void *ud, uint64_t addr, size_t size, int small,
                    const fp_block_info *b, size_t n)
{
    wdump *w = ud;
    if (w->nseg == w->capseg) {
        w->capseg = w->capseg ? 2 * w->capseg : 64;
        w->seg = realloc(w->seg, w->capseg * sizeof *w->seg);
    }
    while (w->nblk + n > w->capblk) {
        w->capblk = w->capblk ? 2 * w->capblk : 256;
        w->blk = realloc(w->blk, w->capblk * sizeof *w->blk);
    }
    if (!w->seg || !w->blk)
        abort();
    w->seg[w->nseg++] = (wseg){addr, size, small != 0, w->nblk, n};
    if (n)
        memcpy(&w->blk[w->nblk], b, n * sizeof *b);
    w->nblk += n;
}

static void wd_free(wdump *w)
{
    free(w->seg);
    free(w->blk);
    memset(w, 0, sizeof *w);
}

/* Walks the pool and verifies the walk on its own: segments in address
 * order without overlap, blocks tiling each segment, free blocks with
 * requested 0, allocated ones with 0 < requested <= size. */
static void wd_take(fp_pool *p, wdump *w)
{
    w->nseg = w->nblk = 0;
    fp_pool_walk(p, walk_cb, w);
    check(p);
    for (size_t s = 0; s < w->nseg; s++) {
        const wseg *g = &w->seg[s];
        if (s > 0)
            TRUE(w->seg[s - 1].addr + w->seg[s - 1].size <= g->addr);
        TRUE(g->n >= 1);
        uint64_t at = g->addr;
        for (size_t k = 0; k < g->n; k++) {
            const fp_block_info *b = &w->blk[g->first + k];
            EQ(b->addr, at);
            TRUE(b->size >= FP_MIN_BLOCK && b->size % FP_MIN_BLOCK == 0);
            TRUE(b->state == 0 || b->state == 1 || b->state == 2);
            if (b->state == 0)
                EQ(b->requested, 0);
            else if (b->state == 1)
                TRUE(b->requested > 0 && b->requested <= b->size);
            at += b->size;
        }
        EQ(at, g->addr + g->size);
    }
}

static const wseg *wd_seg_at(const wdump *w, uint64_t addr)
{
    for (size_t s = 0; s < w->nseg; s++)
        if (w->seg[s].addr == addr)
            return &w->seg[s];
    return NULL;
}

static const fp_block_info *wd_block_at(const wdump *w, uint64_t addr,
                                        const wseg **segout)
{
    for (size_t s = 0; s < w->nseg; s++) {
        const wseg *g = &w->seg[s];
        if (addr < g->addr || addr >= g->addr + g->size)
            continue;
        for (size_t k = 0; k < g->n; k++)
            if (w->blk[g->first + k].addr == addr) {
                if (segout)
                    *segout = g;
                return &w->blk[g->first + k];
            }
    }
    return NULL;
}

static int wd_same(const wdump *a, const wdump *b)
{
    if (a->nseg != b->nseg || a->nblk != b->nblk)
        return 0;
    for (size_t s = 0; s < a->nseg; s++)
        if (a->seg[s].addr != b->seg[s].addr || a->seg[s].size != b->seg[s].size ||
            a->seg[s].small != b->seg[s].small || a->seg[s].n != b->seg[s].n)
            return 0;
    for (size_t k = 0; k < a->nblk; k++) {
        const fp_block_info *x = &a->blk[k], *y = &b->blk[k];
        if (x->addr != y->addr || x->size != y->size ||
            x->requested != y->requested || x->state != y->state)
            return 0;
    }
    return 1;
}

/* Expected layout of one segment. */
typedef struct xb {
    size_t size;
    int state; /* 0 free, 1 allocated */
} xb;

static void expect_seg(fp_pool *p, uint64_t seg, size_t segsize, int small,
                       const xb *x, size_t n)
{
    wdump w = {0};
    wd_take(p, &w);
    const wseg *g = wd_seg_at(&w, seg);
    if (!g)
        fail_msg("no segment at 0x%llx", (unsigned long long)seg);
    EQ(g->size, segsize);
    EQ(g->small, small);
    EQ(g->n, n);
    uint64_t at = seg;
    for (size_t k = 0; k < n; k++) {
        const fp_block_info *b = &w.blk[g->first + k];
        EQ(b->addr, at);
        EQ(b->size, x[k].size);
        EQ(b->state, x[k].state);
        at += x[k].size;
    }
    wd_free(&w);
}

static size_t nsegs(fp_pool *p)
{
    wdump w = {0};
    wd_take(p, &w);
    size_t n = w.nseg;
    wd_free(&w);
    return n;
}

/* ---- the rules, written independently of the pool -------------------- */

static size_t m_round(const fp_pool_opts *o, size_t s)
{
    if (s < FP_MIN_BLOCK)
        return FP_MIN_BLOCK;
    int lg = 63 - __builtin_clzll((unsigned long long)s);
    int idx = lg - 20;
    idx = idx < 0 ? 0 : idx > FP_ROUNDUP_INTERVALS - 1 ? FP_ROUNDUP_INTERVALS - 1 : idx;
    size_t d = o->roundup_divisions[idx];
    if (d > 1 && s > FP_MIN_BLOCK * d) {
        if ((s & (s - 1)) == 0)
            return s;
        size_t floor2 = (size_t)1 << lg;
        size_t step = floor2 / d;
        if (step == 0)
            return 2 * floor2;
        return (s + step - 1) / step * step;
    }
    return (s + FP_MIN_BLOCK - 1) / FP_MIN_BLOCK * FP_MIN_BLOCK;
}

static size_t m_segsize(size_t r)
{
    if (r <= 1 * MiB)
        return 2 * MiB;
    if (r < 10 * MiB)
        return 20 * MiB;
    return (r + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
}

static int m_split(const fp_pool_opts *o, int small, size_t bsize, size_t r)
{
    size_t rem = bsize - r;
    if (small)
        return rem >= FP_MIN_BLOCK;
    return r < o->max_split_size && rem > 1 * MiB;
}

/* 1 when a best-fit block of bsize may not serve a request rounded to r. */
static int m_refuses(const fp_pool_opts *o, size_t r, size_t bsize)
{
    if (r < o->max_split_size)
        return bsize >= o->max_split_size;
    return bsize - r >= o->max_non_split_rounding;
}

/* ======================================================================= */
/* options and size rules                                                  */
/* ======================================================================= */

static void test_opts_default(void **state)
{
    (void)state;
    fp_pool_opts o;
    memset(&o, 0xab, sizeof o);
    fp_pool_opts_default(&o);
    EQ(o.max_split_size, SIZE_MAX);
    EQ(o.max_non_split_rounding, 20 * MiB);
    for (int i = 0; i < FP_ROUNDUP_INTERVALS; i++)
        TRUE(o.roundup_divisions[i] <= 1);
    TRUE(o.gc_threshold == 0.0);
    TRUE(o.memory_fraction == 0.0);
    EQ(o.max_reserved, 0);
    EQ(fp_pool_opts_cap(&o), SIZE_MAX);
}

static void test_opts_cap(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.device_total = 1 * GiB;
    EQ(fp_pool_opts_cap(&o), SIZE_MAX); /* device_total alone is no cap */
    o.max_reserved = 100 * MiB;
    EQ(fp_pool_opts_cap(&o), 100 * MiB);
    o.max_reserved = 0;
    o.memory_fraction = 0.5;
    EQ(fp_pool_opts_cap(&o), 512 * MiB);
    o.memory_fraction = 0.25;
    EQ(fp_pool_opts_cap(&o), 256 * MiB);
    o.memory_fraction = 1.0;
    EQ(fp_pool_opts_cap(&o), 1 * GiB);
    o.memory_fraction = 0.5;
    o.max_reserved = 100 * MiB; /* both: the smaller */
    EQ(fp_pool_opts_cap(&o), 100 * MiB);
    o.max_reserved = 600 * MiB;
    EQ(fp_pool_opts_cap(&o), 512 * MiB);
}

typedef struct sz2 {
    size_t in, out;
} sz2;

static void round_table(const fp_pool_opts *o, const sz2 *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t got = fp_round_size(o, t[i].in);
        if (got != t[i].out)
            fail_msg("fp_round_size(%zu) = %zu, expected %zu", t[i].in, got,
                     t[i].out);
        EQ(m_round(o, t[i].in), t[i].out); /* the model agrees */
    }
}

static void test_round_plain(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    static const sz2 t[] = {
        {0, 512}, {1, 512}, {511, 512}, {512, 512}, {513, 1024},
        {1000, 1024}, {1024, 1024}, {1025, 1536}, {4097, 4608},
        {1 * MiB - 1, 1 * MiB}, {1 * MiB, 1 * MiB}, {1 * MiB + 1, 1 * MiB + 512},
        {3 * MiB / 2 + 1, 3 * MiB / 2 + 512}, {10 * MiB - 1, 10 * MiB},
        {10 * MiB + 1, 10 * MiB + 512}, {1 * GiB + 1, 1 * GiB + 512},
        {64 * GiB + 1, 64 * GiB + 512},
    };
    round_table(&o, t, sizeof t / sizeof t[0]);
    o.roundup_divisions[0] = 1; /* 1 = off */
    o.roundup_divisions[5] = 1;
    round_table(&o, t, sizeof t / sizeof t[0]);
}

static void test_round_divisions(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.roundup_divisions[0] = 4;  /* [0, 2M): also below 1 MiB */
    o.roundup_divisions[1] = 8;  /* [2M, 4M)                  */
    o.roundup_divisions[5] = 2;  /* [32M, 64M)                */
    o.roundup_divisions[14] = 1; /* [16G, 32G): off            */
    o.roundup_divisions[15] = 4; /* [32G, ...)                */
    static const sz2 t[] = {
        {1, 512}, {2047, 2048}, {2048, 2048}, {2049, 2560}, {3000, 3072},
        {4097, 5120}, {900 * KiB, 1 * MiB}, {1 * MiB, 1 * MiB},
        {1 * MiB + 1, 1 * MiB + 256 * KiB}, {5 * MiB / 4, 5 * MiB / 4},
        {3 * MiB / 2, 3 * MiB / 2}, {3 * MiB / 2 + 1, 7 * MiB / 4},
        {2 * MiB - 1, 2 * MiB}, {2 * MiB, 2 * MiB},
        {2 * MiB + 1, 2 * MiB + 256 * KiB}, {3 * MiB + 1, 3 * MiB + 256 * KiB},
        {4 * MiB - 1, 4 * MiB}, {4 * MiB + 1, 4 * MiB + 512},
        {32 * MiB, 32 * MiB}, {33 * MiB, 48 * MiB}, {40 * MiB, 48 * MiB},
        {48 * MiB, 48 * MiB}, {48 * MiB + 1, 64 * MiB},
        {64 * MiB + 1, 64 * MiB + 512},
        {16 * GiB + 1, 16 * GiB + 512}, {32 * GiB + 1, 40 * GiB},
        {64 * GiB, 64 * GiB}, {100 * GiB, 112 * GiB},
    };
    round_table(&o, t, sizeof t / sizeof t[0]);

    /* "only above 512 x N": with 16 divisions, sizes <= 8 KiB keep 512 B. */
    fp_pool_opts_default(&o);
    o.roundup_divisions[0] = 16;
    static const sz2 u[] = {
        {4097, 4608}, {8191, 8192}, {8192, 8192}, {8193, 8704},
        {16385, 17408}, {1 * MiB + 1, 1 * MiB + 64 * KiB},
    };
    round_table(&o, u, sizeof u / sizeof u[0]);
}

static void test_segment_size(void **state)
{
    (void)state;
    static const sz2 t[] = {
        {512, 2 * MiB}, {1 * MiB, 2 * MiB}, {1 * MiB + 1, 20 * MiB},
        {1 * MiB + 512, 20 * MiB}, {2 * MiB, 20 * MiB},
        {10 * MiB - 1, 20 * MiB}, {10 * MiB - 512, 20 * MiB},
        {10 * MiB, 10 * MiB}, {10 * MiB + 1, 12 * MiB},
        {10 * MiB + 512, 12 * MiB}, {19 * MiB, 20 * MiB},
        {20 * MiB, 20 * MiB}, {21 * MiB, 22 * MiB}, {22 * MiB, 22 * MiB},
        {1 * GiB + 512, 1 * GiB + 2 * MiB},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        size_t got = fp_segment_size(t[i].in);
        if (got != t[i].out)
            fail_msg("fp_segment_size(%zu) = %zu, expected %zu", t[i].in, got,
                     t[i].out);
        EQ(m_segsize(t[i].in), t[i].out);
    }
    EQ(fp_is_small(512), 1);
    EQ(fp_is_small(1 * MiB - 512), 1);
    EQ(fp_is_small(1 * MiB), 1);
    EQ(fp_is_small(1 * MiB + 1), 0);
    EQ(fp_is_small(1 * MiB + 512), 0);
    EQ(fp_is_small(20 * MiB), 0);
}

/* ======================================================================= */
/* split, best fit, max_split, merge                                       */
/* ======================================================================= */

static void test_small_split_boundary(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    uint64_t a = A(f.p, 1 * MiB); /* small: 2 MiB segment, split 1M + 1M */
    const xb l0[] = {{1 * MiB, 1}, {1 * MiB, 0}};
    expect_seg(f.p, a, 2 * MiB, 1, l0, 2);
    uint64_t b = A(f.p, 1 * MiB - 512); /* remainder 512: split */
    EQ(b, a + 1 * MiB);
    const xb l1[] = {{1 * MiB, 1}, {1 * MiB - 512, 1}, {512, 0}};
    expect_seg(f.p, a, 2 * MiB, 1, l1, 3);
    uint64_t c = A(f.p, 1); /* remainder 0: the 512 B block as it is */
    EQ(c, a + 2 * MiB - 512);
    const xb l2[] = {{1 * MiB, 1}, {1 * MiB - 512, 1}, {512, 1}};
    expect_seg(f.p, a, 2 * MiB, 1, l2, 3);
    F(f.p, b);
    uint64_t d = A(f.p, 1 * MiB - 1000); /* rounds to 1M - 512: exact fit */
    EQ(d, b);
    expect_seg(f.p, a, 2 * MiB, 1, l2, 3);
    fp_pool_stats s = S(f.p);
    EQ(s.allocated_bytes[FP_SMALL].current, 2 * MiB);
    EQ(s.requested_bytes[FP_SMALL].current, 2 * MiB - 1000 + 1);
    EQ(f.m.reserve_ok, 1);
    fx_close(&f);
}

static void test_large_split_boundary(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    uint64_t a = A(f.p, 19 * MiB); /* segment 20M, remainder 1M: no split */
    const xb whole[] = {{20 * MiB, 1}};
    expect_seg(f.p, a, 20 * MiB, 0, whole, 1);
    fp_pool_stats s = S(f.p);
    EQ(s.allocated_bytes[FP_LARGE].current, 20 * MiB);
    EQ(s.requested_bytes[FP_LARGE].current, 19 * MiB);

    uint64_t b = A(f.p, 19 * MiB - 512); /* remainder 1M + 512: split */
    const xb split[] = {{19 * MiB - 512, 1}, {1 * MiB + 512, 0}};
    expect_seg(f.p, b, 20 * MiB, 0, split, 2);

    F(f.p, a); /* the same two cases from a cached block */
    uint64_t c = A(f.p, 19 * MiB);
    EQ(c, a);
    expect_seg(f.p, a, 20 * MiB, 0, whole, 1);
    F(f.p, c);
    uint64_t d = A(f.p, 19 * MiB - 512);
    EQ(d, a);
    expect_seg(f.p, a, 20 * MiB, 0, split, 2);
    EQ(f.m.reserve_ok, 2);

    uint64_t e = A(f.p, 2 * MiB); /* 20 MiB segment, split 2M + 18M */
    const xb l3[] = {{2 * MiB, 1}, {18 * MiB, 0}};
    expect_seg(f.p, e, 20 * MiB, 0, l3, 2);
    EQ(f.m.reserve_ok, 3);

    /* two free 1M+512 blocks (in a's and b's segments) fit exactly: the
     * lower address wins, and the rest of the pool is untouched */
    uint64_t g = A(f.p, 1 * MiB + 1);
    EQ(g, a + 19 * MiB - 512);
    expect_seg(f.p, b, 20 * MiB, 0, split, 2);
    s = S(f.p);
    EQ(s.allocated_bytes[FP_LARGE].current,
       2 * (19 * MiB - 512) + 1 * MiB + 512 + 2 * MiB);
    EQ(f.m.reserve_ok, 3);
    fx_close(&f);
}

static void test_best_fit_small(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    uint64_t a1 = A(f.p, 512);
    uint64_t h1 = A(f.p, 1024);
    uint64_t a2 = A(f.p, 512);
    uint64_t h2 = A(f.p, 2048);
    uint64_t a3 = A(f.p, 512);
    uint64_t h3 = A(f.p, 1024);
    uint64_t a4 = A(f.p, 512);
    EQ(h1, a1 + 512);
    EQ(a2, a1 + 1536);
    EQ(h2, a1 + 2048);
    EQ(a3, a1 + 4096);
    EQ(h3, a1 + 4608);
    EQ(a4, a1 + 5632);
    F(f.p, h3); /* holes: h1 1024, h2 2048, h3 1024, and the tail */
    F(f.p, h2);
    F(f.p, h1);
    EQ(A(f.p, 1000), h1);       /* 1024: two exact holes, lower address */
    EQ(A(f.p, 1024), h3);       /* the other exact hole                  */
    EQ(A(f.p, 1536), h2);       /* best fit 2048, split                  */
    EQ(A(f.p, 100), h2 + 1536); /* the 512 B remainder before the tail   */
    EQ(A(f.p, 600), a1 + 6144); /* only the tail fits                    */
    EQ(f.m.reserve_ok, 1);
    fx_close(&f);

    /* tie across segments: two free 1 MiB blocks, lower address wins */
    fx_open(&f, NULL, SIZE_MAX);
    uint64_t s1a = A(f.p, 1 * MiB);
    uint64_t s1b = A(f.p, 1 * MiB);
    uint64_t s2a = A(f.p, 1 * MiB);
    uint64_t s2b = A(f.p, 1 * MiB);
    EQ(s1b, s1a + 1 * MiB);
    EQ(s2b, s2a + 1 * MiB);
    TRUE(s2a > s1a);
    F(f.p, s2b);
    F(f.p, s1b);
    EQ(A(f.p, 1 * MiB), s1b);
    EQ(A(f.p, 1 * MiB), s2b);
    EQ(f.m.reserve_ok, 2);
    fx_close(&f);
}

static void test_best_fit_large(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    uint64_t a12 = A(f.p, 12 * MiB);
    uint64_t b14 = A(f.p, 14 * MiB);
    uint64_t c16 = A(f.p, 16 * MiB);
    uint64_t d12 = A(f.p, 12 * MiB);
    TRUE(a12 < b14 && b14 < c16 && c16 < d12);
    F(f.p, c16); /* free out of address order */
    F(f.p, d12);
    F(f.p, b14);
    F(f.p, a12);
    EQ(A(f.p, 13 * MiB), b14);       /* smallest that fits; rem 1M kept */
    EQ(A(f.p, 12 * MiB), a12);       /* tie of two 12M: lower address   */
    EQ(A(f.p, 12 * MiB - 512), d12); /* rem 512 in the large pool: kept */
    EQ(A(f.p, 15 * MiB), c16);
    EQ(f.m.reserve_ok, 4);
    const xb whole14[] = {{14 * MiB, 1}};
    expect_seg(f.p, b14, 14 * MiB, 0, whole14, 1);
    const xb whole12[] = {{12 * MiB, 1}};
    expect_seg(f.p, d12, 12 * MiB, 0, whole12, 1);
    const xb whole16[] = {{16 * MiB, 1}};
    expect_seg(f.p, c16, 16 * MiB, 0, whole16, 1);

    /* a large request never takes a small-pool block, nor the reverse */
    uint64_t sm = A(f.p, 1 * MiB);
    F(f.p, sm); /* a free 2 MiB small segment */
    uint64_t lg = A(f.p, 1 * MiB + 512);
    TRUE(lg < sm || lg >= sm + 2 * MiB);
    EQ(f.m.reserve_ok, 6);
    uint64_t l2 = A(f.p, 2 * MiB); /* from lg's segment */
    EQ(l2, lg + 1 * MiB + 512);
    F(f.p, l2);
    EQ(A(f.p, 512), sm); /* small request: the small segment */
    EQ(f.m.reserve_ok, 6);
    fx_close(&f);
}

static void test_max_split_refuse(void **state)
{
    (void)state;
    fp_pool_opts o = opts_ms(32 * MiB);
    fx f;
    fx_open(&f, &o, SIZE_MAX);
    uint64_t big = A(f.p, 40 * MiB);
    F(f.p, big); /* cached oversize block */
    uint64_t x = A(f.p, 5 * MiB);
    TRUE(x != big);
    EQ(f.m.reserve_ok, 2);
    const xb free40[] = {{40 * MiB, 0}};
    expect_seg(f.p, big, 40 * MiB, 0, free40, 1);
    uint64_t y = A(f.p, 30 * MiB); /* < max_split: still refused */
    TRUE(y != big);
    EQ(f.m.reserve_ok, 3);
    uint64_t z = A(f.p, 32 * MiB - 512); /* just under max_split */
    TRUE(z != big);
    EQ(f.m.reserve_ok, 4);
    expect_seg(f.p, big, 40 * MiB, 0, free40, 1);
    uint64_t w = A(f.p, 32 * MiB); /* == max_split: takes it, unsplit */
    EQ(w, big);
    const xb used40[] = {{40 * MiB, 1}};
    expect_seg(f.p, big, 40 * MiB, 0, used40, 1);
    EQ(f.m.reserve_ok, 4);
    fx_close(&f);
}

static void test_max_split_slack(void **state)
{
    (void)state;
    fp_pool_opts o = opts_ms(32 * MiB);
    fx f;
    fx_open(&f, &o, SIZE_MAX);
    uint64_t b60 = A(f.p, 60 * MiB);
    F(f.p, b60);
    uint64_t x = A(f.p, 40 * MiB); /* 60 >= 40 + 20: refused */
    TRUE(x != b60);
    EQ(f.m.reserve_ok, 2);
    fp_pool_stats s0 = S(f.p);
    uint64_t y = A(f.p, 40 * MiB + 512); /* 60 < 60M + 512: taken whole */
    EQ(y, b60);
    EQ(f.m.reserve_ok, 2);
    const xb used60[] = {{60 * MiB, 1}};
    expect_seg(f.p, b60, 60 * MiB, 0, used60, 1);
    fp_pool_stats s = S(f.p);
    EQ(s.allocated_bytes[FP_LARGE].current,
       s0.allocated_bytes[FP_LARGE].current + 60 * MiB);
    EQ(s.requested_bytes[FP_LARGE].current,
       s0.requested_bytes[FP_LARGE].current + 40 * MiB + 512);
    EQ(s.num_cache_hits, s0.num_cache_hits + 1);

    F(f.p, x); /* 40M block: request == max_split takes it, not split */
    uint64_t z = A(f.p, 32 * MiB);
    EQ(z, x);
    const xb used40[] = {{40 * MiB, 1}};
    expect_seg(f.p, x, 40 * MiB, 0, used40, 1);
    fx_close(&f);

    /* a smaller max_non_split_rounding */
    o.max_non_split_rounding = 4 * MiB;
    fx_open(&f, &o, SIZE_MAX);
    uint64_t b40 = A(f.p, 40 * MiB);
    F(f.p, b40);
    uint64_t u = A(f.p, 36 * MiB); /* 40 >= 36 + 4 */
    TRUE(u != b40);
    uint64_t v = A(f.p, 36 * MiB + 512); /* 40 < 40M + 512 */
    EQ(v, b40);
    EQ(f.m.reserve_ok, 2);
    fx_close(&f);
}

static void test_max_split_no_split(void **state)
{
    (void)state;
    fp_pool_opts o = opts_ms(32 * MiB);
    fx f;
    fx_open(&f, &o, SIZE_MAX);
    /* A request >= max_split never splits, whatever the remainder. */
    uint64_t a = A(f.p, 50 * MiB);
    F(f.p, a);
    uint64_t b = A(f.p, 34 * MiB); /* 50 < 54: taken, remainder 16M kept */
    EQ(b, a);
    const xb l[] = {{50 * MiB, 1}};
    expect_seg(f.p, a, 50 * MiB, 0, l, 1);
    fp_pool_stats s = S(f.p);
    EQ(s.allocated_bytes[FP_ALL].current, 50 * MiB);
    EQ(s.requested_bytes[FP_ALL].current, 34 * MiB);
    EQ(s.oversize_allocations.current, 1);
    EQ(idle(f.p), 0);
    fx_close(&f);
}

/* The split rule looks at the request only: a request under max_split whose
 * new segment is >= max_split (30.5M -> 32M) is split like any other
 * (PyTorch's should_split). */
static void test_max_split_fresh_segment(void **state)
{
    (void)state;
    fp_pool_opts o = opts_ms(32 * MiB);
    fx f;
    fx_open(&f, &o, SIZE_MAX);
    uint64_t a = A(f.p, 30 * MiB + 512);
    const xb l[] = {{30 * MiB + 512, 1}, {2 * MiB - 512, 0}};
    expect_seg(f.p, a, 32 * MiB, 0, l, 2);
    F(f.p, a); /* merges back to a free 32M block: oversize now */
    const xb fr[] = {{32 * MiB, 0}};
    expect_seg(f.p, a, 32 * MiB, 0, fr, 1);
    uint64_t b = A(f.p, 2 * MiB); /* < max_split: refuses it */
    TRUE(b != a);
    EQ(f.m.reserve_ok, 2);
    fx_close(&f);
}

static void test_merge(void **state)
{
    (void)state;
    const size_t tail = 2 * MiB - 1536;
    fx f;
    for (int mode = 0; mode < 3; mode++) {
        fx_open(&f, NULL, SIZE_MAX);
        uint64_t a = A(f.p, 512), b = A(f.p, 512), c = A(f.p, 512);
        EQ(b, a + 512);
        EQ(c, a + 1024);
        if (mode == 0) { /* with the previous block */
            F(f.p, a);
            F(f.p, b);
            const xb l[] = {{1024, 0}, {512, 1}, {tail, 0}};
            expect_seg(f.p, a, 2 * MiB, 1, l, 3);
        } else if (mode == 1) { /* with the next block */
            F(f.p, b);
            F(f.p, a);
            const xb l[] = {{1024, 0}, {512, 1}, {tail, 0}};
            expect_seg(f.p, a, 2 * MiB, 1, l, 3);
        } else { /* with both */
            F(f.p, a);
            F(f.p, c); /* merges with the tail */
            const xb l[] = {{512, 0}, {512, 1}, {tail + 512, 0}};
            expect_seg(f.p, a, 2 * MiB, 1, l, 3);
            F(f.p, b);
            const xb w[] = {{2 * MiB, 0}};
            expect_seg(f.p, a, 2 * MiB, 1, w, 1);
            fp_pool_stats s = S(f.p);
            EQ(s.inactive_split[FP_ALL].current, 0);
            EQ(s.inactive_split_bytes[FP_ALL].current, 0);
            EQ(s.largest_free, 2 * MiB);
        }
        fx_close(&f);
    }

    /* the same in the large pool, and a merged block is reused whole */
    fx_open(&f, NULL, SIZE_MAX);
    uint64_t a = A(f.p, 4 * MiB), b = A(f.p, 4 * MiB), c = A(f.p, 4 * MiB);
    EQ(b, a + 4 * MiB);
    EQ(c, a + 8 * MiB);
    F(f.p, c);
    F(f.p, a);
    const xb l[] = {{4 * MiB, 0}, {4 * MiB, 1}, {12 * MiB, 0}};
    expect_seg(f.p, a, 20 * MiB, 0, l, 3);
    F(f.p, b);
    const xb w[] = {{20 * MiB, 0}};
    expect_seg(f.p, a, 20 * MiB, 0, w, 1);
    EQ(A(f.p, 20 * MiB), a);
    EQ(f.m.reserve_ok, 1);
    fx_close(&f);
}

static void test_no_merge_across_segments(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    uint64_t a1 = A(f.p, 1 * MiB), a2 = A(f.p, 1 * MiB);
    uint64_t b1 = A(f.p, 1 * MiB), b2 = A(f.p, 1 * MiB);
    EQ(b1, a1 + 2 * MiB); /* the mock hands out adjacent segments */
    F(f.p, a2);
    F(f.p, b1); /* a2 and b1 touch, but lie in two segments */
    F(f.p, a1);
    F(f.p, b2);
    const xb w2[] = {{2 * MiB, 0}};
    expect_seg(f.p, a1, 2 * MiB, 1, w2, 1);
    expect_seg(f.p, b1, 2 * MiB, 1, w2, 1);
    EQ(S(f.p).largest_free, 2 * MiB);

    uint64_t c1 = A(f.p, 20 * MiB), c2 = A(f.p, 20 * MiB);
    EQ(c2, c1 + 20 * MiB);
    F(f.p, c1);
    F(f.p, c2);
    EQ(S(f.p).largest_free, 20 * MiB);
    uint64_t d = A(f.p, 30 * MiB); /* 40M of adjacent free space: unused */
    TRUE(d >= c2 + 20 * MiB);
    EQ(f.m.reserve_ok, 5);
    const xb w20[] = {{20 * MiB, 0}};
    expect_seg(f.p, c1, 20 * MiB, 0, w20, 1);
    expect_seg(f.p, c2, 20 * MiB, 0, w20, 1);
    fx_close(&f);
}

/* ======================================================================= */
/* release and retry, OOM, backend errors, cap, GC                         */
/* ======================================================================= */

static void test_retry_release_all(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, 40 * MiB);
    uint64_t a = A(f.p, 20 * MiB), b = A(f.p, 20 * MiB);
    F(f.p, a);
    F(f.p, b);
    uint64_t c = A(f.p, 30 * MiB); /* refused, release both, retry */
    EQ(f.m.sync_calls, 1);
    EQ(f.m.release_calls, 2);
    EQ(owns(f.p, a), 0);
    EQ(owns(f.p, b), 0);
    EQ(owns(f.p, c), 1);
    fp_pool_stats s = S(f.p);
    EQ(s.num_alloc_retries, 1);
    EQ(s.num_ooms, 0);
    EQ(s.num_release_calls, 2);
    EQ(s.num_reserve_calls, 3);
    EQ(s.reserved_bytes[FP_ALL].current, 30 * MiB);
    EQ(s.segments[FP_ALL].current, 1);
    EQ(s.num_allocs, 3);
    fx_close(&f);

    /* both pools are emptied; live segments stay */
    fx_open(&f, NULL, 42 * MiB);
    uint64_t sm = A(f.p, 512), l = A(f.p, 20 * MiB), k = A(f.p, 20 * MiB);
    F(f.p, sm);
    F(f.p, l);
    uint64_t x = A(f.p, 22 * MiB);
    EQ(f.m.release_calls, 2);
    EQ(f.m.sync_calls, 1);
    EQ(owns(f.p, k), 1);
    EQ(owns(f.p, x), 1);
    EQ(owns(f.p, sm), 0);
    s = S(f.p);
    EQ(s.num_alloc_retries, 1);
    EQ(s.reserved_bytes[FP_SMALL].current, 0);
    EQ(s.reserved_bytes[FP_LARGE].current, 42 * MiB);
    fx_close(&f);

    /* a transient refusal: the retry succeeds with nothing to release */
    fx_open(&f, NULL, SIZE_MAX);
    f.m.fail_next = 1;
    A(f.p, 5 * MiB);
    EQ(f.m.reserve_calls, 2);
    EQ(f.m.sync_calls, 1);
    s = S(f.p);
    EQ(s.num_alloc_retries, 1);
    EQ(s.num_ooms, 0);
    EQ(s.num_reserve_calls, 1);
    fx_close(&f);
}

static void test_retry_oversize_largest_first(void **state)
{
    (void)state;
    fp_pool_opts o = opts_ms(32 * MiB);
    fx f;
    fx_open(&f, &o, 200 * MiB);
    uint64_t o1 = A(f.p, 40 * MiB), o2 = A(f.p, 50 * MiB), o3 = A(f.p, 60 * MiB);
    uint64_t l = A(f.p, 20 * MiB), sm = A(f.p, 512); /* 172 MiB */
    F(f.p, o1);
    F(f.p, o2);
    F(f.p, o3);
    F(f.p, l);
    /* 100M: 172 + 100 > 200; release 60, then 50 (>= 100): retry fits */
    uint64_t r = A(f.p, 100 * MiB);
    EQ(f.m.release_calls, 2);
    EQ(f.m.sync_calls, 0);
    EQ(owns(f.p, o3), 0);
    EQ(owns(f.p, o2), 0);
    EQ(owns(f.p, o1), 1);
    EQ(owns(f.p, l), 1);
    EQ(owns(f.p, sm), 1);
    EQ(owns(f.p, r), 1);
    fp_pool_stats s = S(f.p);
    EQ(s.num_alloc_retries, 0);
    EQ(s.num_ooms, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 162 * MiB);
    EQ(s.oversize_segments.current, 2);
    EQ(s.oversize_allocations.current, 1);
    fx_close(&f);
}

static void test_retry_oversize_single(void **state)
{
    (void)state;
    fp_pool_opts o = opts_ms(32 * MiB);
    fx f;
    /* 40 + 70 + 80 + 2 = 192 MiB of 200 */
    fx_open(&f, &o, 200 * MiB);
    uint64_t o1 = A(f.p, 40 * MiB), o3 = A(f.p, 70 * MiB), o4 = A(f.p, 80 * MiB);
    uint64_t sm = A(f.p, 512);
    F(f.p, o1);
    F(f.p, o3);
    F(f.p, o4);
    /* 45M: best fit 70 >= 65 refused; 192 + 46 > 200; the smallest single
     * oversize block >= 45M is 70M: release just that one */
    uint64_t r = A(f.p, 45 * MiB);
    EQ(f.m.release_calls, 1);
    EQ(f.m.sync_calls, 0);
    EQ(owns(f.p, o3), 0);
    EQ(owns(f.p, o1), 1);
    EQ(owns(f.p, o4), 1);
    EQ(owns(f.p, r), 1);
    EQ(owns(f.p, sm), 1);
    fp_pool_stats s = S(f.p);
    EQ(s.num_alloc_retries, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 40 * MiB + 80 * MiB + 2 * MiB + 46 * MiB);
    fx_close(&f);

    /* a request under max_split: key max(5M, 32M) -> the 40M block */
    fx_open(&f, &o, 110 * MiB);
    o1 = A(f.p, 40 * MiB);
    uint64_t o2 = A(f.p, 60 * MiB);
    sm = A(f.p, 512);
    F(f.p, o1);
    F(f.p, o2);
    r = A(f.p, 5 * MiB); /* 102 + 20 > 110 */
    EQ(f.m.release_calls, 1);
    EQ(owns(f.p, o1), 0);
    EQ(owns(f.p, o2), 1);
    EQ(S(f.p).num_alloc_retries, 0);
    EQ(owns(f.p, sm), 1);
    EQ(owns(f.p, r), 1);
    fx_close(&f);

    /* step 1 not enough: step 2 follows */
    fx_open(&f, &o, 115 * MiB);
    uint64_t l = A(f.p, 20 * MiB);
    o1 = A(f.p, 40 * MiB);
    o2 = A(f.p, 50 * MiB);
    F(f.p, l);
    F(f.p, o1);
    F(f.p, o2);
    r = A(f.p, 100 * MiB);
    EQ(f.m.release_calls, 3);
    EQ(f.m.sync_calls, 1);
    fp_pool_stats s2 = S(f.p);
    EQ(s2.num_alloc_retries, 1);
    EQ(s2.num_ooms, 0);
    EQ(s2.reserved_bytes[FP_ALL].current, 100 * MiB);
    EQ(nsegs(f.p), 1);
    fx_close(&f);
}

static void stats_equal_except(fp_pool_stats x, fp_pool_stats y, int ooms,
                               int invalid)
{
    if (ooms) {
        x.num_ooms = y.num_ooms = 0;
        x.num_alloc_retries = y.num_alloc_retries = 0;
    }
    if (invalid)
        x.num_invalid_frees = y.num_invalid_frees = 0;
    if (memcmp(&x, &y, sizeof x) != 0)
        fail_msg("%s: stats changed", g_where);
}

static void test_oom_when_full(void **state)
{
    (void)state;
    for (int ms = 0; ms < 2; ms++) {
        fp_pool_opts o = opts_ms(ms ? 32 * MiB : SIZE_MAX);
        fx f;
        fx_open(&f, &o, 40 * MiB);
        uint64_t a = A(f.p, 20 * MiB);
        A(f.p, 20 * MiB);
        fp_pool_stats s0 = S(f.p);
        wdump w0 = {0}, w1 = {0};
        wd_take(f.p, &w0);
        uint64_t x;
        EQ(Atry(f.p, 20 * MiB, &x), ENOMEM);
        fp_pool_stats s1 = S(f.p);
        EQ(s1.num_ooms, 1);
        EQ(s1.num_alloc_retries, 1);
        EQ(f.m.sync_calls, 1);
        EQ(f.m.release_calls, 0);
        stats_equal_except(s0, s1, 1, 0);
        wd_take(f.p, &w1);
        TRUE(wd_same(&w0, &w1));
        fp_oom_info oi;
        memset(&oi, 0xff, sizeof oi);
        fp_pool_last_oom(f.p, &oi);
        check(f.p);
        EQ(oi.requested, 20 * MiB);
        EQ(oi.rounded, 20 * MiB);
        EQ(oi.segment, 20 * MiB);
        EQ(oi.allocated, 40 * MiB);
        EQ(oi.reserved, 40 * MiB);
        EQ(oi.idle, 0);
        EQ(oi.largest_free, 0);
        EQ(oi.cap, SIZE_MAX);
        EQ(oi.over_cap, 0);
        EQ(oi.backend_err, ENOMEM);
        F(f.p, a); /* the pool still works */
        EQ(A(f.p, 20 * MiB), a);
        wd_free(&w0);
        wd_free(&w1);
        fx_close(&f);
    }
}

static void test_backend_error(void **state)
{
    (void)state;
    fp_pool_opts o = opts_ms(32 * MiB);
    fx f;
    fx_open(&f, &o, SIZE_MAX);
    uint64_t a = A(f.p, 20 * MiB), big = A(f.p, 40 * MiB);
    F(f.p, a);
    F(f.p, big);
    fp_pool_stats s0 = S(f.p);
    f.m.fail_next = 1;
    f.m.fail_err = EIO;
    uint64_t x;
    EQ(Atry(f.p, 22 * MiB, &x), EIO);
    EQ(f.m.reserve_calls, 3);
    EQ(f.m.release_calls, 0);
    EQ(f.m.sync_calls, 0);
    EQ(owns(f.p, a), 1);
    EQ(owns(f.p, big), 1);
    fp_pool_stats s1 = S(f.p);
    EQ(s1.num_alloc_retries, 0);
    EQ(s1.num_allocs, s0.num_allocs);
    EQ(s1.reserved_bytes[FP_ALL].current, 60 * MiB);
    f.m.fail_next = 1;
    EQ(Atry(f.p, 50 * MiB, &x), EIO); /* no oversize release either */
    EQ(f.m.release_calls, 0);
    EQ(owns(f.p, big), 1);
    A(f.p, 22 * MiB); /* and then it works */
    fx_close(&f);
}

static void test_cap(void **state)
{
    (void)state;
    for (int how = 0; how < 4; how++) {
        fp_pool_opts o;
        fp_pool_opts_default(&o);
        o.device_total = 100 * MiB;
        if (how == 0) {
            o.max_reserved = 50 * MiB;
        } else if (how == 1) {
            o.memory_fraction = 0.5;
        } else if (how == 2) { /* both: the smaller is the fraction */
            o.max_reserved = 60 * MiB;
            o.memory_fraction = 0.5;
        } else { /* both: the smaller is max_reserved */
            o.max_reserved = 50 * MiB;
            o.memory_fraction = 0.75;
            o.device_total = 100 * MiB;
        }
        EQ(fp_pool_opts_cap(&o), 50 * MiB);
        fx f;
        fx_open(&f, &o, SIZE_MAX);
        A(f.p, 20 * MiB);
        uint64_t b = A(f.p, 20 * MiB);
        uint64_t x;
        EQ(Atry(f.p, 20 * MiB, &x), ENOMEM); /* 60 > 50 */
        EQ(f.m.reserve_calls, 2);              /* the backend never saw it */
        fp_oom_info oi;
        fp_pool_last_oom(f.p, &oi);
        check(f.p);
        EQ(oi.cap, 50 * MiB);
        EQ(oi.over_cap, 1);
        EQ(oi.requested, 20 * MiB);
        EQ(oi.segment, 20 * MiB);
        fp_pool_stats s = S(f.p);
        EQ(s.num_ooms, 1);
        EQ(s.reserved_bytes[FP_ALL].peak, 40 * MiB);
        A(f.p, 10 * MiB); /* 40 + 10 == 50: allowed */
        EQ(Atry(f.p, 1, &x), ENOMEM);
        F(f.p, b); /* cached 20M: a 22M request releases it, still over */
        EQ(Atry(f.p, 22 * MiB, &x), ENOMEM);
        EQ(owns(f.p, b), 0);
        EQ(f.m.release_calls, 1);
        A(f.p, 20 * MiB); /* 30 + 20 == 50 */
        s = S(f.p);
        EQ(s.num_ooms, 3);
        EQ(s.reserved_bytes[FP_ALL].current, 50 * MiB);
        EQ(s.reserved_bytes[FP_ALL].peak, 50 * MiB);
        fx_close(&f);
    }

    /* the cap releases and retries like the backend */
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.max_reserved = 40 * MiB;
    fx f;
    fx_open(&f, &o, SIZE_MAX);
    uint64_t a = A(f.p, 20 * MiB), b = A(f.p, 20 * MiB);
    F(f.p, a);
    F(f.p, b);
    A(f.p, 30 * MiB);
    fp_pool_stats s = S(f.p);
    EQ(s.num_alloc_retries, 1);
    EQ(s.num_ooms, 0);
    EQ(f.m.release_calls, 2);
    fx_close(&f);
}

static fp_pool_opts opts_gc(size_t cap, double th)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.max_reserved = cap;
    o.gc_threshold = th;
    return o;
}

static void test_gc_order(void **state)
{
    (void)state;
    fp_pool_opts o = opts_gc(200 * MiB, 0.45); /* threshold 90 MiB */
    fx f;
    fx_open(&f, &o, SIZE_MAX);
    uint64_t g = A(f.p, 2 * MiB); /* 20M segment: 2M + 18M free */
    uint64_t a = A(f.p, 20 * MiB), b = A(f.p, 20 * MiB);
    A(f.p, 20 * MiB);
    A(f.p, 20 * MiB); /* 100 MiB reserved */
    EQ(S(f.p).num_gc_releases, 0);
    F(f.p, a);
    nap();
    EQ(A(f.p, 2 * MiB), g + 2 * MiB); /* cache hit from the 18M block */
    nap();
    F(f.p, b);
    nap();
    /* 22M fits nowhere: 100 > 90, so the GC runs; the older a goes, and
     * that is enough (80 <= 90); b, used more recently, stays */
    uint64_t x = A(f.p, 22 * MiB);
    EQ(owns(f.p, a), 0);
    EQ(owns(f.p, b), 1);
    EQ(owns(f.p, x), 1);
    fp_pool_stats s = S(f.p);
    EQ(s.num_gc_releases, 1);
    EQ(s.num_release_calls, 1);
    EQ(s.num_alloc_retries, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 102 * MiB);
    fx_close(&f);

    /* age counts from the free, not the allocation: b, allocated first but
     * freed last, is the one that stays */
    fx_open(&f, &o, SIZE_MAX);
    g = A(f.p, 2 * MiB);
    b = A(f.p, 20 * MiB);
    a = A(f.p, 20 * MiB);
    A(f.p, 20 * MiB);
    A(f.p, 20 * MiB);
    F(f.p, a);
    nap();
    EQ(A(f.p, 2 * MiB), g + 2 * MiB);
    nap();
    F(f.p, b);
    nap();
    x = A(f.p, 22 * MiB);
    EQ(owns(f.p, a), 0);
    EQ(owns(f.p, b), 1);
    s = S(f.p);
    EQ(s.num_gc_releases, 1);
    EQ(s.reserved_bytes[FP_ALL].current, 102 * MiB);
    fx_close(&f);
}

static void test_gc_threshold(void **state)
{
    (void)state;
    /* at the threshold exactly: no GC; above: down to it */
    fp_pool_opts o = opts_gc(200 * MiB, 0.5); /* threshold 100 MiB */
    fx f;
    fx_open(&f, &o, SIZE_MAX);
    uint64_t a[5];
    for (int i = 0; i < 5; i++)
        a[i] = A(f.p, 20 * MiB);
    F(f.p, a[0]);
    A(f.p, 22 * MiB); /* 100 is not > 100 */
    EQ(owns(f.p, a[0]), 1);
    EQ(S(f.p).num_gc_releases, 0);
    nap();
    F(f.p, a[1]);
    nap();
    A(f.p, 24 * MiB); /* 122 > 100: both free segments must go (102, 82) */
    EQ(owns(f.p, a[0]), 0);
    EQ(owns(f.p, a[1]), 0);
    fp_pool_stats s = S(f.p);
    EQ(s.num_gc_releases, 2);
    EQ(s.reserved_bytes[FP_ALL].current, 106 * MiB);
    EQ(s.num_alloc_retries, 0);
    fx_close(&f);

    /* many idle segments: reserved falls to the threshold before the new
     * segment is added */
    fx_open(&f, &o, SIZE_MAX);
    uint64_t b[6];
    for (int i = 0; i < 6; i++)
        b[i] = A(f.p, 20 * MiB);
    for (int i = 0; i < 6; i++)
        F(f.p, b[i]);
    A(f.p, 22 * MiB);
    s = S(f.p);
    TRUE(s.num_gc_releases >= 1);
    EQ(s.num_release_calls, s.num_gc_releases);
    TRUE(s.reserved_bytes[FP_ALL].current - (int64_t)(22 * MiB) <= (int64_t)(100 * MiB));
    EQ(s.reserved_bytes[FP_ALL].current,
       (int64_t)(142 * MiB - 20 * MiB * s.num_gc_releases));
    EQ(s.num_alloc_retries, 0);
    fx_close(&f);

    /* live segments are never collected */
    o = opts_gc(100 * MiB, 0.5);
    fx_open(&f, &o, SIZE_MAX);
    A(f.p, 20 * MiB);
    A(f.p, 20 * MiB);
    A(f.p, 20 * MiB);
    A(f.p, 512);
    A(f.p, 22 * MiB); /* 62 > 50, nothing idle */
    s = S(f.p);
    EQ(s.num_gc_releases, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 84 * MiB);
    fx_close(&f);

    /* no cap, no GC */
    o = opts_gc(0, 0.5);
    fx_open(&f, &o, SIZE_MAX);
    for (int i = 0; i < 6; i++)
        b[i] = A(f.p, 20 * MiB);
    for (int i = 0; i < 6; i++)
        F(f.p, b[i]);
    A(f.p, 22 * MiB);
    s = S(f.p);
    EQ(s.num_gc_releases, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 142 * MiB);
    fx_close(&f);
}

/* ======================================================================= */
/* stats                                                                   */
/* ======================================================================= */

static void st_(const fp_stat *s, int64_t cur, int64_t peak, int64_t alloc,
                int64_t freed, const char *name, int line)
{
    if (s->current != cur || s->peak != peak || s->allocated != alloc ||
        s->freed != freed)
        fail_msg("line %d: %s = {cur %jd, peak %jd, alloc %jd, freed %jd}, "
                 "expected {%jd, %jd, %jd, %jd}", line, name,
                 (intmax_t)s->current, (intmax_t)s->peak,
                 (intmax_t)s->allocated, (intmax_t)s->freed, (intmax_t)cur,
                 (intmax_t)peak, (intmax_t)alloc, (intmax_t)freed);
}
#define ST(s, c, p, a, f) st_(&(s), (c), (p), (a), (f), #s, __LINE__)

/* current and peak only, with allocated - freed == current */
static void stcp_(const fp_stat *s, int64_t cur, int64_t peak, const char *name,
                  int line)
{
    if (s->current != cur || s->peak != peak ||
        s->allocated - s->freed != s->current)
        fail_msg("line %d: %s = {cur %jd, peak %jd, alloc %jd, freed %jd}, "
                 "expected cur %jd, peak %jd, alloc - freed == cur", line, name,
                 (intmax_t)s->current, (intmax_t)s->peak,
                 (intmax_t)s->allocated, (intmax_t)s->freed, (intmax_t)cur,
                 (intmax_t)peak);
}
#define STCP(s, c, p) stcp_(&(s), (c), (p), #s, __LINE__)

static void test_stats_sequence(void **state)
{
    (void)state;
    const int64_t K = 1024, M = 1024 * 1024;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    fp_pool_stats z = S(f.p), zero;
    memset(&zero, 0, sizeof zero);
    stats_equal_except(z, zero, 0, 0);

    uint64_t a = A(f.p, 1000);            /* small: 1024 of a new 2M   */
    uint64_t c = A(f.p, 12 * MiB + 100);  /* 12M+512 of a new 14M      */
    uint64_t b = A(f.p, 3 * MiB);         /* large: 3M of a new 20M    */
    uint64_t d = A(f.p, 500);             /* 512, cache hit            */
    F(f.p, a);                            /* free 1024, no merge       */
    F(f.p, b);                            /* merges: 20M whole, free   */
    uint64_t e = A(f.p, 19 * MiB);        /* takes the 20M, unsplit    */
    EQ(e, b);
    EQ(d, a + 1024);

    fp_pool_stats s = S(f.p);
    ST(s.requested_bytes[FP_ALL], 31 * M + 600, 31 * M + 600, 34 * M + 1600, 3 * M + 1000);
    ST(s.requested_bytes[FP_SMALL], 500, 1500, 1500, 1000);
    ST(s.requested_bytes[FP_LARGE], 31 * M + 100, 31 * M + 100, 34 * M + 100, 3 * M);
    ST(s.allocated_bytes[FP_ALL], 32 * M + 1024, 32 * M + 1024, 35 * M + 2048, 3 * M + 1024);
    ST(s.allocated_bytes[FP_SMALL], 512, 1536, 1536, 1024);
    ST(s.allocated_bytes[FP_LARGE], 32 * M + 512, 32 * M + 512, 35 * M + 512, 3 * M);
    for (int k = 0; k < FP_NKINDS; k++) {
        ST(s.active_bytes[k], s.allocated_bytes[k].current, s.allocated_bytes[k].peak,
           s.allocated_bytes[k].allocated, s.allocated_bytes[k].freed);
        ST(s.active[k], s.allocations[k].current, s.allocations[k].peak,
           s.allocations[k].allocated, s.allocations[k].freed);
    }
    ST(s.reserved_bytes[FP_ALL], 36 * M, 36 * M, 36 * M, 0);
    ST(s.reserved_bytes[FP_SMALL], 2 * M, 2 * M, 2 * M, 0);
    ST(s.reserved_bytes[FP_LARGE], 34 * M, 34 * M, 34 * M, 0);
    ST(s.allocations[FP_ALL], 3, 4, 5, 2);
    ST(s.allocations[FP_SMALL], 1, 2, 2, 1);
    ST(s.allocations[FP_LARGE], 2, 2, 3, 1);
    ST(s.segments[FP_ALL], 3, 3, 3, 0);
    ST(s.segments[FP_SMALL], 1, 1, 1, 0);
    ST(s.segments[FP_LARGE], 2, 2, 2, 0);
    /* free blocks of split segments: small [1024][d][2M-1536], large
     * [c][2M-512]; b's segment is whole again */
    STCP(s.inactive_split_bytes[FP_ALL], 4 * M - 1024, 21 * M - 1024);
    STCP(s.inactive_split_bytes[FP_SMALL], 2 * M - 512, 2 * M - 512);
    STCP(s.inactive_split_bytes[FP_LARGE], 2 * M - 512, 19 * M - 512);
    STCP(s.inactive_split[FP_ALL], 3, 4);
    STCP(s.inactive_split[FP_SMALL], 2, 2);
    STCP(s.inactive_split[FP_LARGE], 1, 2);
    ST(s.oversize_allocations, 0, 0, 0, 0);
    ST(s.oversize_segments, 0, 0, 0, 0);
    EQ(s.num_allocs, 5);
    EQ(s.num_frees, 2);
    EQ(s.num_cache_hits, 2);
    EQ(s.num_reserve_calls, 3);
    EQ(s.num_release_calls, 0);
    EQ(s.num_alloc_retries, 0);
    EQ(s.num_ooms, 0);
    EQ(s.num_gc_releases, 0);
    EQ(s.num_invalid_frees, 0);
    EQ(s.largest_free, 2 * MiB - 512);
    TRUE(s.largest_free_at_peak <= 36 * MiB);
    EQ(idle(f.p), 4 * MiB - 1024);
    (void)K;

    E(f.p); /* nothing wholly free */
    EQ(S(f.p).num_release_calls, 0);
    F(f.p, d);
    F(f.p, c);
    F(f.p, e);
    s = S(f.p);
    EQ(s.largest_free, 20 * MiB);
    EQ(idle(f.p), 36 * MiB);
    STCP(s.inactive_split_bytes[FP_ALL], 0, 21 * M - 1024);
    STCP(s.inactive_split[FP_ALL], 0, 4);
    E(f.p);
    s = S(f.p);
    ST(s.requested_bytes[FP_ALL], 0, 31 * M + 600, 34 * M + 1600, 34 * M + 1600);
    ST(s.allocated_bytes[FP_ALL], 0, 32 * M + 1024, 35 * M + 2048, 35 * M + 2048);
    ST(s.reserved_bytes[FP_ALL], 0, 36 * M, 36 * M, 36 * M);
    ST(s.reserved_bytes[FP_SMALL], 0, 2 * M, 2 * M, 2 * M);
    ST(s.reserved_bytes[FP_LARGE], 0, 34 * M, 34 * M, 34 * M);
    ST(s.allocations[FP_ALL], 0, 4, 5, 5);
    ST(s.segments[FP_ALL], 0, 3, 3, 3);
    ST(s.segments[FP_SMALL], 0, 1, 1, 1);
    EQ(s.num_frees, 5);
    EQ(s.num_release_calls, 3);
    EQ(s.largest_free, 0);
    EQ(idle(f.p), 0);
    EQ(f.m.nlive, 0);
    fx_close(&f);
}

static void test_stats_oversize(void **state)
{
    (void)state;
    fp_pool_opts o = opts_ms(32 * MiB);
    fx f;
    fx_open(&f, &o, SIZE_MAX);
    uint64_t x = A(f.p, 40 * MiB);
    uint64_t sm = A(f.p, 5 * MiB);
    fp_pool_stats s = S(f.p);
    ST(s.oversize_allocations, 1, 1, 1, 0);
    ST(s.oversize_segments, 1, 1, 1, 0);
    F(f.p, x);
    s = S(f.p);
    ST(s.oversize_allocations, 0, 1, 1, 1);
    ST(s.oversize_segments, 1, 1, 1, 0);
    uint64_t y = A(f.p, 35 * MiB); /* the cached 40M */
    EQ(y, x);
    s = S(f.p);
    ST(s.oversize_allocations, 1, 1, 2, 1);
    ST(s.oversize_segments, 1, 1, 1, 0);
    EQ(s.allocated_bytes[FP_LARGE].current, 40 * MiB + 5 * MiB);
    F(f.p, y);
    F(f.p, sm);
    E(f.p);
    s = S(f.p);
    ST(s.oversize_allocations, 0, 1, 2, 2);
    ST(s.oversize_segments, 0, 1, 1, 1);
    fx_close(&f);
}

static void test_divisions_effect(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.roundup_divisions[0] = 4;
    o.roundup_divisions[1] = 8;
    fx f;
    fx_open(&f, &o, SIZE_MAX);
    uint64_t a = A(f.p, 3 * MiB / 2 + 1);
    const xb l[] = {{7 * MiB / 4, 1}, {20 * MiB - 7 * MiB / 4, 0}};
    expect_seg(f.p, a, 20 * MiB, 0, l, 2);
    fp_pool_stats s = S(f.p);
    EQ(s.allocated_bytes[FP_LARGE].current, 7 * MiB / 4);
    EQ(s.requested_bytes[FP_LARGE].current, 3 * MiB / 2 + 1);
    uint64_t b = A(f.p, 900 * KiB); /* -> 1 MiB, still the small pool */
    const xb m[] = {{1 * MiB, 1}, {1 * MiB, 0}};
    expect_seg(f.p, b, 2 * MiB, 1, m, 2);
    uint64_t c = A(f.p, 3 * MiB + 1); /* -> 3.25 MiB, after a */
    EQ(c, a + 7 * MiB / 4);
    s = S(f.p);
    EQ(s.allocated_bytes[FP_ALL].current, 7 * MiB / 4 + 1 * MiB + 13 * MiB / 4);
    fx_close(&f);

    fx_open(&f, NULL, SIZE_MAX); /* the same without divisions */
    a = A(f.p, 3 * MiB / 2 + 1);
    EQ(S(f.p).allocated_bytes[FP_LARGE].current, 3 * MiB / 2 + 512);
    fx_close(&f);
}

/* ======================================================================= */
/* empty_cache, invalid frees, owns, walk, destroy, huge requests           */
/* ======================================================================= */

static void test_empty_cache(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    E(f.p); /* empty pool */
    EQ(f.m.release_calls, 0);
    uint64_t a = A(f.p, 512), b = A(f.p, 20 * MiB), c = A(f.p, 2 * MiB);
    uint64_t d = A(f.p, 512);
    F(f.p, b);
    F(f.p, a);
    E(f.p); /* only b's segment is wholly free */
    EQ(f.m.release_calls, 1);
    EQ(owns(f.p, b), 0);
    EQ(owns(f.p, a), 1);
    fp_pool_stats s = S(f.p);
    EQ(s.reserved_bytes[FP_ALL].current, 22 * MiB);
    EQ(s.num_release_calls, 1);
    EQ(s.num_alloc_retries, 0);
    F(f.p, d);
    E(f.p);
    EQ(owns(f.p, a), 0);
    F(f.p, c);
    E(f.p);
    s = S(f.p);
    EQ(s.reserved_bytes[FP_ALL].current, 0);
    EQ(s.segments[FP_ALL].current, 0);
    EQ(s.num_release_calls, 3);
    EQ(f.m.nlive, 0);
    A(f.p, 512); /* and it grows again */
    EQ(f.m.nlive, 1);
    fx_close(&f);
}

static void test_invalid_free(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    uint64_t a = A(f.p, 1000), b = A(f.p, 3 * MiB);
    EQ(b, a + 2 * MiB); /* adjacent segments */
    fp_pool_stats s0 = S(f.p);
    wdump w0 = {0}, w = {0};
    wd_take(f.p, &w0);
    const uint64_t bad[] = {
        0, 0x1234, a - 512, a + 512, /* inside a */
        a + 1024,                    /* start of the free tail */
        b + 1 * MiB,                 /* inside b */
        b + 3 * MiB,                 /* b's free remainder */
        b + 20 * MiB, UINT64_MAX,
    };
    size_t n = sizeof bad / sizeof bad[0];
    for (size_t i = 0; i < n; i++) {
        snprintf(g_where, sizeof g_where, "invalid free 0x%llx",
                 (unsigned long long)bad[i]);
        EQ(fp_pool_free(f.p, bad[i]), EINVAL);
        check(f.p);
        fp_pool_stats s = S(f.p);
        EQ(s.num_invalid_frees, i + 1);
        stats_equal_except(s0, s, 0, 1);
        wd_take(f.p, &w);
        TRUE(wd_same(&w0, &w));
    }
    g_where[0] = 0;
    F(f.p, b);
    EQ(fp_pool_free(f.p, b), EINVAL); /* double free */
    check(f.p);
    F(f.p, a);
    EQ(fp_pool_free(f.p, a), EINVAL);
    check(f.p);
    fp_pool_stats s = S(f.p);
    EQ(s.num_invalid_frees, n + 2);
    EQ(s.num_frees, 2);
    EQ(s.allocations[FP_ALL].current, 0);
    wd_free(&w0);
    wd_free(&w);
    fx_close(&f);
}

static void test_owns(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    size_t sz;
    EQ(OWNS(f.p, MOCK_BASE, &sz), 0);
    uint64_t a = A(f.p, 1000);
    uint64_t b = A(f.p, 1);
    EQ(OWNS(f.p, a, &sz), 1);
    EQ(sz, 1000);
    EQ(OWNS(f.p, b, &sz), 1);
    EQ(sz, 1);
    EQ(OWNS(f.p, a + 512, &sz), 1); /* inside a */
    EQ(sz, 0);
    EQ(OWNS(f.p, a + 1536, &sz), 1); /* the free tail */
    EQ(sz, 0);
    EQ(OWNS(f.p, a + 2 * MiB - 1, &sz), 1);
    EQ(sz, 0);
    EQ(OWNS(f.p, a + 2 * MiB, &sz), 0); /* the end is outside */
    EQ(OWNS(f.p, a - 1, &sz), 0);
    EQ(OWNS(f.p, 0, &sz), 0);
    EQ(OWNS(f.p, UINT64_MAX, &sz), 0);
    F(f.p, a);
    EQ(OWNS(f.p, a, &sz), 1); /* still cached */
    EQ(sz, 0);
    F(f.p, b);
    E(f.p);
    EQ(OWNS(f.p, a, &sz), 0);
    fx_close(&f);
}

static void test_walk(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    wdump w = {0};
    wd_take(f.p, &w);
    EQ(w.nseg, 0);
    uint64_t a = A(f.p, 1000), b = A(f.p, 3 * MiB), c = A(f.p, 512);
    wd_take(f.p, &w);
    EQ(w.nseg, 2);
    EQ(w.seg[0].addr, a);
    EQ(w.seg[0].size, 2 * MiB);
    EQ(w.seg[0].small, 1);
    EQ(w.seg[0].n, 3);
    EQ(w.seg[1].addr, b);
    EQ(w.seg[1].size, 20 * MiB);
    EQ(w.seg[1].small, 0);
    EQ(w.seg[1].n, 2);
    const fp_block_info *x = &w.blk[w.seg[0].first];
    EQ(x[0].addr, a);
    EQ(x[0].size, 1024);
    EQ(x[0].requested, 1000);
    EQ(x[0].state, 1);
    EQ(x[1].addr, c);
    EQ(x[1].size, 512);
    EQ(x[1].requested, 512);
    EQ(x[1].state, 1);
    EQ(x[2].size, 2 * MiB - 1536);
    EQ(x[2].state, 0);
    const fp_block_info *y = &w.blk[w.seg[1].first];
    EQ(y[0].size, 3 * MiB);
    EQ(y[0].requested, 3 * MiB);
    EQ(y[0].state, 1);
    EQ(y[1].size, 17 * MiB);
    EQ(y[1].state, 0);
    TRUE(x[0].seq < y[0].seq); /* in allocation order */
    TRUE(y[0].seq < x[1].seq);
    F(f.p, a);
    uint64_t a2 = A(f.p, 1000);
    EQ(a2, a);
    wd_take(f.p, &w);
    TRUE(w.blk[w.seg[0].first].seq > w.blk[w.seg[0].first + 1].seq);
    wd_free(&w);
    fx_close(&f);
}

static void test_destroy(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    uint64_t a = A(f.p, 512);
    A(f.p, 20 * MiB);
    A(f.p, 30 * MiB);
    F(f.p, a);
    fp_pool_destroy(f.p, 0); /* releases every segment, live or not */
    EQ(f.m.nlive, 0);
    EQ(f.m.release_calls, 3);
    mock_ok(&f.m);
    mock_fini(&f.m);

    fx_open(&f, NULL, SIZE_MAX);
    A(f.p, 512);
    A(f.p, 20 * MiB);
    fp_pool_destroy(f.p, 1); /* keeps them */
    EQ(f.m.nlive, 2);
    EQ(f.m.release_calls, 0);
    mock_ok(&f.m);
    mock_fini(&f.m);

    fp_pool_opts o = opts_ms(40 * MiB);
    o.roundup_divisions[3] = 4;
    o.max_reserved = 1 * GiB;
    fx_open(&f, &o, SIZE_MAX);
    const fp_pool_opts *g = fp_pool_get_opts(f.p);
    check(f.p);
    EQ(g->max_split_size, 40 * MiB);
    EQ(g->roundup_divisions[3], 4);
    EQ(g->max_reserved, 1 * GiB);
    EQ(g->max_non_split_rounding, 20 * MiB);
    fx_close(&f);
}

static void test_huge(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, 1 * GiB);
    uint64_t x;
    EQ(Atry(f.p, (size_t)1 << 50, &x), ENOMEM);
    EQ(S(f.p).num_ooms, 1);
    TRUE(Atry(f.p, SIZE_MAX / 2, &x) != 0);
    TRUE(Atry(f.p, SIZE_MAX - 100, &x) != 0);
    TRUE(Atry(f.p, SIZE_MAX, &x) != 0);
    fp_pool_stats s = S(f.p);
    EQ(s.num_allocs, 0);
    EQ(s.allocations[FP_ALL].current, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 0);
    A(f.p, 512);
    mock_ok(&f.m);
    fx_close(&f);
}

/* ======================================================================= */
/* deferred reuse: free stamps and grants                                  */
/* ======================================================================= */

static fp_grant G(fp_pool *p, size_t size, uint64_t unsafe_from)
{
    fp_grant g = {0};
    EQ(fp_pool_alloc_grant(p, size, unsafe_from, &g), 0);
    check(p);
    return g;
}

static uint64_t F_at(fp_pool *p, uint64_t addr)
{
    uint64_t t = 0;
    EQ(fp_pool_free_at(p, addr, &t, NULL), 0);
    check(p);
    return t;
}

/* The clock ticks once per allocation; a free is stamped with it; a new
 * segment was never freed; merging keeps the newest stamp and a split
 * keeps its block's; every grant's freed_at is older than its clock. */
static void test_grant_stamps(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, SIZE_MAX);
    fp_grant a = G(f.p, 1000, UINT64_MAX);
    EQ(a.now, 1);
    EQ(a.freed_at, FP_NEVER_FREED);
    EQ(a.size, 1024);
    fp_grant b = G(f.p, 1000, UINT64_MAX); /* the fresh remainder */
    EQ(b.now, 2);
    EQ(b.freed_at, FP_NEVER_FREED);
    EQ(F_at(f.p, a.addr), 2);              /* freed at clock 2 */
    fp_grant c = G(f.p, 1000, UINT64_MAX); /* best fit: a's block */
    EQ(c.addr, a.addr);
    EQ(c.freed_at, 2);
    EQ(c.now, 3);
    /* merge: c freed at 3, then b (its upper neighbour) at 4 after one more
     * allocation: the merged block is stamped 4, the newest */
    EQ(F_at(f.p, c.addr), 3);
    fp_grant d = G(f.p, 4096, UINT64_MAX);
    EQ(d.freed_at, FP_NEVER_FREED); /* beyond b: never used */
    EQ(F_at(f.p, b.addr), 4);
    fp_grant e = G(f.p, 1500, UINT64_MAX); /* a split of the merged 2 KiB */
    EQ(e.addr, a.addr);
    EQ(e.freed_at, 4);
    TRUE(e.freed_at < e.now);
    fp_grant g = G(f.p, 500, UINT64_MAX); /* the split's remainder keeps 4 */
    EQ(g.addr, a.addr + 1536);
    EQ(g.freed_at, 4);
    /* a free that merges with an older free neighbour below takes its own
     * time too (the lower block absorbs it) */
    F_at(f.p, e.addr);
    G(f.p, 8 * MiB, UINT64_MAX);
    uint64_t t = F_at(f.p, g.addr);
    fp_grant h = G(f.p, 2048, UINT64_MAX);
    EQ(h.addr, a.addr);
    EQ(h.freed_at, t);
    size_t sz = 0;
    EQ(fp_pool_free_at(f.p, h.addr + 512, &t, &sz), EINVAL); /* not a block */
    EQ(S(f.p).num_invalid_frees, 1);
    EQ(fp_pool_free_at(f.p, 0x1000, &t, &sz), ENOENT); /* not the pool's */
    EQ(S(f.p).num_invalid_frees, 1);
    EQ(fp_pool_free_at(f.p, h.addr, &t, &sz), 0);
    EQ(sz, 2048);
    check(f.p);
    fx_close(&f);
}

/* unsafe_from: a block freed at or after it is passed over for a new
 * segment; when no segment can be had, EAGAIN with nothing released, no
 * retry, no OOM counted and nothing synchronized. */
static void test_grant_unsafe_from(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL, 24 * MiB);
    fp_grant a = G(f.p, 4 * MiB, UINT64_MAX); /* a 20 MiB segment */
    uint64_t t = F_at(f.p, a.addr);           /* the segment is whole again */
    fp_grant b = G(f.p, 4 * MiB, t + 1);      /* freed before t + 1: taken */
    EQ(b.addr, a.addr);
    EQ(b.freed_at, t);
    t = F_at(f.p, b.addr);
    uint64_t rel = f.m.release_calls, syncs = f.m.sync_calls, res = f.m.reserve_ok;
    fp_grant c = {0};
    EQ(fp_pool_alloc_grant(f.p, 4 * MiB, t, &c), EAGAIN); /* 20 + 20 > 24 */
    check(f.p);
    EQ(f.m.release_calls, rel);
    EQ(f.m.sync_calls, syncs);
    EQ(f.m.reserve_ok, res);
    fp_pool_stats s = S(f.p);
    EQ(s.num_ooms, 0);
    EQ(s.num_alloc_retries, 0);
    fx_close(&f);
    fx_open(&f, NULL, 64 * MiB);
    a = G(f.p, 4 * MiB, UINT64_MAX);
    t = F_at(f.p, a.addr);
    c = G(f.p, 4 * MiB, t); /* too fresh: a second segment instead */
    TRUE(c.addr != a.addr);
    EQ(c.freed_at, FP_NEVER_FREED);
    EQ(f.m.reserve_ok, 2);
    EQ(S(f.p).segments[FP_ALL].current, 2);
    fx_close(&f);
}

/* ======================================================================= */
/* threads                                                                 */
/* ======================================================================= */

#define T_THREADS 8
#define T_OPS 20000
#define T_LIVE 64

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
                     (unsigned long long)a, len, (unsigned long long)sh->addr[i],
                     sh->len[i]);
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
                t_insert(sh, a, m_round(&sh->o, size));
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
    fx f;
    fx_open(&f, NULL, 192 * MiB); /* tight enough for OOMs and retries */
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
    check(f.p);
    if (sh.failed)
        fail_msg("threads: %s", sh.err);
    mock_ok(&f.m);
    fp_pool_stats s = S(f.p);
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
    print_message("threads: %ld allocs, %ld frees, %ld OOMs, %ju retries\n",
                  sh.allocs, sh.frees, sh.ooms, (uintmax_t)s.num_alloc_retries);
    E(f.p);
    EQ(f.m.nlive, 0);
    fx_close(&f);
    free(sh.addr);
    free(sh.len);
    pthread_mutex_destroy(&sh.mu);
}

/* ======================================================================= */
/* the randomized test                                                     */
/* ======================================================================= */

typedef struct mlive {
    uint64_t addr;
    size_t req, rounded, bsize;
    int small;
} mlive;

typedef struct kst { /* a model fp_stat */
    int64_t cur, peak, alloc, freed;
} kst;

static void ks_add(kst *k, int64_t d)
{
    if (d > 0)
        k->alloc += d;
    else
        k->freed += -d;
    k->cur += d;
    if (k->cur > k->peak)
        k->peak = k->cur;
}

static void ks_add2(kst *k, int small, int64_t d) /* FP_ALL and the kind */
{
    ks_add(&k[FP_ALL], d);
    ks_add(&k[small ? FP_SMALL : FP_LARGE], d);
}

typedef struct rphase {
    const char *name;
    uint64_t seed;
    int ops;
    size_t capacity; /* the mock's */
    size_t max_split;
    size_t non_split;   /* 0: default */
    int div;            /* 0 none, 1 mixed, 2 all 4 */
    size_t max_reserved;
    double gc;
    size_t maxlive;
} rphase;

typedef struct rctx {
    fx f;
    const rphase *ph;
    uint64_t rng;
    size_t cap; /* min(mock capacity, pool cap) */
    mlive *live;
    size_t n, capn;
    wdump last; /* the walk after the previous operation */
    uint64_t allocs, frees, ooms, hits, invalid, clock;
    kst req[3], alc[3], cnt[3], res[3], seg[3], over;
    kst actb[3], act[3]; /* active: in use */
    uint64_t last_freed;
    long n_new, n_split, n_oom, n_gc, n_empty;
} rctx;

static uint64_t rnd(rctx *c)
{
    return rng_next(&c->rng);
}

static size_t r_size(rctx *c)
{
    uint64_t x = rnd(c);
    if (x % 10 == 0) {
        const size_t ms = c->f.o.max_split_size;
        const size_t edge[] = {
            1, 511, 512, 513, 1 * MiB - 512, 1 * MiB, 1 * MiB + 1,
            1 * MiB + 512, 10 * MiB - 512, 10 * MiB, 10 * MiB + 512,
            19 * MiB - 512, 19 * MiB, 20 * MiB, 21 * MiB,
            ms == SIZE_MAX ? 18 * MiB : ms - 2 * MiB + 512,
            ms == SIZE_MAX ? 30 * MiB : ms - 512,
            ms == SIZE_MAX ? 32 * MiB : ms,
            ms == SIZE_MAX ? 40 * MiB : ms + 512,
            ms == SIZE_MAX ? 48 * MiB : ms + 8 * MiB,
        };
        return edge[(x >> 8) % (sizeof edge / sizeof edge[0])];
    }
    unsigned e = (unsigned)((x >> 8) % 26);
    size_t s = ((size_t)1 << e) + (size_t)((x >> 16) % ((uint64_t)1 << e));
    if ((x >> 60) % 4 == 0)
        s = (s + 511) / 512 * 512;
    return s;
}

static size_t m_find(const rctx *c, uint64_t addr) /* first index >= addr */
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->live[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void m_insert(rctx *c, mlive b)
{
    size_t i = m_find(c, b.addr);
    if (i > 0)
        TRUE(c->live[i - 1].addr + c->live[i - 1].bsize <= b.addr);
    if (i < c->n)
        TRUE(b.addr + b.bsize <= c->live[i].addr);
    if (c->n == c->capn) {
        c->capn = c->capn ? 2 * c->capn : 256;
        c->live = realloc(c->live, c->capn * sizeof *c->live);
        if (!c->live)
            abort();
    }
    memmove(&c->live[i + 1], &c->live[i], (c->n - i) * sizeof *c->live);
    c->live[i] = b;
    c->n++;
}

/* Segments reserved and released between two walks (addresses are never
 * reused, so an address names one reservation). */
static void seg_diff(rctx *c, const wdump *pre, const wdump *post)
{
    size_t i = 0, j = 0;
    while (i < pre->nseg || j < post->nseg) {
        if (j == post->nseg || (i < pre->nseg && pre->seg[i].addr < post->seg[j].addr)) {
            ks_add2(c->res, pre->seg[i].small, -(int64_t)pre->seg[i].size);
            ks_add2(c->seg, pre->seg[i].small, -1);
            i++;
        } else if (i == pre->nseg || post->seg[j].addr < pre->seg[i].addr) {
            ks_add2(c->res, post->seg[j].small, (int64_t)post->seg[j].size);
            ks_add2(c->seg, post->seg[j].small, 1);
            j++;
        } else {
            EQ(pre->seg[i].size, post->seg[j].size);
            EQ(pre->seg[i].small, post->seg[j].small);
            i++;
            j++;
        }
    }
}

static int whole_free(const wdump *w, const wseg *g)
{
    return g->n == 1 && w->blk[g->first].state == 0;
}

static void x_stat(const fp_stat *s, const kst *k, const char *name, int kind)
{
    if (s->current != k->cur || s->peak != k->peak || s->allocated != k->alloc ||
        s->freed != k->freed)
        fail_msg("%s: %s[%d] = {cur %jd, peak %jd, alloc %jd, freed %jd}, model "
                 "{%jd, %jd, %jd, %jd}", g_where, name, kind,
                 (intmax_t)s->current, (intmax_t)s->peak, (intmax_t)s->allocated,
                 (intmax_t)s->freed, (intmax_t)k->cur, (intmax_t)k->peak,
                 (intmax_t)k->alloc, (intmax_t)k->freed);
}

static void x_sane(const fp_stat *s, const char *name)
{
    if (s->current < 0 || s->peak < s->current || s->allocated - s->freed != s->current)
        fail_msg("%s: %s = {cur %jd, peak %jd, alloc %jd, freed %jd} inconsistent",
                 g_where, name, (intmax_t)s->current, (intmax_t)s->peak,
                 (intmax_t)s->allocated, (intmax_t)s->freed);
}

/* The pool, its stats, the mock and the model agree. */
static void xcheck(rctx *c)
{
    const wdump *w = &c->last;
    const mock *m = &c->f.m;
    mock_ok(m);
    /* the walk's segments are the mock's live reservations */
    EQ(w->nseg, m->nlive);
    for (size_t s = 0; s < w->nseg; s++) {
        EQ(w->seg[s].addr, m->live[s].addr);
        EQ(w->seg[s].size, m->live[s].size);
    }
    /* the walk's allocated blocks are the model's */
    size_t k = 0;
    int64_t isb[3] = {0}, isn[3] = {0}, over = 0;
    size_t largest = 0;
    for (size_t s = 0; s < w->nseg; s++) {
        const wseg *g = &w->seg[s];
        for (size_t j = 0; j < g->n; j++) {
            const fp_block_info *b = &w->blk[g->first + j];
            if (b->state == 0) {
                if (b->size > largest)
                    largest = b->size;
                if (g->n > 1) {
                    isb[FP_ALL] += (int64_t)b->size;
                    isb[g->small ? FP_SMALL : FP_LARGE] += (int64_t)b->size;
                    isn[FP_ALL]++;
                    isn[g->small ? FP_SMALL : FP_LARGE]++;
                }
                continue;
            }
            TRUE(k < c->n);
            const mlive *l = &c->live[k++];
            EQ(b->addr, l->addr);
            EQ(b->size, l->bsize);
            EQ(b->state, 1);
            EQ(b->requested, l->req);
            EQ(g->small, l->small);
            if (b->size >= c->f.o.max_split_size)
                over++;
        }
    }
    EQ(k, c->n);

    fp_pool_stats st = S(c->f.p);
    static const char *const kn[3] = {"all", "small", "large"};
    for (int i = 0; i < FP_NKINDS; i++) {
        x_stat(&st.requested_bytes[i], &c->req[i], "requested_bytes", i);
        x_stat(&st.allocated_bytes[i], &c->alc[i], "allocated_bytes", i);
        x_stat(&st.active_bytes[i], &c->actb[i], "active_bytes", i);
        x_stat(&st.allocations[i], &c->cnt[i], "allocations", i);
        x_stat(&st.active[i], &c->act[i], "active", i);
        x_stat(&st.reserved_bytes[i], &c->res[i], "reserved_bytes", i);
        x_stat(&st.segments[i], &c->seg[i], "segments", i);
        x_sane(&st.inactive_split_bytes[i], kn[i]);
        x_sane(&st.inactive_split[i], kn[i]);
        EQ(st.inactive_split_bytes[i].current, isb[i]);
        EQ(st.inactive_split[i].current, isn[i]);
    }
    x_stat(&st.oversize_allocations, &c->over, "oversize_allocations", 0);
    EQ(st.oversize_allocations.current, over);
    x_sane(&st.oversize_segments, "oversize_segments");
    TRUE(st.oversize_segments.current <= st.segments[FP_LARGE].current);
    EQ(st.reserved_bytes[FP_ALL].current, m->live_bytes);
    EQ(st.num_allocs, c->allocs);
    EQ(st.num_frees, c->frees);
    EQ(st.num_cache_hits, c->hits);
    EQ(st.num_ooms, c->ooms);
    EQ(st.num_invalid_frees, c->invalid);
    EQ(st.num_reserve_calls, m->reserve_ok);
    EQ(st.num_release_calls, m->release_calls);
    EQ(st.reserved_bytes[FP_ALL].allocated, m->reserved_total);
    EQ(st.reserved_bytes[FP_ALL].freed, m->released_total);
    TRUE(st.num_gc_releases <= st.num_release_calls);
    if (c->f.o.gc_threshold == 0.0)
        EQ(st.num_gc_releases, 0);
    EQ(st.largest_free, largest);
    TRUE(st.largest_free_at_peak <= (size_t)st.reserved_bytes[FP_ALL].peak);
    EQ(idle(c->f.p), (size_t)(st.reserved_bytes[FP_ALL].current -
                              st.allocated_bytes[FP_ALL].current));
    TRUE(m->live_bytes <= c->cap);
}

static void r_walk(rctx *c) /* after an operation: walk, diff, cross-check */
{
    wdump post = {0};
    wd_take(c->f.p, &post);
    seg_diff(c, &c->last, &post);
    wd_free(&c->last);
    c->last = post;
    xcheck(c);
}

static void r_alloc(rctx *c)
{
    fp_pool *p = c->f.p;
    const fp_pool_opts *o = &c->f.o;
    size_t req = r_size(c);
    size_t r = m_round(o, req);
    int small = r <= FP_SMALL_SIZE;
    const wdump *pre = &c->last;
    const fp_block_info *best = NULL;
    for (size_t s = 0; s < pre->nseg; s++) {
        if (pre->seg[s].small != small)
            continue;
        for (size_t k = 0; k < pre->seg[s].n; k++) {
            const fp_block_info *b = &pre->blk[pre->seg[s].first + k];
            if (b->state != 0 || b->size < r)
                continue;
            if (!best || b->size < best->size ||
                (b->size == best->size && b->addr < best->addr))
                best = b;
        }
    }
    int hit = best && !m_refuses(o, r, best->size);
    fp_block_info cand = {0};
    if (hit)
        cand = *best;
    uint64_t ok0 = c->f.m.reserve_ok, rel0 = c->f.m.release_calls;
    uint64_t inj0 = c->f.m.injected;
    snprintf(g_where + strlen(g_where), sizeof g_where - strlen(g_where),
             " alloc %zu (rounded %zu)", req, r);
    fp_grant gr = {0};
    int rc = fp_pool_alloc_grant(p, req, UINT64_MAX, &gr);
    uint64_t addr = gr.addr;
    check(p);
    c->clock++; /* r_size stays far below FP_MAX_REQUEST */
    wdump post = {0};
    wd_take(p, &post);
    if (rc == 0) {
        const wseg *g = NULL;
        const fp_block_info *b = wd_block_at(&post, addr, &g);
        if (!b)
            fail_msg("%s: 0x%llx is no block", g_where, (unsigned long long)addr);
        EQ(b->state, 1);
        EQ(b->requested, req);
        EQ(g->small, small);
        size_t bsize;
        if (hit) { /* best fit, no backend, no release */
            EQ(addr, cand.addr);
            EQ(c->f.m.reserve_ok, ok0);
            EQ(c->f.m.release_calls, rel0);
            bsize = m_split(o, small, cand.size, r) ? r : cand.size;
            c->hits++;
        } else { /* exactly one new segment, the block at its front */
            EQ(c->f.m.reserve_ok, ok0 + 1);
            EQ(g->addr, addr);
            EQ(g->size, m_segsize(r));
            TRUE(wd_seg_at(pre, addr) == NULL);
            bsize = m_split(o, small, g->size, r) ? r : g->size;
            c->n_new++;
        }
        EQ(b->size, bsize);
        EQ(gr.size, bsize);
        EQ(gr.now, c->clock); /* one tick per allocation */
        TRUE(gr.freed_at < gr.now);
        if (!hit)
            EQ(gr.freed_at, FP_NEVER_FREED);
        if (bsize != (hit ? cand.size : g->size))
            c->n_split++;
        size_t sz = 0;
        EQ(fp_pool_owns(p, addr, &sz), 1);
        check(p);
        EQ(sz, req);
        m_insert(c, (mlive){addr, req, r, bsize, small});
        c->allocs++;
        ks_add2(c->req, small, (int64_t)req);
        ks_add2(c->alc, small, (int64_t)bsize);
        ks_add2(c->cnt, small, 1);
        ks_add2(c->actb, small, (int64_t)bsize);
        ks_add2(c->act, small, 1);
        if (bsize >= o->max_split_size)
            ks_add(&c->over, 1);
    } else if (rc == ENOMEM) {
        if (hit)
            fail_msg("%s: ENOMEM with a fitting free block at 0x%llx (%zu)",
                     g_where, (unsigned long long)cand.addr, cand.size);
        /* step 2 ran: nothing wholly free is left */
        for (size_t s = 0; s < post.nseg; s++)
            if (whole_free(&post, &post.seg[s]))
                fail_msg("%s: ENOMEM but a wholly free segment is kept",
                         g_where);
        /* and it really did not fit (unless an injected refusal met the
         * last retry: the cap may have refused the first try before the
         * backend saw it) */
        size_t resv = c->f.m.live_bytes;
        TRUE(resv <= c->cap);
        if (c->f.m.injected == inj0)
            TRUE(m_segsize(r) > c->cap - resv);
        c->ooms++;
        c->n_oom++;
    } else {
        fail_msg("%s: fp_pool_alloc = %d", g_where, rc);
    }
    wd_free(&post);
    r_walk(c);
}

/* A random live block, or c->n when there is none. */
static size_t r_pick(rctx *c)
{
    return c->n ? (size_t)(rnd(c) % c->n) : c->n;
}

static void r_free(rctx *c)
{
    size_t i = r_pick(c);
    if (i == c->n)
        return;
    mlive l = c->live[i];
    snprintf(g_where + strlen(g_where), sizeof g_where - strlen(g_where),
             " free 0x%llx (%zu)", (unsigned long long)l.addr, l.req);
    uint64_t rel0 = c->f.m.release_calls;
    F(c->f.p, l.addr);
    memmove(&c->live[i], &c->live[i + 1], (c->n - i - 1) * sizeof *c->live);
    c->n--;
    c->frees++;
    c->last_freed = l.addr;
    ks_add2(c->req, l.small, -(int64_t)l.req);
    ks_add2(c->alc, l.small, -(int64_t)l.bsize);
    ks_add2(c->cnt, l.small, -1);
    ks_add2(c->actb, l.small, -(int64_t)l.bsize);
    ks_add2(c->act, l.small, -1);
    if (l.bsize >= c->f.o.max_split_size)
        ks_add(&c->over, -1);
    r_walk(c);
    EQ(c->f.m.release_calls, rel0); /* caching: a free releases nothing */
    const wseg *g = NULL;
    const fp_block_info *b = NULL;
    for (size_t s = 0; s < c->last.nseg && !b; s++) {
        g = &c->last.seg[s];
        if (l.addr >= g->addr && l.addr < g->addr + g->size)
            for (size_t k = 0; k < g->n; k++) {
                const fp_block_info *x = &c->last.blk[g->first + k];
                if (l.addr >= x->addr && l.addr < x->addr + x->size)
                    b = x;
            }
    }
    TRUE(b != NULL);
    EQ(b->state, 0);
}

static void r_empty(rctx *c)
{
    size_t wholly = 0;
    for (size_t s = 0; s < c->last.nseg; s++)
        wholly += whole_free(&c->last, &c->last.seg[s]);
    uint64_t rel0 = c->f.m.release_calls;
    size_t nseg0 = c->last.nseg;
    strcat(g_where, " empty_cache");
    E(c->f.p);
    r_walk(c);
    EQ(c->f.m.release_calls, rel0 + wholly);
    EQ(c->last.nseg, nseg0 - wholly);
    c->n_empty++;
}

static void r_invalid(rctx *c)
{
    uint64_t x = rnd(c), a;
    switch (x % 4) {
    case 0: /* inside a live block */
        if (c->n == 0 || c->live[x / 4 % c->n].bsize <= 512)
            return;
        a = c->live[x / 4 % c->n].addr + 512;
        break;
    case 1: /* the last freed address, unless it is live again */
        a = c->last_freed;
        if (a == 0 || (m_find(c, a) < c->n && c->live[m_find(c, a)].addr == a))
            return;
        break;
    case 2: { /* a free block's start */
        size_t nfree = 0, pick;
        for (size_t k = 0; k < c->last.nblk; k++)
            nfree += c->last.blk[k].state == 0;
        if (nfree == 0)
            return;
        pick = (size_t)((x >> 8) % nfree);
        a = 0;
        for (size_t k = 0; k < c->last.nblk; k++)
            if (c->last.blk[k].state == 0 && pick-- == 0) {
                a = c->last.blk[k].addr;
                break;
            }
        break;
    }
    default: /* outside everything */
        a = (x & 1) ? 0x1000 + (x >> 40) : UINT64_MAX - (x >> 40);
        break;
    }
    fp_pool_stats s0 = S(c->f.p);
    snprintf(g_where + strlen(g_where), sizeof g_where - strlen(g_where),
             " invalid free 0x%llx", (unsigned long long)a);
    EQ(fp_pool_free(c->f.p, a), EINVAL);
    check(c->f.p);
    c->invalid++;
    fp_pool_stats s1 = S(c->f.p);
    EQ(s1.num_invalid_frees, s0.num_invalid_frees + 1);
    stats_equal_except(s0, s1, 0, 1);
    wdump post = {0};
    wd_take(c->f.p, &post);
    TRUE(wd_same(&c->last, &post));
    wd_free(&post);
    xcheck(c);
}

static void r_owns(rctx *c)
{
    size_t sz;
    uint64_t x = rnd(c);
    if (c->n > 0) {
        const mlive *l = &c->live[x % c->n];
        EQ(OWNS(c->f.p, l->addr, &sz), 1);
        EQ(sz, l->req);
        if (l->bsize > 512) {
            EQ(OWNS(c->f.p, l->addr + 512, &sz), 1);
            EQ(sz, 0);
        }
    }
    EQ(OWNS(c->f.p, MOCK_BASE - 1, &sz), 0);
    EQ(OWNS(c->f.p, c->f.m.next + 2 * SEG_ALIGN, &sz), 0);
    for (size_t s = 0; s < c->last.nseg; s++) {
        const wseg *g = &c->last.seg[s];
        EQ(OWNS(c->f.p, g->addr + g->size - 1, &sz), 1);
        if (s + 1 == c->last.nseg || c->last.seg[s + 1].addr != g->addr + g->size)
            EQ(OWNS(c->f.p, g->addr + g->size, &sz), 0);
    }
}

static void run_phase(const rphase *ph)
{
    static rctx c;
    memset(&c, 0, sizeof c);
    c.ph = ph;
    c.rng = ph->seed;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.max_split_size = ph->max_split;
    if (ph->non_split)
        o.max_non_split_rounding = ph->non_split;
    for (int i = 0; i < FP_ROUNDUP_INTERVALS; i++)
        o.roundup_divisions[i] = ph->div == 0 ? 0 : ph->div == 2 ? 4
                                 : i == 0 ? 4 : i <= 5 ? 8 : 2;
    o.max_reserved = ph->max_reserved;
    o.gc_threshold = ph->gc;
    fx_open(&c.f, &o, ph->capacity);
    size_t pc = fp_pool_opts_cap(&o);
    c.cap = pc < ph->capacity ? pc : ph->capacity;
    for (int op = 0; op < ph->ops; op++) {
        snprintf(g_where, sizeof g_where, "[%s op %d]", ph->name, op);
        uint64_t r = rnd(&c) % 1000;
        if (r < 2)
            r_empty(&c);
        else if (r < 6)
            r_invalid(&c);
        else if (r < 9)
            c.f.m.fail_next = 1; /* one transient refusal */
        else if (r < 12)
            r_owns(&c);
        else if (c.n == 0 || (c.n < ph->maxlive && r < 560))
            r_alloc(&c);
        else
            r_free(&c);
    }
    c.f.m.fail_next = 0;
    fp_pool_stats st = S(c.f.p);
    print_message("%-10s %d ops: %ju allocs (%ju hits, %ld new segments, %ld "
                  "split), %ju OOMs, %ju retries, %ju GC releases, %ld "
                  "empty_cache, peak reserved %jd MiB\n",
                  ph->name, ph->ops, (uintmax_t)c.allocs, (uintmax_t)c.hits,
                  c.n_new, c.n_split, (uintmax_t)c.ooms,
                  (uintmax_t)st.num_alloc_retries, (uintmax_t)st.num_gc_releases,
                  c.n_empty,
                  (intmax_t)(st.reserved_bytes[FP_ALL].peak / (int64_t)MiB));
    TRUE(c.ooms > 0);   /* the OOM path ran */
    TRUE(c.hits > 0);
    while (c.n > 0) {
        snprintf(g_where, sizeof g_where, "[%s drain %zu]", ph->name, c.n);
        r_free(&c);
    }
    r_empty(&c);
    EQ(c.last.nseg, 0);
    g_where[0] = 0;
    wd_free(&c.last);
    free(c.live);
    fx_close(&c.f);
}

static void test_random(void **state)
{
    (void)state;
    static const rphase ph[] = {
        {"plain", 1, 30000, 768 * MiB, SIZE_MAX, 0, 0, 0, 0.0, 120},
        {"max_split", 2, 30000, 512 * MiB, 32 * MiB, 0, 0, 0, 0.0, 120},
        {"divisions", 3, 25000, 1 * GiB, SIZE_MAX, 0, 1, 0, 0.0, 160},
        {"all", 4, 25000, 1 * GiB, 24 * MiB, 8 * MiB, 2, 400 * MiB, 0.7, 100},
    };
    for (size_t i = 0; i < sizeof ph / sizeof ph[0]; i++)
        run_phase(&ph[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opts_default),
        cmocka_unit_test(test_opts_cap),
        cmocka_unit_test(test_round_plain),
        cmocka_unit_test(test_round_divisions),
        cmocka_unit_test(test_segment_size),
        cmocka_unit_test(test_small_split_boundary),
        cmocka_unit_test(test_large_split_boundary),
        cmocka_unit_test(test_best_fit_small),
        cmocka_unit_test(test_best_fit_large),
        cmocka_unit_test(test_max_split_refuse),
        cmocka_unit_test(test_max_split_slack),
        cmocka_unit_test(test_max_split_no_split),
        cmocka_unit_test(test_max_split_fresh_segment),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_no_merge_across_segments),
        cmocka_unit_test(test_retry_release_all),
        cmocka_unit_test(test_retry_oversize_largest_first),
        cmocka_unit_test(test_retry_oversize_single),
        cmocka_unit_test(test_oom_when_full),
        cmocka_unit_test(test_backend_error),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_gc_order),
        cmocka_unit_test(test_gc_threshold),
        cmocka_unit_test(test_stats_sequence),
        cmocka_unit_test(test_stats_oversize),
        cmocka_unit_test(test_divisions_effect),
        cmocka_unit_test(test_empty_cache),
        cmocka_unit_test(test_invalid_free),
        cmocka_unit_test(test_owns),
        cmocka_unit_test(test_walk),
        cmocka_unit_test(test_destroy),
        cmocka_unit_test(test_huge),
        cmocka_unit_test(test_grant_stamps),
        cmocka_unit_test(test_grant_unsafe_from),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
