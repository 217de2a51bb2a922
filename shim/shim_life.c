/* shim_life.c - the shim's lifetime: configuration before main, setup on
 * the first CUDA call, fork, and exit.  The one orchestrator of shim/: it
 * calls the core files (state, real, clock, framework, trace, pools,
 * summary) in the order setup, fork and exit need, none of them calls it,
 * and only the interposers call fp_shim_init.
 *
 * Before main (constructor) fragpool only reads FRAGPOOL_CONF (or, when
 * it is unset, PyTorch's variables: shim_framework.c): parsing is pure,
 * and with strict:1 a bad config ends the process with status 2.
 * Everything that touches the driver waits for the first CUDA call
 * (pthread_once).  The exit handler writes the summary and makes no CUDA
 * call: the runtime tears the driver down in handlers of its own, and
 * frees that arrive after ours are still forwarded safely.  It waits for
 * no lock without a bound (exit() may come from a signal handler that
 * interrupted fragpool): what it cannot have in time it skips, in one line.
 */
#include "shim_life.h"
#include "shim_advice.h"
#include "shim_clock.h"
#include "shim_defer.h"
#include "shim_exitlock.h"
#include "shim_framework.h"
#include "shim_host.h"
#include "shim_lend.h"
#include "shim_path.h"
#include "shim_pools.h"
#include "shim_real.h"
#include "shim_sanitizer.h"
#include "shim_snaprec.h"
#include "shim_snapfile.h"
#include "shim_state.h"
#include "shim_summary.h"
#include "shim_trace.h"
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- configuration, before main ------------------------------------------- */

/* Kept whole or not at all (the summary counts the others: "... and N
 * more"); every problem is printed on stderr. */
static void keep_problem(void *ud, const char *line)
{
    (void)ud;
    size_t used = strlen(fp_shim.conf_errors), n = strlen(line);
    if (n + 2 <= sizeof fp_shim.conf_errors - used) {
        memcpy(fp_shim.conf_errors + used, line, n);
        memcpy(fp_shim.conf_errors + used + n, "\n", 2);
    }
    fp_shim.nconf_errors++;
    size_t len = strlen(line);
    ssize_t w = write(2, line, len);
    w = write(2, "\n", 1);
    (void)w;
}

static void arm_sigusr1(void);

__attribute__((constructor)) static void fp_shim_configure(void)
{
    fp_conf_default(&fp_shim.conf);
    int problems = fp_fw_read_conf(&fp_shim.conf, keep_problem, NULL);
    if (problems && fp_shim.conf.strict) {
        fp_say("strict:1 and %d problem%s in %s: exiting with status 2", problems,
               problems == 1 ? "" : "s", fp_fw_conf_source());
        _exit(2);
    }
    if (fp_shim.conf.dump_on_sigusr1)
        arm_sigusr1();
}

/* ---- first call, fork, exit ---------------------------------------------- */

/* exit() may run in a signal handler that interrupted this thread inside
 * fragpool, holding one of its locks: the handler waits for no lock past
 * one deadline (shim_exitlock.h).  The locks the trace, the snapshot, the
 * advice and the summary take (every pool's and its deferral's, the host
 * pool's, the recorder's, the trace's) are tried first, all together:
 * only when this thread holds none of them may it wait for one (another
 * thread gives it back; were this thread holding one, a thread holding
 * the next could be waiting for it).  Else all of it is skipped, and one
 * line says so. */
static void probe_pool(fp_ctx_pool *d, void *ud)
{
    bool *ok = ud;
    if (*ok && (!fp_pool_lock_free(d->pool) || (d->defer && !fp_defer_lock_free(d->defer))))
        *ok = false;
}

static bool shared_locks_free(void *ud)
{
    (void)ud;
    bool ok = true;
    fp_pools_each(probe_pool, &ok);
    return ok && fp_host_locks_free() && fp_snap_locks_free() && fp_tracer_lock_free();
}

static void wait_dump_idle(void);

static void on_exit_handler(void)
{
    if (atomic_exchange(&fp_shim.exiting, true))
        return;
    fp_lend_exit(); /* no listener makes a driver call from here on */
    wait_dump_idle();
    struct timespec by;
    fp_exit_deadline(&by);
    bool used = atomic_load(&fp_shim.used), summary = strcmp(fp_shim.conf.summary, "off") != 0;
    const char *lost[3];
    size_t n = 0;
    if (!fp_exit_wait(shared_locks_free, NULL, &by)) {
        if (fp_tracer_on())
            lost[n++] = "trace left incomplete";
        if (fp_snap_on() && used)
            lost[n++] = "snapshot skipped";
        if (used && summary)
            lost[n++] = "summary skipped";
    } else {
        if (!fp_tracer_flush(&by))
            lost[n++] = "trace left incomplete";
        fp_snapfile_write_exit();
        if (used && summary)
            fp_advice_exit();
        if (used && !fp_summary_write(fp_real_device_kind(), &by) && summary)
            lost[n++] = "summary skipped";
    }
    if (n)
        fp_say("exit while a thread was inside the allocator (exit() from a signal handler?): "
               "%s%s%s%s%s; fragpool did not wait for the lock that thread holds",
               lost[0], n > 1 ? ", " : "", n > 1 ? lost[1] : "", n > 2 ? ", " : "",
               n > 2 ? lost[2] : "");
}

static void dump_fork_child(void);

/* ---- fork: every lock of fragpool's, ranked ------------------------------ *
 *
 * The one list of fragpool's locks, outermost first: a thread that holds
 * a lock takes only locks listed after it.  The fork handlers walk it:
 * before fork every lock is taken in this order, so that no child
 * inherits one held by a thread it does not have; after, the parent gives
 * them back in reverse and the child makes them new.  A new lock is one
 * row here, in the place its nesting gives it.  A row whose locks live in
 * an interposer file (above this one: it may not be called from here) is
 * filled by that file's constructor through fp_life_rank_lock, by name. */

static void trace_fork_after(bool child)
{
    if (child)
        fp_tracer_fork_child();
    else
        fp_tracer_fork_parent();
}

static struct ranked_lock {
    const char *name;
    void (*prepare)(void);
    void (*after)(bool child);
} ranked_locks[] = {
    /* the summary writer reads everything below under it */
    {"summary", fp_summary_fork_prepare, fp_summary_fork_after},
    /* a traced allocation or free, whole, and a thread's join or leave */
    {"trace order", fp_tracer_order_fork_prepare, fp_tracer_order_fork_after},
    /* the snapshot writer walks the pools under it */
    {"snapshot ring", fp_snap_fork_prepare, fp_snap_fork_after},
    /* an OOM search reads a pool's record under it */
    {"advice", fp_advice_fork_prepare, fp_advice_fork_after},
    /* a fence pass enters the capture gate under it; then the host pool */
    {"pinned host pool", fp_host_fork_prepare, fp_host_fork_after},
    /* the table of stream-ordered blocks asks the pools under it */
    {"stream-ordered blocks", NULL, NULL}, /* shim_mempool.c */
    /* the IPC channel's answer finds a block in the pools under it */
    {"IPC registry", NULL, NULL}, /* shim_ipc.c */
    /* the C API's totals bases: a device's pools are read under it */
    {"C API bases", NULL, NULL}, /* shim_api.c */
    /* grow lock, capture gate; per pool: the pool, its deferral, its VMM */
    {"device pools", fp_pools_fork_prepare, fp_pools_fork_after},
    /* leaves: taken under a pool's lock or under none */
    {"snapshot pending", fp_snap_pending_fork_prepare, fp_snap_pending_fork_after},
    {"trace", fp_tracer_fork_prepare, trace_fork_after},
    {"IPC opens", NULL, NULL}, /* shim_ipc.c */
    {"output claims", fp_path_fork_prepare, fp_path_fork_after},
};

#define FP_NRANKED (sizeof ranked_locks / sizeof *ranked_locks)

void fp_life_rank_lock(const char *name, void (*prepare)(void), void (*after)(bool child))
{
    for (size_t i = 0; i < FP_NRANKED; i++)
        if (strcmp(ranked_locks[i].name, name) == 0) {
            ranked_locks[i].prepare = prepare;
            ranked_locks[i].after = after;
            return;
        }
    abort(); /* a row that is not in the list: a build defect */
}

static void on_fork_prepare(void)
{
    for (size_t i = 0; i < FP_NRANKED; i++)
        if (ranked_locks[i].prepare)
            ranked_locks[i].prepare();
}

static void on_fork_parent(void)
{
    for (size_t i = FP_NRANKED; i-- > 0;)
        if (ranked_locks[i].after)
            ranked_locks[i].after(false);
}

static void on_fork_child(void)
{
    /* The child inherits the parent's pools but not its CUDA state: it
     * writes no summary unless it allocates through fragpool itself, and
     * records no trace (the parent's rows are the parent's). */
    atomic_store(&fp_shim.used, false);
    fp_lend_fork_child();
    for (size_t i = FP_NRANKED; i-- > 0;)
        if (ranked_locks[i].after)
            ranked_locks[i].after(true);
    dump_fork_child();
}

/* ---- dump_on_sigusr1: the handler only posts a semaphore (sem_post is
 * async-signal-safe, and a semaphore holds no descriptor that a program
 * closing descriptors it did not open could take over); a thread of ours
 * waits on it and writes the summary outside signal context.  A handler
 * some library installed before ours is called after ours (chained). -- */

static sem_t dump_sem;
static atomic_bool dump_armed; /* the semaphore and the handler are set */
static atomic_bool dump_busy;  /* the dump thread is writing            */
static struct sigaction prev_usr1;

static void on_sigusr1(int sig, siginfo_t *info, void *uc)
{
    int saved = errno;
    sem_post(&dump_sem);
    errno = saved;
    if (prev_usr1.sa_flags & SA_SIGINFO)
        prev_usr1.sa_sigaction(sig, info, uc);
    else if (prev_usr1.sa_handler != SIG_DFL && prev_usr1.sa_handler != SIG_IGN)
        prev_usr1.sa_handler(sig);
}

static void *dump_thread(void *arg)
{
    (void)arg;
    unsigned n = 0;
    for (;;) {
        if (sem_wait(&dump_sem) != 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        atomic_store(&dump_busy, true);
        if (!atomic_load(&fp_shim.exiting)) {
            fp_summary_dump(++n);
            fp_snapfile_dump(n);
        }
        atomic_store(&dump_busy, false);
    }
}

/* Before main: only the semaphore and the handler, so that an early
 * SIGUSR1 is counted rather than fatal.  The thread starts with the first
 * CUDA call, last of the setup (it reads what the setup makes). */
static void arm_sigusr1(void)
{
    if (sem_init(&dump_sem, 0, 0) != 0 || sigaction(SIGUSR1, NULL, &prev_usr1) != 0)
        return;
    struct sigaction sa = {.sa_sigaction = on_sigusr1, .sa_flags = SA_RESTART | SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return;
    atomic_store(&dump_armed, true);
    if ((prev_usr1.sa_flags & SA_SIGINFO) ||
        (prev_usr1.sa_handler != SIG_DFL && prev_usr1.sa_handler != SIG_IGN))
        fp_say("dump_on_sigusr1: SIGUSR1 already had a handler (set before fragpool's); "
               "fragpool dumps, then calls that handler");
}

/* The thread blocks every signal: a signal for the process is never run
 * on it, so it is never the thread an exit() from a handler interrupted. */
static void start_dump_thread(void)
{
    if (!atomic_load(&dump_armed))
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    if (pthread_create(&t, NULL, dump_thread, NULL) == 0)
        pthread_detach(t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static bool dump_idle(void *ud)
{
    (void)ud;
    return !atomic_load(&dump_busy);
}

/* At exit: a dump under way finishes first (bounded: it may wait for a
 * lock the exiting thread holds). */
static void wait_dump_idle(void)
{
    struct timespec by;
    fp_exit_deadline(&by);
    by.tv_sec += 2;
    fp_exit_wait(dump_idle, NULL, &by);
}

/* A forked child has no dump thread (threads do not survive fork, and
 * starting one in a child of a threaded process is not safe), so its
 * SIGUSR1 dumps nothing; the handler stays, so the signal still does not
 * kill it, and posts to the child's own fresh semaphore, on which no
 * thread waits. */
static void dump_fork_child(void)
{
    if (atomic_load(&dump_armed))
        sem_init(&dump_sem, 0, 0);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void)
{
    if (fp_real_resolve() != 0)
        return;
    fp_fw_first_call(&fp_shim.conf);
    fp_tools_detect(); /* before any pool: passthrough or not, for good */
    fp_clock_start();
    fp_tracer_open();
    atexit(on_exit_handler);
    pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
    fp_snap_open();
    start_dump_thread(); /* last: a dump reads the trace and the snapshot's ring */
    fp_shim.ready = true;
}

bool fp_shim_init_slow(void)
{
    pthread_once(&once, setup);
    atomic_store_explicit(&fp_shim.set_up, true, memory_order_release);
    return fp_shim.ready;
}
