/* shim_trace.c - trace:PATH records every allocation and free the shim
 * sees, and the pool's segment events, in the CSV that `fragpool replay`
 * reads (seq,op,id,size,stream; docs/replay.md).
 *
 * Rows go into one in-memory buffer under a mutex and reach the file in
 * large writes, so recording costs no system call per event.  The buffer
 * is flushed when full and at exit.  Ops: a (allocate), f (free), and for
 * the pool's segments s (reserved from the driver) and r (released), which
 * replay skips.  Ids: (pool number << 40) | the pool's allocation number,
 * unique for the life of one allocation.  stream: 0 for cuMemAlloc, else a
 * small number per distinct stream, in order of first use.
 */
#include "shim.h"
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define FP_TRACE_BUF (1u << 20)
#define FP_TRACE_STREAMS 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char buf[FP_TRACE_BUF];
static size_t used;
static int fd = -1;
static uint64_t seq;
static CUstream streams[FP_TRACE_STREAMS];
static unsigned nstreams;

bool fp_trace_on(void)
{
    return fd >= 0;
}

void fp_trace_open(void)
{
    const char *path = fp_shim.conf.trace;
    if (!path[0] || strcmp(path, "off") == 0)
        return;
    char name[FP_CONF_PATH_MAX + 32];
    fp_expand_path(path, name, sizeof name);
    fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fp_say("trace: cannot open '%s'; recording nothing", name);
        return;
    }
    static const char header[] = "seq,op,id,size,stream\n";
    memcpy(buf, header, sizeof header - 1);
    used = sizeof header - 1;
}

static void flush_locked(void)
{
    for (size_t off = 0; off < used;) {
        ssize_t w = write(fd, buf + off, used - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    used = 0;
}

void fp_trace_flush(void)
{
    if (fd < 0)
        return;
    pthread_mutex_lock(&lock);
    flush_locked();
    pthread_mutex_unlock(&lock);
}

/* fork: the child must not write the parent's rows again, nor inherit a
 * held lock.  The parent's buffer stays the parent's. */
void fp_trace_fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

void fp_trace_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

void fp_trace_fork_child(void)
{
    if (fd >= 0)
        close(fd);
    fd = -1;
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

/* Decimal digits of v at p, then c; returns the end.  snprintf would cost
 * more than the allocation it records. */
static char *put_u64(char *p, uint64_t v, char c)
{
    char tmp[20];
    int n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n)
        *p++ = tmp[--n];
    *p++ = c;
    return p;
}

void fp_trace_event(char op, uint64_t id, uint64_t size, CUstream s)
{
    if (fd < 0)
        return;
    pthread_mutex_lock(&lock);
    if (FP_TRACE_BUF - used < 96) /* a row is at most 4 x 20 digits + 6 */
        flush_locked();
    char *p = put_u64(buf + used, seq++, ',');
    *p++ = op;
    *p++ = ',';
    p = put_u64(p, id, ',');
    p = put_u64(p, size, ',');
    p = put_u64(p, stream_number(s), '\n');
    used = (size_t)(p - buf);
    pthread_mutex_unlock(&lock);
}
