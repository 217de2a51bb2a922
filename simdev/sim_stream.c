/* simdev/sim_stream.c: streams, their worker threads, and ordering.
 *
 * Every stream - the legacy default stream of each device, each thread's
 * per-thread default stream of each device, and each user stream - owns a
 * FIFO of operations and, once it has work, one worker thread that runs
 * them in order.  Tickets number a stream's operations 1, 2, ...; enq is
 * the last handed out and done the last completed.
 *
 * Ordering rules, resolved when an operation is submitted, as
 * "do not start before stream S has completed ticket T" dependencies:
 *   - on the legacy stream: wait for every blocking stream of the device
 *     (user streams without CU_STREAM_NON_BLOCKING, per-thread streams) up
 *     to its current ticket;
 *   - on a blocking stream: wait for the legacy stream up to its current
 *     ticket;
 *   - on a non-blocking stream: nothing.
 * And on every stream: wait for the device's barrier (cuCtxWaitEvent,
 * sim_event.c), the work of a context event it was made to wait for.
 * Dependencies point to strictly earlier submissions, so they cannot form
 * a cycle.  While a stream is being captured its work is recorded in the
 * capture (counted) and not executed, as on the real driver.
 *
 * Destroying a user stream does not wait, as on the real driver.  An idle
 * stream is retired at once (its worker, if any, is idle and joined).  A
 * stream with work queued becomes draining: its handle is invalid from
 * then on, but it stays on the device list, so device synchronization and
 * legacy-stream ordering still see its work, and events recorded on it
 * still complete.  Its worker runs the queue to the end, then reaps the
 * stream (unlinks it, drops the list's reference, broadcasts progress) and
 * exits detached.  Context teardown waits for the draining streams of the
 * context; at process exit they may still be running, and stay reachable.
 *
 * All state is under g_sim.lock; a worker drops the lock only while it
 * runs an operation's body (copy, memset, host function, free).
 */
#include "sim.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef struct ptds_set {
    sim_stream *s[SIM_MAX_DEVICES]; /* this thread's per-device streams */
} ptds_set;

static _Thread_local ptds_set *tl_ptds;

/* ---- the worker ----------------------------------------------------------- */

static bool deps_ready(const sim_op *op)
{
    for (int i = 0; i < op->ndeps; i++)
        if (op->deps[i].stream->done < op->deps[i].ticket)
            return false;
    return true;
}

/* Next operation whose dependencies are met, or NULL to exit. */
static sim_op *next_op(sim_stream *s)
{
    while (s->head == NULL && !s->worker_exit)
        pthread_cond_wait(&s->work, &g_sim.lock);
    if (s->head == NULL)
        return NULL;
    while (!deps_ready(s->head))
        pthread_cond_wait(&g_sim.progress, &g_sim.lock);
    return s->head;
}

static void set32(void *dst, unsigned value, size_t count)
{
    unsigned char *p = dst;
    for (size_t i = 0; i < count; i++)
        memcpy(p + 4 * i, &value, 4);
}

static void set16(void *dst, unsigned value, size_t count)
{
    unsigned char *p = dst;
    uint16_t v = (uint16_t)value;
    for (size_t i = 0; i < count; i++)
        memcpy(p + 2 * i, &v, 2);
}

static bool is_set(sim_op_kind k)
{
    return k == SIM_OP_SET8 || k == SIM_OP_SET16 || k == SIM_OP_SET32;
}

/* The body of an operation; runs without g_sim.lock. */
static void run_op(const sim_op *op)
{
    bool empty = (op->kind == SIM_OP_COPY && op->u.copy.n == 0) ||
                 (is_set(op->kind) && op->u.set.count == 0);
    if (empty)
        return; /* pointers may be NULL for 0 bytes */
    switch (op->kind) {
    case SIM_OP_COPY: memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.n); break;
    case SIM_OP_SET8: memset(op->u.set.dst, (int)(op->u.set.value & 0xff), op->u.set.count); break;
    case SIM_OP_SET16: set16(op->u.set.dst, op->u.set.value, op->u.set.count); break;
    case SIM_OP_SET32: set32(op->u.set.dst, op->u.set.value, op->u.set.count); break;
    case SIM_OP_HOSTFN: op->u.host.fn(op->u.host.data); break;
    case SIM_OP_FREE: sim_mem_release(op->u.free_ptr, SIM_FREE_ASYNC_RUN); break;
    case SIM_OP_EVENT:
    case SIM_OP_WAIT: break;
    }
}

static void finish_op(sim_stream *s, sim_op *op)
{
    s->head = op->next;
    if (s->head == NULL)
        s->tail = NULL;
    s->done = op->ticket;
    if (op->kind == SIM_OP_EVENT)
        sim_event_fire(op->u.event, op, s);
    g_sim.dev[s->dev].ops_executed++;
    sim_op_free(op);
    pthread_cond_broadcast(&g_sim.progress);
}

static void unlink_stream(sim_stream *s)
{
    sim_stream **pp = &g_sim.dev[s->dev].streams;
    while (*pp != NULL && *pp != s)
        pp = &(*pp)->next;
    if (*pp == s)
        *pp = s->next;
}

/* A draining stream has run its queue: it leaves the device list and its
 * worker (the caller) detaches itself.  s may be freed here. */
static void reap(sim_stream *s)
{
    unlink_stream(s);
    s->worker_running = false;
    pthread_detach(pthread_self());
    g_sim.dev[s->dev].streams_draining--;
    pthread_cond_broadcast(&g_sim.progress);
    sim_stream_unref(s); /* the device list's */
}

static void *worker_main(void *arg)
{
    sim_stream *s = arg;
    sim_lock();
    for (sim_op *op; (op = next_op(s)) != NULL;) {
        sim_unlock();
        run_op(op);
        sim_lock();
        finish_op(s, op);
    }
    if (s->draining)
        reap(s);
    sim_unlock();
    return NULL;
}

/* Starts the worker with every signal blocked, so signals go elsewhere. */
static CUresult ensure_worker(sim_stream *s)
{
    if (s->worker_running)
        return CUDA_SUCCESS;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&s->worker, NULL, worker_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->worker_running = true;
    s->worker_exit = s->draining; /* a draining stream's worker runs out */
    return CUDA_SUCCESS;
}

/* ---- submission and waiting ---------------------------------------------- */

/* Adds the legacy-stream ordering dependencies of an op on s. */
static bool add_order_deps(sim_stream *s, sim_op *op)
{
    sim_device *d = &g_sim.dev[s->dev];
    if (sim_stream_blocking(s))
        return sim_stream_idle(d->legacy) || sim_op_add_dep(op, d->legacy, d->legacy->enq);
    if (s->kind != SIM_STREAM_LEGACY)
        return true;
    for (sim_stream *t = d->streams; t != NULL; t = t->next)
        if (t != s && sim_stream_blocking(t) && !sim_stream_idle(t) &&
            !sim_op_add_dep(op, t, t->enq))
            return false;
    return true;
}

/* The device barrier's dependencies (cuCtxWaitEvent) of an op on s. */
static bool add_barrier_deps(sim_stream *s, sim_op *op)
{
    const sim_device *d = &g_sim.dev[s->dev];
    for (int i = 0; i < d->nbarrier; i++) {
        const sim_dep *b = &d->barrier[i];
        if (b->stream != s && b->stream->done < b->ticket &&
            !sim_op_add_dep(op, b->stream, b->ticket))
            return false;
    }
    return true;
}

/* Capture rules for new work on s: CUDA_SUCCESS to run it, *captured when
 * it was recorded into a capture instead. */
static CUresult capture_filter(sim_stream *s, bool *captured)
{
    *captured = false;
    if (s->kind == SIM_STREAM_LEGACY)
        return sim_capture_conflict(s->dev, true, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    if (s->cap == NULL)
        return CUDA_SUCCESS;
    if (s->cap->status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    sim_capture_add_node(s->cap);
    *captured = true;
    return CUDA_SUCCESS;
}

/* Whether the device of the stream may touch the memory of op: VMM memory
 * only where cuMemSetAccess granted the device access (a kernel of a
 * device without it faults; its copies are refused here). */
static bool op_reachable(const sim_op *op, int dev)
{
    if (op->kind == SIM_OP_COPY)
        return sim_mem_dev_reaches((uintptr_t)op->u.copy.dst, op->u.copy.n, dev) &&
               sim_mem_dev_reaches((uintptr_t)op->u.copy.src, op->u.copy.n, dev);
    if (!is_set(op->kind))
        return true;
    size_t w = op->kind == SIM_OP_SET32 ? 4 : op->kind == SIM_OP_SET16 ? 2 : 1;
    return sim_mem_dev_reaches((uintptr_t)op->u.set.dst, op->u.set.count * w, dev);
}

CUresult sim_stream_submit(sim_stream *s, sim_op *op)
{
    bool captured = false;
    CUresult rc = s->dead                     ? CUDA_ERROR_INVALID_HANDLE
                  : !op_reachable(op, s->dev) ? CUDA_ERROR_INVALID_VALUE
                                              : capture_filter(s, &captured);
    if (rc == CUDA_SUCCESS && !captured && (!add_order_deps(s, op) || !add_barrier_deps(s, op)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && !captured)
        rc = ensure_worker(s);
    if (rc != CUDA_SUCCESS || captured) {
        sim_op_free(op);
        return rc;
    }
    op->ticket = ++s->enq;
    if (s->tail != NULL)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_signal(&s->work);
    return CUDA_SUCCESS;
}

void sim_stream_wait(sim_stream *s, unsigned long long ticket)
{
    sim_stream_ref(s);
    if (s->done < ticket && !s->worker_running)
        ensure_worker(s); /* only after fork() lost the worker */
    while (s->done < ticket)
        pthread_cond_wait(&g_sim.progress, &g_sim.lock);
    sim_stream_unref(s);
}

typedef bool (*stream_pick)(const sim_stream *);

static sim_stream *first_busy(int dev, stream_pick pick)
{
    for (sim_stream *t = g_sim.dev[dev].streams; t != NULL; t = t->next)
        if (pick(t) && !sim_stream_idle(t))
            return t;
    return NULL;
}

/* Waits for the streams of dev picked by pick(), as of now. */
static void wait_streams(int dev, stream_pick pick)
{
    size_t n = 0;
    for (sim_stream *t = g_sim.dev[dev].streams; t != NULL; t = t->next)
        n += pick(t) && !sim_stream_idle(t);
    sim_dep *snap = n ? calloc(n, sizeof *snap) : NULL;
    if (n != 0 && snap == NULL) { /* no memory: wait until idle */
        for (sim_stream *t; (t = first_busy(dev, pick)) != NULL;)
            sim_stream_wait(t, t->enq);
        return;
    }
    size_t k = 0;
    for (sim_stream *t = g_sim.dev[dev].streams; t != NULL && k < n; t = t->next)
        if (pick(t) && !sim_stream_idle(t)) {
            snap[k] = (sim_dep){t, t->enq};
            sim_stream_ref(snap[k++].stream);
        }
    for (size_t i = 0; i < k; i++) {
        sim_stream_wait(snap[i].stream, snap[i].ticket);
        sim_stream_unref(snap[i].stream);
    }
    free(snap);
}

static bool pick_all(const sim_stream *s)
{
    (void)s;
    return true;
}

static bool pick_legacy_set(const sim_stream *s)
{
    return s->kind == SIM_STREAM_LEGACY || sim_stream_blocking(s);
}

void sim_device_sync(int dev)
{
    g_sim.dev[dev].device_syncs++;
    wait_streams(dev, pick_all);
}

/* ---- stream objects ---------------------------------------------------------- */

sim_stream *sim_stream_new(int dev, sim_ctx *ctx, sim_stream_kind kind, unsigned flags,
                           int priority)
{
    sim_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->kind = kind;
    s->dev = dev;
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority;
    s->refs = 1; /* the device list */
    pthread_cond_init(&s->work, NULL);
    s->next = g_sim.dev[dev].streams;
    g_sim.dev[dev].streams = s;
    return s;
}

void sim_stream_retire(sim_stream *s)
{
    s->dead = true;
    sim_capture_detach(s);
    sim_stream_ref(s);
    sim_stream_wait(s, s->enq);
    unlink_stream(s);
    if (s->worker_running) {
        pthread_t t = s->worker;
        s->worker_exit = true;
        s->worker_running = false;
        pthread_cond_signal(&s->work);
        sim_unlock();
        pthread_join(t, NULL);
        sim_lock();
    }
    s->refs--;           /* the device list's; ours keeps s alive */
    sim_stream_unref(s); /* ours */
}

/* Destroys s without waiting: retired now when idle, else draining (see
 * the top of the file). */
void sim_stream_abandon(sim_stream *s)
{
    if (sim_stream_idle(s) || ensure_worker(s) != CUDA_SUCCESS) {
        sim_stream_retire(s); /* nothing to wait for (or no thread) */
        return;
    }
    s->dead = true;
    s->draining = true;
    s->worker_exit = true;
    g_sim.dev[s->dev].streams_draining++;
    sim_capture_detach(s);
    pthread_cond_signal(&s->work);
}

/* A user stream of ctx: live, or (draining) destroyed and still draining. */
static sim_stream *find_ctx_stream(const sim_ctx *ctx, bool draining)
{
    for (sim_stream *t = g_sim.dev[ctx->dev].streams; t != NULL; t = t->next)
        if (t->kind == SIM_STREAM_USER && t->ctx == ctx && (draining ? t->draining : !t->dead))
            return t;
    return NULL;
}

void sim_ctx_retire_streams(const sim_ctx *ctx)
{
    for (sim_stream *t; (t = find_ctx_stream(ctx, false)) != NULL;) {
        g_sim.dev[ctx->dev].streams_live--;
        sim_stream_retire(t);
    }
    for (sim_stream *t; (t = find_ctx_stream(ctx, true)) != NULL;) {
        if (!t->worker_running && ensure_worker(t) != CUDA_SUCCESS)
            return; /* fork() lost the worker, no new one */
        pthread_cond_wait(&g_sim.progress, &g_sim.lock);
    }
}

/* ---- per-thread default streams --------------------------------------------- */

static void ptds_exit(void *arg)
{
    ptds_set *set = arg;
    sim_lock();
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        if (set->s[d] != NULL)
            sim_stream_retire(set->s[d]);
    sim_unlock();
    tl_ptds = NULL;
    free(set);
}

static sim_stream *ptds_get(int dev)
{
    if (tl_ptds == NULL) {
        tl_ptds = calloc(1, sizeof *tl_ptds);
        if (tl_ptds == NULL)
            return NULL;
        pthread_setspecific(g_sim.ptds_key, tl_ptds);
    }
    if (tl_ptds->s[dev] == NULL)
        tl_ptds->s[dev] = sim_stream_new(dev, NULL, SIM_STREAM_PTDS, 0, 0);
    return tl_ptds->s[dev];
}

void sim_stream_setup(void)
{
    pthread_key_create(&g_sim.ptds_key, ptds_exit);
}

void sim_stream_fork_child(void)
{
    for (int d = 0; d < g_sim.ndev; d++)
        for (sim_stream *s = g_sim.dev[d].streams; s != NULL; s = s->next) {
            s->worker_running = false; /* restarted by the next wait */
            s->worker_exit = s->draining;
            pthread_cond_init(&s->work, NULL);
        }
}

/* ---- handles ------------------------------------------------------------------ */

static sim_stream *find_user(CUstream h)
{
    for (int d = 0; d < g_sim.ndev; d++)
        for (sim_stream *t = g_sim.dev[d].streams; t != NULL; t = t->next)
            if ((CUstream)t == h && t->kind == SIM_STREAM_USER && !t->dead)
                return t;
    return NULL;
}

static bool special_handle(CUstream h)
{
    return h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
}

CUresult sim_stream_resolve(CUstream h, bool per_thread, sim_stream **out, sim_ctx **ctx)
{
    sim_ctx *c = NULL;
    sim_stream *s = NULL;
    if (special_handle(h)) {
        CUresult rc = sim_ctx_current_locked(&c);
        if (rc != CUDA_SUCCESS)
            return rc;
        bool pt = h == CU_STREAM_PER_THREAD || (h == NULL && per_thread);
        s = pt ? ptds_get(c->dev) : g_sim.dev[c->dev].legacy;
        if (s == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
    } else if ((s = find_user(h)) == NULL) {
        return CUDA_ERROR_INVALID_HANDLE;
    } else {
        c = s->ctx;
    }
    *out = s;
    if (ctx != NULL)
        *ctx = c;
    return CUDA_SUCCESS;
}

/* ---- API: lifetime ---------------------------------------------------------- */

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (ph == NULL || (flags & ~1u) != 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_ctx *c = NULL;
    sim_lock();
    rc = sim_ctx_current_locked(&c);
    sim_stream *s = NULL;
    if (rc == CUDA_SUCCESS)
        s = sim_stream_new(c->dev, c, SIM_STREAM_USER, flags, priority);
    if (rc == CUDA_SUCCESS && s == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        g_sim.dev[c->dev].streams_created++;
        g_sim.dev[c->dev].streams_live++;
        *ph = (CUstream)s;
    }
    sim_unlock();
    return rc;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return stream_create(phStream, Flags, SIM_PRIORITY_LEAST);
}

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    if (priority > SIM_PRIORITY_LEAST)
        priority = SIM_PRIORITY_LEAST;
    if (priority < SIM_PRIORITY_GREATEST)
        priority = SIM_PRIORITY_GREATEST;
    return stream_create(phStream, flags, priority);
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    sim_stream *s = special_handle(hStream) ? NULL : find_user(hStream);
    if (s == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        g_sim.dev[s->dev].streams_live--;
        sim_stream_abandon(s);
    }
    sim_unlock();
    return rc;
}

CUresult cuStreamDestroy(CUstream hStream)
{
    return cuStreamDestroy_v2(hStream);
}

/* ---- API: properties ---------------------------------------------------------- */

static CUresult stream_get(CUstream h, bool pt, int *priority, unsigned *flags)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && priority == NULL && flags == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_stream *s = NULL;
    sim_lock();
    rc = sim_stream_resolve(h, pt, &s, NULL);
    if (rc == CUDA_SUCCESS && priority != NULL)
        *priority = s->priority;
    if (rc == CUDA_SUCCESS && flags != NULL)
        *flags = s->flags;
    sim_unlock();
    return rc;
}

CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
    return priority ? stream_get(hStream, false, priority, NULL) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
    return priority ? stream_get(hStream, true, priority, NULL) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    return flags ? stream_get(hStream, false, NULL, flags) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
    return flags ? stream_get(hStream, true, NULL, flags) : CUDA_ERROR_INVALID_VALUE;
}

/* ---- API: synchronization ------------------------------------------------------ */

/* Capture rules for synchronizing with s (lock held). */
static CUresult sync_capture_check(sim_stream *s)
{
    if (s->kind == SIM_STREAM_LEGACY)
        return sim_capture_conflict(s->dev, true, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    if (s->cap == NULL)
        return CUDA_SUCCESS;
    sim_capture_invalidate(s->cap);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

static bool legacy_set_idle(int dev)
{
    for (sim_stream *t = g_sim.dev[dev].streams; t != NULL; t = t->next)
        if (pick_legacy_set(t) && !sim_stream_idle(t))
            return false;
    return true;
}

static CUresult stream_sync(CUstream h, bool pt, bool query)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_stream *s = NULL;
    sim_lock();
    rc = sim_stream_resolve(h, pt, &s, NULL);
    if (rc == CUDA_SUCCESS)
        rc = sync_capture_check(s);
    bool legacy = rc == CUDA_SUCCESS && s->kind == SIM_STREAM_LEGACY;
    if (rc == CUDA_SUCCESS && query)
        rc = (legacy ? legacy_set_idle(s->dev) : sim_stream_idle(s)) ? CUDA_SUCCESS
                                                                     : CUDA_ERROR_NOT_READY;
    else if (rc == CUDA_SUCCESS && legacy)
        wait_streams(s->dev, pick_legacy_set);
    else if (rc == CUDA_SUCCESS)
        sim_stream_wait(s, s->enq);
    if (rc == CUDA_SUCCESS && !query)
        sim_pool_synced(s->dev);
    sim_unlock();
    return rc;
}

CUresult cuStreamSynchronize(CUstream hStream)
{
    return stream_sync(hStream, false, false);
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    return stream_sync(hStream, true, false);
}

CUresult cuStreamQuery(CUstream hStream)
{
    return stream_sync(hStream, false, true);
}

CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    return stream_sync(hStream, true, true);
}

/* ---- API: host functions -------------------------------------------------------- */

static CUresult launch_host(CUstream h, bool pt, CUhostFn fn, void *data)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && fn == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_op *op = sim_op_new(SIM_OP_HOSTFN);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.host.fn = fn;
    op->u.host.data = data;
    sim_stream *s = NULL;
    sim_lock();
    rc = sim_stream_resolve(h, pt, &s, NULL);
    if (rc == CUDA_SUCCESS)
        rc = sim_stream_submit(s, op);
    else
        sim_op_free(op);
    sim_unlock();
    return rc;
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    return launch_host(hStream, false, fn, userData);
}

CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    return launch_host(hStream, true, fn, userData);
}
