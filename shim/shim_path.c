/* shim_path.c - the names of the shim's output files: a pattern with %p
 * (pid), %r (rank), %h (host) and %% (a '%') expanded whole, for the
 * summary:PATH, trace:PATH and snapshot:PATH keys (docs/files.md); and
 * the claims that keep two of them off one file.
 *
 * Invariants: the name is expanded whole or not at all: a name that does
 * not fit, an unknown escape or a lone '%' at the end is an error with a
 * reason that quotes the pattern, and out is then empty.  No output
 * empties a file another key of this process wrote (same name or same
 * inode), and a forked child never empties its parent's file through a
 * name without %p: the later one moves to another name, in one line.
 */
#include "shim_path.h"
#include "shim_exitlock.h"
#include "shim_state.h"
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fp_path_rank(void)
{
    static const char *const vars[] = {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                       "SLURM_PROCID"};
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
        snprintf(why, whylen,
                 "'%s' holds the unknown escape %%%c (the escapes are %%p pid, "
                 "%%r rank, %%h host, %%%% a '%%')",
                 pat, c);
    else
        snprintf(why, whylen, "'%s' ends in a lone '%%' (write %%%% for a '%%')", pat);
}

int fp_path_expand_as(const char *pat, int rank, const char *host, char *out, size_t len, char *why,
                      size_t whylen)
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

/* ---- claims: which key wrote which file ----------------------------------- */

/* The last file each key opened (trace, snapshot, summary).  Written by
 * the trace's setup, the summary writer and the snapshot writer; read by
 * the others, under claims_lock. */
typedef struct claim {
    const char *key;
    char path[FP_OUT_PATH_MAX];
    dev_t dev;
    ino_t ino;
    bool set;
    bool said; /* the expanded name was said (once per key) */
} claim;

static claim claims[3] = {{.key = "trace"}, {.key = "snapshot"}, {.key = "summary"}};
static pthread_mutex_t claims_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t first_pid; /* the process the library was loaded in */

__attribute__((constructor)) static void note_first_pid(void)
{
    first_pid = getpid();
}

static claim *claim_of(const char *key)
{
    for (size_t i = 0; i < sizeof claims / sizeof *claims; i++)
        if (strcmp(claims[i].key, key) == 0)
            return &claims[i];
    return NULL;
}

/* Another key's claim on path (its name, or the inode the name is now),
 * or NULL. */
static const claim *taken_by(const char *key, const char *path)
{
    struct stat st;
    bool exists = stat(path, &st) == 0;
    for (size_t i = 0; i < sizeof claims / sizeof *claims; i++) {
        const claim *c = &claims[i];
        if (c->set && strcmp(c->key, key) != 0 &&
            (strcmp(c->path, path) == 0 || (exists && c->dev == st.st_dev && c->ino == st.st_ino)))
            return c;
    }
    return NULL;
}

/* Whether pat holds a %p escape (not a %%p). */
static bool has_pid(const char *pat)
{
    for (const char *s = pat; *s; s++)
        if (*s == '%' && s[1]) {
            if (s[1] == 'p')
                return true;
            s++;
        }
    return false;
}

/* path += suffix; false (path as it was) when it does not fit. */
static bool add_suffix(char *path, size_t len, const char *suffix)
{
    size_t n = strlen(path), m = strlen(suffix);
    if (n + m >= len)
        return false;
    memcpy(path + n, suffix, m + 1);
    return true;
}

static int claim_locked(const char *key, const char *pat, char *path, size_t len, char *why,
                        size_t whylen)
{
    char was[FP_OUT_PATH_MAX], suffix[32];
    snprintf(was, sizeof was, "%s", path);
    if (getpid() != first_pid && !has_pid(pat)) {
        snprintf(suffix, sizeof suffix, ".%d", (int)getpid());
        if (!add_suffix(path, len, suffix)) {
            snprintf(why, whylen,
                     "'%s' has no %%p and this is a forked child (pid %d), but "
                     "'%s%s' is too long a name (the parent's file is kept)",
                     was, (int)getpid(), was, suffix);
            return ENAMETOOLONG;
        }
        fp_say("%s: '%s' has no %%p and this is a forked child: writing its %s to '%s' "
               "instead, so the parent's file is kept",
               key, was, key, path);
        snprintf(was, sizeof was, "%s", path);
    }
    const claim *c = taken_by(key, path);
    if (!c)
        return 0;
    snprintf(suffix, sizeof suffix, ".%s", key);
    if (!add_suffix(path, len, suffix) || taken_by(key, path)) {
        snprintf(why, whylen,
                 "'%s' is also the %s file (%s:PATH), and so is '%s%s' or it is "
                 "too long (the %s is kept)",
                 was, c->key, c->key, was, suffix, c->key);
        return EEXIST;
    }
    fp_say("%s: '%s' is also the %s file (%s:PATH); writing the %s to '%s' instead", key, was,
           c->key, c->key, key, path);
    return 0;
}

/* The exit path calls this: the lock is tried for a moment only, and
 * without it no check is made (a writer that holds it is on another
 * thread, about to give it back, or interrupted: the claim is a courtesy,
 * never a reason to hang). */
static bool claims_take(void)
{
    struct timespec by;
    clock_gettime(CLOCK_MONOTONIC, &by);
    by.tv_nsec += 100000000L;
    by.tv_sec += by.tv_nsec / 1000000000L;
    by.tv_nsec %= 1000000000L;
    return fp_exit_lock(&claims_lock, &by);
}

int fp_path_claim(const char *key, const char *pat, char *path, size_t len, char *why,
                  size_t whylen)
{
    if (!claims_take())
        return 0;
    int err = claim_locked(key, pat, path, len, why, whylen);
    pthread_mutex_unlock(&claims_lock);
    return err;
}

void fp_path_claimed(const char *key, const char *pat, int fd, const char *path)
{
    struct stat st;
    claim *c = claim_of(key);
    if (!c || fstat(fd, &st) != 0 || !claims_take())
        return;
    snprintf(c->path, sizeof c->path, "%s", path);
    c->dev = st.st_dev;
    c->ino = st.st_ino;
    c->set = true;
    bool say = pat && strchr(pat, '%') && !c->said; /* the name the escapes gave */
    c->said = c->said || say;
    pthread_mutex_unlock(&claims_lock);
    if (say)
        fp_say("%s: writing %s (%s:%s)", key, path, key, pat);
}

void fp_path_fork_prepare(void)
{
    pthread_mutex_lock(&claims_lock);
}

void fp_path_fork_after(bool child)
{
    fp_mutex_fork_after(&claims_lock, child);
}
