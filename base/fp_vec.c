/* fp_vec.c - growable arrays and whole-stream reading (fp_vec.h).
 *
 * Invariants: a failed growth leaves the caller's array as it was; every
 * size is checked against SIZE_MAX before it is multiplied.
 */
#include "fp_vec.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

void *fp_vec_grow(void *v, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return v;
    size_t ncap = *cap ? *cap : (first ? first : 1);
    while (ncap < need)
        ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    if (!elem || ncap > SIZE_MAX / elem)
        return NULL;
    void *nv = realloc(v, ncap * elem);
    if (nv)
        *cap = ncap;
    return nv;
}

int fp_read_all(fp_read_fn fn, void *ctx, char **out, size_t *len)
{
    size_t cap = 0, n = 0;
    char *buf = NULL;
    for (;;) {
        char *nb = fp_vec_grow(buf, &cap, n + 4097, 1, 1 << 16);
        if (!nb) {
            free(buf);
            return ENOMEM;
        }
        buf = nb;
        long got = fn(ctx, buf + n, cap - 1 - n);
        if (got == 0)
            break;
        if (got < 0) {
            free(buf);
            return EIO;
        }
        n += (size_t)got;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

int fp_render_alloc(fp_render_fn fn, const void *ctx, size_t first, char **out, size_t *len)
{
    size_t cap = first ? first : 1;
    for (;;) {
        char *buf = malloc(cap);
        if (!buf)
            return ENOMEM;
        fp_sink s = fp_sink_buffer(buf, cap);
        int err = fn(ctx, &s);
        if (!err) {
            *out = buf;
            *len = fp_sink_length(&s);
            return 0;
        }
        free(buf);
        if (err != ENOSPC || fp_sink_total(&s) >= SIZE_MAX - 1)
            return err;
        cap = fp_sink_total(&s) + 1;
    }
}
