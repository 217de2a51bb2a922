/* tests/pool/vmm.c - the tests of pool/'s virtual-memory segments
 * (the default; expandable_segments:True) against a mock backend with the VMM ops.
 *
 * What is pinned: pages mapped on demand and kept by freed ranges; no
 * map in a repeated pattern (steady state); pages shared by a live block
 * and a free neighbour stay mapped; idle pages taken back oldest free
 * first, under a cap and when the device refuses, each unmap naming the
 * newest free stamp of its pages; max_split_size with VMM strands
 * nothing; empty_cache; destroy; a new range when one is full; a fresh
 * range for a block too fresh for the caller; fallback to classic
 * segments without VMM ops; a randomized run under a cap; the headroom
 * left free for the driver (vmm_headroom), and none when it is off;
 * vmm_page and vmm_reserve past what the device and the address space
 * allow clamped (fp_vmm_size), so that requests are still served.
 *
 * Every pool call is followed by fp_pool_check, which verifies the page
 * accounting, by a comparison of the pool's reserved bytes with the
 * pages the mock holds mapped, by the walk (one segment per run of mapped
 * pages, blocks clipped to it, every page mapped in the mock), by the page
 * walk (each range tiled by runs all mapped or all unmapped in the mock),
 * and by "largest free block" against the largest free run the walk
 * shows.  The mock flags any map of a page already mapped, any unmap of a
 * page not mapped, any misaligned range, and any map outside a reserved
 * range.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fp_pool.h"

#define MiB      FP_MIB
#define GiB      FP_GIB
#define PAGE     (2 * MiB)
#define MAXPAGES 65536 /* 128 GiB of address space in all */
#define BASE     0x7f0000000000ull

typedef struct mock {
    uint64_t next_va; /* bump pointer of address space      */
    uint64_t va_lo[16], va_hi[16];
    int nva;
    unsigned char mapped[MAXPAGES];
    size_t mapped_pages, capacity_pages; /* capacity: SIZE_MAX = none  */
    size_t outside_pages;                /* taken by "the driver", not the pool */
    uint64_t maps, unmaps, bad;
    uint64_t last_unmap_addr, last_unmap_stamp;
    size_t last_unmap_size;
} mock;

static size_t page_index(uint64_t addr)
{
    return (size_t)((addr - BASE) / PAGE);
}

static size_t m_gran(void *ctx)
{
    (void)ctx;
    return PAGE;
}

static int m_reserve_va(void *ctx, size_t size, size_t align, uint64_t *addr)
{
    mock *m = ctx;
    if (align % PAGE || size % PAGE || m->nva == 16 || page_index(m->next_va + size) > MAXPAGES)
        return m->bad++, ENOMEM;
    *addr = m->next_va;
    m->va_lo[m->nva] = m->next_va;
    m->va_hi[m->nva++] = m->next_va + size;
    m->next_va += size;
    return 0;
}

static int m_free_va(void *ctx, uint64_t addr, size_t size)
{
    mock *m = ctx;
    for (int i = 0; i < m->nva; i++)
        if (m->va_lo[i] == addr && m->va_hi[i] == addr + size) {
            for (size_t k = page_index(addr); k < page_index(addr + size); k++)
                if (m->mapped[k])
                    m->bad++; /* freed with pages still mapped */
            m->va_lo[i] = m->va_hi[i] = 0;
            return 0;
        }
    m->bad++;
    return EINVAL;
}

static bool in_va(const mock *m, uint64_t addr, size_t size)
{
    for (int i = 0; i < m->nva; i++)
        if (addr >= m->va_lo[i] && addr + size <= m->va_hi[i])
            return true;
    return false;
}

static int m_map(void *ctx, uint64_t addr, size_t size)
{
    mock *m = ctx;
    if (addr % PAGE || size % PAGE || !size || !in_va(m, addr, size))
        return m->bad++, EINVAL;
    size_t n = size / PAGE;
    if (m->capacity_pages != SIZE_MAX && m->mapped_pages + m->outside_pages + n > m->capacity_pages)
        return ENOMEM;
    for (size_t k = page_index(addr); k < page_index(addr) + n; k++) {
        if (m->mapped[k])
            m->bad++;
        m->mapped[k] = 1;
    }
    m->mapped_pages += n;
    m->maps++;
    return 0;
}

static int m_unmap(void *ctx, uint64_t addr, size_t size, uint64_t freed_at)
{
    mock *m = ctx;
    if (addr % PAGE || size % PAGE || !size || !in_va(m, addr, size))
        return m->bad++, EINVAL;
    for (size_t k = page_index(addr); k < page_index(addr + size); k++) {
        if (!m->mapped[k])
            m->bad++;
        m->mapped[k] = 0;
    }
    m->mapped_pages -= size / PAGE;
    m->unmaps++;
    m->last_unmap_addr = addr;
    m->last_unmap_size = size;
    m->last_unmap_stamp = freed_at;
    return 0;
}

/* The device's free bytes, as cuMemGetInfo counts them. */
static size_t m_device_free(void *ctx)
{
    mock *m = ctx;
    if (m->capacity_pages == SIZE_MAX)
        return SIZE_MAX;
    return (m->capacity_pages - m->mapped_pages - m->outside_pages) * PAGE;
}

static int m_reserve(void *ctx, size_t size, uint64_t *addr)
{
    (void)ctx, (void)size, (void)addr;
    return ENOMEM; /* classic segments must not be asked for */
}

static int m_release(void *ctx, uint64_t addr, size_t size)
{
    mock *m = ctx;
    (void)addr, (void)size;
    m->bad++;
    return 0;
}

static mock *mock_new(size_t capacity_pages)
{
    mock *m = calloc(1, sizeof *m);
    m->next_va = BASE;
    m->capacity_pages = capacity_pages;
    return m;
}

static fp_backend backend(mock *m)
{
    return (fp_backend){.ctx = m,
                        .reserve = m_reserve,
                        .release = m_release,
                        .granularity = m_gran,
                        .reserve_va = m_reserve_va,
                        .free_va = m_free_va,
                        .map = m_map,
                        .unmap = m_unmap};
}

static fp_pool *make(mock *m, size_t range, size_t cap, size_t mss)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.expandable_segments = 1;
    o.vmm_reserve = range;
    o.max_reserved = cap;
    if (mss)
        o.max_split_size = mss;
    fp_backend be = backend(m);
    fp_pool *p = NULL;
    assert_int_equal(fp_pool_create(&o, &be, &p), 0);
    assert_true(fp_pool_is_vmm(p));
    return p;
}

/* What the walk shows: one segment per run of mapped pages, its blocks
 * clipped to the run. */
typedef struct walked {
    const mock *m;
    size_t bytes;        /* of the segments walked      */
    size_t largest_free; /* the largest clipped free block */
} walked;

static void on_segment(void *ud, uint64_t addr, size_t size, int small, const fp_block_info *b,
                       size_t n)
{
    walked *w = ud;
    (void)small;
    w->bytes += size;
    uint64_t at = addr;
    for (size_t i = 0; i < n; i++) { /* the blocks tile the segment */
        assert_int_equal(b[i].addr, at);
        at += b[i].size;
        if (b[i].state == FP_BLOCK_FREE && b[i].size > w->largest_free)
            w->largest_free = b[i].size;
    }
    assert_int_equal(at, addr + size);
    for (uint64_t a = addr; a < addr + size; a += PAGE) /* every page mapped */
        assert_true(w->m->mapped[page_index(a)]);
}

/* What the page walk shows: every range tiled by its runs from its first
 * byte, each run all mapped or all unmapped as the mock holds it. */
typedef struct paged {
    const mock *m;
    uint64_t range, next; /* the range walked now, where its next run starts */
    size_t mapped;        /* bytes in mapped runs */
} paged;

static void on_run(void *ud, const fp_page_run *r)
{
    paged *w = ud;
    if (r->range != w->range) { /* a new range starts at its first byte */
        assert_int_equal(r->addr, r->range);
        w->range = r->range;
        w->next = r->range;
    }
    assert_int_equal(r->addr, w->next);
    assert_int_equal(r->size % PAGE, 0);
    assert_true(r->size > 0 && r->addr + r->size <= r->range + r->range_size);
    for (uint64_t a = r->addr; a < r->addr + r->size; a += PAGE)
        assert_int_equal(w->m->mapped[page_index(a)], r->mapped);
    w->next = r->addr + r->size;
    if (r->mapped)
        w->mapped += r->size;
}

/* The checker; the pool's reserved bytes against the mock's pages; the
 * walk against both; and "largest free block" as the longest free run in
 * mapped pages, found the slow way. */
static void check(fp_pool *p, const mock *m)
{
    char msg[512];
    if (fp_pool_check(p, msg, sizeof msg))
        fail_msg("fp_pool_check: %s", msg);
    assert_int_equal(fp_pool_reserved_bytes(p), m->mapped_pages * PAGE);
    assert_int_equal(m->bad, 0);
    walked w = {m, 0, 0};
    fp_pool_walk(p, on_segment, &w);
    assert_int_equal(w.bytes, m->mapped_pages * PAGE);
    fp_pool_stats st;
    fp_pool_get_stats(p, &st);
    assert_int_equal(st.largest_free, w.largest_free);
    paged pw = {m, 0, 0, 0};
    fp_pool_walk_pages(p, on_run, &pw);
    assert_int_equal(pw.mapped, m->mapped_pages * PAGE);
}

static uint64_t alloc(fp_pool *p, const mock *m, size_t size)
{
    uint64_t a = 0;
    assert_int_equal(fp_pool_alloc(p, size, &a), 0);
    check(p, m);
    return a;
}

static uint64_t release(fp_pool *p, const mock *m, uint64_t a)
{
    uint64_t stamp = 0;
    assert_int_equal(fp_pool_free_at(p, a, &stamp, NULL), 0);
    check(p, m);
    return stamp;
}

static fp_pool_stats stats(fp_pool *p)
{
    fp_pool_stats st;
    fp_pool_get_stats(p, &st);
    return st;
}

static void finish(fp_pool *p, mock *m)
{
    fp_pool_destroy(p, 0);
    assert_int_equal(m->mapped_pages, 0);
    assert_int_equal(m->bad, 0);
    free(m);
}

/* ---- the tests ---------------------------------------------------------------- */

/* A pool with the backend's device_free and a headroom of headroom bytes. */
static fp_pool *make_headroom(mock *m, size_t headroom)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.expandable_segments = 1;
    o.vmm_reserve = 1 * GiB;
    o.vmm_headroom = headroom;
    fp_backend be = backend(m);
    be.device_free = m_device_free;
    fp_pool *p = NULL;
    assert_int_equal(fp_pool_create(&o, &be, &p), 0);
    return p;
}

/* A device of 120 pages, 4 of them the driver's; A and B (30 pages each)
 * mapped, A freed.  C (50 pages) fits on the device, but would leave it
 * 6 pages free, under the headroom of 16: 10 of A's idle pages are
 * unmapped first, oldest free first, and 16 pages stay free.  With no
 * idle page left the limit is soft: D maps into the headroom. */
static void keeps_headroom_for_the_driver(void **state)
{
    (void)state;
    mock *m = mock_new(120);
    m->outside_pages = 4;
    fp_pool *p = make_headroom(m, 16 * PAGE);
    uint64_t a = alloc(p, m, 60 * MiB), b = alloc(p, m, 60 * MiB);
    uint64_t stamp = release(p, m, a);
    uint64_t c = alloc(p, m, 100 * MiB);
    assert_int_equal(c, BASE + 120 * MiB);
    assert_int_equal(m_device_free(m), 16 * PAGE);
    assert_int_equal(m->mapped_pages, 20 + 30 + 50);
    assert_int_equal(m->last_unmap_stamp, stamp);
    fp_pool_stats st = stats(p);
    assert_int_equal(st.num_headroom_reclaims, 1);
    assert_int_equal(st.num_reclaims, 1);
    /* A's pages 10-29 are idle.  E (20 pages) lands on A's pages 0-19:
     * its 10 unmapped ones are paid for with 20-29, outside E. */
    uint64_t e = alloc(p, m, 40 * MiB);
    assert_int_equal(e, BASE);
    assert_int_equal(m->last_unmap_addr, BASE + 40 * MiB);
    assert_int_equal(m_device_free(m), 16 * PAGE);
    assert_int_equal(stats(p).num_headroom_reclaims, 2);
    uint64_t d = alloc(p, m, 8 * MiB); /* 4 new pages, nothing idle */
    assert_int_equal(m_device_free(m), 12 * PAGE);
    assert_int_equal(stats(p).num_headroom_reclaims, 2);
    release(p, m, b);
    release(p, m, c);
    release(p, m, d);
    release(p, m, e);
    finish(p, m);
}

/* vmm_headroom:off, or a backend that cannot tell: the device is filled
 * to its last page before anything idle is taken back. */
static void headroom_off_fills_the_device(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        mock *m = mock_new(120);
        m->outside_pages = 4;
        fp_pool *p = k ? make(m, 1 * GiB, 0, 0) : make_headroom(m, 0);
        uint64_t a = alloc(p, m, 60 * MiB), b = alloc(p, m, 60 * MiB);
        release(p, m, a);
        uint64_t c = alloc(p, m, 100 * MiB);
        assert_int_equal(m_device_free(m), 6 * PAGE);
        assert_int_equal(m->unmaps, 0);
        assert_int_equal(stats(p).num_headroom_reclaims, 0);
        release(p, m, b);
        release(p, m, c);
        finish(p, m);
    }
}

static void maps_on_demand_and_keeps_pages(void **state)
{
    (void)state;
    mock *m = mock_new(SIZE_MAX);
    fp_pool *p = make(m, 1 * GiB, 0, 0);
    uint64_t a = alloc(p, m, 3 * MiB);
    assert_int_equal(a, BASE);
    assert_int_equal(fp_pool_reserved_bytes(p), 4 * MiB); /* two pages */
    assert_int_equal(m->maps, 1);
    release(p, m, a);
    assert_int_equal(fp_pool_reserved_bytes(p), 4 * MiB); /* a free keeps them */
    uint64_t b = alloc(p, m, 4 * MiB);
    assert_int_equal(b, a);
    assert_int_equal(m->maps, 1); /* no new page */
    fp_pool_stats st = stats(p);
    assert_int_equal(st.num_map_calls, 1);
    assert_int_equal(st.num_unmap_calls, 0);
    assert_int_equal(st.page_size, PAGE);
    assert_int_equal(st.segments[FP_ALL].current, 1);
    release(p, m, b);
    finish(p, m);
}

/* A repeated pattern of mixed sizes (two variants, alternating) maps in
 * its first two rounds only. */
static void steady_state_maps_nothing(void **state)
{
    (void)state;
    static const size_t sizes[] = {3 * MiB, 700 * 1024, 25 * MiB, 512, 9 * MiB, 64 * MiB, 1 * MiB};
    enum { N = sizeof sizes / sizeof *sizes };
    mock *m = mock_new(SIZE_MAX);
    fp_pool *p = make(m, 4 * GiB, 0, 0);
    uint64_t after_first = 0;
    for (int round = 0; round < 10; round++) {
        uint64_t a[N];
        for (int i = 0; i < N; i++)
            a[i] = alloc(p, m, sizes[i] + (size_t)round % 2 * 512);
        for (int i = 0; i < N; i += 2)
            release(p, m, a[i]);
        for (int i = 1; i < N; i += 2)
            release(p, m, a[i]);
        if (round == 1) /* both sizes of the pattern have been seen */
            after_first = m->maps;
    }
    assert_int_equal(m->maps, after_first);
    assert_int_equal(stats(p).num_unmap_calls, 0);
    finish(p, m);
}

/* Cap of 4 pages: A (3 MiB, pages 0-1) and B (3 MiB, pages 1-2).  Freed
 * A leaves page 0 idle; page 1 is shared with B and stays.  C (4 MiB)
 * needs 2 new pages: page 0 is taken back, with A's stamp. */
static void reclaims_idle_pages_under_cap(void **state)
{
    (void)state;
    mock *m = mock_new(SIZE_MAX);
    fp_pool *p = make(m, 1 * GiB, 8 * MiB, 0);
    uint64_t a = alloc(p, m, 3 * MiB), b = alloc(p, m, 3 * MiB);
    assert_int_equal(b, BASE + 3 * MiB);
    assert_int_equal(fp_pool_reserved_bytes(p), 6 * MiB);
    uint64_t stamp = release(p, m, a);
    uint64_t c = alloc(p, m, 4 * MiB);
    assert_int_equal(c, BASE + 6 * MiB);
    assert_int_equal(m->unmaps, 1);
    assert_int_equal(m->last_unmap_addr, BASE);
    assert_int_equal(m->last_unmap_size, PAGE);
    assert_int_equal(m->last_unmap_stamp, stamp);
    assert_int_equal(m->mapped[1], 1); /* shared with live B */
    assert_int_equal(fp_pool_reserved_bytes(p), 8 * MiB);
    fp_pool_stats st = stats(p);
    assert_int_equal(st.num_reclaims, 1);
    assert_int_equal(st.num_unmap_calls, 1);
    /* Nothing idle is left: one more page is over the cap. */
    uint64_t d;
    assert_int_equal(fp_pool_alloc(p, 3 * MiB, &d), ENOMEM);
    check(p, m);
    fp_oom_info oom;
    fp_pool_last_oom(p, &oom);
    assert_int_equal(oom.over_cap, 1);
    release(p, m, b);
    release(p, m, c);
    finish(p, m);
}

/* The same with the device refusing instead of a cap. */
static void reclaims_when_device_is_full(void **state)
{
    (void)state;
    mock *m = mock_new(4);
    fp_pool *p = make(m, 1 * GiB, 0, 0);
    uint64_t a = alloc(p, m, 3 * MiB), b = alloc(p, m, 3 * MiB);
    uint64_t stamp = release(p, m, a);
    uint64_t c = alloc(p, m, 4 * MiB);
    assert_int_equal(m->last_unmap_stamp, stamp);
    assert_int_equal(m->mapped_pages, 4);
    uint64_t d;
    assert_int_equal(fp_pool_alloc(p, 3 * MiB, &d), ENOMEM);
    check(p, m);
    fp_oom_info oom;
    fp_pool_last_oom(p, &oom);
    assert_int_equal(oom.over_cap, 0);
    assert_int_equal(oom.backend_err, ENOMEM);
    release(p, m, b);
    release(p, m, c);
    finish(p, m);
}

/* Two idle ranges: the one freed first goes first, and an unmap covering
 * merged blocks names the newest stamp of the block. */
static void reclaims_oldest_first(void **state)
{
    (void)state;
    mock *m = mock_new(SIZE_MAX);
    fp_pool *p = make(m, 1 * GiB, 12 * MiB, 0);
    uint64_t a = alloc(p, m, 2 * MiB), k1 = alloc(p, m, 2 * MiB);
    uint64_t b = alloc(p, m, 2 * MiB), k2 = alloc(p, m, 2 * MiB);
    release(p, m, b);                  /* b: freed first (older)  */
    uint64_t t = alloc(p, m, 512);     /* the clock ticks         */
    uint64_t sa = release(p, m, a);    /* a: newer                */
    uint64_t c = alloc(p, m, 6 * MiB); /* needs 3 pages, 2 over   */
    assert_int_equal(m->mapped[page_index(b)], 0);
    assert_int_equal(m->mapped[page_index(a)], 0);
    assert_int_equal(m->last_unmap_addr, a); /* a went second */
    assert_int_equal(m->last_unmap_stamp, sa);
    release(p, m, t);
    release(p, m, c);
    release(p, m, k1);
    release(p, m, k2);
    finish(p, m);
}

/* max_split_size_mb with VMM: a freed oversize block is split for small
 * requests (its address space strands nothing) and, under a cap, its
 * pages go where they are needed. */
static void max_split_strands_nothing(void **state)
{
    (void)state;
    mock *m = mock_new(SIZE_MAX);
    fp_pool *p = make(m, 8 * GiB, 704 * MiB, 512 * MiB);
    uint64_t big = alloc(p, m, 600 * MiB), keep = alloc(p, m, 2 * MiB);
    release(p, m, big);
    uint64_t maps = m->maps;
    uint64_t s1 = alloc(p, m, 100 * MiB);
    assert_int_equal(s1, big); /* no refusal: reuses the range */
    assert_int_equal(m->maps, maps);
    release(p, m, s1);
    /* 700 MiB does not fit before keep: the idle 600 MiB move after it. */
    uint64_t huge = alloc(p, m, 700 * MiB);
    assert_int_equal(huge, keep + 2 * MiB);
    assert_true(m->unmaps > 0);
    assert_true(fp_pool_reserved_bytes(p) <= 704 * MiB);
    assert_int_equal(stats(p).oversize_allocations.current, 1);
    release(p, m, huge);
    release(p, m, keep);
    finish(p, m);
}

static void empty_cache_unmaps_idle(void **state)
{
    (void)state;
    mock *m = mock_new(SIZE_MAX);
    fp_pool *p = make(m, 1 * GiB, 0, 0);
    uint64_t a = alloc(p, m, 30 * MiB), b = alloc(p, m, 3 * MiB);
    uint64_t s = alloc(p, m, 4096);
    release(p, m, a);
    assert_int_equal(fp_pool_empty_cache(p), 0);
    check(p, m);
    /* b touches pages 15-16 (30..33 MiB); the small range keeps s's page. */
    assert_int_equal(fp_pool_reserved_bytes(p), 4 * MiB + PAGE);
    release(p, m, b);
    release(p, m, s);
    assert_int_equal(fp_pool_empty_cache(p), 0);
    check(p, m);
    assert_int_equal(fp_pool_reserved_bytes(p), 0);
    finish(p, m);
}

/* A range that is full makes a new one; a request larger than the range
 * gets one of its own size. */
static void new_range_when_full(void **state)
{
    (void)state;
    mock *m = mock_new(SIZE_MAX);
    fp_pool *p = make(m, 8 * MiB, 0, 0);
    uint64_t a = alloc(p, m, 6 * MiB), b = alloc(p, m, 6 * MiB);
    assert_true(b >= a + 8 * MiB);
    uint64_t c = alloc(p, m, 20 * MiB);
    assert_int_equal(stats(p).segments[FP_LARGE].current, 3);
    assert_int_equal(m->nva, 3);
    release(p, m, a);
    release(p, m, b);
    release(p, m, c);
    finish(p, m);
}

/* A caller that cannot make fresh memory safe gets a range of its own. */
static void too_fresh_gets_own_range(void **state)
{
    (void)state;
    mock *m = mock_new(SIZE_MAX);
    fp_pool *p = make(m, 1 * GiB, 0, 0);
    uint64_t a = alloc(p, m, 4 * MiB);
    uint64_t stamp = release(p, m, a);
    fp_grant g;
    assert_int_equal(fp_pool_alloc_grant(p, 4 * MiB, stamp, &g), 0);
    check(p, m);
    assert_true(g.addr != a);
    assert_int_equal(g.freed_at, FP_NEVER_FREED);
    assert_int_equal(fp_pool_alloc_grant(p, 4 * MiB, UINT64_MAX, &g), 0);
    check(p, m);
    assert_int_equal(g.addr, a);
    assert_int_equal(g.freed_at, stamp);
    finish(p, m);
}

/* expandable_segments on a backend without the VMM ops: classic. */
static void falls_back_without_vmm_ops(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.expandable_segments = 1;
    mock *m = mock_new(SIZE_MAX);
    fp_backend be = {.ctx = m, .reserve = m_reserve, .release = m_release};
    fp_pool *p;
    assert_int_equal(fp_pool_create(&o, &be, &p), 0);
    assert_false(fp_pool_is_vmm(p));
    assert_int_equal(stats(p).page_size, 0);
    fp_pool_destroy(p, 0);
    free(m);
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* 20,000 random operations under a cap, checked after each; every
 * allocation that fits the cap by page count must succeed. */
static void randomized_under_cap(void **state)
{
    (void)state;
    enum { SLOTS = 64 };
    mock *m = mock_new(SIZE_MAX);
    size_t cap = 256 * MiB;
    fp_pool *p = make(m, 2 * GiB, cap, 0);
    uint64_t addr[SLOTS] = {0}, seed = 0x9e3779b97f4a7c15ull;
    size_t size[SLOTS] = {0};
    for (int i = 0; i < 20000; i++) {
        size_t k = (size_t)(rng(&seed) % SLOTS);
        if (addr[k]) {
            release(p, m, addr[k]);
            addr[k] = 0;
            continue;
        }
        size_t sz = rng(&seed) % 3 ? (size_t)(rng(&seed) % (1 * MiB)) + 1
                                   : (size_t)(rng(&seed) % (24 * MiB)) + 1;
        size_t live_pages = 0;
        for (size_t j = 0; j < SLOTS; j++)
            live_pages += addr[j] ? (size[j] + 2 * PAGE) / PAGE : 0;
        int err = fp_pool_alloc(p, sz, &addr[k]);
        check(p, m);
        if (err) {
            assert_int_equal(err, ENOMEM);
            assert_true((live_pages + (sz + 2 * PAGE) / PAGE) * PAGE > cap);
            addr[k] = 0;
        }
        size[k] = sz;
    }
    assert_true(fp_pool_reserved_bytes(p) <= cap);
    finish(p, m);
}

/* ---- extreme vmm_page_mb and vmm_reserve_mb (issue 41, item 10) ------------- */

#define DEVICE  (16 * GiB)
#define MAX_KEY ((size_t)17592186044415 * MiB) /* the largest _mb value the parser takes */

static fp_vmm_sizes sizes(size_t total, size_t page, size_t reserve)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.device_total = total;
    o.vmm_page = page;
    o.vmm_reserve = reserve;
    fp_vmm_sizes z;
    fp_vmm_size(&o, PAGE, &z);
    return z;
}

/* Pages at most an eighth of the device, ranges at most 4 devices and
 * 4 TiB, no rounding overflows; only what was asked for is "clamped". */
static void extreme_sizes_are_clamped(void **state)
{
    (void)state;
    fp_vmm_sizes z = sizes(DEVICE, 0, 0); /* the defaults: untouched */
    assert_int_equal(z.page, PAGE);
    assert_int_equal(z.range, DEVICE);
    assert_false(z.page_clamped || z.range_clamped);
    z = sizes(DEVICE, 3 * MiB, 0); /* rounded up, not clamped */
    assert_int_equal(z.page, 4 * MiB);
    assert_false(z.page_clamped);
    z = sizes(DEVICE, 2 * GiB, 64 * GiB); /* right at the limits */
    assert_int_equal(z.page, 2 * GiB);
    assert_int_equal(z.range, 64 * GiB);
    assert_false(z.page_clamped || z.range_clamped);
    size_t pages[] = {20000 * MiB, 16000 * MiB, 1048576 * MiB, MAX_KEY};
    for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
        z = sizes(DEVICE, pages[i], 0);
        assert_int_equal(z.page, 2 * GiB);
        assert_int_equal(z.page_max, 2 * GiB);
        assert_true(z.page_clamped);
        assert_int_equal(z.range, DEVICE);
    }
    size_t ranges[] = {67108865 * MiB, 8796093022208 * MiB, MAX_KEY};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        z = sizes(DEVICE, 0, ranges[i]);
        assert_int_equal(z.range, 64 * GiB);
        assert_true(z.range_clamped);
        z = sizes(0, MAX_KEY, ranges[i]); /* no device size: the address space */
        assert_int_equal(z.page, FP_VMM_RANGE_MAX);
        assert_int_equal(z.range, FP_VMM_RANGE_MAX);
        assert_true(z.page_clamped && z.range_clamped);
    }
    z = sizes(SIZE_MAX, 0, 0); /* a replay's unlimited budget: no overflow, no line */
    assert_int_equal(z.range, FP_VMM_RANGE_MAX);
    assert_false(z.range_clamped);
    z = sizes(3 * MiB, 0, 0); /* a device smaller than a few pages */
    assert_int_equal(z.page, PAGE);
    assert_true(z.range >= z.page && z.range % z.page == 0);
}

/* The largest vmm_reserve_mb once overflowed the rounding to a range of
 * 0 bytes: every request got a range of its own (22 for 2,000 pairs).
 * Now 2 ranges, one per pool. */
static void largest_reserve_gives_two_ranges(void **state)
{
    (void)state;
    mock *m = mock_new(DEVICE / PAGE);
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.expandable_segments = 1;
    o.device_total = DEVICE;
    o.vmm_reserve = MAX_KEY;
    fp_backend be = backend(m);
    fp_pool *p = NULL;
    assert_int_equal(fp_pool_create(&o, &be, &p), 0);
    for (size_t i = 0; i < 2000; i++) {
        size_t n = i % 2 ? 1000 + i : (size_t)(i % 37 + 1) * MiB;
        release(p, m, alloc(p, m, n));
    }
    assert_int_equal(m->nva, 2);
    finish(p, m);
}

/* A page larger than the device (vmm_page_mb:20000 or 1048576 on 16 GiB)
 * once failed every request; clamped, a request is served. */
static void page_over_device_still_serves(void **state)
{
    (void)state;
    size_t pages[] = {20000 * MiB, 1048576 * MiB};
    for (size_t i = 0; i < 2; i++) {
        mock *m = mock_new(DEVICE / PAGE);
        fp_pool_opts o;
        fp_pool_opts_default(&o);
        o.expandable_segments = 1;
        o.device_total = DEVICE;
        o.vmm_page = pages[i];
        o.vmm_reserve = 32 * GiB; /* two ranges fit the mock's address space */
        fp_backend be = backend(m);
        fp_pool *p = NULL;
        assert_int_equal(fp_pool_create(&o, &be, &p), 0);
        release(p, m, alloc(p, m, 1000));
        release(p, m, alloc(p, m, 64 * MiB));
        assert_int_equal(stats(p).page_size, 2 * GiB);
        finish(p, m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(maps_on_demand_and_keeps_pages),
        cmocka_unit_test(steady_state_maps_nothing),
        cmocka_unit_test(reclaims_idle_pages_under_cap),
        cmocka_unit_test(reclaims_when_device_is_full),
        cmocka_unit_test(reclaims_oldest_first),
        cmocka_unit_test(max_split_strands_nothing),
        cmocka_unit_test(empty_cache_unmaps_idle),
        cmocka_unit_test(new_range_when_full),
        cmocka_unit_test(too_fresh_gets_own_range),
        cmocka_unit_test(falls_back_without_vmm_ops),
        cmocka_unit_test(randomized_under_cap),
        cmocka_unit_test(keeps_headroom_for_the_driver),
        cmocka_unit_test(headroom_off_fills_the_device),
        cmocka_unit_test(extreme_sizes_are_clamped),
        cmocka_unit_test(largest_reserve_gives_two_ranges),
        cmocka_unit_test(page_over_device_still_serves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
