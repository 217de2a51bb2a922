/* test_shim_ipc.c - IPC on pooled memory, two processes on the simulated
 * device.
 *
 * The exporter (this test, under fragpool) allocates blocks that fragpool
 * places at several offsets of its segments (offset 0 and inside, in the
 * large and the small pool), fills each with its own pattern and exports
 * each.  An importer (this program again, "import FILE", exec'd) opens every
 * handle, compares every word with the pattern, writes a mark into the last
 * word and closes it; the exporter then sees the mark.  The importer runs
 * twice: under fragpool, and without it (LD_PRELOAD dropped).
 *
 * What must hold, in every configuration: no importer ever reads a wrong
 * word.  Per FRAGPOOL_CONF:
 *   ipc_export:fragpool  (the default) every export succeeds; the importer
 *                        under fragpool reads every block; the one without
 *                        fragpool reads the blocks at offset 0 and gets an
 *                        error for the others (they carry fragpool handles);
 *   ipc_export:refuse    exports at offset 0 succeed and both importers read
 *                        them; the others fail at export with
 *                        CUDA_ERROR_NOT_SUPPORTED and a line naming the keys;
 *   own_segment_mb:1     as refuse, but blocks of 1 MiB or more are
 *                        segments of their own: exported, read by both;
 *   expandable_segments:True  every block is virtual memory, which has no
 *                        driver handle: with fragpool handles, the importer
 *                        under fragpool maps each block's granules (passed
 *                        over the exporter's channel) and reads every block,
 *                        the one without fragpool gets errors; with refuse
 *                        every export fails.
 * Also: an interior pointer exports its block (as the driver exports its
 * allocation), and cuMemGetAddressRange of an interior pointer gives the
 * block, so programs that export the range's start and add the offset
 * themselves (UCX, vLLM) read the right bytes; in the importer under
 * fragpool the range of an opened pointer is the exporter's block; a
 * freed block's fragpool handle is refused; two opens need two closes;
 * the importer's summary counts its exports and opens.  A forged fragpool
 * handle (naming a FIFO with no writer, a regular file, /dev/zero, or a
 * memfd that only carries the registry's name) is refused with
 * CUDA_ERROR_INVALID_VALUE at once, as the driver refuses bytes it never
 * made: nothing blocks (alarm) and nothing is read.
 */
#include "shim_test.h"
#include "child_run.h"
#include "fpsim.h"
#include <stdlib.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB  ((size_t)1 << 20)
#define NBLK 10
#define MARK 0xC0DE0000u

static CUcontext ctx;
static int mode_fragpool, mode_vmm, own_mb;

/* One handle for the importer. */
typedef struct rec {
    int k;         /* index, for the importer's lines             */
    int fragpool;  /* a fragpool handle (else the driver's)       */
    uint64_t size; /* bytes to check from ptr + add               */
    uint64_t add;  /* the importer adds this to what it opens     */
    uint32_t seed;
    CUipcMemHandle h;
} rec;

static uint32_t word(uint32_t seed, size_t i)
{
    return seed * 2654435761u ^ (uint32_t)i;
}

static void fill(CUdeviceptr p, size_t n, uint32_t seed)
{
    uint32_t *v = malloc(n);
    assert_non_null(v);
    for (size_t i = 0; i < n / 4; i++)
        v[i] = word(seed, i);
    CU(cuMemcpyHtoD_v2(p, v, n));
    free(v);
}

/* ---- the importer ------------------------------------------------------------ */

/* Checks one handle; prints "OK k", "BAD k wrong" or "ERR k code". */
static void import_one(const rec *r)
{
    CUdeviceptr p = 0;
    CUresult e = cuIpcOpenMemHandle_v2(&p, r->h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (e != CUDA_SUCCESS) {
        printf("ERR %d %d\n", r->k, (int)e);
        return;
    }
    size_t n = r->size / 4, bad = 0;
    uint32_t *v = malloc(r->size);
    if (!v || cuMemcpyDtoH_v2(v, p + r->add, r->size) != CUDA_SUCCESS) {
        printf("ERR %d copy\n", r->k);
        free(v);
        return;
    }
    for (size_t i = 0; i + 1 < n; i++)
        bad += v[i] != word(r->seed, i);
    uint32_t mark = MARK | (uint32_t)r->k;
    cuMemcpyHtoD_v2(p + r->add + r->size - 4, &mark, 4);
    free(v);
    CUdeviceptr rb = 0;
    size_t rs = 0;
    if (r->fragpool && getenv("FRAGPOOL_CONF") && /* under fragpool: the exporter's block */
        (cuMemGetAddressRange_v2(&rb, &rs, p + r->size / 2) != CUDA_SUCCESS || rb != p ||
         rs != r->size))
        printf("RANGE %d 0x%llx %zu\n", r->k, (unsigned long long)(rb - p), rs);
    e = cuIpcCloseMemHandle(p);
    if (bad)
        printf("BAD %d %zu\n", r->k, bad);
    else if (e != CUDA_SUCCESS)
        printf("ERR %d close %d\n", r->k, (int)e);
    else
        printf("OK %d\n", r->k);
}

/* Two opens of one handle give one pointer and need two closes. */
static void import_twice(const rec *r)
{
    CUdeviceptr a = 0, b = 0;
    if (cuIpcOpenMemHandle_v2(&a, r->h, 1) || cuIpcOpenMemHandle_v2(&b, r->h, 1)) {
        printf("TWICE ERR\n");
        return;
    }
    int ok = a == b && cuIpcCloseMemHandle(a) == CUDA_SUCCESS &&
             cuIpcCloseMemHandle(b) == CUDA_SUCCESS && cuIpcCloseMemHandle(b) != CUDA_SUCCESS;
    printf("TWICE %s\n", ok ? "OK" : "BAD");
}

/* The importer's own exports: a block at offset 0 and one after it. */
static void export_own(void)
{
    CUdeviceptr a, b;
    CUipcMemHandle h;
    if (cuMemAlloc_v2(&a, 4096) || cuMemAlloc_v2(&b, 4096))
        return;
    CUresult ea = cuIpcGetMemHandle(&h, a), eb = cuIpcGetMemHandle(&h, b);
    printf("OWN %d %d\n", (int)ea, (int)eb);
}

static int importer(const char *path, int twice)
{
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return 3;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 4;
    rec r;
    int first = 1;
    while (fread(&r, sizeof r, 1, f) == 1) {
        if (twice && first && r.fragpool == twice - 1)
            import_twice(&r), first = 0;
        import_one(&r);
    }
    fclose(f);
    export_own();
    fflush(stdout);
    return 0;
}

/* ---- the exporter ------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    const char *conf = getenv("FRAGPOOL_CONF");
    mode_fragpool = !(conf && strstr(conf, "ipc_export:refuse"));
    mode_vmm = !fp_test_classic();
    const char *o = conf ? strstr(conf, "own_segment_mb:") : NULL;
    own_mb = o ? atoi(o + strlen("own_segment_mb:")) : 0;
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return -1;
    return 0;
}

/* p's offset in the simulated driver's own allocation (the pool segment,
 * or for virtual memory its granule's mapping): fragpool's range queries
 * answer with the block, so the test asks the simulated driver. */
static uint64_t seg_offset(CUdeviceptr p)
{
    unsigned long long base = 0;
    size_t size = 0;
    assert_int_equal(fpsim_range(p, &base, &size), 0);
    return p - base;
}

/* Runs the importer on the n records, with or without fragpool; its
 * output and its summary (JSON, under fragpool) in memory held. */
static char *run_importer(const rec *v, size_t n, int with_fragpool, int twice, char **summary)
{
    char path[128], out_path[128], sum_path[128], conf[512], twice_s[16];
    snprintf(path, sizeof path, "/tmp/fp-ipc-%d-recs", (int)getpid());
    snprintf(sum_path, sizeof sum_path, "/tmp/fp-ipc-%d-sum.json", (int)getpid());
    snprintf(out_path, sizeof out_path, "/tmp/fp-ipc-%d-out-", (int)getpid());
    snprintf(twice_s, sizeof twice_s, "%d", twice);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(v, sizeof *v, n, f), n);
    fclose(f);
    unlink(sum_path);
    char own[32] = "";
    if (own_mb)
        snprintf(own, sizeof own, ",own_segment_mb:%d", own_mb);
    snprintf(conf, sizeof conf,
             "FRAGPOOL_CONF=debug_check:1,ipc_export:%s%s%s,"
             "summary_format:json,summary:%s",
             mode_fragpool ? "fragpool" : "refuse", mode_vmm ? "" : ",expandable_segments:False",
             own, sum_path);
    const char *drop_fp[] = {"LD_PRELOAD=", "FRAGPOOL_CONF=", NULL};
    const char *drop_conf[] = {"FRAGPOOL_CONF=", NULL};
    const char *add[] = {conf, NULL};
    char **env = fp_t_hold(fp_t_child_env(with_fragpool ? drop_conf : drop_fp, add));
    char *argv[] = {"test_shim_ipc", "import", path, twice_s, NULL};
    int out = fp_t_temp_fd(out_path), st = 0;
    pid_t pid = fp_t_spawn_wait("/proc/self/exe", argv, env, out, -1, 60, &st);
    assert_true(pid > 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char *text = fp_t_slurp_fd(out);
    close(out);
    unlink(path);
    *summary = with_fragpool ? fp_t_slurp_path(sum_path) : NULL;
    unlink(sum_path);
    return text;
}

static int has_line(const char *text, const char *fmt, int k)
{
    char line[64];
    snprintf(line, sizeof line, fmt, k);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && p[strlen(line)] == '\n')
            return 1;
    return 0;
}

/* Whether a block of n bytes is a driver allocation of its own. */
static int own_segment(size_t n)
{
    return own_mb && n >= (size_t)own_mb * MIB;
}

/* Whether the export of a block at off of size n must succeed, in this
 * mode. */
static int export_expected(uint64_t off, size_t n)
{
    if (own_segment(n) || mode_fragpool)
        return 1;
    return !mode_vmm && off == 0;
}

/* Whether it gives a fragpool handle (else the driver's). */
static int fragpool_expected(uint64_t off, size_t n)
{
    return !own_segment(n) && (mode_vmm || off != 0);
}

/* Exports p; returns 1 when exported (and fills r), 0 when refused. */
static int export_block(CUdeviceptr p, size_t n, int k, rec *r)
{
    int err = fp_t_temp_fd("/tmp/fp-ipc-err-"), saved = dup(2);
    fflush(stderr);
    dup2(err, 2);
    CUresult e = cuIpcGetMemHandle(&r->h, p);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char *msg = fp_t_slurp_fd(err);
    close(err);
    uint64_t off = seg_offset(p);
    if (!export_expected(off, n)) {
        assert_int_equal(e, CUDA_ERROR_NOT_SUPPORTED);
        assert_non_null(strstr(msg, "fragpool: cuIpcGetMemHandle("));
        assert_non_null(strstr(msg, mode_vmm ? "own_segment_mb" : "ipc_export"));
        assert_int_equal(fp_t_count_of(msg, "\n"), 1);
        return 0;
    }
    CU(e);
    assert_string_equal(msg, "");
    r->k = k;
    r->fragpool = memcmp(r->h.reserved, "fragpool", 8) == 0;
    assert_int_equal(r->fragpool, fragpool_expected(off, n));
    r->size = n;
    r->add = 0;
    return 1;
}

typedef struct layout {
    CUdeviceptr p[NBLK];
    size_t n[NBLK];
    uint64_t off[NBLK];
} layout;

/* Large-pool blocks of 3 MiB (one 20 MiB segment: offsets 0, 3, 6, 9 MiB),
 * small-pool blocks of 96 KiB and 512 B, and one of 12 MiB. */
static void allocate(layout *l)
{
    static const size_t sizes[NBLK] = {3 * MIB,  3 * MIB,  3 * MIB, 3 * MIB,  96 << 10,
                                       96 << 10, 96 << 10, 512,     12 * MIB, 3 * MIB};
    for (int k = 0; k < NBLK; k++) {
        l->n[k] = sizes[k];
        CU(cuMemAlloc_v2(&l->p[k], sizes[k]));
        fill(l->p[k], sizes[k], 1000u + (uint32_t)k);
        l->off[k] = seg_offset(l->p[k]);
    }
}

static int count_offsets(const layout *l, int nonzero)
{
    int c = 0;
    for (int k = 0; k < NBLK; k++)
        c += nonzero ? l->off[k] != 0 : l->off[k] == 0;
    return c;
}

static void check_importer(const char *out, const rec *v, size_t n, int with_fragpool)
{
    assert_null(strstr(out, "BAD")); /* never a wrong word */
    for (size_t i = 0; i < n; i++) {
        int readable = with_fragpool || !v[i].fragpool;
        if (!has_line(out, readable ? "OK %d" : "ERR %d 1", v[i].k))
            fail_msg("importer (%s fragpool), handle %d (%s): want %s; got:\n%s",
                     with_fragpool ? "under" : "without", v[i].k,
                     v[i].fragpool ? "fragpool handle" : "driver handle", readable ? "OK" : "ERR 1",
                     out);
    }
}

static void check_marks(const layout *l, const rec *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t w = 0;
        int k = v[i].k;
        CU(cuMemcpyDtoH_v2(&w, l->p[k] + l->n[k] - 4, 4));
        assert_int_equal(w, MARK | (uint32_t)k);
    }
}

static void offsets(void **state)
{
    (void)state;
    layout l;
    rec v[NBLK];
    size_t nv = 0;
    allocate(&l);
    if (!mode_vmm) {
        assert_true(count_offsets(&l, 0) >= 2);
        assert_true(count_offsets(&l, 1) >= (own_mb ? 3 : 6));
    }
    for (int k = 0; k < NBLK; k++) {
        v[nv].seed = 1000u + (uint32_t)k;
        nv += (size_t)export_block(l.p[k], l.n[k], k, &v[nv]);
    }
    char *sum;
    for (int with = 1; with >= 0; with--) {
        const char *out = run_importer(v, nv, with, with ? 1 + mode_fragpool : 0, &sum);
        check_importer(out, v, nv, with);
        check_marks(&l, v, nv);
        assert_null(strstr(out, "RANGE"));
        if (with) {
            if (nv)
                assert_non_null(strstr(out, "TWICE OK\n"));
            assert_true(strstr(out, mode_fragpool ? "OWN 0 0\n"
                                    : mode_vmm    ? "OWN 801 801\n"
                                                  : "OWN 0 801\n") != NULL);
            assert_non_null(sum);
            char want[64];
            size_t twice = nv ? 2 : 0; /* import_twice's two opens and closes */
            snprintf(want, sizeof want, "\"opens\":%zu,", nv + twice);
            if (!strstr(sum, want))
                fail_msg("importer summary lacks %s: %s", want, sum);
            const char *own =
                mode_fragpool ? (mode_vmm ? "\"exports\":2,\"exports_fragpool\":2,\"refused\":0"
                                          : "\"exports\":2,\"exports_fragpool\":1,\"refused\":0")
                : mode_vmm    ? "\"exports\":0,\"exports_fragpool\":0,\"refused\":2"
                              : "\"exports\":1,\"exports_fragpool\":0,\"refused\":1";
            if (!strstr(sum, own))
                fail_msg("importer summary lacks %s: %s", own, sum);
            snprintf(want, sizeof want, "\"closes\":%zu,", nv + twice);
            assert_non_null(strstr(sum, want));
        }
    }
    for (int k = 0; k < NBLK; k++)
        CU(cuMemFree_v2(l.p[k]));
}

/* An interior pointer exports its block, and the range of an interior
 * pointer is the block: a program that exports the range's start and adds
 * the offset from it (UCX, vLLM) reads the right bytes, as one that
 * exports the pointer it was given (PyTorch). */
static void interior_and_range_start(void **state)
{
    (void)state;
    CUdeviceptr a, b, base = 0;
    size_t bn = 96 << 10, size = 0; /* the small pool: pooled in every mode */
    CU(cuMemAlloc_v2(&a, bn));
    CU(cuMemAlloc_v2(&b, bn));
    fill(b, bn, 77);
    CU(cuMemGetAddressRange_v2(&base, &size, b + 12345));
    assert_true(base == b && size == bn);
    rec v[2] = {{.k = 0, .seed = 77, .size = bn}, {.k = 1, .seed = 77, .size = bn}};
    if (!export_expected(seg_offset(b), bn)) {
        assert_int_equal(cuIpcGetMemHandle(&v[0].h, b + 12345), CUDA_ERROR_NOT_SUPPORTED);
    } else {
        CU(cuIpcGetMemHandle(&v[0].h, base));      /* from the range */
        CU(cuIpcGetMemHandle(&v[1].h, b + 12345)); /* inside b: b itself */
        for (int i = 0; i < 2; i++)
            v[i].fragpool = memcmp(v[i].h.reserved, "fragpool", 8) == 0;
        assert_int_equal(v[0].fragpool, fragpool_expected(seg_offset(b), bn));
        assert_int_equal(memcmp(&v[0].h, &v[1].h, sizeof v[0].h), 0);
        char *sum;
        for (int with = 1; with >= 0; with--) {
            const char *out = run_importer(v, 2, with, 0, &sum);
            check_importer(out, v, 2, with);
            assert_null(strstr(out, "RANGE"));
        }
    }
    CU(cuMemFree_v2(b));
    CU(cuMemFree_v2(a));
}

/* A freed block's handle is refused, never mapped onto what is there now;
 * the block that takes its place exports anew. */
static void freed_block(void **state)
{
    (void)state;
    if (!mode_fragpool)
        skip();
    CUdeviceptr keep[8], b = 0, b2;
    int nkeep = 0;
    while (nkeep < 8 && !b) { /* the first 3 MiB block with a fragpool handle */
        CU(cuMemAlloc_v2(&keep[nkeep], 3 * MIB));
        if (fragpool_expected(seg_offset(keep[nkeep]), 3 * MIB))
            b = keep[nkeep];
        else
            nkeep++;
    }
    assert_true(b != 0);
    fill(b, 3 * MIB, 5);
    rec v[1] = {{.k = 0, .fragpool = 1, .seed = 5, .size = 3 * MIB}};
    CU(cuIpcGetMemHandle(&v[0].h, b));
    assert_int_equal(memcmp(v[0].h.reserved, "fragpool", 8), 0);
    CU(cuMemFree_v2(b));
    CU(cuCtxSynchronize()); /* deferred reuse: b is reusable now */
    CU(cuMemAlloc_v2(&b2, 3 * MIB));
    fill(b2, 3 * MIB, 6);
    char *sum;
    const char *out = run_importer(v, 1, 1, 0, &sum);
    if (!has_line(out, "ERR %d 1", 0))
        fail_msg("a freed block opened: %s", out);
    if (b2 == b) { /* the same address, a new export */
        v[0].seed = 6;
        CU(cuIpcGetMemHandle(&v[0].h, b2));
        out = run_importer(v, 1, 1, 0, &sum);
        assert_true(has_line(out, "OK %d", 0));
    }
    CU(cuMemFree_v2(b2));
    for (int i = 0; i < nkeep; i++)
        CU(cuMemFree_v2(keep[i]));
}

/* Memory fragpool does not own goes to the driver untouched. */
static void not_pool_memory(void **state)
{
    (void)state;
    CUdeviceptr m;
    CUipcMemHandle h;
    CU(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    assert_int_equal(cuIpcGetMemHandle(&h, m), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemFree_v2(m));
    assert_int_equal(cuIpcCloseMemHandle(0x1000), CUDA_ERROR_INVALID_VALUE);
}

static int cmp_ptr(const void *a, const void *b)
{
    CUdeviceptr x = *(const CUdeviceptr *)a, y = *(const CUdeviceptr *)b;
    return x < y ? -1 : x > y;
}

#define NEXP 40000

/* Allocates NEXP blocks of 512 B into v; exports each when out is set
 * (the addresses into out), and returns the exports that failed. */
static unsigned small_blocks(CUdeviceptr *v, CUdeviceptr *out)
{
    unsigned failed = 0;
    for (int i = 0; i < NEXP; i++) {
        CU(cuMemAlloc_v2(&v[i], 512));
        CUipcMemHandle h;
        if (out) {
            out[i] = v[i];
            failed += cuIpcGetMemHandle(&h, v[i]) != CUDA_SUCCESS;
        }
    }
    return failed;
}

/* More distinct blocks exported over a run than the registry has slots
 * (65536), never more than 40,000 of them live: a freed block's slot is
 * taken again.  40,000 blocks are exported and freed; their places are
 * then filled again (not exported) so that 40,000 more, exported, land at
 * new addresses. */
static void many_exports(void **state)
{
    (void)state;
    if (!mode_fragpool)
        skip();
    CUdeviceptr *a = fp_t_hold(calloc(NEXP, sizeof *a)), *plug = fp_t_hold(calloc(NEXP, sizeof *a));
    CUdeviceptr *b = fp_t_hold(calloc(NEXP, sizeof *b)),
                *seen = fp_t_hold(calloc(2 * NEXP, sizeof *b));
    unsigned failed = small_blocks(a, seen);
    for (int i = 0; i < NEXP; i++)
        CU(cuMemFree_v2(a[i]));
    CU(cuCtxSynchronize()); /* deferred reuse: their places are reusable now */
    small_blocks(plug, NULL);
    failed += small_blocks(b, seen + NEXP);
    for (int i = 0; i < NEXP; i++) {
        CU(cuMemFree_v2(b[i]));
        CU(cuMemFree_v2(plug[i]));
    }
    qsort(seen, 2 * NEXP, sizeof *seen, cmp_ptr);
    size_t distinct = 0;
    for (size_t i = 0; i < 2 * NEXP; i++)
        distinct += i == 0 || seen[i] != seen[i - 1];
    assert_true(distinct > 65536);
    assert_int_equal(failed, 0);
}

/* A handle that begins as fragpool's and names descriptor fd of this
 * process (the layout of shim_ipc.c's wire: magic, pid, fd). */
static CUipcMemHandle forged(int fd)
{
    CUipcMemHandle h;
    memset(&h, 0, sizeof h);
    uint32_t pid = (uint32_t)getpid();
    int32_t f = fd;
    memcpy(h.reserved, "fragpool", 8);
    memcpy(h.reserved + 8, &pid, 4);
    memcpy(h.reserved + 12, &f, 4);
    return h;
}

static void refused(int fd)
{
    CUdeviceptr p = 0;
    assert_true(fd >= 0);
    assert_int_equal(cuIpcOpenMemHandle_v2(&p, forged(fd), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(p, 0);
    close(fd);
}

static void forged_handles(void **state)
{
    (void)state;
    char fifo[] = "/tmp/fp-ipc-fifo-XXXXXX";
    int tmp = mkstemp(fifo);
    assert_true(tmp >= 0);
    close(tmp);
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(20);                                  /* a receiver that blocks fails the test */
    refused(open(fifo, O_RDONLY | O_NONBLOCK)); /* no writer: a reader's open blocks */
    unlink(fifo);
    char file[] = "/tmp/fp-ipc-file-XXXXXX";
    int f = mkstemp(file);
    unlink(file);
    assert_int_equal(ftruncate(f, 1 << 20), 0);
    refused(f);
    refused(open("/dev/zero", O_RDONLY));
    int m = memfd_create("fragpool-ipc", MFD_CLOEXEC); /* the name alone is not enough */
    assert_int_equal(ftruncate(m, 1 << 20), 0);
    refused(m);
    refused(999); /* no such descriptor */
    /* a virtual-memory handle naming a process with no fragpool channel */
    CUipcMemHandle h = forged(3);
    uint32_t pid = (uint32_t)getppid(), version = 2;
    memcpy(h.reserved + 8, &pid, 4);
    memcpy(h.reserved + 28, &version, 4);
    CUdeviceptr p = 0;
    assert_int_equal(cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(p, 0);
    alarm(0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "import") == 0)
        return importer(argv[2], atoi(argv[3]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(offsets, fp_t_release_held),
        cmocka_unit_test_teardown(interior_and_range_start, fp_t_release_held),
        cmocka_unit_test_teardown(freed_block, fp_t_release_held),
        cmocka_unit_test(not_pool_memory),
        cmocka_unit_test(forged_handles),
    };
    /* "many": only many_exports, in a ctest run of its own without
     * debug_check (a whole-pool check after each of its 200,000 calls) */
    const struct CMUnitTest many[] = {cmocka_unit_test_teardown(many_exports, fp_t_release_held)};
    if (argc == 2 && strcmp(argv[1], "many") == 0)
        return cmocka_run_group_tests(many, setup, NULL);
    return cmocka_run_group_tests(tests, setup, NULL);
}
