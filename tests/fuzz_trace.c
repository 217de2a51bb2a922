/* fuzz_trace.c - libFuzzer harness for the trace loader (replay/fp_trace.c)
 * and the replay's id table (replay/fp_replay.c).
 *
 * The input is written to a memfd (a regular file) and loaded by name,
 * gzip or plain, through the same path `fragpool replay` takes.  Checked
 * on every input: the loader returns 0 with at least one event, each an
 * 'a' or an 'f'; or an error whose message is one line naming the file,
 * with nothing returned.  A loaded trace of up to 4096 events is then
 * replayed: every free either frees a live id or counts as unknown (an
 * `o` row the pool serves is freed at once).
 */
#include "fp_trace.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void check_replay(const fp_trace *t)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    fp_replay_result r;
    if (fp_replay(t, &o, 64u << 20, &r, NULL) != 0)
        return; /* out of host memory */
    size_t frees = 0;
    for (size_t i = 0; i < t->n; i++)
        frees += t->ev[i].op == 'f';
    /* an 'o' row the pool serves is given straight back: one free more */
    if (r.events != t->n ||
        r.stats.num_frees + r.bad_frees != frees + r.recorded_ooms - r.recorded_refused)
        abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    int fd = memfd_create("fuzz_trace", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64], err[512] = "";
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    fp_trace t;
    int rc = fp_trace_load(path, &t, err, sizeof err);
    close(fd);
    if (rc) {
        if (t.ev || t.n || !strstr(err, path) || strchr(err, '\n'))
            abort();
        return 0;
    }
    if (!t.n)
        abort();
    for (size_t i = 0; i < t.n; i++)
        if (t.ev[i].op != 'a' && t.ev[i].op != 'f' && t.ev[i].op != 'o')
            abort();
    if (t.n <= 4096)
        check_replay(&t);
    fp_trace_free(&t);
    return 0;
}
