/* fp_trace.c - reading allocation traces.  The CSV header line is
 * optional; blank lines and lines starting with '#' are skipped; any other
 * malformed line stops the load with its line number.
 */
#include "fp_trace.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

int fp_trace_push(fp_trace *t, char op, uint64_t id, uint64_t size, uint32_t stream)
{
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 4096;
        fp_trace_event *nv = realloc(t->ev, ncap * sizeof *nv);
        if (!nv)
            return ENOMEM;
        t->ev = nv;
        t->cap = ncap;
    }
    t->ev[t->n++] = (fp_trace_event){id, size, stream, op};
    return 0;
}

void fp_trace_free(fp_trace *t)
{
    free(t->ev);
    *t = (fp_trace){0};
}

static int parse_line(const char *s, char *op, uint64_t *id, uint64_t *size, uint32_t *stream)
{
    unsigned long long seq, i, sz;
    unsigned st = 0;
    char o;
    int n = sscanf(s, "%llu,%c,%llu,%llu,%u", &seq, &o, &i, &sz, &st);
    if (n < 4 || (o != 'a' && o != 'f'))
        return EINVAL;
    *op = o;
    *id = i;
    *size = sz;
    *stream = n == 5 ? st : 0;
    return 0;
}

/* Blank lines, comments, the header, and the segment rows (s, r) that
 * the shim's recorder writes: replay makes its own segments. */
static bool skip_line(const char *s, size_t lineno)
{
    if (s[0] == '\n' || s[0] == '\r' || s[0] == '#' || s[0] == '\0')
        return true;
    const char *comma = strchr(s, ',');
    if (comma && (comma[1] == 's' || comma[1] == 'r') && comma[2] == ',')
        return true;
    return lineno == 1 && strncmp(s, "seq,", 4) == 0;
}

int fp_trace_load(const char *path, fp_trace *t, char *err, size_t errlen)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open trace '%s': %s", path, strerror(errno ? errno : ENOENT));
        return errno ? errno : ENOENT;
    }
    char line[256];
    size_t lineno = 0;
    int rc = 0;
    *t = (fp_trace){0};
    while (!rc && gzgets(f, line, sizeof line)) {
        lineno++;
        if (skip_line(line, lineno))
            continue;
        char op;
        uint64_t id, size;
        uint32_t stream;
        if (parse_line(line, &op, &id, &size, &stream)) {
            snprintf(err, errlen, "%s:%zu: not a trace row (want seq,op,id,size,stream with op a or f)",
                     path, lineno);
            rc = EINVAL;
        } else {
            rc = fp_trace_push(t, op, id, size, stream);
        }
    }
    gzclose(f);
    if (rc)
        fp_trace_free(t);
    return rc;
}
