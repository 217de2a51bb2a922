/* shim_advice.c - advice a replay has proven: after an out-of-memory
 * failure, the one setting under which a replay of this very run fits in
 * the memory it had; at exit, a setting that would have held at least 5%
 * less (docs/advice.md).
 *
 * The pool records its requests (pool_record.c, record_mb).  At a pool's
 * first OOM the failing thread, once the pool's lock is given back and the
 * message's first two lines are out, copies the record up to the failure,
 * adds the refused request, and runs replay/'s verdict (fp_advise) on all
 * CPUs before it returns the driver's CUDA_ERROR_OUT_OF_MEMORY.
 * The failing path itself (the pool, the first two lines) keeps its rule:
 * no allocation, no stdio.
 *
 * Invariants:
 *  - the search runs once per pool (a device's context), at its first OOM:
 *    later OOMs repeat that fix line, so a program that catches OOMs and
 *    carries on (batch-size search) pays for one search;
 *  - nothing here changes the pool or what the failing call returns, and
 *    the only driver call is the device's PCI bus id, for NVML, when no
 *    setting fits (shim_nvml.c); without a record, or with PyTorch's cache
 *    in front (fragpool sees its segments, not the tensors), it says so
 *    and proves nothing;
 *  - at exit the search is only unlimited replays of the settings without
 *    roundup_power2_divisions (no budget search), and makes no CUDA call.
 */
#include "shim_advice.h"
#include "fp_advise.h"
#include "fp_report.h"
#include "shim_framework.h"
#include "shim_nvml.h"
#include "shim_state.h"
#include "shim_summary.h"
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

/* The pools searched so far, with their fix lines (under lock).  A pool
 * is searched at its first OOM only; past FP_ADVICE_POOLS pools, no more. */
#define FP_ADVICE_POOLS 8
typedef struct proven {
    const fp_pool *pool;
    char line[2 * FP_ADVICE_CONF_MAX + 512];
} proven;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static proven done[FP_ADVICE_POOLS];
static size_t ndone;

static int push(void *ud, char op, uint64_t id, uint64_t size)
{
    return fp_trace_push(ud, op, id, size, 0);
}

/* d's record up to event upto, into t (the caller frees it). */
static int record_trace(fp_ctx_pool *d, uint64_t upto, fp_trace *t, fp_record_info *info)
{
    *t = (fp_trace){.format = "fragpool record"};
    int err = fp_pool_record_read(d->pool, upto, push, t, info);
    if (err)
        fp_trace_free(t);
    return err;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The memory the run had: reserved at the failure plus the device's free
 * memory (the whole device when that is unknown). */
static size_t run_room(const fp_oom_info *o, size_t device_free, size_t total)
{
    if (device_free == (size_t)-1)
        return total ? total : SIZE_MAX;
    return o->reserved + device_free;
}

static void put_why_none(fp_sink *s, int err)
{
    fp_puts(s, "fragpool: fix: none proven"
               " \xe2\x80\x94 ");
    if (err == ENODATA)
        fp_puts(s, "the record of requests is off (record_mb:off), so no replay of this run "
                   "exists; record it with trace:PATH and run `fragpool tune PATH --budget SIZE`");
    else if (err == ESTALE)
        fp_puts(s, "the record dropped the history before this failure; a larger record_mb "
                   "keeps more");
    else
        fp_puts(s, "host memory ran short for the record or its replay; record the run with "
                   "trace:PATH and run `fragpool tune PATH --budget SIZE`");
    fp_putc(s, '\n');
}

/* "fragpool: advice: ..." - how the verdict was reached. */
static void put_method(fp_sink *s, const fp_advice *a, const fp_trace *t,
                       const fp_record_info *info, double secs)
{
    fp_puts(s, "fragpool: advice: replayed ");
    fp_put_u64(s, a->settings);
    fp_puts(s, " settings (");
    fp_put_u64(s, a->replays);
    fp_puts(s, " replays) over this run's ");
    fp_put_u64(s, t->n);
    fp_puts(s, " events in ");
    fp_put_fixed(s, (uint64_t)(secs * 100 + 0.5), 100, 2);
    fp_puts(s, " s");
    if (info->dropped) {
        fp_puts(s, "; the record kept the last ");
        fp_put_u64(s, t->n - info->base_blocks);
        fp_puts(s, " events, and the ");
        fp_put_u64(s, info->dropped);
        fp_puts(s, " before them stand as the ");
        fp_put_u64(s, info->base_blocks);
        fp_puts(s, " blocks live then, packed: the proof covers the run from there");
    }
    fp_putc(s, '\n');
}

/* What holds the device beside the pool, when nothing the pool can do fits. */
static void put_outside(fp_sink *s, const fp_oom_info *o, size_t device_free, size_t total)
{
    if (!total || device_free == (size_t)-1 || o->reserved + device_free + FP_MIB > total)
        return; /* unknown, or under 1 MiB */
    fp_puts(s, "fragpool: outside the pool: ");
    fp_advise_put_mib(s, total - device_free - o->reserved);
    fp_puts(s, " of the device's ");
    fp_advise_put_mib(s, total);
    fp_puts(s, " is held by this process's CUDA context, memory fragpool passes to the "
               "driver, and other processes (nvidia-smi lists them)\n");
}

/* The settings d's pool ran: the configuration, but classic segments
 * where it asked for virtual memory and the driver had none (a replay of
 * the default would run virtual memory). */
static const fp_conf *conf_as_run(fp_ctx_pool *d, fp_conf *buf)
{
    if (!fp_shim.conf.pool.expandable_segments || fp_pool_is_vmm(d->pool))
        return &fp_shim.conf;
    *buf = fp_shim.conf;
    buf->pool.expandable_segments = FP_VMM_OFF;
    return buf;
}

static void search(fp_ctx_pool *d, const fp_oom_info *o, size_t device_free, char *fix_line,
                   size_t len, fp_sink *s)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fp_trace t;
    fp_record_info info;
    int err = record_trace(d, o->record_at, &t, &info);
    if (!err && info.broken)
        err = ENOMEM;
    if (!err)
        err = fp_trace_push(&t, 'o', 0, o->requested, 0);
    fp_advice a;
    size_t room = run_room(o, device_free, d->total);
    fp_conf ran;
    fp_advice_req req = {.budget = o->cap && o->cap < room ? o->cap : room,
                         .current = conf_as_run(d, &ran),
                         .device_total = d->total};
    req.room = req.budget < room ? room : 0; /* the cap binds */
    if (!err)
        err = fp_advise(&t, &req, &a);
    fp_sink line = fp_sink_buffer(fix_line, len);
    if (err)
        put_why_none(&line, err);
    else
        fp_advise_put_fix(&line, &a);
    fp_puts(s, fix_line);
    if (!err) {
        put_method(s, &a, &t, &info, seconds_since(&t0));
        if (a.kind != FP_ADVICE_FIX && a.kind != FP_ADVICE_RAISE_CAP) {
            put_outside(s, o, device_free, d->total);
            fp_nvml_put_processes(d->dev, s);
        }
    }
    fp_trace_free(&t);
}

void fp_advice_oom(fp_ctx_pool *d)
{
    size_t device_free = (size_t)-1;
    fp_oom_info o; /* the failure the message reports, proven against */
    fp_summary_oom(d, &o, &device_free);
    fp_sink s = fp_sink_fd(2);
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < ndone && done[i].pool != d->pool)
        i++;
    if (fp_fw_cache_in_front()) {
        fp_puts(&s, "fragpool: fix: none proven \xe2\x80\x94 PyTorch's own caching allocator "
                    "is on, so fragpool sees its segments, not the tensors; run under "
                    "`fragpool run` (or set PYTORCH_NO_CUDA_MEMORY_CACHING=1) and fragpool "
                    "will prove a setting at the next OOM\n");
    } else if (i < ndone) {
        fp_puts(&s, done[i].line); /* proven at this pool's first OOM */
    } else if (ndone < FP_ADVICE_POOLS) {
        done[ndone].pool = d->pool;
        search(d, &o, device_free, done[ndone].line, sizeof done[ndone].line, &s);
        ndone++;
    } else {
        fp_puts(&s, "fragpool: fix: none proven \xe2\x80\x94 the runs of "
                    "8 pools were searched already in this process\n");
    }
    pthread_mutex_unlock(&lock);
    fp_summary_oom_host(&s);
    fp_sink_flush(&s);
}

/* fork: the search holds the lock while it takes the pools' locks, so it
 * is taken first (shim_life.c's order) and given back, or made new in the
 * child, after. */
void fp_advice_fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

void fp_advice_fork_after(bool child)
{
    fp_mutex_fork_after(&lock, child);
}

/* ---- at exit ------------------------------------------------------------------ */

static char exit_note[2 * FP_ADVICE_CONF_MAX + 256];

/* The exit note for the pool of ds (all held) that reserved the most. */
static void advise_biggest(fp_ctx_pool **ds, size_t n, void *ud)
{
    (void)ud;
    fp_ctx_pool *big = NULL;
    size_t peak = 0;
    for (size_t i = 0; i < n; i++) {
        fp_pool_stats st;
        fp_pool_get_stats(ds[i]->pool, &st);
        if ((size_t)st.reserved_bytes[FP_ALL].peak > peak) {
            big = ds[i];
            peak = (size_t)st.reserved_bytes[FP_ALL].peak;
        }
    }
    fp_trace t;
    fp_record_info info;
    if (!big || record_trace(big, UINT64_MAX, &t, &info))
        return;
    fp_advice a;
    fp_conf ran;
    fp_advice_req req = {.current = conf_as_run(big, &ran), .lean = 1};
    if (!info.broken && fp_advise(&t, &req, &a) == 0 && a.kind == FP_ADVICE_BEST) {
        fp_sink s = fp_sink_buffer(exit_note, sizeof exit_note);
        fp_advise_put(&s, &a, "", info.dropped ? "the run's record" : "this run");
        size_t n = fp_sink_length(&s);
        if (!fp_sink_error(&s) && n && exit_note[n - 1] == '\n')
            exit_note[n - 1] = '\0';
        if (!fp_sink_error(&s))
            fp_summary_note(exit_note);
    }
    fp_trace_free(&t);
}

void fp_advice_exit(void)
{
    fp_pools_all(advise_biggest, NULL);
}
