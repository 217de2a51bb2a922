/* fp_trace.c - loading allocation traces (docs/replay.md, "The trace
 * format"; docs/files.md): the dispatcher.
 *
 * The file is opened with fp_file_open_read (a regular file, never a FIFO
 * or a device, opened without blocking) and read through zlib, gzip or
 * plain.  Its first bytes pick the reader, by content, never by name:
 * a pickle (PyTorch's memory snapshot, trace_pickle.c), RMM's
 * logging_resource_adaptor CSV (trace_rmm.c), or fragpool's own CSV
 * (trace_csv.c).
 *
 * Invariants: every failure is one line in err naming the file and the
 * line (and for a zlib error the byte) where it happened; nothing is
 * returned on failure (the trace is freed); a file that ends inside a
 * gzip stream, fails its CRC, or holds no event is a failure, never a
 * shorter trace.
 */
#include "trace_read.h"
#include "fp_file.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* ---- which format ----------------------------------------------------- */

/* The reader for the file's first bytes: a pickle starts with PROTO
 * (0x80), an RMM log with its header "Thread,Time,Action"; anything else
 * is read as fragpool's own CSV. */
static int read_any(fp_reader *r, fp_trace *t)
{
    static const char rmm[] = "Thread,Time,Action";
    int rc = fp_reader_fill(r);
    if (rc)
        return rc;
    const char *c = r->chunk;
    size_t n = r->end;
    if (n && (unsigned char)c[0] == 0x80) {
        t->format = "PyTorch snapshot";
        rc = fp_trace_read_pickle(r, t);
    } else if (n >= sizeof rmm - 1 && !memcmp(c, rmm, sizeof rmm - 1)) {
        t->format = "RMM log";
        rc = fp_trace_read_rmm(r, t);
    } else {
        t->format = "fragpool CSV";
        rc = fp_trace_read_csv(r, t);
    }
    if (!rc && !t->n && !r->lineno) {
        snprintf(r->err, r->errlen, "%s: no events: the file is empty", r->path);
        rc = EINVAL;
    } else if (!rc && !t->n) {
        snprintf(r->err, r->errlen, "%s: no events in %zu line%s (an empty trace)", r->path,
                 r->lineno, r->lineno == 1 ? "" : "s");
        rc = EINVAL;
    }
    return rc;
}

static int open_gz(const char *path, gzFile *f, char *err, size_t errlen)
{
    char why[128];
    int fd, rc = fp_file_open_read(path, &fd, why, sizeof why);
    if (rc) {
        snprintf(err, errlen, "cannot read trace '%s': %s", path, why);
        return rc;
    }
    *f = gzdopen(fd, "rb");
    if (!*f) {
        close(fd);
        snprintf(err, errlen, "cannot read trace '%s': out of memory", path);
        return ENOMEM;
    }
    gzbuffer(*f, TRACE_CHUNK);
    return 0;
}

int fp_trace_load(const char *path, fp_trace *t, char *err, size_t errlen)
{
    *t = (fp_trace){0};
    fp_reader *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "cannot read trace '%s': out of memory", path);
        return ENOMEM;
    }
    int rc = open_gz(path, &r->f, err, errlen);
    if (!rc) {
        r->path = path;
        r->err = err;
        r->errlen = errlen;
        rc = read_any(r, t);
        gzclose(r->f);
    }
    free(r->line);
    free(r);
    if (rc)
        fp_trace_free(t);
    return rc;
}
