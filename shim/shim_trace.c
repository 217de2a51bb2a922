/* shim_trace.c - trace:PATH records every allocation and free the shim
 * sees, and the pool's segment events, in the CSV that `fragpool replay`
 * reads (seq,op,id,size,stream,thread; docs/replay.md).
 *
 * Order: a replay runs the rows in file order, so the rows of different
 * threads must be in the order their calls changed the pools and the
 * threads' caches.  While a trace records, each allocation and free holds
 * the order lock (fp_tracer_order_begin) from before it touches a pool
 * or a cache until its row is written, and so do a thread's joining and
 * leaving of a pool's front end ('j' with the thread cache bytes, 'l').
 * Recording thus serialises the program's allocations; the caches decide
 * as they would unrecorded.  The lock is outermost but for the summary's
 * (shim_life.c's list), reentrant for its own thread (a join inside an
 * allocation).  thread: a number per thread, 1, 2, ... in order of its
 * first row.
 *
 * Rows go into one in-memory buffer under a mutex and reach the file in
 * large writes, so recording costs no system call per event.  The buffer
 * is flushed when full and at exit.  Ops: a (allocate), f (free), and for
 * the pool's segments s (reserved from the driver) and r (released), which
 * replay skips.  Ids: (pool number << 40) | the pool's allocation number,
 * unique for the life of one allocation.  stream: 0 for cuMemAlloc, else a
 * small number per distinct stream, in order of first use.
 *
 * The file (docs/files.md): the name must expand whole; it is opened by
 * fp_file_create (O_EXCL for a fresh name, O_NOFOLLOW, never a FIFO, a
 * device, or another user's file).  A failed open records nothing; a
 * failed write stops the recording; a failed close at exit is reported.
 * Each is one line on stderr naming the file, so an incomplete trace is
 * never mistaken for a whole one.  fp_tracer_fd is atomic: the exit handler and a
 * failed write close it while other threads check it.
 *
 * Writes never raise SIGXFSZ (fp_write_capped): past RLIMIT_FSIZE a write
 * fails with EFBIG, the recording stops with its line, the program runs
 * on.  At exit the lock is only tried until the exit deadline
 * (shim_exitlock.h): exit() from a signal handler that interrupted a row
 * must not hang; the caller then says the trace is incomplete.
 */
#include "shim_trace.h"
#include "shim_exitlock.h"
#include "fp_file.h"
#include "fp_text.h"
#include "shim_path.h"
#include "shim_state.h"
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define FP_TRACE_BUF     (1u << 20)
#define FP_TRACE_STREAMS 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char buf[FP_TRACE_BUF];
static size_t used;
atomic_int fp_tracer_fd = -1;
static char name[FP_OUT_PATH_MAX];
static uint64_t written; /* bytes that reached the file */
static uint64_t seq;
static CUstream streams[FP_TRACE_STREAMS];
static unsigned nstreams;
static pthread_mutex_t order = PTHREAD_MUTEX_INITIALIZER;
static FP_THREAD_LOCAL unsigned order_depth; /* this thread holds order       */
static FP_THREAD_LOCAL uint64_t my_thread;   /* this thread's number; 0: none */
static atomic_ullong next_thread = 1;

bool fp_tracer_order_lock(void)
{
    if (order_depth++ == 0)
        pthread_mutex_lock(&order);
    return true;
}

void fp_tracer_order_unlock(void)
{
    if (--order_depth == 0)
        pthread_mutex_unlock(&order);
}

void fp_tracer_order_fork_prepare(void)
{
    pthread_mutex_lock(&order);
}

void fp_tracer_order_fork_after(bool child)
{
    if (child)
        pthread_mutex_init(&order, NULL);
    else
        pthread_mutex_unlock(&order);
}

void fp_tracer_open(void)
{
    const char *path = fp_shim.conf.trace;
    if (!path[0] || strcmp(path, "off") == 0)
        return;
    static char why[FP_OUT_PATH_MAX + 256];
    if (fp_path_expand(path, name, sizeof name, why, sizeof why)) {
        fp_say("trace: %s; recording nothing", why);
        return;
    }
    int f;
    if (fp_path_claim("trace", path, name, sizeof name, why, sizeof why)) {
        fp_say("trace: %s; recording nothing", why);
        return;
    }
    if (fp_file_create(name, &f, why, sizeof why)) {
        fp_say("trace: cannot write '%s': %s; recording nothing", name, why);
        return;
    }
    static const char header[] = "seq,op,id,size,stream,thread\n";
    fp_path_claimed("trace", path, f, name);
    memcpy(buf, header, sizeof header - 1);
    used = sizeof header - 1;
    atomic_store(&fp_tracer_fd, f);
}

/* Closes the trace after what; one line when that, or the close, failed. */
static void stop_locked(int err, const char *what)
{
    int f = atomic_exchange(&fp_tracer_fd, -1);
    if (close(f) != 0 && !err) {
        err = errno;
        what = "closing";
    }
    if (err)
        fp_say("trace: %s '%s' after %llu bytes: %s; the trace is incomplete", what, name,
               (unsigned long long)written, strerror(err));
}

static void flush_locked(void)
{
    int f = atomic_load_explicit(&fp_tracer_fd, memory_order_relaxed);
    for (size_t off = 0; f >= 0 && off < used;) {
        ssize_t w = fp_write_capped(f, buf + off, used - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            stop_locked(w < 0 ? errno : EIO, "writing to");
            break;
        }
        off += (size_t)w;
        written += (uint64_t)w;
    }
    used = 0;
}

/* At exit: the last rows, then the close, both checked.  false when the
 * lock could not be had by the deadline (nothing written). */
bool fp_tracer_flush(const struct timespec *by)
{
    if (!fp_tracer_on())
        return true;
    if (!fp_exit_lock(&lock, by))
        return false;
    flush_locked();
    if (atomic_load(&fp_tracer_fd) >= 0)
        stop_locked(0, "");
    pthread_mutex_unlock(&lock);
    return true;
}

bool fp_tracer_lock_free(void)
{
    if (pthread_mutex_trylock(&lock) != 0)
        return false;
    pthread_mutex_unlock(&lock);
    return true;
}

/* fork: the child must not write the parent's rows again, nor inherit a
 * held lock.  The parent's buffer stays the parent's. */
void fp_tracer_fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

void fp_tracer_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

void fp_tracer_fork_child(void)
{
    int f = atomic_exchange(&fp_tracer_fd, -1);
    if (f >= 0)
        close(f);
    used = 0;
    pthread_mutex_init(&lock, NULL);
}

static unsigned stream_number(CUstream s)
{
    if (!s)
        return 0;
    for (unsigned i = 0; i < nstreams; i++)
        if (streams[i] == s)
            return i + 1;
    if (nstreams < FP_TRACE_STREAMS)
        streams[nstreams++] = s;
    return nstreams;
}

/* Decimal digits of v at p (base/'s fp_fmt_u64), then c; returns the
 * end.  snprintf would cost more than the allocation it records. */
static char *put_u64(char *p, uint64_t v, char c)
{
    p += fp_fmt_u64(p, v);
    *p++ = c;
    return p;
}

void fp_tracer_event(char op, uint64_t id, uint64_t size, CUstream s)
{
    if (!fp_tracer_on())
        return;
    pthread_mutex_lock(&lock);
    if (atomic_load_explicit(&fp_tracer_fd, memory_order_relaxed) < 0) { /* stopped meanwhile */
        pthread_mutex_unlock(&lock);
        return;
    }
    if (!my_thread)
        my_thread = atomic_fetch_add_explicit(&next_thread, 1, memory_order_relaxed);
    if (FP_TRACE_BUF - used < 128) /* a row is at most 5 x 20 digits + 7 */
        flush_locked();
    char *p = put_u64(buf + used, seq++, ',');
    *p++ = op;
    *p++ = ',';
    p = put_u64(p, id, ',');
    p = put_u64(p, size, ',');
    p = put_u64(p, stream_number(s), ',');
    p = put_u64(p, my_thread, '\n');
    used = (size_t)(p - buf);
    pthread_mutex_unlock(&lock);
}
