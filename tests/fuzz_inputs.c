/* fuzz_inputs.c - libFuzzer harness for the readers of RMM logs
 * (replay/trace_rmm.c) and of PyTorch snapshot pickles
 * (replay/fp_unpickle.c, replay/trace_pickle.c).
 *
 * The first byte picks the reader: odd, the rest follows RMM's header;
 * even, it follows PROTO 2 (so most inputs reach the opcodes).  The file
 * goes through fp_trace_load by name (a memfd), as `fragpool replay` reads
 * it.  The unpickler also runs on the raw input.  Checked on every input:
 * success gives events of op a, f or o only; failure gives one line naming
 * the file and nothing else; the unpickler's tree holds only valid node
 * indices, every string's id is the first string of its bytes, and every
 * dict holds its string keys once each, sorted by id (fp_pkeys.c).
 */
#include "fp_trace.h"
#include "fp_unpickle.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void check_tree(const unsigned char *data, size_t size)
{
    fp_pdoc d;
    char err[512] = "";
    if (fp_unpickle(data, size, "raw", &d, err, sizeof err)) {
        if (d.n || d.node || strchr(err, '\n') || strncmp(err, "raw: ", 5))
            abort();
        return;
    }
    if (d.root >= d.n)
        abort();
    for (size_t i = 0; i < d.n; i++) {
        const fp_pv *v = &d.node[i];
        if (v->type >= FP_PV_LIST)
            for (uint32_t j = 0; j < v->n; j++)
                if (v->v.items[j] >= d.n)
                    abort();
        if (v->type == FP_PV_STR && (v->v.s.off > size || v->v.s.len > size - v->v.s.off))
            abort();
        if (v->type == FP_PV_STR &&
            (v->key > i || d.node[v->key].type != FP_PV_STR || d.node[v->key].key != v->key))
            abort(); /* a string's id is the first string of its bytes */
        if (v->type == FP_PV_DICT && (v->n % 2 || v->key > v->n / 2))
            abort();
        for (uint32_t j = 1; v->type == FP_PV_DICT && j < v->key; j++)
            if (d.node[v->v.items[2 * j - 2]].key >= d.node[v->v.items[2 * j]].key)
                abort(); /* string keys once each, sorted by id */
    }
    fp_pdoc_free(&d);
}

static void check_load(const unsigned char *data, size_t size)
{
    static const char rmm[] = "Thread,Time,Action,Pointer,Size,Stream\n";
    int fd = memfd_create("fuzz_inputs", MFD_CLOEXEC);
    if (fd < 0)
        return;
    int ok = 1;
    if (data[0] & 1)
        ok = write(fd, rmm, sizeof rmm - 1) == (ssize_t)(sizeof rmm - 1);
    else
        ok = write(fd, "\x80\x02", 2) == 2;
    if (ok && size > 1)
        ok = write(fd, data + 1, size - 1) == (ssize_t)(size - 1);
    if (!ok) {
        close(fd);
        return;
    }
    char path[64], err[512] = "";
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    fp_trace t;
    int rc = fp_trace_load(path, &t, err, sizeof err);
    close(fd);
    if (rc) {
        if (t.ev || t.n || !strstr(err, path) || strchr(err, '\n'))
            abort();
        return;
    }
    if (!t.n)
        abort();
    for (size_t i = 0; i < t.n; i++)
        if (!strchr("afo", t.ev[i].op) || !t.ev[i].op)
            abort();
    fp_trace_free(&t);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    check_tree(data, size);
    if (size)
        check_load(data, size);
    return 0;
}
