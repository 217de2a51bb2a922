/* cli_progress.c - the progress line of replay, report and tune: one line
 * on stderr, rewritten in place ("\r"), once a command has run for 2 s,
 * and wiped when it ends, so that nothing of it stays on the screen or
 * in what the command prints.
 *
 * Invariants: nothing is written unless stderr is a terminal and --quiet
 * was not given; the line is written at most 4 times a second; callers
 * on several threads are serialized by the caller (tune: its job lock);
 * FRAGPOOL_PROGRESS_AFTER_MS (digits) replaces the 2 s, for tests.
 */
#include "cli.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FP_PROGRESS_AFTER_S 2.0
#define FP_PROGRESS_EVERY_S 0.25

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void fp_progress_init(fp_progress *p, const char *cmd, int quiet)
{
    const char *ms = getenv("FRAGPOOL_PROGRESS_AFTER_MS");
    uint64_t v;
    memset(p, 0, sizeof *p);
    p->cmd = cmd;
    p->on = !quiet && isatty(2);
    p->after = ms && !fp_parse_count(ms, 3600000, &v) ? (double)v / 1000.0 : FP_PROGRESS_AFTER_S;
    p->t0 = now_s();
    p->last = -1.0;
}

void fp_progress_say(fp_progress *p, const char *fmt, ...)
{
    if (!p || !p->on)
        return;
    double t = now_s() - p->t0;
    if (t < p->after || (p->last >= 0 && t - p->last < FP_PROGRESS_EVERY_S))
        return;
    char what[160], line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int n = snprintf(line, sizeof line, "\rfragpool %s: %s (%.0f s)\033[K", p->cmd, what, t);
    if (n > 0 && write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) > 0)
        p->shown = 1;
    p->last = t;
}

void fp_progress_done(fp_progress *p)
{
    if (p && p->shown && write(2, "\r\033[K", 4) == 4)
        p->shown = 0;
}

int fp_progress_replay_hook(void *ud, fp_pool *pool, size_t i, int refused)
{
    fp_progress_events *e = ud;
    (void)pool, (void)refused;
    if (i % 65536 == 0)
        fp_progress_say(e->p, "%s %zu of %zu events", e->what, i, e->n);
    return 0;
}
