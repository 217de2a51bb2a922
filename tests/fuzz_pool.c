/* fuzz_pool.c - libFuzzer harness for pool/.
 *
 * The input is a small program of pool operations run against a mock
 * backend; fp_pool_check runs after every operation and any failure, any
 * overlap of two live blocks, or any bad backend call aborts.
 *
 * Input layout:
 *   byte 0  options: bits 0-1 max_split (off, 24M, 32M, 64M); bits 2-3
 *           roundup divisions (off, 2, 4, mixed 4/8/2); bits 4-5 cap (none,
 *           max_reserved 64M, memory_fraction 0.5 of 256M, both with
 *           max_reserved 96M); bit 6 GC threshold 0.5; bit 7
 *           max_non_split_rounding 4M
 *   byte 1  the mock's capacity: 8 choices in bits 0-2; bit 3:
 *           expandable_segments with the mock's VMM ops (capacity then
 *           counts mapped pages, and every unmap must name a stamp no
 *           older than any recent free of the pages it unmaps); bit 4:
 *           small VMM ranges; bit 5: the record of requests, 32 events
 *           a generation (fp_pool_check checks it after every operation)
 *   then operations, one opcode byte each (low 3 bits) with arguments:
 *     0-3  alloc; 3 bytes: exponent, then 16 bits of mantissa (1 B..256 MiB);
 *          with bit 7 of the opcode, refusing blocks freed since a recent
 *          free (fp_pool_alloc_grant's unsafe_from)
 *     4-5  free; 1 byte: index into the live blocks
 *     6    empty_cache
 *     7    misc; 1 byte: invalid free inside a live block, double free,
 *          refuse the next reserve (ENOMEM or EIO), owns probe, stats
 *
 * Deferred reuse rests on one property, checked on every grant: its
 * freed_at is at least the stamp of every earlier free that overlaps it
 * (the model keeps the recent frees; a release forgets the freed ranges).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp_pool.h"

#define MIB       FP_MIB
#define SEG_ALIGN (2 * MIB)
#define MAX_LIVE  1024
#define MAX_SEGS  4096

typedef struct fmock {
    uint64_t next;
    size_t capacity, live_bytes;
    uint64_t addr[MAX_SEGS];
    size_t size[MAX_SEGS];
    size_t n;
    int fail_next, fail_err;
    unsigned eio_used; /* injected EIOs handed out      */
    unsigned injected; /* injected refusals handed out */
} fmock;

static fmock M;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_pool: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static int m_reserve(void *ctx, size_t size, uint64_t *addr)
{
    fmock *m = ctx;
    if (m->fail_next > 0) {
        m->fail_next--;
        m->injected++;
        if (m->fail_err == EIO)
            m->eio_used++;
        return m->fail_err;
    }
    if (size == 0 || size % SEG_ALIGN != 0)
        die("reserve of a size no rule makes", NULL);
    if (size > m->capacity || m->live_bytes > m->capacity - size || m->n == MAX_SEGS)
        return ENOMEM;
    uint64_t a = (m->next + SEG_ALIGN - 1) & ~(uint64_t)(SEG_ALIGN - 1);
    m->addr[m->n] = a;
    m->size[m->n] = size;
    m->n++;
    m->next = a + size;
    m->live_bytes += size;
    *addr = a;
    return 0;
}

static int m_release(void *ctx, uint64_t addr, size_t size)
{
    fmock *m = ctx;
    for (size_t i = 0; i < m->n; i++)
        if (m->addr[i] == addr) {
            if (m->size[i] != size)
                die("release with the wrong size", NULL);
            m->addr[i] = m->addr[m->n - 1];
            m->size[i] = m->size[m->n - 1];
            m->n--;
            m->live_bytes -= size;
            return 0;
        }
    die("release of no live reservation", NULL);
    return EINVAL;
}

/* ---- the VMM ops ---- */
static size_t m_gran(void *ctx)
{
    (void)ctx;
    return SEG_ALIGN;
}

static int m_reserve_va(void *ctx, size_t size, size_t align, uint64_t *addr)
{
    fmock *m = ctx;
    if (size == 0 || size % SEG_ALIGN || align % SEG_ALIGN)
        die("address reserve not in whole pages", NULL);
    uint64_t a = (m->next + SEG_ALIGN - 1) & ~(uint64_t)(SEG_ALIGN - 1);
    *addr = a;
    m->next = a + size;
    return 0;
}

static int m_free_va(void *ctx, uint64_t addr, size_t size)
{
    (void)ctx, (void)addr, (void)size;
    return 0;
}

static int m_map(void *ctx, uint64_t addr, size_t size)
{
    fmock *m = ctx;
    if (addr % SEG_ALIGN || size == 0 || size % SEG_ALIGN)
        die("map not in whole pages", NULL);
    if (m->fail_next > 0) {
        m->fail_next--;
        m->injected++;
        if (m->fail_err == EIO)
            m->eio_used++;
        return m->fail_err;
    }
    if (size > m->capacity || m->live_bytes > m->capacity - size)
        return ENOMEM;
    m->live_bytes += size;
    return 0;
}

static int m_unmap(void *ctx, uint64_t addr, size_t size, uint64_t freed_at);

static int m_sync(void *ctx)
{
    (void)ctx;
    return 0;
}

static void check(fp_pool *p)
{
    char msg[512];
    msg[0] = 0;
    if (fp_pool_check(p, msg, sizeof msg) != 0)
        die("fp_pool_check", msg);
}

typedef struct blk {
    uint64_t addr;
    size_t req, len; /* len: the rounded size, a lower bound of the block */
} blk;

static blk L[MAX_LIVE];
static size_t NL;
#define NRECENT 64
typedef struct freed {
    uint64_t addr, len, stamp;
} freed;
static freed R[NRECENT]; /* the last frees, a ring */
static size_t NR;        /* frees recorded (R[NR % NRECENT] is next) */
static uint64_t last_freed;

static void opts_from(uint8_t b, fp_pool_opts *o)
{
    static const size_t ms[4] = {SIZE_MAX, 24 * MIB, 32 * MIB, 64 * MIB};
    fp_pool_opts_default(o);
    o->max_split_size = ms[b & 3];
    for (int i = 0; i < FP_ROUNDUP_INTERVALS; i++) {
        switch ((b >> 2) & 3) {
        case 1: o->roundup_divisions[i] = 2; break;
        case 2: o->roundup_divisions[i] = 4; break;
        case 3: o->roundup_divisions[i] = i == 0 ? 4 : i <= 5 ? 8 : 2; break;
        default: break;
        }
    }
    switch ((b >> 4) & 3) {
    case 1: o->max_reserved = 64 * MIB; break;
    case 2:
        o->memory_fraction = 0.5;
        o->device_total = 256 * MIB;
        break;
    case 3:
        o->max_reserved = 96 * MIB;
        o->memory_fraction = 0.5;
        o->device_total = 256 * MIB;
        break;
    default: break;
    }
    if (b & 0x40)
        o->gc_threshold = 0.5;
    if (b & 0x80)
        o->max_non_split_rounding = 4 * MIB;
}

static void seg_cb(void *ud, uint64_t addr, size_t size, int small, const fp_block_info *b,
                   size_t n)
{
    (void)addr;
    (void)size;
    (void)small;
    if (n == 1 && b[0].state == 0)
        *(int *)ud = 1;
}

/* An ENOMEM must be real: release-and-retry left no wholly free segment,
 * and the segment the request needs does not fit under the cap or in the
 * backend. */
static void oom_is_real(fp_pool *p, const fp_pool_opts *o, size_t size, int injected)
{
    int whole_free = 0;
    fp_pool_walk(p, seg_cb, &whole_free);
    check(p);
    if (whole_free)
        die("ENOMEM, but a wholly free segment is still cached", NULL);
    size_t cap = fp_pool_opts_cap(o), lim = M.capacity < cap ? M.capacity : cap;
    size_t seg = fp_pool_segment_size(fp_round_size(o, size));
    /* (an injected refusal may have met the last retry: the cap refused
     * the first try before the backend saw it) */
    if (!injected && M.n < MAX_SEGS && M.live_bytes <= lim && seg <= lim - M.live_bytes)
        die("ENOMEM, but the segment fits", NULL);
}

/* An unmap must come after the fence of every free of its pages. */
static int m_unmap(void *ctx, uint64_t addr, size_t size, uint64_t freed_at)
{
    fmock *m = ctx;
    if (addr % SEG_ALIGN || size == 0 || size % SEG_ALIGN || size > m->live_bytes)
        die("unmap not in whole mapped pages", NULL);
    size_t n = NR < NRECENT ? NR : NRECENT;
    for (size_t k = 0; k < n; k++)
        if (addr < R[k].addr + R[k].len && R[k].addr < addr + size && R[k].stamp > freed_at)
            die("an unmap names a stamp older than a free of its pages", NULL);
    m->live_bytes -= size;
    return 0;
}

/* The grant overlaps no recent free stamped later than its freed_at. */
static void grant_is_safe(const fp_grant *g, uint64_t unsafe_from)
{
    if (g->freed_at >= g->now)
        die("a grant freed at or after its own clock", NULL);
    if (g->freed_at != FP_NEVER_FREED && g->freed_at >= unsafe_from)
        die("a grant freed after unsafe_from", NULL);
    size_t n = NR < NRECENT ? NR : NRECENT;
    for (size_t k = 0; k < n; k++)
        if (g->addr < R[k].addr + R[k].len && R[k].addr < g->addr + g->size &&
            R[k].stamp > g->freed_at)
            die("a grant older than a free inside it", NULL);
}

/* A release hands memory back to the backend: forget what was freed. */
static void forget_frees_on_release(uint64_t rel0, fp_pool *p)
{
    fp_pool_stats s;
    fp_pool_get_stats(p, &s);
    if (s.num_release_calls != rel0)
        NR = 0;
}

/* unsafe: refuse blocks freed at or after a recent free's stamp; the
 * allocation may then be refused (EAGAIN) but never releases, retries or
 * counts an OOM. */
static void do_alloc(fp_pool *p, const fp_pool_opts *o, size_t size, bool unsafe)
{
    unsigned eio0 = M.eio_used, inj0 = M.injected;
    uint64_t from = unsafe && NR ? R[(NR - 1) % NRECENT].stamp : UINT64_MAX;
    fp_pool_stats before;
    fp_pool_get_stats(p, &before);
    fp_grant g = {0};
    int rc = fp_pool_alloc_grant(p, size, from, &g);
    check(p);
    forget_frees_on_release(before.num_release_calls, p);
    if (from != UINT64_MAX && rc == EAGAIN) {
        fp_pool_stats after;
        fp_pool_get_stats(p, &after);
        uint64_t released = after.num_release_calls - before.num_release_calls;
        uint64_t collected = after.num_gc_releases - before.num_gc_releases;
        if (after.num_ooms != before.num_ooms ||
            after.num_alloc_retries != before.num_alloc_retries || released != collected)
            die("a refused grant released, retried or counted an OOM", NULL);
        return;
    }
    if (rc == ENOMEM) {
        if (!o->expandable_segments) /* with pages, the checker stands in */
            oom_is_real(p, o, size, M.injected != inj0);
        return;
    }
    if (rc == EIO && M.eio_used > eio0)
        return;
    if (rc != 0)
        die("alloc failed with an unexpected error", NULL);
    grant_is_safe(&g, from);
    uint64_t a = g.addr;
    size_t len = fp_round_size(o, size);
    if (g.size < len)
        die("a grant smaller than the rounded request", NULL);
    for (size_t i = 0; i < NL; i++)
        if (a < L[i].addr + L[i].len && L[i].addr < a + len)
            die("two live blocks overlap", NULL);
    size_t got = 0;
    if (fp_pool_owns(p, a, &got) != 1 || got != size)
        die("owns of a fresh block", NULL);
    check(p);
    if (NL == MAX_LIVE) { /* keep the model bounded */
        if (fp_pool_free(p, a) != 0)
            die("free of a fresh block", NULL);
        check(p);
        return;
    }
    L[NL++] = (blk){a, size, g.size};
}

static void do_free(fp_pool *p, size_t i)
{
    uint64_t stamp = 0;
    if (fp_pool_free_at(p, L[i].addr, &stamp, NULL) != 0)
        die("free of a live block", NULL);
    check(p);
    if (NR && stamp < R[(NR - 1) % NRECENT].stamp)
        die("a free stamped before an earlier one", NULL);
    R[NR++ % NRECENT] = (freed){L[i].addr, L[i].len, stamp};
    last_freed = L[i].addr;
    L[i] = L[--NL];
}

static void expect_invalid(fp_pool *p, uint64_t a)
{
    for (size_t i = 0; i < NL; i++)
        if (L[i].addr == a)
            return; /* live: not invalid */
    if (fp_pool_free(p, a) != EINVAL)
        die("invalid free accepted", NULL);
    check(p);
}

static void do_misc(fp_pool *p, uint8_t b)
{
    switch (b % 8) {
    case 0:
        if (NL > 0 && L[b % NL].len > 512)
            expect_invalid(p, L[b % NL].addr + 512);
        break;
    case 1:
        if (last_freed)
            expect_invalid(p, last_freed);
        break;
    case 2:
        M.fail_next = 1;
        M.fail_err = (b & 0x40) ? EIO : ENOMEM;
        break;
    case 3: {
        size_t sz = 0;
        if (NL > 0 && (fp_pool_owns(p, L[b % NL].addr, &sz) != 1 || sz != L[b % NL].req))
            die("owns of a live block", NULL);
        if (fp_pool_owns(p, 0x1000, &sz) != 0)
            die("owns of a foreign address", NULL);
        check(p);
        break;
    }
    case 4: {
        fp_pool_stats s;
        fp_pool_get_stats(p, &s);
        check(p);
        if (s.allocations[FP_ALL].current != (int64_t)NL)
            die("allocations != live blocks", NULL);
        if (s.reserved_bytes[FP_ALL].current != (int64_t)M.live_bytes)
            die("reserved != the backend's bytes", NULL);
        if ((size_t)s.reserved_bytes[FP_ALL].current > fp_pool_opts_cap(fp_pool_get_opts(p)))
            die("reserved over the cap", NULL);
        break;
    }
    default: expect_invalid(p, UINT64_MAX - b); break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t caps[8] = {SIZE_MAX,  24 * MIB,  48 * MIB,  64 * MIB,
                                   128 * MIB, 256 * MIB, 512 * MIB, 1024 * MIB};
    if (size < 2)
        return 0;
    fp_pool_opts o;
    opts_from(data[0], &o);
    memset(&M, 0, sizeof M);
    M.next = 0x7f0000000000ull;
    M.capacity = caps[data[1] & 7];
    NL = 0;
    NR = 0;
    last_freed = 0;
    fp_backend be = {.ctx = &M, .reserve = m_reserve, .release = m_release, .synchronize = m_sync};
    if (data[1] & 32)
        o.record_bytes = 64 * 16; /* the record: 32 events a generation, so it turns over */
    if (data[1] & 8) {
        o.expandable_segments = 1;
        o.vmm_reserve = (data[1] & 16) ? 64 * MIB : 0; /* small ranges fill up */
        be.granularity = m_gran, be.reserve_va = m_reserve_va, be.free_va = m_free_va;
        be.map = m_map, be.unmap = m_unmap;
    }
    fp_pool *p = NULL;
    if (fp_pool_create(&o, &be, &p) != 0 || !p)
        die("fp_pool_create", NULL);
    check(p);

    size_t i = 2;
    while (i < size) {
        uint8_t op = data[i++];
        switch (op & 7) {
        case 0:
        case 1:
        case 2:
        case 3: {
            if (i + 3 > size)
                break;
            unsigned e = data[i] % 28;
            uint32_t mant = (uint32_t)data[i + 1] << 8 | data[i + 2];
            i += 3;
            size_t s = ((size_t)1 << e) + (size_t)(((uint64_t)mant << e) >> 16);
            do_alloc(p, &o, s, op & 0x80);
            break;
        }
        case 4:
        case 5:
            if (i < size && NL > 0)
                do_free(p, data[i] % NL);
            i++;
            break;
        case 6:
            if (fp_pool_empty_cache(p) != 0)
                die("empty_cache", NULL);
            check(p);
            NR = 0; /* the released ranges may come back as new segments */
            break;
        default:
            if (i < size)
                do_misc(p, data[i]);
            i++;
            break;
        }
    }

    M.fail_next = 0;
    while (NL > 0)
        do_free(p, NL - 1);
    if (fp_pool_empty_cache(p) != 0)
        die("empty_cache", NULL);
    check(p);
    fp_pool_stats s;
    fp_pool_get_stats(p, &s);
    if (s.allocations[FP_ALL].current != 0 || s.requested_bytes[FP_ALL].current != 0 ||
        s.reserved_bytes[FP_ALL].current != 0 || M.n != 0)
        die("the pool is not empty after freeing everything", NULL);
    fp_pool_destroy(p, 0);
    if (M.n != 0)
        die("destroy left reservations", NULL);
    return 0;
}
