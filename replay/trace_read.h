/* trace_read.h - reading a trace file, shared by the readers of each
 * format (trace_csv.c, trace_rmm.c, trace_pickle.c); fp_trace.c opens
 * the file, looks at its first bytes and picks the reader.
 *
 * The file is read through zlib (gzip or plain) in chunks: by line, for
 * the text formats, or whole, for a pickle.  Invariant: every failure
 * leaves one line in r->err naming the file and where it happened.
 */
#ifndef FP_TRACE_READ_H
#define FP_TRACE_READ_H

#include "fp_trace.h"
#include "fp_hmap.h"
#include <zlib.h>

#define TRACE_CHUNK (1u << 16)
#define TRACE_SHOW  32 /* bytes of a bad field quoted */

typedef struct fp_reader {
    gzFile f;
    const char *path;
    char *err;
    size_t errlen;
    char chunk[TRACE_CHUNK];
    size_t pos, end; /* unread bytes of chunk                    */
    int eof;
    char *line; /* the current line, without its '\n'        */
    size_t len, cap;
    size_t lineno;
    uint64_t bytes;  /* uncompressed bytes read so far            */
    int header_seen; /* a row or the header came already          */
    int whole;       /* read whole (fp_reader_all): no line numbers */
} fp_reader;

/* The next chunk: 0 (r->eof at the end), or EIO with the reason. */
int fp_reader_fill(fp_reader *r);
/* The next line into r->line/len; 0 with *got 0 at the end of the file. */
int fp_reader_line(fp_reader *r, int *got);
/* The whole rest of the file into a malloc'd *data, *len: 0 or an errno. */
int fp_reader_all(fp_reader *r, unsigned char **data, size_t *len);
/* The line without trailing spaces, tabs and CR: its length; 0 when the
 * line is blank or a '#' comment. */
size_t fp_reader_trim(const fp_reader *r);

/* A field of a row, quoted for an error message into out[len]: at most
 * TRACE_SHOW bytes, those outside printable ASCII as \xNN. */
void fp_trace_show(char *out, size_t len, const char *p, size_t n);
/* Unsigned decimal digits only, at most max: 0 and *out, or EINVAL. */
int fp_trace_parse_u64(const char *p, size_t n, uint64_t max, uint64_t *out);
/* Splits s[0..n) at commas into at most max fields (starts f, lengths fl);
 * returns the count, max + 1 when there are more. */
size_t fp_trace_split(const char *s, size_t n, const char **f, size_t *fl, size_t max);

/* Sets key to val (never 0) in m, growing it as needed: 0 or ENOMEM. */
int fp_trace_map_set(fp_hmap *m, uint64_t key, uint64_t val);

/* The readers: the rest of the file into t (fp_trace.c has opened it and
 * filled the first chunk).  0, or an errno with r->err set. */
int fp_trace_read_csv(fp_reader *r, fp_trace *t);
int fp_trace_read_rmm(fp_reader *r, fp_trace *t);
int fp_trace_read_pickle(fp_reader *r, fp_trace *t);

#endif
