/* test_shim_oom.c - the OOM message of the shim, on the simulated device
 * with a small capacity: stderr is captured (a temp file dup2'd over fd
 * 2) around the failing cuMemAlloc_v2, which must return
 * CUDA_ERROR_OUT_OF_MEMORY and write "fragpool: CUDA out of memory. Tried
 * to allocate ...", "fragpool: cause: ...", then the fix a replay of the
 * run proves, "fragpool: fix: ..." (docs/summary.md, docs/advice.md).
 *
 * Each case runs in a fresh context (so a fresh pool) on a device whose
 * capacity is set before the context exists:
 *  - exhaustion: 4 live blocks of 24 MiB on a 100 MiB device; the fifth
 *    needs a 24 MiB segment and 4 MiB are free -> "cause: exhaustion",
 *    "fix: no setting fits" (every setting needs 120 MiB);
 *  - fragmentation: 20 blocks of 8 MiB fill a 200 MiB device (two per 20
 *    MiB segment, 4 MiB left in each); every other block is freed, so 120
 *    MiB sit idle in pieces of at most 8 MiB, in segments that cannot be
 *    released; a request of 25 MiB + 512 B fits no free block, no whole
 *    segment can be released and the device is full -> "cause:
 *    fragmentation" and "fix: FRAGPOOL_CONF=...expandable_segments:True",
 *    which a replay proves fits in 160 MiB;
 *  - recovery: once the rest is freed, the same requests succeed (the
 *    pool releases its free segments and retries) and write no message;
 *  - cap (run as "test_shim_oom cap" with FRAGPOOL_CONF=...,
 *    max_reserved_mb:64): three 20 MiB segments are reserved; the fourth
 *    would pass the cap -> "cause: the cap refused" and "fix:
 *    FRAGPOOL_CONF=...max_reserved_mb:80" (nothing fits under the cap, the
 *    settings in force fit in 80 MiB).
 * Those run on classic segments (expandable_segments:False).  Under the
 * default, virtual-memory segments ("test_shim_oom vmm"):
 *  - exhaustion_vmm: the same 4 blocks hold 96 MiB of pages; the fifth
 *    needs 24 MiB more -> "cause: exhaustion", "fix: no setting fits";
 *  - fragmentation_served: the same 20 blocks of 8 MiB hold 160 MiB of
 *    pages; with every other freed, the request of 25 MiB + 512 B that
 *    fails on classic segments is served: idle pages are unmapped and
 *    mapped where it lands, and no message is written;
 *  - too_large_vmm: on 16 GiB with 6 GiB live, requests of 20 GiB, 1 TiB
 *    (over the device) and 12 GiB (over what is free) fail and leave the
 *    device's peak at 6 GiB: nothing is mapped for a request that cannot
 *    complete.
 * The default free_policy (deferred) is in force: the frees are pending
 * when the failing request comes, and must be reclaimed before the OOM.
 */
#include "shim_test.h"
#include "fpsim.h"
#include "fp_report.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static CUdevice dev;

/* ---- stderr capture ------------------------------------------------------ */

typedef struct capture {
    int saved, fd;
} capture;

static void capture_begin(capture *c)
{
    char name[] = "/tmp/fp-oom-stderr-XXXXXX";
    c->fd = mkstemp(name);
    assert_true(c->fd >= 0);
    unlink(name);
    fflush(stderr);
    c->saved = dup(2);
    assert_true(c->saved >= 0);
    assert_int_equal(dup2(c->fd, 2), 2);
}

/* Restores stderr; returns what was written (caller frees). */
static char *capture_end(capture *c)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    off_t n = lseek(c->fd, 0, SEEK_END);
    assert_true(n >= 0);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(pread(c->fd, s, (size_t)n, 0), n);
    s[n] = '\0';
    close(c->fd);
    return s;
}

/* ---- the device and its contexts ------------------------------------------- */

static unsigned long long in_use(void)
{
    fpsim_counts c;
    assert_int_equal(fpsim_stats(0, &c), 0);
    return c.bytes_in_use;
}

/* A fresh context (a fresh pool) on a device of capacity bytes. */
static CUcontext fresh_context(size_t capacity)
{
    assert_int_equal(in_use(), 0); /* earlier cases gave everything back */
    assert_int_equal(fpsim_set_capacity(0, capacity), 0);
    CUcontext ctx;
    CU(cuCtxCreate_v2(&ctx, 0, dev));
    return ctx;
}

static void drop_context(CUcontext ctx)
{
    CU(cuCtxDestroy_v2(ctx));
    assert_int_equal(in_use(), 0);
    assert_int_equal(fpsim_set_capacity(0, (size_t)16 << 30), 0);
}

static void fill_check(CUdeviceptr p, size_t n, unsigned char v)
{
    unsigned char back[4096];
    CU(cuMemsetD8_v2(p, v, n));
    CU(cuMemcpyDtoH_v2(back, p + n - sizeof back, sizeof back));
    for (size_t i = 0; i < sizeof back; i++)
        assert_int_equal(back[i], v);
}

/* The failing call: OOM, the message's two lines, then the fix; the whole
 * text returned (caller frees). */
static char *alloc_expect_oom(size_t size)
{
    capture c;
    CUdeviceptr p = 0;
    capture_begin(&c);
    CUresult r = cuMemAlloc_v2(&p, size);
    char *msg = capture_end(&c);
    if (r != CUDA_ERROR_OUT_OF_MEMORY)
        fail_msg("cuMemAlloc_v2(%zu) returned %d, want CUDA_ERROR_OUT_OF_MEMORY; stderr:\n%s", size,
                 (int)r, msg);
    printf("%s", msg);
    const char *l1 = msg, *l2 = strchr(l1, '\n'), *l3;
    assert_non_null(l2);
    l3 = strchr(++l2, '\n');
    assert_non_null(l3);
    l3++;
    assert_memory_equal(l1, "fragpool: CUDA out of memory. Tried to allocate ", 48);
    assert_memory_equal(l2, "fragpool: cause: ", 17);
    assert_memory_equal(l3, "fragpool: fix: ", 15);
    return msg;
}

static CUdeviceptr alloc_quiet(size_t size)
{
    capture c;
    CUdeviceptr p = 0;
    capture_begin(&c);
    CUresult r = cuMemAlloc_v2(&p, size);
    char *msg = capture_end(&c);
    if (r != CUDA_SUCCESS)
        fail_msg("cuMemAlloc_v2(%zu) returned %d; stderr:\n%s", size, (int)r, msg);
    assert_string_equal(msg, "");
    free(msg);
    return p;
}

static void has(const char *msg, const char *part)
{
    if (!strstr(msg, part))
        fail_msg("the OOM message lacks \"%s\":\n%s", part, msg);
}

/* ---- cases --------------------------------------------------------------------- */

static void exhaustion(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context(100 * MiB);
    CUdeviceptr p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = alloc_quiet(24 * MiB);
        fill_check(p[i], 24 * MiB, (unsigned char)(i + 1));
    }
    assert_int_equal(in_use(), 96 * MiB);
    char *msg = alloc_expect_oom(24 * MiB);
    has(msg, "fragpool: CUDA out of memory. Tried to allocate 24.00 MiB (GPU 0; "
             "100.00 MiB total capacity; 96.00 MiB allocated; 96.00 MiB reserved by fragpool, "
             "of which 0 bytes idle in cached blocks; 4.00 MiB free on the device; "
             "largest free block 0 bytes)\n");
    has(msg, "\nfragpool: cause: exhaustion");
    has(msg, "live allocations hold 96.00 MiB of 100.00 MiB; the device has 4.00 MiB free\n");
    has(msg, "\nfragpool: fix: no setting fits \xe2\x80\x94 the peak live bytes are "
             "120 MiB (each request rounded), and the leanest setting (");
    has(msg, ") needs 120 MiB, 20 MiB more than the 100 MiB it had: too little memory for "
             "this run under any setting");
    has(msg, "\nfragpool: advice: replayed ");
    free(msg);

    /* Recovery: a freed block (pending first) serves the same request. */
    CU(cuMemFree_v2(p[2]));
    p[2] = alloc_quiet(24 * MiB);
    fill_check(p[2], 24 * MiB, 9);
    for (int i = 0; i < 4; i++)
        CU(cuMemFree_v2(p[i]));
    drop_context(ctx);
}

enum { NFRAG = 20 };
#define FRAG_BLOCK   (8 * MiB)
#define FRAG_REQUEST (25 * MiB + 512)

/* NFRAG blocks of FRAG_BLOCK, block i filled with i + 1. */
static void alloc_marked(CUdeviceptr p[NFRAG])
{
    for (int i = 0; i < NFRAG; i++) {
        p[i] = alloc_quiet(FRAG_BLOCK);
        fill_check(p[i], FRAG_BLOCK, (unsigned char)(i + 1));
    }
}

/* The odd blocks, still live, kept their bytes. */
static void check_survivors(const CUdeviceptr p[NFRAG])
{
    for (int i = 1; i < NFRAG; i += 2) {
        unsigned char b;
        CU(cuMemcpyDtoH_v2(&b, p[i] + FRAG_BLOCK - 1, 1));
        assert_int_equal(b, i + 1);
    }
}

static void fragmentation_then_recovery(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context(200 * MiB);
    CUdeviceptr p[NFRAG];
    alloc_marked(p);
    assert_int_equal(in_use(), 200 * MiB); /* ten 20 MiB segments: the device is full */
    for (int i = 0; i < NFRAG; i += 2)
        CU(cuMemFree_v2(p[i]));

    char *msg = alloc_expect_oom(FRAG_REQUEST);
    has(msg, "Tried to allocate 25.00 MiB (GPU 0; 200.00 MiB total capacity; "
             "80.00 MiB allocated; 200.00 MiB reserved by fragpool, of which 120.00 MiB idle "
             "in cached blocks; 0 bytes free on the device; largest free block 8.00 MiB)\n");
    has(msg, "\nfragpool: cause: fragmentation");
    has(msg, "120.00 MiB idle in cached blocks would cover the 25.00 MiB request, but the "
             "largest free block is 8.00 MiB; 120.00 MiB of it sits in partly used segments, "
             "which cannot be released\n");
    /* a replay of the run proves virtual-memory segments fit: the 20
     * blocks of 8 MiB need 160 MiB of pages, where 20 MiB segments strand
     * the freed halves */
    has(msg, "\nfragpool: fix: FRAGPOOL_CONF=debug_check:1,summary:off,expandable_segments:True "
             "\xe2\x80\x94 a replay of this run up to this failure fits in 160 MiB; it had "
             "200 MiB (PyTorch: "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)\n");
    free(msg);

    check_survivors(p); /* the blocks still live kept their contents */

    /* Recovery: with the rest freed, the same request succeeds. */
    for (int i = 1; i < NFRAG; i += 2)
        CU(cuMemFree_v2(p[i]));
    CUdeviceptr q = alloc_quiet(FRAG_REQUEST);
    fill_check(q, FRAG_REQUEST, 0x5a);
    CU(cuMemFree_v2(q));
    /* ... and so does the request that was refused before, many times. */
    for (int i = 0; i < NFRAG / 2; i++)
        p[i] = alloc_quiet(FRAG_BLOCK);
    for (int i = 0; i < NFRAG / 2; i++)
        CU(cuMemFree_v2(p[i]));
    drop_context(ctx);
}

static void exhaustion_vmm(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context(100 * MiB);
    CUdeviceptr p[4];
    for (int i = 0; i < 4; i++)
        p[i] = alloc_quiet(24 * MiB);
    assert_int_equal(in_use(), 96 * MiB);
    char *msg = alloc_expect_oom(24 * MiB);
    has(msg, "Tried to allocate 24.00 MiB (GPU 0; 100.00 MiB total capacity; 96.00 MiB "
             "allocated; 96.00 MiB reserved by fragpool, of which 0 bytes idle in cached blocks; "
             "4.00 MiB free on the device; largest free block 0 bytes)\n");
    has(msg, "\nfragpool: cause: exhaustion");
    has(msg, "\nfragpool: fix: no setting fits");
    free(msg);
    CU(cuMemFree_v2(p[2]));
    p[2] = alloc_quiet(24 * MiB);
    for (int i = 0; i < 4; i++)
        CU(cuMemFree_v2(p[i]));
    drop_context(ctx);
}

static void fragmentation_served(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context(200 * MiB);
    CUdeviceptr p[NFRAG];
    alloc_marked(p);
    assert_int_equal(in_use(), 160 * MiB); /* pages, not 20 MiB segments */
    for (int i = 0; i < NFRAG; i += 2)
        CU(cuMemFree_v2(p[i]));
    CUdeviceptr q = alloc_quiet(FRAG_REQUEST);
    fill_check(q, FRAG_REQUEST, 0x5a);
    check_survivors(p);
    assert_true(in_use() <= 200 * MiB);
    CU(cuMemFree_v2(q));
    for (int i = 1; i < NFRAG; i += 2)
        CU(cuMemFree_v2(p[i]));
    drop_context(ctx);
}

static unsigned long long device_peak(void)
{
    fpsim_counts c;
    assert_int_equal(fpsim_stats(0, &c), 0);
    return c.bytes_peak;
}

/* A request the device cannot hold maps nothing: over its total (20 GiB,
 * 1 TiB on 16 GiB) it is refused up front; within the total but over
 * what is free (12 GiB with 6 GiB live), no page is mapped, the headroom
 * included.  The device's peak stays where it was. */
static void too_large_vmm(void **state)
{
    (void)state;
    CUcontext ctx = fresh_context((size_t)16 << 30);
    CUdeviceptr live = alloc_quiet((size_t)6 << 30);
    assert_int_equal(fpsim_reset_stats(0), 0);
    unsigned long long peak = device_peak();
    assert_int_equal(peak, (size_t)6 << 30);
    const size_t sizes[] = {(size_t)20 << 30, (size_t)1 << 40, (size_t)12 << 30};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        free(alloc_expect_oom(sizes[i]));
        if (device_peak() != peak)
            fail_msg("a request of %zu bytes took the device's peak from %llu to %llu", sizes[i],
                     peak, device_peak());
    }
    CUdeviceptr p = alloc_quiet((size_t)8 << 30); /* what fits still fits */
    CU(cuMemFree_v2(p));
    CU(cuMemFree_v2(live));
    drop_context(ctx);
}

static void cap_refuses(void **state)
{
    (void)state;
    const char *conf = getenv("FRAGPOOL_CONF");
    assert_non_null(conf);
    assert_non_null(strstr(conf, "max_reserved_mb:64"));
    CUcontext ctx = fresh_context((size_t)16 << 30);
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = alloc_quiet(20 * MiB);
        fill_check(p[i], 20 * MiB, (unsigned char)(i + 1));
    }
    char *msg = alloc_expect_oom(20 * MiB);
    has(msg, "Tried to allocate 20.00 MiB (GPU 0; 16.00 GiB total capacity; 60.00 MiB "
             "allocated; 60.00 MiB reserved by fragpool, of which 0 bytes idle in cached blocks; ");
    has(msg, "\nfragpool: cause: the cap refused");
    has(msg, "reserved 60.00 MiB plus the 20.00 MiB segment it needed would pass the cap "
             "64.00 MiB (max_reserved_mb:64)\n");
    has(msg, "\nfragpool: fix: FRAGPOOL_CONF=debug_check:1,summary:off,expandable_segments:0,"
             "max_reserved_mb:80 "
             "\xe2\x80\x94 the cap binds: a replay of this run up to this failure under the "
             "settings in force fits in 80 MiB, over the cap's 64 MiB, and no setting fits under "
             "the cap; the "
             "device had 16,384 MiB\n");
    free(msg);

    /* A request just over 1 MiB needs a 20 MiB large-pool segment too:
     * refused by the cap as well.  After a free, 20 MiB fit again. */
    msg = alloc_expect_oom(1 * MiB + 1);
    has(msg, "\nfragpool: cause: the cap refused");
    free(msg);
    CU(cuMemFree_v2(p[1]));
    p[1] = alloc_quiet(20 * MiB);
    fill_check(p[1], 20 * MiB, 7);
    for (int i = 0; i < 3; i++)
        CU(cuMemFree_v2(p[i]));
    drop_context(ctx);
}

static int setup(void **state)
{
    (void)state;
    if (cuInit(0) || cuDeviceGet(&dev, 0))
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest normal[] = {
        cmocka_unit_test(exhaustion),
        cmocka_unit_test(fragmentation_then_recovery),
    };
    const struct CMUnitTest capped[] = {
        cmocka_unit_test(cap_refuses),
    };
    const struct CMUnitTest vmm[] = {
        cmocka_unit_test(exhaustion_vmm),
        cmocka_unit_test(fragmentation_served),
        cmocka_unit_test(too_large_vmm),
    };
    if (argc > 1 && strcmp(argv[1], "cap") == 0)
        return cmocka_run_group_tests_name("cap", capped, setup, NULL);
    if (argc > 1 && strcmp(argv[1], "vmm") == 0)
        return cmocka_run_group_tests_name("vmm", vmm, setup, NULL);
    return cmocka_run_group_tests(normal, setup, NULL);
}
