/* shim_lend.c - lending idle device memory between the fragpool processes
 * of one user on one GPU: joining, the listener, the ask (shim_lend.h says
 * what it keeps; docs/lending.md says why it is built so).
 *
 * Joining happens once per device, at its first pooled allocation: the
 * GPU's UUID names the rendezvous file (shim_lendtab.c), and a listener
 * thread starts, every signal blocked, waiting in the kernel until a peer
 * rings.  It answers by trimming the device's pools (fp_pool_trim_try:
 * oldest idle memory first, each page or segment after the work of its
 * last free; a classic pool after its context is synchronized) up to the
 * bytes asked, for at most half of lend_wait_ms while a pool's lock is
 * busy, and replies with what it gave back and what it still holds idle.
 *
 * The asking thread holds no lock of fragpool's while it waits (the
 * caller, shim_core.c, asks between two tries of the allocation).
 *
 * Exit: fp_lend_exit stops the listeners before the summary (so none
 * makes a driver call while the process tears down), waiting for an
 * answer under way no longer than the exit handler's bound
 * (shim_exitlock.h), and gives the slots back.
 */
#include "shim_lend.h"
#include "fp_advise.h"
#include "shim_clock.h"
#include "shim_exitlock.h"
#include "shim_real.h"
#include "shim_state.h"
#include "shim_streams.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#define FP_LEND_SHOWN 4 /* peers an OOM message names */

typedef struct lend_dev {
    fp_lendtab *tab;
    CUdevice dev;
    bool joined;           /* ever: its counters are the summary's */
    atomic_bool running;   /* the listener thread is in its loop    */
    atomic_bool answering; /* ... and inside an answer              */
#define FP_LEND_ATOMIC(field, key, one, many, kind) atomic_ullong field;
    FP_LEND_COUNTS(FP_LEND_ATOMIC)
#undef FP_LEND_ATOMIC
} lend_dev;

atomic_int fp_lend_state[FP_LEND_DEVICES];
static lend_dev devs[FP_LEND_DEVICES];

/* This thread's last ask, for its OOM message.  Plain _Thread_local, not
 * FP_THREAD_LOCAL's initial-exec: read only after an OOM, and too big for
 * the spare static TLS a dlopen of the shim may have to fit in. */
typedef struct last_ask {
    bool valid;
    CUdevice dev;
    unsigned asked, answered, ignored, wait_ms, waited_ms;
    uint64_t want, released;
    fp_lend_peer peer[FP_LEND_SHOWN];
} last_ask;
static _Thread_local last_ask last;

/* ---- the listener -------------------------------------------------------- */

typedef struct release_req {
    CUdevice dev;
    size_t want, got;
    size_t idle;       /* idle bytes left in the pools it could read */
    uint64_t until_ns; /* no waiting for a busy pool past this */
} release_req;

static void nap_ms(void)
{
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
}

/* The pool's idle bytes, waiting for its lock only by trylock, until
 * until_ns: 0, or EBUSY. */
static int idle_of(fp_ctx_pool *d, const release_req *r, size_t *idle)
{
    int err;
    while ((err = fp_pool_idle_try(d->pool, idle)) == EBUSY && fp_clock_mono_ns() < r->until_ns)
        nap_ms();
    return err;
}

/* Gives back up to left bytes of d's idle memory, oldest first, in d's
 * context; the bytes given back. */
static size_t trim_pool(fp_ctx_pool *d, const release_req *r, size_t left)
{
    if (!fp_pool_is_vmm(d->pool) && (fp_streams_capturing() || fp_pools_sync(d)))
        return 0; /* classic segments go back once the context is done */
    size_t held = fp_pool_reserved_bytes(d->pool), bytes = 0;
    size_t keep = held > left ? held - left : 0;
    CUcontext popped;
    if (fp_real.cuCtxPushCurrent_v2(d->ctx) != CUDA_SUCCESS)
        return 0;
    while (fp_pool_trim_try(d->pool, keep, &bytes) == EBUSY && fp_clock_mono_ns() < r->until_ns)
        nap_ms();
    fp_real.cuCtxPopCurrent_v2(&popped);
    return bytes;
}

static void release_pool(fp_ctx_pool *d, void *ud)
{
    release_req *r = ud;
    size_t idle = 0, bytes = 0;
    if (d->dev != r->dev || fp_pools_retired(d) || idle_of(d, r, &idle) || !idle)
        return;
    if (r->got < r->want)
        bytes = trim_pool(d, r, r->want - r->got);
    r->got += bytes;
    r->idle += idle > bytes ? idle - bytes : 0;
}

static void answer(lend_dev *L, const fp_lend_asks *a)
{
    release_req r = {L->dev, a->want ? a->want : SIZE_MAX, 0, 0,
                     fp_clock_mono_ns() + (uint64_t)fp_shim.conf.lend_wait_ms * 500000ull};
    if (a->askers)
        fp_pools_each(release_pool, &r);
    fp_lendtab_answer(L->tab, a, r.got, r.idle);
    atomic_fetch_add(&L->answers, (uint64_t)__builtin_popcountll(a->askers));
    atomic_fetch_add(&L->lent, r.got);
    atomic_fetch_add(&L->refused, a->refused);
}

static void *listen_main(void *arg)
{
    lend_dev *L = arg;
    fp_lend_asks a;
    while (fp_lendtab_wait(L->tab, &a) == 0) {
        atomic_store(&L->answering, true); /* then exiting: see fp_lend_exit */
        if (atomic_load(&fp_shim.exiting)) {
            atomic_store(&L->answering, false);
            break;
        }
        answer(L, &a);
        atomic_store(&L->answering, false);
    }
    atomic_store(&L->running, false);
    return NULL;
}

/* Every signal blocked: a signal for the process never runs on it. */
static int start_listener(lend_dev *L)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 << 10);
    int err = pthread_create(&t, &at, listen_main, L);
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return err;
}

/* ---- joining --------------------------------------------------------------- */

static int join_dev(lend_dev *L, CUdevice dev)
{
    CUuuid u;
    char why[200] = "";
    if (!fp_real.cuDeviceGetUuid || fp_real.cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) {
        fp_say("lend: the driver gives no UUID for device %d; this process neither lends nor "
               "borrows memory there",
               dev);
        return ENODEV;
    }
    int err = fp_lendtab_join(fp_shim.conf.lend_dir, (const unsigned char *)u.bytes, &L->tab, why,
                              sizeof why);
    if (err) {
        fp_say("lend: cannot use the rendezvous in lend_dir %s for device %d (%s); this process "
               "neither lends nor borrows memory there",
               fp_shim.conf.lend_dir, dev, why);
        return err;
    }
    L->dev = dev;
    atomic_store(&L->running, true);
    if ((err = start_listener(L)) != 0) {
        atomic_store(&L->running, false);
        fp_say("lend: cannot start the listener thread for device %d (%s); this process "
               "neither lends nor borrows memory there",
               dev, strerror(err));
        fp_lendtab_leave(L->tab);
        L->tab = NULL;
    }
    L->joined = !err;
    return err;
}

void fp_lend_join(fp_ctx_pool *d)
{
    CUdevice dev = d->dev;
    int none = FP_LEND_NONE;
    if (!atomic_compare_exchange_strong(&fp_lend_state[dev], &none, FP_LEND_JOINING))
        return;
    bool ok = fp_shim.conf.lend && !atomic_load(&fp_shim.exiting) && join_dev(&devs[dev], dev) == 0;
    atomic_store(&fp_lend_state[dev], ok ? FP_LEND_JOINED : FP_LEND_OFF);
}

/* ---- asking ------------------------------------------------------------------ */

static bool device_ran_out(fp_ctx_pool *d, size_t size)
{
    fp_oom_info o;
    fp_pool_last_oom(d->pool, &o);
    return o.requested == size && !o.over_cap && !o.host && o.backend_err == ENOMEM;
}

static void keep_last(CUdevice dev, const fp_lend_round *r)
{
    last = (last_ask){.valid = true,
                      .dev = dev,
                      .asked = r->asked,
                      .answered = r->answered,
                      .ignored = r->ignored,
                      .wait_ms = r->wait_ms,
                      .waited_ms = (unsigned)(r->waited_ns / 1000000u),
                      .want = r->want,
                      .released = r->released};
    for (unsigned i = 0; i < r->asked && i < FP_LEND_SHOWN; i++)
        last.peer[i] = r->peer[i];
}

bool fp_lend_ask(fp_ctx_pool *d, size_t size)
{
    unsigned dev = (unsigned)d->dev;
    last.valid = false;
    if (dev >= FP_LEND_DEVICES || atomic_load(&fp_lend_state[dev]) != FP_LEND_JOINED ||
        !device_ran_out(d, size))
        return false;
    lend_dev *L = &devs[dev];
    fp_oom_info o;
    fp_pool_last_oom(d->pool, &o);
    uint64_t want = o.segment > o.rounded ? o.segment : o.rounded;
    fp_lend_round r;
    fp_lendtab_ask(L->tab, want, (unsigned)fp_shim.conf.lend_wait_ms, &r);
    keep_last(d->dev, &r);
    if (!r.asked)
        return false;
    atomic_fetch_add(&L->asks, 1);
    atomic_fetch_add(&L->borrowed, r.released);
    atomic_fetch_add(&L->wait_us, r.waited_ns / 1000u);
    atomic_fetch_add(&L->no_answer, r.asked - r.answered);
    return r.released > 0;
}

void fp_lend_served(fp_ctx_pool *d)
{
    fp_pool_oom_averted(d->pool);
    if ((unsigned)d->dev < FP_LEND_DEVICES)
        atomic_fetch_add(&devs[d->dev].asks_served, 1);
}

static void put_peer(fp_sink *s, const fp_lend_peer *p, unsigned wait_ms)
{
    fp_puts(s, "pid ");
    fp_put_u64(s, (uint64_t)p->pid);
    if (!p->answered) {
        fp_puts(s, " did not answer in ");
        fp_put_u64(s, wait_ms);
        fp_puts(s, " ms");
        return;
    }
    fp_puts(s, " gave back ");
    fp_advise_put_mib(s, p->released);
    fp_puts(s, " and holds ");
    fp_advise_put_mib(s, p->idle);
    fp_puts(s, " idle");
}

void fp_lend_oom_lines(CUdevice dev, fp_sink *s)
{
    if (!last.valid || last.dev != dev || !last.asked)
        return;
    fp_puts(s, "fragpool: lending: asked ");
    fp_put_u64(s, last.asked);
    fp_puts(s, last.asked == 1 ? " other fragpool process" : " other fragpool processes");
    fp_puts(s, " on this GPU for ");
    fp_advise_put_mib(s, last.want);
    fp_puts(s, "; they gave back ");
    fp_advise_put_mib(s, last.released);
    fp_puts(s, " in ");
    fp_put_u64(s, last.waited_ms);
    fp_puts(s, " ms, not enough (");
    for (unsigned i = 0; i < last.asked && i < FP_LEND_SHOWN; i++) {
        if (i)
            fp_puts(s, "; ");
        put_peer(s, &last.peer[i], last.wait_ms);
    }
    if (last.asked > FP_LEND_SHOWN) {
        fp_puts(s, "; and ");
        fp_put_u64(s, last.asked - FP_LEND_SHOWN);
        fp_puts(s, " more");
    }
    fp_puts(s, ")\n");
}

bool fp_lend_counts_get(CUdevice dev, fp_lend_counts *out)
{
    if ((unsigned)dev >= FP_LEND_DEVICES || !devs[dev].joined)
        return false;
    const lend_dev *L = &devs[dev];
#define FP_LEND_READ(field, key, one, many, kind) out->field = atomic_load(&L->field);
    FP_LEND_COUNTS(FP_LEND_READ)
#undef FP_LEND_READ
    return true;
}

/* ---- exit and fork ------------------------------------------------------------ */

static bool listener_gone(void *ud)
{
    return !atomic_load(&((lend_dev *)ud)->running);
}

void fp_lend_exit(void)
{
    for (int d = 0; d < FP_LEND_DEVICES; d++) {
        if (atomic_load(&fp_lend_state[d]) != FP_LEND_JOINED)
            continue;
        lend_dev *L = &devs[d];
        atomic_store(&fp_lend_state[d], FP_LEND_OFF); /* no new ask */
        fp_lendtab_stop(L->tab);
        struct timespec by;
        fp_exit_deadline(&by);
        if (fp_exit_wait(listener_gone, L, &by)) /* else its thread still uses the table */
            fp_lendtab_leave(L->tab);
        L->tab = NULL;
    }
}

/* The child has no CUDA of its own to lend: every device is off in it. */
void fp_lend_fork_child(void)
{
    for (int d = 0; d < FP_LEND_DEVICES; d++) {
        if (atomic_load(&fp_lend_state[d]) == FP_LEND_JOINED)
            fp_lendtab_fork_child(devs[d].tab);
        atomic_store(&fp_lend_state[d], FP_LEND_OFF);
    }
}
