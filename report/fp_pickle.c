/* fp_pickle.c - the pickle writer of fp_pickle.h (protocol 2 opcodes:
 * PROTO, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS, TUPLE, BININT,
 * LONG1, BINFLOAT, BINUNICODE, NONE, NEWTRUE, NEWFALSE, STOP; their bytes
 * are those of CPython's Lib/pickle.py, the format's documentation).
 *
 * Invariants: integers that fit 32 bits are BININT, others LONG1 in the
 * fewest little-endian two's-complement bytes; floats are big-endian IEEE
 * doubles; strings are written as given (the caller passes UTF-8).
 */
#include "fp_pickle.h"
#include <errno.h>
#include <string.h>

#define PK_MAX_DEPTH 64

static void op(fp_pk *k, unsigned char c)
{
    fp_putc(k->s, (char)c);
}

static void u32le(fp_pk *k, uint32_t v)
{
    char b[4] = {(char)v, (char)(v >> 8), (char)(v >> 16), (char)(v >> 24)};
    fp_put(k->s, b, 4);
}

void fp_pk_begin(fp_pk *k, fp_sink *s)
{
    *k = (fp_pk){.s = s};
    op(k, 0x80);
    op(k, 2);
}

int fp_pk_done(fp_pk *k)
{
    op(k, '.');
    int err = fp_sink_flush(k->s);
    return k->bad || k->depth ? EINVAL : err;
}

static void open_with(fp_pk *k, unsigned char empty)
{
    if (k->depth == PK_MAX_DEPTH) {
        k->bad = EINVAL;
        return;
    }
    k->depth++;
    if (empty)
        op(k, empty);
    op(k, '(');
}

static void close_with(fp_pk *k, unsigned char c)
{
    if (!k->depth) {
        k->bad = EINVAL;
        return;
    }
    k->depth--;
    op(k, c);
}

void fp_pk_dict(fp_pk *k)
{
    open_with(k, '}');
}
void fp_pk_list(fp_pk *k)
{
    open_with(k, ']');
}
void fp_pk_tuple(fp_pk *k)
{
    open_with(k, 0);
}
void fp_pk_end_dict(fp_pk *k)
{
    close_with(k, 'u');
}
void fp_pk_end_list(fp_pk *k)
{
    close_with(k, 'e');
}
void fp_pk_end_tuple(fp_pk *k)
{
    close_with(k, 't');
}

void fp_pk_int(fp_pk *k, int64_t v)
{
    if (v >= INT32_MIN && v <= INT32_MAX) {
        op(k, 'J');
        u32le(k, (uint32_t)(int32_t)v);
        return;
    }
    char b[8];
    uint64_t u = (uint64_t)v;
    int n = 8;
    for (int i = 0; i < 8; i++)
        b[i] = (char)(u >> (8 * i));
    /* drop bytes that only repeat the sign of the byte below them */
    while (n > 1 &&
           ((b[n - 1] == 0 && !(b[n - 2] & 0x80)) || (b[n - 1] == (char)0xff && (b[n - 2] & 0x80))))
        n--;
    op(k, 0x8a);
    op(k, (unsigned char)n);
    fp_put(k->s, b, (size_t)n);
}

void fp_pk_uint(fp_pk *k, uint64_t v)
{
    if (v <= INT64_MAX) {
        fp_pk_int(k, (int64_t)v);
        return;
    }
    char b[9];
    for (int i = 0; i < 8; i++)
        b[i] = (char)(v >> (8 * i));
    b[8] = 0; /* the top bit is set: one more byte keeps it positive */
    op(k, 0x8a);
    op(k, 9);
    fp_put(k->s, b, 9);
}

void fp_pk_float(fp_pk *k, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (char)(u >> (56 - 8 * i));
    op(k, 'G');
    fp_put(k->s, b, 8);
}

void fp_pk_strn(fp_pk *k, const char *s, size_t n)
{
    if (n > UINT32_MAX) {
        k->bad = EINVAL;
        return;
    }
    op(k, 'X');
    u32le(k, (uint32_t)n);
    fp_put(k->s, s, n);
}

void fp_pk_str(fp_pk *k, const char *s)
{
    if (!s)
        fp_pk_none(k);
    else
        fp_pk_strn(k, s, strlen(s));
}

void fp_pk_none(fp_pk *k)
{
    op(k, 'N');
}
void fp_pk_bool(fp_pk *k, bool v)
{
    op(k, v ? 0x88 : 0x89);
}
