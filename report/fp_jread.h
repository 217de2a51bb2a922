/* fp_jread.h - reading our JSON back: a token-array parser of one RFC 8259
 * value and lookups by key, index and dotted path (fp_jread.c).
 *
 * Invariants: the parser never allocates (the caller gives the tokens)
 * and never reads past len; depth <= 64; every lookup answers -1 or an
 * error code for a wrong type or a missing member, never reads out of
 * the token array.
 */
#ifndef FP_JREAD_H
#define FP_JREAD_H

#include <stddef.h>
#include <stdint.h>

enum { FP_JNULL, FP_JBOOL, FP_JNUM, FP_JSTR, FP_JARR, FP_JOBJ };

typedef struct fp_jtok {
    int type;          /* FP_J*                                          */
    size_t start, end; /* bytes of the value in the text (strings: the  */
                       /* contents between the quotes)                  */
    int next;          /* index of the token after this whole value     */
    int n;             /* arrays: elements; objects: members            */
} fp_jtok;             /* an object's members: key token, then value    */

typedef struct fp_jdoc {
    const char *text;   /* the parsed text, not owned                     */
    const fp_jtok *tok; /* tokens, not owned; tok[0] is the root          */
    int ntok;
} fp_jdoc;

/* Parse one JSON value (RFC 8259, depth <= 64) into the caller's tokens.
 * 0, EINVAL with *errpos at the bad byte, or ENOMEM when cap is short. */
int fp_jdoc_parse(fp_jdoc *d, const char *text, size_t len, fp_jtok *tok, size_t cap,
                  size_t *errpos);
/* 1 when t is a token of d (t >= 0) of the given FP_J* type. */
int fp_jdoc_is(const fp_jdoc *d, int t, int type);
int fp_jdoc_get(const fp_jdoc *d, int obj, const char *key); /* -1: none */
int fp_jdoc_at(const fp_jdoc *d, int arr, size_t i);         /* -1: none */
/* "devices.0.allocated.peak" from the root; -1 when absent. */
int fp_jdoc_path(const fp_jdoc *d, const char *path);
/* 0 and *v for an integer number token, else EINVAL. */
int fp_jdoc_int(const fp_jdoc *d, int t, int64_t *v);
/* Unescaped string into buf (NUL-terminated when len > 0); returns the
 * length the whole string needs, or (size_t)-1 when t is no string. */
size_t fp_jdoc_str(const fp_jdoc *d, int t, char *buf, size_t len);

#endif
