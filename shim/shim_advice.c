/* shim_advice.c - advice a replay has proven: after an out-of-memory
 * failure, the one setting under which a replay of this very run fits in
 * the memory it had; at exit, a setting that would have held at least 5%
 * less (docs/advice.md).
 *
 * The pool records its requests (pool_record.c, record_mb).  At a pool's
 * first OOM the failing thread, once the pool's lock is given back and the
 * message's first two lines are out, copies the record up to the failure,
 * adds the refused request, and runs replay/'s verdict (fp_advise) on the
 * CPUs its host memory bound allows, before it returns the driver's
 * CUDA_ERROR_OUT_OF_MEMORY.  The failing path itself (the pool, the first
 * two lines) keeps its rule: no allocation, no stdio.
 *
 * The search is bounded:
 *  - in time by advice_budget_ms: every replay stops at that deadline
 *    (fp_trace.deadline_ns), and the message says the search was cut
 *    short;
 *  - in host memory by FP_ADVICE_HOST_MAX: the copy is sized exactly, and
 *    a record too long for it is not replayed (the message says so);
 *  - in whom it holds up: one search runs at a time, under no lock; an OOM
 *    of another thread meanwhile gets "search in progress" and returns at
 *    once, and fork waits only for the table's short lock;
 *  - against reentry: an OOM on a thread already inside this report (a
 *    signal handler that allocates) writes one line and returns at once.
 *
 * Invariants:
 *  - a search runs for each OOM that finds no other search under way,
 *    unless the same pool's latest search was for a request of the same
 *    size (then its fix line is repeated), up to FP_ADVICE_SEARCHES in
 *    the process: a later OOM's fix line is about that request, and a
 *    program that catches OOMs and carries on (a batch-size search) pays
 *    at most advice_budget_ms for each size it tries;
 *  - the report's lines go to stderr and are kept as the latest OOM's
 *    text (fp_summary_oom_say), which torch.OutOfMemoryError carries
 *    through the C API;
 *  - the table's lock is held only to read or add a line, never across a
 *    search, a pool's lock or a driver call;
 *  - nothing here changes the pool or what the failing call returns, and
 *    the only driver call is the device's PCI bus id, for NVML, when no
 *    setting fits (shim_nvml.c); without a record, or with PyTorch's cache
 *    in front (fragpool sees its segments, not the tensors), it says so
 *    and proves nothing;
 *  - at exit the search is only unlimited replays of the settings without
 *    roundup_power2_divisions (no budget search), under the same bounds
 *    (past one, no note), and makes no CUDA call.
 */
#include "shim_advice.h"
#include "shim_lend.h"
#include "fp_advise.h"
#include "fp_report.h"
#include "shim_framework.h"
#include "shim_nvml.h"
#include "shim_state.h"
#include "shim_summary.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Host memory an OOM search may use: the copy of the record (one
 * fp_tracer_event per event) and, per replay thread, up to REPLAY_BYTES per
 * event (the replay's id table and its pool). */
#define FP_ADVICE_HOST_MAX ((size_t)256 << 20)
#define REPLAY_BYTES       96

/* The pools searched so far, each with the fix line of its latest search
 * and the request that search was for (under lock).  An OOM of the same
 * pool and request size repeats the line; any other is searched anew, up
 * to FP_ADVICE_SEARCHES searches in the process (each is bounded by
 * advice_budget_ms, so a program that catches OOMs pays at most that). */
#define FP_ADVICE_POOLS    8
#define FP_ADVICE_SEARCHES 32
#define FP_ADVICE_LINE     (2 * FP_ADVICE_CONF_MAX + 512)
#define FP_ADVICE_TEXT     12288 /* an OOM report's lines after the first two */
typedef struct proven {
    const fp_pool *pool;
    size_t requested;
    char line[FP_ADVICE_LINE];
} proven;
static unsigned nsearches; /* under lock */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static proven done[FP_ADVICE_POOLS];
static size_t ndone;
static atomic_bool searching;          /* a search is under way (no lock held) */
static FP_THREAD_LOCAL bool reporting; /* this thread is inside fp_advice_oom */

#define DASH " \xe2\x80\x94 "

static int push(void *ud, char op, uint64_t id, uint64_t size)
{
    return fp_trace_push(ud, op, id, size, 0);
}

static int stop_at_first(void *ud, char op, uint64_t id, uint64_t size)
{
    (void)ud, (void)op, (void)id, (void)size;
    return ECANCELED;
}

/* The events a read of d's record up to upto gives (its base, then its
 * events), from the record's figures alone; 0 with the read's error. */
static size_t record_events(fp_ctx_pool *d, uint64_t upto, int *err)
{
    fp_record_info info;
    *err = fp_pool_record_read(d->pool, upto, stop_at_first, NULL, &info);
    if (*err == ECANCELED)
        *err = 0;
    if (*err)
        return 0;
    uint64_t end = upto < info.total ? upto : info.total;
    return info.base_blocks + (size_t)(end - info.dropped);
}

/* d's record up to event upto, into t (the caller frees it), with room
 * for want events exactly (the refused request added after). */
static int record_trace(fp_ctx_pool *d, uint64_t upto, size_t want, fp_trace *t,
                        fp_record_info *info)
{
    *t = (fp_trace){.format = "fragpool record"};
    if (want) {
        t->ev = malloc(want * sizeof *t->ev);
        if (!t->ev)
            return ENOMEM;
        t->cap = want;
    }
    int err = fp_pool_record_read(d->pool, upto, push, t, info);
    if (err)
        fp_trace_free(t);
    return err;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Replay threads for n events within FP_ADVICE_HOST_MAX, at most one per
 * CPU; 0 when even one does not fit. */
static unsigned search_threads(size_t n)
{
    size_t per = sizeof(fp_tracer_event) + REPLAY_BYTES;
    if (!n)
        return 1;
    if (n > FP_ADVICE_HOST_MAX / per)
        return 0;
    size_t fit = (FP_ADVICE_HOST_MAX / n - sizeof(fp_tracer_event)) / REPLAY_BYTES;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t want = cpus > 0 ? (size_t)cpus : 1;
    return (unsigned)(fit < want ? fit : want);
}

/* The memory the run had: reserved at the failure plus the device's free
 * memory (the whole device when that is unknown). */
static size_t run_room(const fp_oom_info *o, size_t device_free, size_t total)
{
    if (device_free == (size_t)-1)
        return total ? total : SIZE_MAX;
    return o->reserved + device_free;
}

static void put_tune_hint(fp_sink *s)
{
    fp_puts(s, "record the run with trace:PATH and run `fragpool tune PATH --budget SIZE`");
}

/* n: the events the record holds (E2BIG). */
static void put_why_none(fp_sink *s, int err, size_t n)
{
    fp_puts(s, "fragpool: fix: none proven" DASH);
    if (err == ENODATA) {
        fp_puts(s, "the record of requests is off (record_mb:off), so no replay of this run "
                   "exists; ");
        put_tune_hint(s);
    } else if (err == ESTALE) {
        fp_puts(s, "the record dropped the history before this failure; a larger record_mb "
                   "keeps more");
    } else if (err == ETIMEDOUT) {
        fp_puts(s, "the search was cut short at its bound, advice_budget_ms:");
        fp_put_u64(s, (uint64_t)fp_shim.conf.advice_budget_ms);
        fp_puts(s, ", before any setting was proven; a larger advice_budget_ms lets it finish, "
                   "or ");
        put_tune_hint(s);
    } else if (err == E2BIG) {
        fp_puts(s, "the record holds ");
        fp_put_u64(s, n);
        fp_puts(s, " events, more than an OOM search replays within its host memory bound (");
        fp_put_u64(s, FP_ADVICE_HOST_MAX / FP_MIB);
        fp_puts(s, " MiB); ");
        put_tune_hint(s);
    } else {
        fp_puts(s, "host memory ran short for the record or its replay; ");
        put_tune_hint(s);
    }
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
    size_t ours = o->reserved + o->held_aside; /* pages kept through a capture are ours */
    if (!total || device_free == (size_t)-1 || ours + device_free + FP_MIB > total)
        return; /* unknown, or under 1 MiB */
    fp_puts(s, "fragpool: outside the pool: ");
    fp_advise_put_mib(s, total - device_free - ours);
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

/* The record up to the failure and the refused request, into t, within
 * the host memory bound; *threads: the replay threads that fit. */
static int search_trace(fp_ctx_pool *d, const fp_oom_info *o, fp_trace *t, fp_record_info *info,
                        unsigned *threads, size_t *n)
{
    int err;
    *n = record_events(d, o->record_at, &err);
    *threads = err ? 0 : search_threads(*n + 1);
    if (!err && !*threads)
        err = E2BIG;
    if (err) {
        *t = (fp_trace){.format = "fragpool record"};
        return err;
    }
    err = record_trace(d, o->record_at, *n + 1, t, info);
    if (!err && info->broken)
        err = ENOMEM;
    if (!err)
        err = fp_trace_push(t, 'o', 0, o->requested, 0);
    return err;
}

/* The cap that binds is one the program set at run time
 * (torch.cuda.set_per_process_memory_fraction through the C API): an
 * environment variable would not lift it, so say what fraction would. */
static void put_program_fraction(fp_sink *s, fp_ctx_pool *d, size_t need)
{
    double f = fp_pools_fraction(d->dev);
    if (f == fp_shim.conf.pool.memory_fraction || f <= 0 || !d->total)
        return;
    uint64_t hundredths = (uint64_t)((double)need * 100.0 / (double)d->total) + 1;
    fp_puts(s, "fragpool: fix: the cap is the program's own set_per_process_memory_fraction(");
    fp_put_fixed(s, (uint64_t)(f * 100 + 0.5), 100, 2);
    fp_puts(s, "); that run fits with set_per_process_memory_fraction(");
    fp_put_fixed(s, hundredths > 100 ? 100 : hundredths, 100, 2);
    fp_puts(s, ")\n");
}

static void search(fp_ctx_pool *d, const fp_oom_info *o, size_t device_free, char *fix_line,
                   size_t len, fp_sink *s)
{
    uint64_t t0 = now_ns();
    fp_trace t;
    fp_record_info info;
    unsigned threads;
    size_t n;
    int err = search_trace(d, o, &t, &info, &threads, &n);
    t.deadline_ns = t0 + (uint64_t)fp_shim.conf.advice_budget_ms * 1000000u;
    fp_advice a;
    size_t room = run_room(o, device_free, d->total);
    fp_conf ran;
    fp_advice_req req = {.budget = o->cap && o->cap < room ? o->cap : room,
                         .current = conf_as_run(d, &ran),
                         .device_total = d->total,
                         .threads = threads};
    req.room = req.budget < room ? room : 0; /* the cap binds */
    if (!err)
        err = fp_advise(&t, &req, &a);
    fp_sink line = fp_sink_buffer(fix_line, len);
    if (err)
        put_why_none(&line, err, n);
    else
        fp_advise_put_fix(&line, &a);
    if (!err && a.kind == FP_ADVICE_RAISE_CAP)
        put_program_fraction(&line, d, a.need);
    fp_puts(s, fix_line);
    if (!err) {
        put_method(s, &a, &t, &info, (double)(now_ns() - t0) / 1e9);
        if (a.kind != FP_ADVICE_FIX && a.kind != FP_ADVICE_RAISE_CAP) {
            put_outside(s, o, device_free, d->total);
            fp_nvml_put_processes(d->dev, s);
        }
    }
    fp_trace_free(&t);
}

static size_t slot_of(const fp_pool *pool)
{
    size_t i = 0;
    while (i < ndone && done[i].pool != pool)
        i++;
    return i;
}

/* The line proven for this pool and request size, written to s; false
 * when there is none.  *room: a search may run (a slot for the pool, and
 * the process's searches not spent). */
static bool repeat_proven(const fp_pool *pool, size_t requested, fp_sink *s, bool *room)
{
    pthread_mutex_lock(&lock);
    size_t i = slot_of(pool);
    bool same = i < ndone && done[i].requested == requested;
    if (same)
        fp_puts(s, done[i].line);
    *room = (i < ndone || ndone < FP_ADVICE_POOLS) && nsearches < FP_ADVICE_SEARCHES;
    pthread_mutex_unlock(&lock);
    return same;
}

static void keep_proven(const fp_pool *pool, size_t requested, const char *line)
{
    pthread_mutex_lock(&lock);
    size_t i = slot_of(pool);
    if (i < FP_ADVICE_POOLS) {
        done[i].pool = pool;
        done[i].requested = requested;
        memcpy(done[i].line, line, sizeof done[i].line);
        ndone += i == ndone;
    }
    nsearches++;
    pthread_mutex_unlock(&lock);
}

/* The search, unless another thread runs one now. */
static void search_once(fp_ctx_pool *d, const fp_oom_info *o, size_t device_free, fp_sink *s)
{
    if (atomic_exchange(&searching, true)) {
        fp_puts(s, "fragpool: fix: none proven" DASH "search in progress: another thread's "
                   "out-of-memory failure is being searched; this one returns at once and "
                   "its pool is searched at its next OOM\n");
        return;
    }
    char line[FP_ADVICE_LINE];
    search(d, o, device_free, line, sizeof line, s);
    keep_proven(d->pool, o->requested, line);
    atomic_store(&searching, false);
}

/* An OOM on a thread already inside this report: a signal handler that
 * allocates interrupted it.  One line, no lock, no search. */
static void reentered(fp_ctx_pool *d)
{
    fp_sink s = fp_sink_fd(2);
    fp_puts(&s, "fragpool: CUDA out of memory on device ");
    fp_put_u64(&s, (uint64_t)d->dev);
    fp_puts(&s, " while this thread was reporting another (a signal handler that allocates?): "
                "no search; returning CUDA_ERROR_OUT_OF_MEMORY\n");
    fp_sink_flush(&s);
}

void fp_advice_oom(fp_ctx_pool *d)
{
    if (reporting) {
        reentered(d);
        return;
    }
    reporting = true;
    size_t device_free = (size_t)-1;
    fp_oom_info o; /* the failure the message reports, proven against */
    fp_summary_oom(d, &o, &device_free);
    char text[FP_ADVICE_TEXT]; /* the rest of the report: stderr and fragpool_last_oom */
    fp_sink s = fp_sink_buffer(text, sizeof text);
    bool room;
    if (fp_fw_cache_in_front()) {
        fp_puts(&s, "fragpool: fix: none proven" DASH "PyTorch's own caching allocator "
                    "is on, so fragpool sees its segments, not the tensors; run under "
                    "`fragpool run` (or set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) "
                    "and fragpool will prove a setting at the next OOM\n");
    } else if (repeat_proven(d->pool, o.requested, &s, &room)) {
        /* proven for this very request */
    } else if (room) {
        search_once(d, &o, device_free, &s);
    } else {
        fp_puts(&s, "fragpool: fix: none proven" DASH "this process ran its "
                    "32 searches "
                    "already; record the run with trace:PATH and run `fragpool tune PATH "
                    "--budget SIZE`\n");
    }
    fp_lend_oom_lines(d->dev, &s);
    fp_summary_oom_host(&s);
    fp_summary_oom_say(text, false);
    reporting = false;
}

/* fork: the table's lock, held only for a copy, is taken first (shim_life.c's
 * order) and given back, or made new in the child, after.  A search under
 * way is not waited for: the child has no such thread, so none runs there. */
void fp_advice_fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

void fp_advice_fork_after(bool child)
{
    if (child) {
        atomic_store(&searching, false);
        reporting = false;
    }
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
    int err = 0;
    size_t events = big ? record_events(big, UINT64_MAX, &err) : 0;
    unsigned threads = err ? 0 : search_threads(events);
    if (!big || !threads || record_trace(big, UINT64_MAX, events, &t, &info))
        return; /* no pool, no record, or past the host memory bound: no note */
    t.deadline_ns = now_ns() + (uint64_t)fp_shim.conf.advice_budget_ms * 1000000u;
    fp_advice a;
    fp_conf ran;
    fp_advice_req req = {.current = conf_as_run(big, &ran), .lean = 1, .threads = threads};
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
