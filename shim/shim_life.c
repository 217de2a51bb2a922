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
 * frees that arrive after ours are still forwarded safely.
 */
#include "shim_life.h"
#include "shim_advice.h"
#include "shim_clock.h"
#include "shim_framework.h"
#include "shim_host.h"
#include "shim_pools.h"
#include "shim_real.h"
#include "shim_sanitizer.h"
#include "shim_snaprec.h"
#include "shim_snapshot.h"
#include "shim_state.h"
#include "shim_summary.h"
#include "shim_trace.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

static void on_exit_handler(void)
{
    if (atomic_exchange(&fp_shim.exiting, true))
        return;
    fp_trace_flush();
    fp_snapshot_write_exit();
    if (atomic_load(&fp_shim.used)) {
        if (strcmp(fp_shim.conf.summary, "off") != 0)
            fp_advice_exit();
        fp_summary_write("shim");
    }
}

static void dump_fork_child(void);

/* fork: every lock of fragpool's is taken before (the advice's, the host
 * pool's, the pools', then the trace's: the order in which they nest), so
 * that no child inherits one held by a thread it does not have. */
static void on_fork_prepare(void)
{
    fp_advice_fork_prepare(); /* a search holds it while it reads a pool's record */
    fp_host_fork_prepare(); /* a fence pass holds it while it enters the gate */
    fp_pools_fork_prepare();
    fp_trace_fork_prepare();
}

static void on_fork_parent(void)
{
    fp_trace_fork_parent();
    fp_pools_fork_after(false);
    fp_host_fork_after(false);
    fp_advice_fork_after(false);
}

static void on_fork_child(void)
{
    /* The child inherits the parent's pools but not its CUDA state: it
     * writes no summary unless it allocates through fragpool itself, and
     * records no trace (the parent's rows are the parent's). */
    atomic_store(&fp_shim.used, false);
    fp_trace_fork_child();
    fp_pools_fork_after(true);
    fp_host_fork_after(true);
    fp_advice_fork_after(true);
    dump_fork_child();
}

/* ---- dump_on_sigusr1: the handler only writes a byte to a pipe; a thread
 * of ours reads it and writes the summary outside signal context. ------- */

static int dump_pipe[2] = {-1, -1};

static void on_sigusr1(int sig)
{
    (void)sig;
    int saved = errno;
    char c = 1;
    ssize_t w = write(dump_pipe[1], &c, 1);
    (void)w;
    errno = saved;
}

static void *dump_thread(void *arg)
{
    (void)arg;
    unsigned n = 0;
    char c;
    while (read(dump_pipe[0], &c, 1) > 0 || errno == EINTR)
        if (!atomic_load(&fp_shim.exiting)) {
            fp_summary_dump(++n);
            fp_snapshot_dump(n);
        }
    return NULL;
}

/* Before main: only a pipe and the handler, so that an early SIGUSR1 is
 * queued rather than fatal.  The thread starts with the first CUDA call. */
static void arm_sigusr1(void)
{
    if (pipe2(dump_pipe, O_CLOEXEC) != 0)
        return;
    fcntl(dump_pipe[1], F_SETFL, O_NONBLOCK);
    struct sigaction sa = {.sa_handler = on_sigusr1, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
}

static void start_dump_thread(void)
{
    pthread_t t;
    if (dump_pipe[0] >= 0 && pthread_create(&t, NULL, dump_thread, NULL) == 0)
        pthread_detach(t);
}

/* A forked child must not write into its parent's pipe, which the
 * parent's thread reads: SIGUSR1 sent to the child would dump the parent.
 * The child gets a pipe of its own.  It has no dump thread (threads do not
 * survive fork, and starting one in a child of a threaded process is not
 * safe), so its SIGUSR1 dumps nothing; the handler stays, so the signal
 * still does not kill it. */
static void dump_fork_child(void)
{
    int p[2], old[2] = {dump_pipe[0], dump_pipe[1]};
    if (old[0] < 0)
        return;
    if (pipe2(p, O_CLOEXEC) != 0)
        p[0] = p[1] = -1;   /* the handler's write then fails harmlessly */
    else
        fcntl(p[1], F_SETFL, O_NONBLOCK);
    dump_pipe[0] = p[0];
    dump_pipe[1] = p[1];
    close(old[0]);
    close(old[1]);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void)
{
    if (fp_real_resolve() != 0)
        return;
    fp_fw_first_call(&fp_shim.conf);
    fp_tools_detect();   /* before any pool: passthrough or not, for good */
    fp_clock_start();
    fp_trace_open();
    start_dump_thread();
    atexit(on_exit_handler);
    pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
    fp_snap_open();   /* after: its fork handler takes its lock before the pools' */
    fp_shim.ready = true;
}

bool fp_shim_init(void)
{
    pthread_once(&once, setup);
    return fp_shim.ready;
}
