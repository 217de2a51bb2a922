/* trace_client.c - a CUDA client (linked -lcuda against the simulated
 * device) that replays an allocation trace through cuMemAlloc_v2 and
 * cuMemFree_v2; test_shim_advice runs it under LD_PRELOAD=libfragpool.so.
 * Not a test by itself.
 *
 *   trace_client TRACE CAPACITY_MIB
 *
 * Sets device 0's capacity to CAPACITY_MIB MiB (before any context
 * exists), makes a context, then replays TRACE (fp_trace_load: the 'a'
 * and 'f' rows; a free of an id that is not live is skipped).  Each block
 * gets its id written into its first 8 bytes (fewer when smaller) and its
 * last 8 (when 16 B or more), checked before its free: cheap, and enough
 * to see two live blocks overlap.
 *
 * Ends the way a program that runs out of memory does:
 *   - an allocation fails with CUDA_ERROR_OUT_OF_MEMORY: stdout gets
 *     "TRACE_CLIENT OOM event <i>" (i: the event's index in the trace),
 *     exit status 3 (exit(), so atexit handlers such as the shim's run);
 *   - any other failure (a CUDA call, a mark that changed, the trace):
 *     one line on stderr, exit status 1;
 *   - the whole trace replayed: what is still live is freed (after its
 *     mark is checked), stdout gets "TRACE_CLIENT DONE events <n>", exit
 *     status 0.
 */
#include "fp_cuda.h"
#include "fp_trace.h"
#include "fpsim.h"
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    uint64_t id;
    CUdeviceptr p;
    size_t size;
    int used; /* 0 empty, 1 live, 2 freed (a tombstone) */
} slot;

static slot *tab;
static size_t tab_cap;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "trace_client: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void need(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS)
        die("%s failed with %d", what, (int)r);
}

static slot *find(uint64_t id, int insert)
{
    for (size_t i = (id * 0x9e3779b97f4a7c15ull) & (tab_cap - 1);; i = (i + 1) & (tab_cap - 1)) {
        if (tab[i].used == 1 && tab[i].id == id)
            return &tab[i];
        if (tab[i].used == 0)
            return insert ? &tab[i] : NULL;
    }
}

static void mark(const slot *s)
{
    uint64_t who = s->id;
    need(cuMemcpyHtoD_v2(s->p, &who, s->size < 8 ? s->size : 8), "cuMemcpyHtoD (start)");
    if (s->size >= 16)
        need(cuMemcpyHtoD_v2(s->p + s->size - 8, &who, 8), "cuMemcpyHtoD (end)");
}

static void check_mark(const slot *s)
{
    uint64_t a = 0, b = 0, want = 0;
    size_t n = s->size < 8 ? s->size : 8;
    memcpy(&want, &s->id, n);
    need(cuMemcpyDtoH_v2(&a, s->p, n), "cuMemcpyDtoH (start)");
    if (a != want)
        die("block %llu: its first bytes changed (%#llx)", (unsigned long long)s->id,
            (unsigned long long)a);
    if (s->size >= 16) {
        need(cuMemcpyDtoH_v2(&b, s->p + s->size - 8, 8), "cuMemcpyDtoH (end)");
        if (b != s->id)
            die("block %llu: its last bytes changed (%#llx)", (unsigned long long)s->id,
                (unsigned long long)b);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: trace_client TRACE CAPACITY_MIB\n");
        return 1;
    }
    char *end;
    unsigned long long mib = strtoull(argv[2], &end, 10);
    if (*end || !mib)
        die("%s: not a capacity in MiB", argv[2]);
    fp_trace tr;
    char err[512];
    if (fp_trace_load(argv[1], &tr, err, sizeof err) != 0)
        die("%s", err);
    size_t allocs = 0;
    for (size_t i = 0; i < tr.n; i++)
        allocs += tr.ev[i].op == 'a';
    for (tab_cap = 1024; tab_cap < 2 * allocs + 2; tab_cap *= 2)
        ;
    tab = calloc(tab_cap, sizeof *tab);
    if (!tab)
        die("out of host memory");

    if (fpsim_set_capacity(0, (size_t)mib << 20) != 0)
        die("fpsim_set_capacity failed");
    CUdevice dev;
    CUcontext ctx;
    need(cuInit(0), "cuInit");
    need(cuDeviceGet(&dev, 0), "cuDeviceGet");
    need(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    need(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");

    for (size_t i = 0; i < tr.n; i++) {
        const fp_tracer_event *e = &tr.ev[i];
        if (e->op == 'a') {
            slot *s = find(e->id, 1);
            if (s->used)
                die("%s: event %zu allocates live id %llu", argv[1], i, (unsigned long long)e->id);
            CUdeviceptr p = 0;
            CUresult r = cuMemAlloc_v2(&p, e->size);
            if (r == CUDA_ERROR_OUT_OF_MEMORY) {
                printf("TRACE_CLIENT OOM event %zu\n", i);
                fflush(stdout);
                exit(3);
            }
            need(r, "cuMemAlloc_v2");
            *s = (slot){.id = e->id, .p = p, .size = e->size, .used = 1};
            mark(s);
        } else if (e->op == 'f') {
            slot *s = find(e->id, 0);
            if (!s)
                continue;
            check_mark(s);
            need(cuMemFree_v2(s->p), "cuMemFree_v2");
            s->used = 2;
        }
    }
    for (size_t i = 0; i < tab_cap; i++)
        if (tab[i].used == 1) {
            check_mark(&tab[i]);
            need(cuMemFree_v2(tab[i].p), "cuMemFree_v2 (at the end)");
        }
    printf("TRACE_CLIENT DONE events %zu\n", tr.n);
    free(tab);
    fp_trace_free(&tr);
    return 0; /* the context stays: the shim's exit summary reports its pool */
}
