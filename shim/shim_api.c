/* shim_api.c - fragpool's own C API (fragpool.h, docs/api.md): the pools'
 * numbers and controls for a framework's memory API, exported beside the
 * interposed driver entry points.  fragpool's Python side answers
 * torch.cuda's memory functions through it.
 *
 * A device's numbers are the sum over its live pools (one per context;
 * PyTorch uses the primary context alone, so its peaks are exact; with
 * several contexts the peaks are the sum of each pool's peak, an upper
 * bound).  Accumulated totals count from a base read at
 * fragpool_reset_accumulated (fp_pool_stats_since), so the pools' own
 * totals, which the exit summary reports, never go back; peaks reset
 * through the pools' marks, which the summary does not read.
 *
 * Invariants: nothing here makes a CUDA call except through the pools'
 * own safe paths (empty_cache's synchronize or fenced unmaps), and none
 * while the shim is exiting; base_lock is taken while holding no other
 * lock of fragpool's and holds only pool locks under it (its row in
 * shim_life.c's list); every entry point initializes the shim first, so
 * it may be called before the program's first CUDA call.
 */
#include "fragpool.h"
#include "shim_life.h"
#include "shim_mempool.h"
#include "shim_pools.h"
#include "shim_snapfile.h"
#include "shim_snaprec.h"
#include "shim_state.h"
#include "shim_summary.h"
#include <errno.h>
#include <pthread.h>
#include <string.h>

#define FP_API         __attribute__((visibility("default")))
#define FP_API_DEVICES 64

static pthread_mutex_t base_lock = PTHREAD_MUTEX_INITIALIZER;
static fp_pool_stats base[FP_API_DEVICES]; /* totals at the last reset */

typedef struct dev_read {
    CUdevice dev;
    fp_pool_stats sum;
    uint32_t pools;
    uint32_t vmm;
    size_t max_split;
    size_t total;
} dev_read;

static void add_stat(fp_stat *to, const fp_stat *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        to[i].current += s[i].current;
        to[i].peak += s[i].peak;
        to[i].allocated += s[i].allocated;
        to[i].freed += s[i].freed;
        to[i].mark += s[i].mark;
    }
}

static void add_stats(fp_pool_stats *to, const fp_pool_stats *s)
{
#define FP_ADD(f, n) add_stat((fp_stat *)&to->f, (const fp_stat *)&s->f, n);
    FP_POOL_STATS(FP_ADD)
#undef FP_ADD
    uint64_t *c = &to->num_allocs;
    const uint64_t *f = &s->num_allocs;
    for (size_t i = 0; i < FP_POOL_NCOUNTS; i++)
        c[i] += f[i];
}

static void read_pool(fp_ctx_pool *d, void *ud)
{
    dev_read *r = ud;
    if (d->dev != r->dev || fp_pools_retired(d))
        return;
    fp_pool_stats st;
    fp_pool_get_stats(d->pool, &st);
    add_stats(&r->sum, &st);
    r->pools++;
    r->vmm |= (uint32_t)fp_pool_is_vmm(d->pool);
    r->max_split = fp_pool_get_opts(d->pool)->max_split_size;
    r->total = d->total;
}

static bool valid(int device)
{
    return device >= 0 && device < FP_API_DEVICES;
}

/* The device's summed stats, totals counted from its base (under lock). */
static void read_device(int device, dev_read *r)
{
    memset(r, 0, sizeof *r);
    r->dev = device;
    r->max_split = fp_shim.conf.pool.max_split_size;
    fp_pools_each(read_pool, r);
    fp_pool_stats_since(&r->sum, &base[device]);
}

static fragpool_stat out_stat(const fp_stat *s)
{
    return (fragpool_stat){.current = s->current,
                           .peak = s->mark,
                           .allocated = s->allocated,
                           .freed = s->freed,
                           .run_peak = s->peak};
}

static void out_stat3(fragpool_stat *o, const fp_stat *s)
{
    /* PyTorch's order of the three is fragpool's: all, small, large */
    _Static_assert((int)FP_ALL == (int)FRAGPOOL_ALL && (int)FP_SMALL == (int)FRAGPOOL_SMALL_POOL &&
                       (int)FP_LARGE == (int)FRAGPOOL_LARGE_POOL,
                   "the pool kinds index fragpool.h's arrays");
    for (int k = 0; k < FP_NKINDS; k++)
        o[k] = out_stat(&s[k]);
}

static void fill(fragpool_stats *o, const dev_read *r, double fraction)
{
    const fp_pool_stats *s = &r->sum;
    out_stat3(o->allocation, s->allocations);
    out_stat3(o->segment, s->segments);
    out_stat3(o->active, s->active);
    out_stat3(o->inactive_split, s->inactive_split);
    out_stat3(o->allocated_bytes, s->allocated_bytes);
    out_stat3(o->reserved_bytes, s->reserved_bytes);
    out_stat3(o->active_bytes, s->active_bytes);
    out_stat3(o->inactive_split_bytes, s->inactive_split_bytes);
    out_stat3(o->requested_bytes, s->requested_bytes);
    o->oversize_allocations = out_stat(&s->oversize_allocations);
    o->oversize_segments = out_stat(&s->oversize_segments);
    o->num_alloc_retries = s->num_alloc_retries;
    o->num_ooms = s->num_ooms;
    o->num_device_alloc = s->num_reserve_calls + s->num_map_calls;
    o->num_device_free = s->num_release_calls + s->num_unmap_calls;
    o->max_split_size = r->max_split == SIZE_MAX ? UINT64_MAX : r->max_split;
    o->device_total = r->total;
    o->memory_fraction = fraction;
    o->pools = r->pools;
    o->vmm = r->vmm;
}

FP_API int fragpool_api_version(void)
{
    return FRAGPOOL_API_VERSION;
}

FP_API int fragpool_get_stats(int device, fragpool_stats *out, size_t size)
{
    if (!out || !size)
        return EINVAL;
    fp_shim_init();
    fragpool_stats all;
    memset(&all, 0, sizeof all);
    if (valid(device)) {
        static dev_read r; /* under base_lock: a big struct, off the stack */
        pthread_mutex_lock(&base_lock);
        read_device(device, &r);
        fill(&all, &r, fp_pools_fraction(device));
        pthread_mutex_unlock(&base_lock);
    }
    memcpy(out, &all, size < sizeof all ? size : sizeof all);
    return valid(device) ? 0 : ENODEV;
}

static void reset_marks(fp_ctx_pool *d, void *ud)
{
    if (d->dev == *(const int *)ud && !fp_pools_retired(d))
        fp_pool_reset_peaks(d->pool);
}

FP_API int fragpool_reset_peak(int device)
{
    if (!valid(device))
        return ENODEV;
    fp_shim_init();
    fp_pools_each(reset_marks, &device);
    return 0;
}

FP_API int fragpool_reset_accumulated(int device)
{
    if (!valid(device))
        return ENODEV;
    fp_shim_init();
    static dev_read r;
    pthread_mutex_lock(&base_lock);
    memset(&base[device], 0, sizeof base[device]);
    read_device(device, &r); /* the raw totals, now the base */
    base[device] = r.sum;
    pthread_mutex_unlock(&base_lock);
    return 0;
}

FP_API int fragpool_set_fraction(int device, double fraction)
{
    fp_shim_init();
    return fp_pools_set_fraction(device, fraction);
}

FP_API double fragpool_get_fraction(int device)
{
    fp_shim_init();
    return fp_pools_fraction(device);
}

FP_API int fragpool_empty_cache(int device)
{
    fp_shim_init();
    if (device >= FP_API_DEVICES)
        return ENODEV;
    for (int d = device < 0 ? 0 : device; d < (device < 0 ? FP_API_DEVICES : device + 1); d++)
        fp_mempool_trim(d, 0);
    return 0;
}

FP_API int fragpool_record_history(int on, unsigned frames, int clear)
{
    fp_shim_init();
    if (!on) {
        fp_snap_stop();
        return 0;
    }
    return fp_snap_start(frames, clear != 0);
}

FP_API int fragpool_write_snapshot(const char *path)
{
    if (!path || !path[0])
        return EINVAL;
    fp_shim_init();
    return fp_snapfile_write(path);
}

FP_API uint64_t fragpool_last_oom(char *buf, size_t len)
{
    return fp_summary_oom_text(buf, len);
}

/* fork: base_lock is taken before the pools' locks (shim_life.c's row). */
static void fork_prepare(void)
{
    pthread_mutex_lock(&base_lock);
}

static void fork_after(bool child)
{
    fp_mutex_fork_after(&base_lock, child);
}

__attribute__((constructor)) static void rank_locks(void)
{
    fp_life_rank_lock("C API bases", fork_prepare, fork_after);
}
