/* fp_unpickle.c - the strict unpickler of fp_unpickle.h.
 *
 * Opcodes read (their bytes and meaning as in CPython's Lib/pickle.py):
 * PROTO (2 to 5), FRAME, STOP, MARK, POP, EMPTY_DICT, EMPTY_LIST,
 * EMPTY_TUPLE, SETITEM(S), APPEND(S), TUPLE, TUPLE1-3, NONE, NEWTRUE,
 * NEWFALSE, BININT, BININT1, BININT2, LONG1, LONG4 (up to 64 bits),
 * BINFLOAT, BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, BINPUT,
 * LONG_BINPUT, MEMOIZE, BINGET, LONG_BINGET.  Everything else is refused.
 *
 * Invariants: every read is bounds-checked against the input; the stack,
 * the marks and the memo only ever hold node indices that exist; a memo
 * index past the input's length is refused (a real pickle numbers its
 * memo from 0), so the memo is never larger than the input; nesting is
 * bounded by FP_PK_DEPTH; on any failure everything is freed.  Building
 * is linear in the input; the keys are indexed after (fp_pkeys.c), which
 * is where duplicate keys are settled and lookups are served.
 */
#include "fp_unpickle.h"
#include "fp_vec.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FP_PK_DEPTH 256 /* open marks at once */

typedef struct u32vec {
    uint32_t *v;
    size_t n, cap;
} u32vec;

typedef struct parser {
    fp_pdoc *d;
    const unsigned char *p;
    size_t len, pos, op_at;
    u32vec stack, marks, memo;
    const char *name;
    char *err;
    size_t errlen;
    int depth_dicts;
} parser;

static int push32(u32vec *a, uint32_t x)
{
    uint32_t *v = fp_vec_grow(a->v, &a->cap, a->n + 1, sizeof *v, 256);
    if (!v)
        return ENOMEM;
    a->v = v;
    a->v[a->n++] = x;
    return 0;
}

static int fail(parser *k, int rc, const char *what)
{
    snprintf(k->err, k->errlen, "%s: byte %zu: %s", k->name, k->op_at, what);
    return rc;
}

static int nomem(parser *k)
{
    return fail(k, ENOMEM, "out of memory reading the pickle");
}

static int need(parser *k, size_t n, const unsigned char **at)
{
    if (k->len - k->pos < n)
        return fail(k, EINVAL, "the pickle ends inside an opcode (the file is cut short)");
    *at = k->p + k->pos;
    k->pos += n;
    return 0;
}

static uint64_t le(const unsigned char *b, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
        v = v << 8 | b[i];
    return v;
}

/* A new node of type t on the stack; *out its index. */
static int new_node(parser *k, uint8_t t, uint32_t *out)
{
    fp_pdoc *d = k->d;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 1024;
        fp_pv *v = cap >= UINT32_MAX ? NULL : realloc(d->node, cap * sizeof *v);
        if (!v)
            return nomem(k);
        d->node = v;
        d->cap = cap;
    }
    d->node[d->n] = (fp_pv){.type = t};
    *out = (uint32_t)d->n++;
    return push32(&k->stack, *out) ? nomem(k) : 0;
}

static int push_int(parser *k, uint64_t mag, int neg)
{
    uint32_t i;
    int rc = new_node(k, FP_PV_INT, &i);
    if (!rc) {
        k->d->node[i].v.u = mag;
        k->d->node[i].neg = (uint8_t)(neg && mag);
    }
    return rc;
}

/* LONG1/LONG4: n little-endian two's-complement bytes, up to 64 bits of
 * magnitude (a 9th byte only for the sign). */
static int push_long(parser *k, const unsigned char *b, size_t n)
{
    if (!n)
        return push_int(k, 0, 0);
    int neg = (b[n - 1] & 0x80) != 0;
    if (n == 9 && b[8] != (neg ? 0xff : 0))
        return fail(k, EINVAL, "an integer wider than 64 bits (a memory snapshot has none)");
    if (n == 9 && neg && !(b[7] & 0x80))
        return fail(k, EINVAL, "an integer wider than 64 bits (a memory snapshot has none)");
    size_t w = n > 8 ? 8 : n;
    uint64_t v = le(b, w);
    if (!neg || n == 9)
        return neg ? push_int(k, (uint64_t)0 - v, 1) : push_int(k, v, 0);
    if (w < 8)
        v |= ~(uint64_t)0 << (8 * w); /* sign-extend */
    return push_int(k, (uint64_t)0 - v, 1);
}

static int push_str(parser *k, size_t lenbytes)
{
    const unsigned char *b, *s;
    int rc = need(k, lenbytes, &b);
    if (rc)
        return rc;
    uint64_t n = le(b, lenbytes);
    if (n > k->len - k->pos)
        return fail(k, EINVAL, "a string runs past the end of the pickle (the file is cut short)");
    need(k, (size_t)n, &s);
    uint32_t i;
    if ((rc = new_node(k, FP_PV_STR, &i)) != 0)
        return rc;
    k->d->node[i].v.s.off = (size_t)(s - k->p);
    k->d->node[i].v.s.len = (size_t)n;
    return 0;
}

static int add_item(parser *k, fp_pv *c, uint32_t item)
{
    if (c->n == c->cap) {
        uint32_t cap = c->cap ? c->cap * 2 : 8;
        uint32_t *v = c->cap > UINT32_MAX / 2 ? NULL : realloc(c->v.items, cap * sizeof *v);
        if (!v)
            return nomem(k);
        c->v.items = v;
        c->cap = cap;
    }
    c->v.items[c->n++] = item;
    return 0;
}

/* SETITEM(S), APPEND(S): the items above from (a stack position) go into
 * the container just below it. */
static int fill_from(parser *k, size_t from, uint8_t want, const char *op)
{
    if (from == 0 || from > k->stack.n)
        return fail(k, EINVAL, "an opcode with nothing to add to (a malformed pickle)");
    fp_pv *c = &k->d->node[k->stack.v[from - 1]];
    if (c->type != want) {
        char why[96];
        snprintf(why, sizeof why, "%s on a value that is not a %s", op,
                 want == FP_PV_DICT ? "dict" : "list");
        return fail(k, EINVAL, why);
    }
    size_t n = k->stack.n - from;
    if (want == FP_PV_DICT && n % 2)
        return fail(k, EINVAL, "a dict given a key without a value");
    for (size_t i = 0; i < n; i++) {
        fp_pv *cc = &k->d->node[k->stack.v[from - 1]]; /* add_item may not move nodes */
        if (add_item(k, cc, k->stack.v[from + i]))
            return ENOMEM;
    }
    k->stack.n = from;
    return 0;
}

static int pop_mark(parser *k, size_t *at)
{
    if (!k->marks.n)
        return fail(k, EINVAL, "an opcode that needs a MARK, with none (a malformed pickle)");
    *at = k->marks.v[--k->marks.n];
    return 0;
}

static int make_tuple(parser *k, size_t from)
{
    if (from > k->stack.n)
        return fail(k, EINVAL, "a tuple of more items than the stack holds (a malformed pickle)");
    size_t n = k->stack.n - from;
    uint32_t items[3];
    u32vec tmp = {0};
    for (size_t i = 0; i < n; i++)
        if (n <= 3)
            items[i] = k->stack.v[from + i];
        else if (push32(&tmp, k->stack.v[from + i]))
            return free(tmp.v), nomem(k);
    k->stack.n = from;
    uint32_t t;
    int rc = new_node(k, FP_PV_TUPLE, &t);
    for (size_t i = 0; !rc && i < n; i++)
        rc = add_item(k, &k->d->node[t], n <= 3 ? items[i] : tmp.v[i]);
    free(tmp.v);
    return rc;
}

static int memo_put(parser *k, uint64_t idx)
{
    if (!k->stack.n)
        return fail(k, EINVAL, "a memo put with an empty stack (a malformed pickle)");
    if (idx > k->len)
        return fail(k, EINVAL, "a memo index larger than the pickle (a malformed pickle)");
    while (k->memo.n <= idx)
        if (push32(&k->memo, UINT32_MAX))
            return nomem(k);
    k->memo.v[idx] = k->stack.v[k->stack.n - 1];
    return 0;
}

static int memo_get(parser *k, uint64_t idx)
{
    if (idx >= k->memo.n || k->memo.v[idx] == UINT32_MAX)
        return fail(k, EINVAL, "a memo reference to nothing (a malformed pickle)");
    return push32(&k->stack, k->memo.v[idx]) ? nomem(k) : 0;
}

static int refused(parser *k, unsigned op)
{
    static const struct {
        unsigned char op;
        const char *name;
    } names[] = {{'c', "GLOBAL"},
                 {0x93, "STACK_GLOBAL"},
                 {'R', "REDUCE"},
                 {'b', "BUILD"},
                 {0x81, "NEWOBJ"},
                 {0x92, "NEWOBJ_EX"},
                 {'i', "INST"},
                 {'o', "OBJ"},
                 {'P', "PERSID"},
                 {'Q', "BINPERSID"},
                 {'B', "BINBYTES"},
                 {'C', "SHORT_BINBYTES"},
                 {0x8e, "BINBYTES8"},
                 {0x96, "BYTEARRAY8"},
                 {0x8f, "EMPTY_SET"},
                 {0x90, "ADDITEMS"},
                 {0x91, "FROZENSET"},
                 {'I', "INT"},
                 {'L', "LONG"},
                 {'F', "FLOAT"},
                 {'S', "STRING"},
                 {'V', "UNICODE"},
                 {'p', "PUT"},
                 {'g', "GET"},
                 {0x82, "EXT1"},
                 {0x83, "EXT2"},
                 {0x84, "EXT4"},
                 {'2', "DUP"},
                 {'1', "POP_MARK"},
                 {0x97, "NEXT_BUFFER"},
                 {0x98, "READONLY_BUFFER"}};
    const char *name = "an unknown opcode";
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].op == op)
            name = names[i].name;
    char why[256];
    snprintf(why, sizeof why,
             "pickle opcode 0x%02x (%s) is not one a memory snapshot uses; "
             "fragpool reads plain data only (dicts, lists, tuples, numbers, strings) and "
             "runs nothing",
             op, name);
    return fail(k, EINVAL, why);
}

static int simple(parser *k, unsigned op)
{
    uint32_t i;
    size_t at;
    switch (op) {
    case '}': return new_node(k, FP_PV_DICT, &i);
    case ']': return new_node(k, FP_PV_LIST, &i);
    case ')': return new_node(k, FP_PV_TUPLE, &i);
    case 'N': return new_node(k, FP_PV_NONE, &i);
    case 0x88:
    case 0x89: {
        int rc = new_node(k, FP_PV_BOOL, &i);
        if (!rc)
            k->d->node[i].v.u = op == 0x88;
        return rc;
    }
    case '(':
        if (k->marks.n == FP_PK_DEPTH)
            return fail(k, EINVAL, "more than 256 nested containers");
        return push32(&k->marks, (uint32_t)k->stack.n) ? nomem(k) : 0;
    case 'u':
    case 'e':
    case 't':
        if (pop_mark(k, &at))
            return EINVAL;
        return op == 't' ? make_tuple(k, at)
                         : fill_from(k, at, op == 'u' ? FP_PV_DICT : FP_PV_LIST,
                                     op == 'u' ? "SETITEMS" : "APPENDS");
    case 's':
    case 'a':
        if (k->stack.n < (op == 's' ? 3u : 2u))
            return fail(k, EINVAL, "an opcode with too few values (a malformed pickle)");
        return fill_from(k, k->stack.n - (op == 's' ? 2 : 1), op == 's' ? FP_PV_DICT : FP_PV_LIST,
                         op == 's' ? "SETITEM" : "APPEND");
    case 0x85:
    case 0x86:
    case 0x87:
        if (k->stack.n < op - 0x84u)
            return fail(k, EINVAL,
                        "a tuple of more items than the stack holds (a malformed pickle)");
        return make_tuple(k, k->stack.n - (op - 0x84u));
    case '0':
        if (!k->stack.n)
            return fail(k, EINVAL, "POP with an empty stack (a malformed pickle)");
        k->stack.n--;
        return 0;
    case 0x94: return memo_put(k, k->memo.n);
    default: return refused(k, op);
    }
}

/* Opcodes with an argument. */
static int with_arg(parser *k, unsigned op)
{
    const unsigned char *b;
    int rc;
    switch (op) {
    case 'J':
        if ((rc = need(k, 4, &b)) != 0)
            return rc;
        {
            int32_t v = (int32_t)(uint32_t)le(b, 4);
            return push_int(k, v < 0 ? (uint64_t)0 - (uint64_t)(int64_t)v : (uint64_t)v, v < 0);
        }
    case 'K':
    case 'M':
        if ((rc = need(k, op == 'K' ? 1 : 2, &b)) != 0)
            return rc;
        return push_int(k, le(b, op == 'K' ? 1 : 2), 0);
    case 0x8a:
    case 0x8b: {
        size_t w = op == 0x8a ? 1 : 4;
        if ((rc = need(k, w, &b)) != 0)
            return rc;
        uint64_t n = le(b, w);
        if (n > 9)
            return fail(k, EINVAL, "an integer wider than 64 bits (a memory snapshot has none)");
        if ((rc = need(k, (size_t)n, &b)) != 0)
            return rc;
        return push_long(k, b, (size_t)n);
    }
    case 'G': {
        if ((rc = need(k, 8, &b)) != 0)
            return rc;
        uint64_t u = 0;
        for (int i = 0; i < 8; i++)
            u = u << 8 | b[i];
        uint32_t i;
        if ((rc = new_node(k, FP_PV_FLOAT, &i)) == 0)
            memcpy(&k->d->node[i].v.f, &u, sizeof u);
        return rc;
    }
    case 'X': return push_str(k, 4);
    case 0x8c: return push_str(k, 1);
    case 0x8d: return push_str(k, 8);
    case 'q':
    case 'r':
        if ((rc = need(k, op == 'q' ? 1 : 4, &b)) != 0)
            return rc;
        return memo_put(k, le(b, op == 'q' ? 1 : 4));
    case 'h':
    case 'j':
        if ((rc = need(k, op == 'h' ? 1 : 4, &b)) != 0)
            return rc;
        return memo_get(k, le(b, op == 'h' ? 1 : 4));
    case 0x95: return need(k, 8, &b); /* FRAME: its length only helps a streaming reader */
    default: return simple(k, op);
    }
}

static int run(parser *k)
{
    const unsigned char *b;
    if (k->len < 2 || k->p[0] != 0x80 || k->p[1] < 2 || k->p[1] > 5)
        return fail(k, EINVAL,
                    "not a pickle of protocol 2 to 5 (it must start with "
                    "PROTO 2..5)");
    k->pos = 2;
    for (;;) {
        k->op_at = k->pos;
        int rc = need(k, 1, &b);
        if (rc)
            return fail(k, EINVAL, "the pickle ends without STOP (the file is cut short)");
        if (*b == '.')
            break;
        if ((rc = with_arg(k, *b)) != 0)
            return rc;
    }
    if (k->stack.n != 1 || k->marks.n)
        return fail(k, EINVAL,
                    "STOP with the stack not holding exactly one value "
                    "(a malformed pickle)");
    if (k->pos != k->len)
        return fail(k, EINVAL, "bytes after the pickle's STOP (a pickle is one value)");
    k->d->root = k->stack.v[0];
    return 0;
}

void fp_pdoc_free(fp_pdoc *d)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->node[i].type >= FP_PV_LIST)
            free(d->node[i].v.items);
    free(d->node);
    fp_pdoc_index_free(d);
    *d = (fp_pdoc){0};
}

int fp_unpickle(const unsigned char *data, size_t len, const char *name, fp_pdoc *d, char *err,
                size_t errlen)
{
    *d = (fp_pdoc){.data = data, .len = len};
    parser k = {.d = d, .p = data, .len = len, .name = name, .err = err, .errlen = errlen};
    int rc = run(&k);
    if (!rc && fp_pdoc_index(d))
        rc = nomem(&k);
    free(k.stack.v);
    free(k.marks.v);
    free(k.memo.v);
    if (rc)
        fp_pdoc_free(d);
    return rc;
}

const fp_pv *fp_pdoc_node(const fp_pdoc *d, uint32_t i)
{
    return i < d->n ? &d->node[i] : NULL;
}

bool fp_pdoc_str_is(const fp_pdoc *d, const fp_pv *v, const char *s)
{
    size_t n = strlen(s);
    return v && v->type == FP_PV_STR && v->v.s.len == n && !memcmp(d->data + v->v.s.off, s, n);
}

const fp_pv *fp_pdoc_item(const fp_pdoc *d, const fp_pv *v, size_t i)
{
    if (!v || (v->type != FP_PV_LIST && v->type != FP_PV_TUPLE) || i >= v->n)
        return NULL;
    return &d->node[v->v.items[i]];
}

int fp_pdoc_u64(const fp_pv *v, uint64_t *out)
{
    if (!v || v->type != FP_PV_INT || v->neg)
        return EINVAL;
    *out = v->v.u;
    return 0;
}
