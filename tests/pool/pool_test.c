/* tests/pool/pool_test.c - the shared helpers of the pool tests
 * (pool_test.h): failure lines, the checked pool calls, the mock backend,
 * the self-verifying walk and the reference size rules.
 *
 * Invariant: every helper that calls the pool runs fp_pool_check after
 * the call (check_pool), so every test checks after every operation.
 */
#include <time.h>

#include "pool_test.h"

/* ---- failure reporting ------------------------------------------------- */

char g_where[160]; /* phase and operation of the randomized test */

void eq_(uintmax_t a, uintmax_t b, const char *sa, const char *sb, const char *file, int line)
{
    if (a != b)
        fail_msg("%s:%d: %s%s: %s == %ju (%jd, 0x%jx), expected %s == %ju "
                 "(%jd, 0x%jx)",
                 file, line, g_where, g_where[0] ? "" : "-", sa, a, (intmax_t)a, a, sb, b,
                 (intmax_t)b, b);
}

void true_(int ok, const char *what, const char *file, int line)
{
    if (!ok)
        fail_msg("%s:%d: %s: not true: %s", file, line, g_where, what);
}

/* The checker, after every pool operation. */
void check_pool(fp_pool *p)
{
    char msg[512];
    msg[0] = 0;
    int rc = fp_pool_check(p, msg, sizeof msg);
    if (rc != 0)
        fail_msg("fp_pool_check failed (%d) %s: %s", rc, g_where, msg);
}

uint64_t rng_next(uint64_t *s) /* xorshift64* */
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

void nap(void) /* lets a clock-based GC age tell two frees apart */
{
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* ---- the mock backend ------------------------------------------------- */

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
        memmove(&m->live[i], &m->live[i + 1], (m->nlive - i - 1) * sizeof *m->live);
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

void mock_init(mock *m, size_t capacity)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->next = MOCK_BASE;
    m->capacity = capacity;
    m->fail_err = ENOMEM;
}

void mock_fini(mock *m)
{
    free(m->live);
    m->live = NULL;
    pthread_mutex_destroy(&m->mu);
}

void mock_ok(const mock *m)
{
    EQ(m->bad_reserve, 0);
    EQ(m->bad_release, 0);
}

/* ---- a pool on a mock ------------------------------------------------- */

void fixture_open(pool_fixture *f, const fp_pool_opts *o, size_t capacity)
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
    check_pool(f->p);
}

void fixture_close(pool_fixture *f)
{
    check_pool(f->p);
    fp_pool_destroy(f->p, 0);
    f->p = NULL;
    mock_ok(&f->m);
    EQ(f->m.nlive, 0);
    EQ(f->m.live_bytes, 0);
    mock_fini(&f->m);
}

fp_pool_opts opts_max_split(size_t max_split)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.max_split_size = max_split;
    return o;
}

/* Pool calls, each followed by the checker. */
uint64_t alloc_ok(fp_pool *p, size_t size)
{
    uint64_t a = 0;
    int rc = fp_pool_alloc(p, size, &a);
    check_pool(p);
    if (rc != 0)
        fail_msg("fp_pool_alloc(%zu) = %d", size, rc);
    TRUE(a != 0);
    return a;
}

int alloc_try(fp_pool *p, size_t size, uint64_t *a)
{
    *a = 0;
    int rc = fp_pool_alloc(p, size, a);
    check_pool(p);
    return rc;
}

void free_ok(fp_pool *p, uint64_t a)
{
    int rc = fp_pool_free(p, a);
    check_pool(p);
    if (rc != 0)
        fail_msg("fp_pool_free(0x%llx) = %d", (unsigned long long)a, rc);
}

void empty_cache_ok(fp_pool *p)
{
    EQ(fp_pool_empty_cache(p), 0);
    check_pool(p);
}

fp_pool_stats stats_of(fp_pool *p)
{
    fp_pool_stats s;
    memset(&s, 0, sizeof s);
    fp_pool_get_stats(p, &s);
    check_pool(p);
    return s;
}

int owns_size(fp_pool *p, uint64_t a, size_t *size)
{
    *size = 12345; /* must be overwritten */
    int r = fp_pool_owns(p, a, size);
    check_pool(p);
    return r;
}

int owns_addr(fp_pool *p, uint64_t a)
{
    size_t sz;
    return owns_size(p, a, &sz);
}

size_t idle_bytes(fp_pool *p)
{
    size_t n = fp_pool_idle_bytes(p);
    check_pool(p);
    return n;
}

/* ---- walking ----------------------------------------------------------- */

static void walk_cb(void *ud, uint64_t addr, size_t size, int small, const fp_block_info *b,
                    size_t n)
{
    walk_dump *w = ud;
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
    w->seg[w->nseg++] = (walk_seg){addr, size, small != 0, w->nblk, n};
    if (n)
        memcpy(&w->blk[w->nblk], b, n * sizeof *b);
    w->nblk += n;
}

void walk_free(walk_dump *w)
{
    free(w->seg);
    free(w->blk);
    memset(w, 0, sizeof *w);
}

/* Walks the pool and verifies the walk on its own: segments in address
 * order without overlap, blocks tiling each segment, free blocks with
 * requested 0, allocated ones with 0 < requested <= size. */
void walk_take(fp_pool *p, walk_dump *w)
{
    w->nseg = w->nblk = 0;
    fp_pool_walk(p, walk_cb, w);
    check_pool(p);
    for (size_t s = 0; s < w->nseg; s++) {
        const walk_seg *g = &w->seg[s];
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

const walk_seg *walk_segment_at(const walk_dump *w, uint64_t addr)
{
    for (size_t s = 0; s < w->nseg; s++)
        if (w->seg[s].addr == addr)
            return &w->seg[s];
    return NULL;
}

const fp_block_info *walk_block_at(const walk_dump *w, uint64_t addr, const walk_seg **segout)
{
    for (size_t s = 0; s < w->nseg; s++) {
        const walk_seg *g = &w->seg[s];
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

int walk_same(const walk_dump *a, const walk_dump *b)
{
    if (a->nseg != b->nseg || a->nblk != b->nblk)
        return 0;
    for (size_t s = 0; s < a->nseg; s++)
        if (a->seg[s].addr != b->seg[s].addr || a->seg[s].size != b->seg[s].size ||
            a->seg[s].small != b->seg[s].small || a->seg[s].n != b->seg[s].n)
            return 0;
    for (size_t k = 0; k < a->nblk; k++) {
        const fp_block_info *x = &a->blk[k], *y = &b->blk[k];
        if (x->addr != y->addr || x->size != y->size || x->requested != y->requested ||
            x->state != y->state)
            return 0;
    }
    return 1;
}

/* Expected layout of one segment. */

void expect_seg(fp_pool *p, uint64_t seg, size_t segsize, int small, const expect_block *x,
                size_t n)
{
    walk_dump w = {0};
    walk_take(p, &w);
    const walk_seg *g = walk_segment_at(&w, seg);
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
    walk_free(&w);
}

size_t segment_count(fp_pool *p)
{
    walk_dump w = {0};
    walk_take(p, &w);
    size_t n = w.nseg;
    walk_free(&w);
    return n;
}

/* ---- the rules, written independently of the pool -------------------- */

size_t ref_round(const fp_pool_opts *o, size_t s)
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

size_t ref_segment_size(size_t r)
{
    if (r <= 1 * MiB)
        return 2 * MiB;
    if (r < 10 * MiB)
        return 20 * MiB;
    return (r + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
}

int ref_splits(const fp_pool_opts *o, int small, size_t bsize, size_t r)
{
    size_t rem = bsize - r;
    if (small)
        return rem >= FP_MIN_BLOCK;
    return r < o->max_split_size && rem > 1 * MiB;
}

/* 1 when a best-fit block of bsize may not serve a request rounded to r. */
int ref_refuses(const fp_pool_opts *o, size_t r, size_t bsize)
{
    if (r < o->max_split_size)
        return bsize >= o->max_split_size;
    return bsize - r >= o->max_non_split_rounding;
}

void stats_equal_except(fp_pool_stats x, fp_pool_stats y, int ooms, int invalid)
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
fp_grant grant_ok(fp_pool *p, size_t size, uint64_t unsafe_from)
{
    fp_grant g = {0};
    EQ(fp_pool_alloc_grant(p, size, unsafe_from, &g), 0);
    check_pool(p);
    return g;
}

uint64_t free_stamped(fp_pool *p, uint64_t addr)
{
    uint64_t t = 0;
    EQ(fp_pool_free_at(p, addr, &t, NULL), 0);
    check_pool(p);
    return t;
}
