/* shim_path.c - the names of the shim's output files: a pattern with %p
 * (pid), %r (rank), %h (host) and %% (a '%') expanded whole, for the
 * summary:PATH and trace:PATH keys (docs/files.md).
 *
 * Invariant: the name is expanded whole or not at all: a name that does
 * not fit, an unknown escape or a lone '%' at the end is an error with a
 * reason that quotes the pattern, and out is then empty.
 */
#include "shim_path.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fp_path_rank(void)
{
    static const char *const vars[] = {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                                       "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && r >= 0 && r < 1 << 30)
            return (int)r;
    }
    return -1;
}

/* Appends t[0..n) at out + *o; 0, or ENAMETOOLONG past len (with the NUL). */
static int put_part(char *out, size_t len, size_t *o, const char *t, size_t n)
{
    if (n >= len - *o)
        return ENAMETOOLONG;
    memcpy(out + *o, t, n);
    *o += n;
    return 0;
}

/* The text of escape c into *t: 0, or EINVAL for an unknown one. */
static int escape_text(char c, int rank, const char *host, char num[24], const char **t)
{
    *t = num;
    if (c == 'p')
        snprintf(num, 24, "%d", (int)getpid());
    else if (c == 'r')
        snprintf(num, 24, "%d", rank < 0 ? 0 : rank);
    else if (c == 'h')
        *t = host;
    else if (c == '%')
        snprintf(num, 24, "%%");
    else
        return EINVAL;
    return 0;
}

static void bad_escape(const char *pat, char c, char *why, size_t whylen)
{
    if (c)
        snprintf(why, whylen, "'%s' holds the unknown escape %%%c (the escapes are %%p pid, "
                 "%%r rank, %%h host, %%%% a '%%')", pat, c);
    else
        snprintf(why, whylen, "'%s' ends in a lone '%%' (write %%%% for a '%%')", pat);
}

int fp_path_expand_as(const char *pat, int rank, const char *host, char *out, size_t len,
                      char *why, size_t whylen)
{
    size_t o = 0;
    int err = len ? 0 : ENAMETOOLONG;
    for (const char *s = pat; *s && !err; s++) {
        const char *t = s;
        char num[24];
        size_t n = 1;
        if (*s == '%') {
            if ((err = escape_text(s[1], rank, host, num, &t)) != 0) {
                bad_escape(pat, s[1], why, whylen);
                break;
            }
            n = strlen(t);
            s++;
        }
        if ((err = put_part(out, len, &o, t, n)) != 0)
            snprintf(why, whylen, "'%s' expands to more than %zu bytes", pat, len - 1);
    }
    if (len)
        out[err ? 0 : o] = '\0';
    return err;
}

int fp_path_expand(const char *pat, char *out, size_t len, char *why, size_t whylen)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    return fp_path_expand_as(pat, fp_path_rank(), host, out, len, why, whylen);
}
