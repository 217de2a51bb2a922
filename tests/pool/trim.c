/* tests/pool/trim.c - fp_pool_trim, the caller's trim (cuMemPoolTrimTo and
 * a release threshold in the shim; the pinned host pool's cache limit).
 *
 * What is pinned: classic segments go back whole, the one freed longest
 * ago first, until reserved is at most keep, and a segment with a live
 * block never; virtual-memory segments give back idle pages, oldest free
 * first, each unmap naming the newest free stamp of its pages, never a
 * page a live block touches, the range itself kept; no synchronize either
 * way (the caller's business); the bytes returned are the bytes given
 * back.  fp_pool_check runs after every pool call, and in the VMM case the
 * pool's reserved bytes are compared with the pages the mock holds.
 */
#include "pool_test.h"

static size_t trim_ok(fp_pool *p, size_t keep)
{
    size_t got = fp_pool_trim(p, keep);
    check_pool(p);
    return got;
}

static size_t reserved(fp_pool *p)
{
    return (size_t)stats_of(p).reserved_bytes[FP_ALL].current;
}

/* ---- classic segments ------------------------------------------------------ */

static void test_trim_classic(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 20 * MiB), b = alloc_ok(f.p, 4 * MiB), c = alloc_ok(f.p, 512);
    EQ(reserved(f.p), 42 * MiB);     /* 20 + 20 + 2 */
    EQ(trim_ok(f.p, 0), 0);          /* nothing free */
    free_ok(f.p, b);                 /* b's segment is the older free one: */
    uint64_t e = alloc_ok(f.p, 512); /* the clock ticks at allocations */
    free_ok(f.p, a);
    EQ(trim_ok(f.p, SIZE_MAX), 0);
    EQ(trim_ok(f.p, 42 * MiB), 0);
    EQ(trim_ok(f.p, 30 * MiB), 20 * MiB); /* one segment was enough: b's */
    EQ(owns_addr(f.p, b), 0);
    EQ(owns_addr(f.p, a), 1);
    EQ(reserved(f.p), 22 * MiB);
    EQ(trim_ok(f.p, 0), 20 * MiB); /* then a's; c's segment holds c */
    EQ(owns_addr(f.p, a), 0);
    EQ(owns_addr(f.p, c), 1);
    EQ(reserved(f.p), 2 * MiB);
    free_ok(f.p, e);
    EQ(trim_ok(f.p, 0), 0); /* c's segment is not wholly free */
    free_ok(f.p, c);
    EQ(trim_ok(f.p, 0), 2 * MiB);
    EQ(reserved(f.p), 0);
    EQ(f.m.nlive, 0);
    EQ(f.m.sync_calls, 0); /* the caller synchronizes, not the trim */
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_release_calls, 3);
    EQ(s.num_unmap_calls, 0);
    alloc_ok(f.p, 512); /* it grows again */
    mock_ok(&f.m);
    fixture_close(&f);
}

/* ---- virtual-memory segments: a mock with the VMM ops ---------------------- */

#define PAGE   (2 * MiB)
#define NPAGES 512 /* 1 GiB of address space */
#define VBASE  0x7e0000000000ull

typedef struct vmock {
    uint64_t next;
    unsigned char mapped[NPAGES];
    size_t nmapped;
    uint64_t stamp[NPAGES]; /* freed_at of the unmap of each page */
    uint64_t unmaps, syncs, bad;
} vmock;

static size_t vpage(uint64_t addr)
{
    return (size_t)((addr - VBASE) / PAGE);
}

static size_t v_gran(void *ctx)
{
    (void)ctx;
    return PAGE;
}

static int v_reserve_va(void *ctx, size_t size, size_t align, uint64_t *addr)
{
    vmock *m = ctx;
    if (size % PAGE || align % PAGE || vpage(m->next + size) > NPAGES)
        return m->bad++, ENOMEM;
    *addr = m->next;
    m->next += size;
    return 0;
}

static int v_free_va(void *ctx, uint64_t addr, size_t size)
{
    vmock *m = ctx;
    for (size_t k = vpage(addr); k < vpage(addr + size); k++)
        m->bad += m->mapped[k]; /* freed with pages still mapped */
    return 0;
}

static int v_map(void *ctx, uint64_t addr, size_t size)
{
    vmock *m = ctx;
    for (size_t k = vpage(addr); k < vpage(addr + size); k++) {
        m->bad += m->mapped[k];
        m->mapped[k] = 1;
    }
    m->nmapped += size / PAGE;
    return 0;
}

static int v_unmap(void *ctx, uint64_t addr, size_t size, uint64_t freed_at)
{
    vmock *m = ctx;
    for (size_t k = vpage(addr); k < vpage(addr + size); k++) {
        m->bad += !m->mapped[k];
        m->mapped[k] = 0;
        m->stamp[k] = freed_at;
    }
    m->nmapped -= size / PAGE;
    m->unmaps++;
    return 0;
}

static int v_reserve(void *ctx, size_t size, uint64_t *addr)
{
    (void)size, (void)addr;
    ((vmock *)ctx)->bad++; /* no classic segment in this mode */
    return ENOMEM;
}

static int v_release(void *ctx, uint64_t addr, size_t size)
{
    (void)addr, (void)size;
    ((vmock *)ctx)->bad++;
    return 0;
}

static int v_sync(void *ctx)
{
    ((vmock *)ctx)->syncs++;
    return 0;
}

/* The pool's reserved bytes are the pages the mock holds mapped. */
static void vcheck(fp_pool *p, const vmock *m)
{
    EQ(reserved(p), m->nmapped * PAGE);
    EQ(m->bad, 0);
}

/* Whether every page of [addr, addr + size) is mapped. */
static int all_mapped(const vmock *m, uint64_t addr, size_t size)
{
    for (size_t k = vpage(addr); k < vpage(addr + size); k++)
        if (!m->mapped[k])
            return 0;
    return 1;
}

static uint64_t vfree(fp_pool *p, uint64_t addr)
{
    uint64_t stamp = 0;
    EQ(fp_pool_free_at(p, addr, &stamp, NULL), 0);
    check_pool(p);
    return stamp;
}

static void test_trim_vmm(void **state)
{
    (void)state;
    vmock m = {.next = VBASE};
    fp_backend be = {.ctx = &m,
                     .reserve = v_reserve,
                     .release = v_release,
                     .synchronize = v_sync,
                     .granularity = v_gran,
                     .reserve_va = v_reserve_va,
                     .free_va = v_free_va,
                     .map = v_map,
                     .unmap = v_unmap};
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.expandable_segments = 1;
    o.vmm_reserve = 256 * MiB;
    fp_pool *p = NULL;
    EQ(fp_pool_create(&o, &be, &p), 0);
    assert_true(fp_pool_is_vmm(p));
    uint64_t a = alloc_ok(p, 8 * MiB), b = alloc_ok(p, 8 * MiB), c = alloc_ok(p, 8 * MiB);
    EQ(b, a + 8 * MiB); /* one range, back to back */
    EQ(c, b + 8 * MiB);
    vcheck(p, &m);
    EQ(reserved(p), 24 * MiB);
    EQ(trim_ok(p, 0), 0); /* every page is a live block's */
    uint64_t ta = vfree(p, a);
    uint64_t x = alloc_ok(p, 10 * MiB); /* not in a's hole: after c (the clock ticks) */
    EQ(x, c + 8 * MiB);
    uint64_t tc = vfree(p, c);
    assert_true(ta < tc);
    EQ(reserved(p), 34 * MiB);
    EQ(trim_ok(p, SIZE_MAX), 0);
    EQ(trim_ok(p, 34 * MiB), 0);
    EQ(m.unmaps, 0);
    EQ(trim_ok(p, 30 * MiB), 4 * MiB); /* two of a's pages: a was freed first */
    vcheck(p, &m);
    EQ(m.stamp[vpage(a)], ta);
    assert_true(all_mapped(&m, c, 8 * MiB));
    EQ(trim_ok(p, 18 * MiB), 12 * MiB); /* the rest of a's, then c's */
    vcheck(p, &m);
    EQ(m.stamp[vpage(c)], tc);
    assert_true(all_mapped(&m, b, 8 * MiB) && all_mapped(&m, x, 10 * MiB)); /* live: kept */
    EQ(trim_ok(p, 0), 0);
    EQ(reserved(p), 18 * MiB);
    EQ(owns_addr(p, a), 1); /* the range stays: address space costs nothing */
    EQ(m.syncs, 0);
    fp_pool_stats s = stats_of(p);
    EQ(s.num_release_calls, 0);
    assert_true(s.num_unmap_calls > 0);
    uint64_t d = alloc_ok(p, 6 * MiB); /* maps what it needs again */
    assert_true(all_mapped(&m, d, 6 * MiB));
    vcheck(p, &m);
    free_ok(p, d);
    free_ok(p, b);
    free_ok(p, x);
    EQ(trim_ok(p, 0), 24 * MiB); /* d's 3 pages, b's 4, x's 5 */
    vcheck(p, &m);
    EQ(m.nmapped, 0);
    fp_pool_destroy(p, 0);
    EQ(m.bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trim_classic),
        cmocka_unit_test(test_trim_vmm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
