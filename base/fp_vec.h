/* fp_vec.h - the one growable array: room for more elements by doubling,
 * with the overflow checks in one place; reading a whole stream into one
 * growing buffer; and rendering a sink's output into one.  pool/, replay/, report/ and cli/ use it instead of
 * their own realloc loops.
 *
 * Invariants:
 *  - on failure nothing changes: the old array and its capacity stay valid
 *    (the caller still owns and frees them);
 *  - a size that would overflow size_t is ENOMEM, never a short array.
 */
#ifndef FP_VEC_H
#define FP_VEC_H

#include <stddef.h>
#include "fp_text.h"

/* Room for need elements of elem bytes in v (capacity *cap elements):
 * returns v when it holds them already, else the grown array (capacity
 * first, doubled until it holds need), with *cap updated; NULL when out of
 * memory (v and *cap untouched).  v may be NULL with *cap 0. */
void *fp_vec_grow(void *v, size_t *cap, size_t need, size_t elem, size_t first);

/* A source of bytes: up to n into buf; returns the bytes read, 0 at the
 * end, or -1 on an error (the source keeps its own error). */
typedef long (*fp_read_fn)(void *ctx, char *buf, size_t n);

/* Everything fn gives, in a malloc'd NUL-terminated buffer (*out, *len
 * bytes before the NUL).  0; ENOMEM; or EIO when fn failed (nothing is
 * returned then, never a shorter text). */
int fp_read_all(fp_read_fn fn, void *ctx, char **out, size_t *len);

/* Writes what fn writes into a buffer sink (its result: 0, ENOSPC when the
 * sink was too small, or another error). */
typedef int (*fp_render_fn)(const void *ctx, fp_sink *s);

/* fn's output in a malloc'd NUL-terminated buffer: first bytes, and when
 * that is short, once more with the size the sink asked for.  0 with
 * *out and *len; ENOMEM; or fn's own error. */
int fp_render_alloc(fp_render_fn fn, const void *ctx, size_t first, char **out, size_t *len);

#endif
