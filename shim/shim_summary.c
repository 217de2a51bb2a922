/* shim_summary.c - what the shim tells the user: the memory summary at
 * exit and the explanation of an OOM.
 *
 * Both read only what the shim already holds in memory: the exit path
 * makes no CUDA call, and the report module formats into fixed buffers.
 * The summary goes where the summary key says: off, stderr, or a file
 * whose name may hold %p (pid), %r (rank) and %h (host).
 */
#include "shim.h"
#include "shim_framework.h"
#include "fp_report.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FP_MAX_REPORTS 64

typedef struct collect {
    fp_dev_report devs[FP_MAX_REPORTS];
    fp_leak leaks[FP_MAX_REPORTS][FP_REPORT_TOP_LEAKS];
    size_t n;
    bool running;        /* a SIGUSR1 dump, not the exit summary */
} collect;

static collect summary_data; /* static: the exit path needs no big stack */

static void add_pool(fp_ctx_pool *d, void *ud)
{
    collect *c = ud;
    bool running = c->running;
    if (c->n == FP_MAX_REPORTS)
        return;
    fp_dev_report *r = &c->devs[c->n];
    memset(r, 0, sizeof *r);
    r->running = running;
    r->device = d->dev;
    r->device_name = d->name[0] ? d->name : NULL;
    r->total_capacity = d->total;
    r->device_free = (size_t)-1;
    fp_pool_get_stats(d->pool, &r->stats);
    r->idle_now = (size_t)(r->stats.reserved_bytes[FP_ALL].current -
                           r->stats.allocated_bytes[FP_ALL].current);
    r->leaks = c->leaks[c->n];
    r->nleaks = fp_report_collect_leaks(d->pool, c->leaks[c->n], FP_REPORT_TOP_LEAKS,
                                        &r->leak_count, &r->leak_bytes);
    r->deferred = fp_shim.conf.free_policy == FP_FREE_DEFERRED;
    if (r->deferred)
        fp_defer_counts_get(d->defer, &r->defer);
    if (c->n == 0) { /* process-wide counters ride on the first entry */
        fp_time_flush();
        r->alloc_ns = fp_ticks_to_ns(atomic_load(&fp_alloc_ticks));
        for (int k = 0; k < FP_PT_NKINDS; k++)
            r->passthrough[k] = atomic_load(&fp_passthrough[k]);
        fp_ipc_counts_get(&r->ipc);
    }
    c->n++;
}

static int rank_from_env(void)
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

/* Expands %p, %r, %h and %% of a path pattern. */
static void expand_path(const char *pat, int rank, const char *host, char *out, size_t len)
{
    size_t o = 0;
    for (const char *s = pat; *s && o + 1 < len; s++) {
        if (s[0] != '%' || !s[1]) {
            out[o++] = *s;
            continue;
        }
        char num[24];
        const char *t = num;
        s++;
        if (*s == 'p')
            snprintf(num, sizeof num, "%d", (int)getpid());
        else if (*s == 'r')
            snprintf(num, sizeof num, "%d", rank < 0 ? 0 : rank);
        else if (*s == 'h')
            t = host;
        else
            snprintf(num, sizeof num, "%c", *s);
        for (; *t && o + 1 < len; t++)
            out[o++] = *t;
    }
    out[o] = '\0';
}

void fp_expand_path(const char *pat, char *out, size_t len)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    expand_path(pat, rank_from_env(), host, out, len);
}

/* dump 0: the exit summary; n > 0: the n-th SIGUSR1 dump, which goes to
 * PATH.n when the summary goes to a file. */
static int open_destination(int rank, const char *host, unsigned dump)
{
    const char *dest = fp_shim.conf.summary;
    if (strcmp(dest, "off") == 0 && !dump)
        return -1;
    if (strcmp(dest, "stderr") == 0 || strcmp(dest, "off") == 0)
        return 2;
    char path[FP_CONF_PATH_MAX + 160];
    expand_path(dest, rank, host, path, sizeof path - 16);
    if (dump)
        snprintf(path + strlen(path), 16, ".%u", dump);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fp_say("cannot write the summary to '%s'; writing it on stderr instead", path);
    return fd < 0 ? 2 : fd;
}

/* Splits the stored config problems into lines for the report. */
static size_t error_lines(const char **lines, size_t max)
{
    static char copy[sizeof fp_shim.conf_errors];
    memcpy(copy, fp_shim.conf_errors, sizeof copy);
    size_t n = 0;
    for (char *s = copy, *nl; *s && n < max; s = nl + 1) {
        nl = strchr(s, '\n');
        lines[n++] = s;
        if (!nl)
            break;
        *nl = '\0';
    }
    return n;
}

static void write_summary(const char *mode, unsigned dump)
{
    static char host[256], conf[2048];
    const char *errs[32];
    const char *notes[4];
    collect *c = &summary_data;
    c->n = 0;
    c->running = dump != 0;
    fp_pools_each(add_pool, c);
    gethostname(host, sizeof host - 1);
    fp_conf_format(&fp_shim.conf, conf, sizeof conf);
    fp_run_report r = {.pid = (int)getpid(), .rank = rank_from_env(), .host = host,
                       .config = conf, .config_errors = errs,
                       .nconfig_errors = error_lines(errs, 32), .mode = mode,
                       .config_source = fp_fw_conf_source(), .notes = notes,
                       .nnotes = fp_fw_notes(notes, 4),
                       .devs = c->devs, .ndevs = c->n};
    int fd = open_destination(r.rank, host, dump);
    if (fd < 0)
        return;
    fp_sink s = fp_sink_fd(fd);
    if (fp_shim.conf.summary_format == FP_SUMMARY_JSON)
        fp_summary_json(&r, &s);
    else
        fp_summary_text(&r, &s);
    if (fd != 2)
        close(fd);
}

/* summary_data is shared by the exit summary and the SIGUSR1 dumps. */
static pthread_mutex_t summary_lock = PTHREAD_MUTEX_INITIALIZER;

void fp_shim_write_summary(const char *mode)
{
    pthread_mutex_lock(&summary_lock);
    write_summary(mode, 0);
    pthread_mutex_unlock(&summary_lock);
}

void fp_shim_dump_summary(unsigned n)
{
    pthread_mutex_lock(&summary_lock);
    if (!atomic_load(&fp_shim.exiting)) /* the exit summary is the last word */
        write_summary("shim, SIGUSR1 dump", n);
    pthread_mutex_unlock(&summary_lock);
}

void fp_pools_report_oom(fp_ctx_pool *d)
{
    fp_oom_info o;
    fp_pool_stats st;
    fp_pool_last_oom(d->pool, &o);
    fp_pool_get_stats(d->pool, &st);
    size_t fr = (size_t)-1, tot = 0;
    if (fp_real.cuMemGetInfo_v2 && fp_real.cuMemGetInfo_v2(&fr, &tot) != CUDA_SUCCESS)
        fr = (size_t)-1;
    fp_sink s = fp_sink_fd(2);
    fp_oom_message(&o, &st, fp_pool_get_opts(d->pool), d->dev, d->total, fr, &s);
}
