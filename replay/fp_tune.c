/* fp_tune.c - settings search for `fragpool tune` (design in fp_tune.h and
 * docs/replay.md).
 *
 * Stage 1 takes the default segments (virtual memory, where max_split has
 * no effect on placement) with a fixed set of roundup_power2_divisions
 * values, and the classic segments (expandable_segments:False) crossing
 * the max_split_size_mb values derived from the trace with the same
 * roundup values.  Stage 2 adds
 * garbage_collection_threshold variants (0.6, 0.8) of the defaults and of
 * the gc_top settings with the smallest budgets: GC acts only under a cap,
 * so a GC variant differs from its base only in the budget search, where
 * the budget is also the cap (per_process_memory_fraction:1 of a device of
 * exactly the budget).  Each stage runs its settings on a small pool of
 * threads, classic segments first (the longer searches); each setting is
 * evaluated on one thread, start to finish, so the results do not depend
 * on scheduling.  A setting that replays like
 * an earlier one (roundup_power2_divisions that rounds every request of
 * the trace alike) is not replayed again: it takes that one's results.
 */
#include "fp_tune.h"
#include "fp_conf.h"
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TUNE_MAX_SPLITS  12
#define TUNE_MAX_THREADS 64

static const char *const roundups[] = {
    NULL, "2", "4", "8", "16", "[32:1,>:4]", "[256:1,512:2,1024:4,>:8]"};
#define TUNE_NROUNDUPS (sizeof roundups / sizeof *roundups)

static const char *const gc_thresholds[] = {"0.6", "0.8"};
#define TUNE_NGC (sizeof gc_thresholds / sizeof *gc_thresholds)

int fp_tune_setting_init_over(fp_tune_setting *s, const char *conf, const fp_conf *over)
{
    memset(s, 0, sizeof *s);
    size_t n = strlen(conf);
    if (n >= sizeof s->conf)
        return EINVAL;
    memcpy(s->conf, conf, n + 1);
    fp_conf c;
    if (over)
        c = *over;
    else
        fp_conf_default(&c);
    if (fp_conf_parse(conf, &c, NULL, NULL))
        return EINVAL;
    s->opts = c.pool;
    s->gc = c.pool.gc_threshold > 0;
    return 0;
}

int fp_tune_setting_init(fp_tune_setting *s, const char *conf)
{
    return fp_tune_setting_init_over(s, conf, NULL);
}

/* ---- candidate values ----------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

static size_t add_unique(size_t *v, size_t n, size_t cap, size_t x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x)
            return n;
    if (n < cap)
        v[n++] = x;
    return n;
}

/* Whole MiB, rounded up, without overflowing near 2^64. */
static size_t ceil_mib(uint64_t bytes)
{
    return (size_t)(bytes / FP_MIB + (bytes % FP_MIB != 0));
}

/* Requests no pool can serve (over FP_MAX_REQUEST) are left out: they
 * fail under every setting, and sizes near 2^64 would overflow the
 * arithmetic below. */
size_t fp_tune_split_values(const fp_trace *t, size_t *mb, size_t cap)
{
    uint64_t largest = 0;
    size_t nbig = 0;
    for (size_t i = 0; i < t->n; i++) {
        uint64_t sz = t->ev[i].size;
        if (t->ev[i].op == 'a' && sz <= FP_MAX_REQUEST) {
            largest = sz > largest ? sz : largest;
            nbig += sz > 20 * FP_MIB;
        }
    }
    size_t n = 0;
    for (size_t p = 32; p <= largest / FP_MIB; p *= 2)
        n = add_unique(mb, n, cap, p);
    uint64_t *big = nbig ? malloc(nbig * sizeof *big) : NULL;
    if (big) {
        size_t k = 0;
        for (size_t i = 0; i < t->n; i++) {
            uint64_t sz = t->ev[i].size;
            if (t->ev[i].op == 'a' && sz > 20 * FP_MIB && sz <= FP_MAX_REQUEST)
                big[k++] = sz;
        }
        qsort(big, k, sizeof *big, cmp_u64);
        n = add_unique(mb, n, cap, ceil_mib(big[(k - 1) / 2]));
        n = add_unique(mb, n, cap, ceil_mib(big[(k - 1) * 9 / 10]));
        free(big);
    }
    qsort(mb, n, sizeof *mb, cmp_size);
    return n;
}

/* ---- one setting -------------------------------------------------------------- */

/* s's options for a replay of the search: it reads only the peaks of
 * reserved and allocated and the OOMs, and asks for no block by address,
 * so the pool keeps no other statistics and no map of live blocks (each
 * a fifth of a replay's time). */
static fp_pool_opts search_opts(const fp_tune_setting *s)
{
    fp_pool_opts o = s->opts;
    o.lean_stats = 1;
    o.no_live_map = 1;
    return o;
}

int fp_tune_runs_clean(const fp_trace *t, const fp_tune_setting *s, size_t budget, int *clean)
{
    fp_replay_hook h = {.stop_at_oom = 1};
    fp_replay_result r;
    fp_pool_opts o = search_opts(s);
    int err = fp_replay_ex(t, &o, budget, &h, &r, NULL);
    *clean = !err && r.ooms == 0;
    return err;
}

/* ---- budgets that replay alike --------------------------------------------
 * A replay at budget B reads B in the simulated device's reserves and maps
 * (fp_replay_result.budget_from/below), and through device_total (set to
 * B when the setting has none): the pool's cap (memory_fraction), virtual
 * memory's page and range sizes, and the refusal of a request over the
 * whole device.  With classic segments, no GC (the budget is not the cap)
 * and no memory_fraction over B, only the device and that refusal read it;
 * the refusal never happens at a budget of at least the trace's peak live
 * bytes (each request counted, rounded), where every search starts.  So
 * every budget of [max(budget_from, lower), budget_below) runs exactly as
 * the one replayed did: clean or not, it needs no replay of its own. */

#define TUNE_KNOWN_MAX 64

typedef struct known_budgets {
    size_t from[TUNE_KNOWN_MAX], below[TUNE_KNOWN_MAX]; /* [from, below) */
    int clean[TUNE_KNOWN_MAX];
    size_t n;
    bool on; /* the setting reads the budget as the device alone */
} known_budgets;

static bool budget_is_device_only(const fp_tune_setting *s, size_t lower)
{
    const fp_pool_opts *o = &s->opts;
    return !s->gc && lower && o->expandable_segments == FP_VMM_OFF &&
           (o->device_total || o->memory_fraction <= 0);
}

static int known_clean(const known_budgets *k, size_t budget)
{
    for (size_t i = 0; i < k->n; i++)
        if (k->from[i] <= budget && budget < k->below[i])
            return k->clean[i];
    return -1;
}

static void know(known_budgets *k, const fp_replay_result *r, size_t lower, int clean)
{
    if (!k->on || k->n == TUNE_KNOWN_MAX)
        return;
    k->from[k->n] = r->budget_from > lower ? r->budget_from : lower;
    k->below[k->n] = r->budget_below;
    k->clean[k->n++] = clean;
}

/* fp_tune_runs_clean, answered from k where a replay already holds for
 * budget; *n counts the replays run. */
static int try_budget(const fp_trace *t, const fp_tune_setting *s, known_budgets *k, size_t lower,
                      size_t budget, int *clean, size_t *n)
{
    int c = k->on ? known_clean(k, budget) : -1;
    if (c >= 0) {
        *clean = c;
        return 0;
    }
    fp_replay_hook h = {.stop_at_oom = 1};
    fp_replay_result r;
    fp_pool_opts o = search_opts(s);
    int err = fp_replay_ex(t, &o, budget, &h, &r, NULL);
    *clean = !err && r.ooms == 0;
    (*n)++;
    if (!err)
        know(k, &r, lower, *clean);
    return err;
}

/* 1 once hi steps of g pass 4 x upper (+ g), without overflowing. */
static int past_search_end(size_t hi, size_t g, size_t upper)
{
    if (hi > SIZE_MAX / g)
        return 1;
    if (upper > (SIZE_MAX - g) / 4)
        return 0;
    return hi * g > 4 * upper + g;
}

/* fp_tune_min_budget with the budgets known so far (k). */
static int min_budget_known(const fp_trace *t, const fp_tune_setting *s, known_budgets *k,
                            size_t lower, size_t upper, size_t g, size_t *out, size_t *replays)
{
    size_t max_steps = SIZE_MAX / g;
    size_t lo = lower ? (lower - 1) / g : 0;         /* lo * g < lower  */
    size_t hi = upper / g + (upper % g != 0), n = 0; /* hi * g >= upper */
    int clean = !s->gc, err = 0;                     /* without GC, hi is safe */
    *out = 0;
    if (hi <= lo)
        hi = lo + 1;
    if (hi >= max_steps) /* upper is near SIZE_MAX: no budget can be tried */
        goto done;
    while (!clean) { /* with the budget as the cap, hi must be tried */
        if ((err = try_budget(t, s, k, lower, hi * g, &clean, &n)))
            return err;
        if (!clean) {
            lo = hi;
            hi += hi / 8 ? hi / 8 : 1;
            if (past_search_end(hi, g, upper))
                goto done;
        }
    }
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((err = try_budget(t, s, k, lower, mid * g, &clean, &n)))
            return err;
        *(clean ? &hi : &lo) = mid;
    }
    *out = hi * g;
done:
    if (replays)
        *replays += n;
    return 0;
}

/* Budgets are counted in steps of g, and no step count reaches SIZE_MAX / g,
 * so every budget tried is a size_t, for any upper. */
int fp_tune_min_budget(const fp_trace *t, const fp_tune_setting *s, size_t lower, size_t upper,
                       size_t g, size_t *out, size_t *replays)
{
    known_budgets k = {.on = budget_is_device_only(s, lower)};
    return min_budget_known(t, s, &k, lower, upper, g, out, replays);
}

/* after_event of a replay with params.stop_above: stop past it. */
static int over_limit(void *ud, fp_pool *p, size_t i, int refused)
{
    (void)i, (void)refused;
    return fp_pool_reserved_bytes(p) > *(const size_t *)ud;
}

/* A row's unlimited replay: its peaks, cut and ooms; *from its
 * budget_from (the budgets from there up replay as it did). */
static int eval_unlimited(const fp_trace *t, const fp_tune_setting *s, const fp_tune_params *p,
                          fp_tune_row *row, size_t *from)
{
    fp_replay_result r;
    int stop = p && p->stop_above && p->peaks_only && !p->at_budget;
    fp_replay_hook h = {.after_event = over_limit, .ud = p ? (void *)&p->stop_above : NULL};
    fp_pool_opts o = search_opts(s);
    int err = fp_replay_ex(t, &o, 0, stop ? &h : NULL, &r, NULL);
    if (err)
        return err;
    row->replays = 1;
    row->peak_reserved = (size_t)r.stats.reserved_bytes[FP_ALL].peak;
    row->peak_allocated = (size_t)r.stats.allocated_bytes[FP_ALL].peak;
    row->cut = r.events < t->n;
    row->ooms = r.ooms;
    *from = r.budget_from;
    return 0;
}

/* The rest of a row after its unlimited replay (from: its budget_from):
 * the replay at p->at_budget, then the budget search. */
static int eval_budgets(const fp_trace *t, const fp_tune_setting *s, const fp_tune_params *p,
                        fp_tune_row *row, size_t from)
{
    size_t g = p && p->granularity ? p->granularity : 2 * FP_MIB;
    if (row->ooms || row->cut) /* a request no device could hold; or past the limit */
        return 0;
    int search = !p || !p->peaks_only;
    size_t lower = search || (p && p->at_budget) ? fp_trace_peak_live(t, &s->opts) : 0;
    known_budgets k = {.on = budget_is_device_only(s, lower)};
    fp_replay_result unlimited = {.budget_from = from, .budget_below = SIZE_MAX};
    know(&k, &unlimited, lower, 1);
    size_t n = 0;
    int err;
    if (p && p->at_budget && (err = try_budget(t, s, &k, lower, p->at_budget, &row->fits, &n)))
        return err;
    row->replays += n;
    if (!search)
        return 0;
    return min_budget_known(t, s, &k, lower, row->peak_reserved, g, &row->min_budget,
                            &row->replays);
}

static void row_init(fp_tune_row *row, const fp_tune_setting *s)
{
    memset(row, 0, sizeof *row);
    row->set = *s;
    row->is_default = s->conf[0] == '\0';
    row->fits = -1;
}

int fp_tune_eval(const fp_trace *t, const fp_tune_setting *s, const fp_tune_params *p,
                 fp_tune_row *row)
{
    size_t from;
    row_init(row, s);
    int err = eval_unlimited(t, s, p, row, &from);
    return err ? err : eval_budgets(t, s, p, row, from);
}

/* ---- GC variants' unlimited replays ----------------------------------------
 * garbage_collection_threshold and per_process_memory_fraction act only
 * under a cap; with no device size nor max_reserved there is none in an
 * unlimited replay, so a GC variant's unlimited replay is its base
 * setting's, event for event: it takes the base row's peaks instead of
 * replaying.  Its budget search, where the budget is the cap, is its own. */

static bool unlimited_alike(const fp_tune_setting *gc, const fp_tune_setting *base)
{
    fp_pool_opts x = gc->opts, y = base->opts;
    if (x.device_total || x.max_reserved || y.device_total || y.max_reserved)
        return false; /* a cap even without a budget */
    x.gc_threshold = y.gc_threshold = 0;
    x.memory_fraction = y.memory_fraction = 0;
    return !memcmp(&x, &y, sizeof x);
}

/* base_of[i] for rows [from, n): an earlier row of [0, from) whose
 * unlimited replay row i's is, or SIZE_MAX. */
static void find_bases(const fp_tune_row *rows, size_t from, size_t n, size_t *base_of)
{
    for (size_t i = from; i < n; i++) {
        base_of[i] = SIZE_MAX;
        for (size_t j = 0; j < from && base_of[i] == SIZE_MAX; j++)
            if (unlimited_alike(&rows[i].set, &rows[j].set))
                base_of[i] = j;
    }
}

/* fp_tune_eval of s with base's unlimited replay. */
static int eval_on_base(const fp_trace *t, const fp_tune_setting *s, const fp_tune_params *p,
                        const fp_tune_row *base, fp_tune_row *row)
{
    row_init(row, s);
    row->peak_reserved = base->peak_reserved;
    row->peak_allocated = base->peak_allocated;
    row->cut = base->cut;
    row->ooms = base->ooms;
    return eval_budgets(t, s, p, row, base->peak_reserved);
}

/* ---- settings that replay alike ------------------------------------------
 * roundup_power2_divisions acts only through the rounded size of each
 * request (fp_round_size): two settings equal but for it, that round every
 * request size of the trace alike, give the same replays, event for
 * event.  Such a "twin" is not replayed again; it takes the results of
 * the first of its kind, replays included, and is marked shared. */

static int cmp_u64_asc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The distinct request sizes of t (allocations and 'o' rows), ascending. */
static uint64_t *distinct_sizes(const fp_trace *t, size_t *n)
{
    uint64_t *v = malloc((t->n ? t->n : 1) * sizeof *v);
    size_t k = 0;
    if (!v)
        return NULL;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].op == 'a' || t->ev[i].op == 'o') /* requests, not 'j' rows */
            v[k++] = t->ev[i].size;
    qsort(v, k, sizeof *v, cmp_u64_asc);
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (!m || v[m - 1] != v[i])
            v[m++] = v[i];
    *n = m;
    return v;
}

static bool replay_alike(const fp_tune_setting *a, const fp_tune_setting *b, const uint64_t *sizes,
                         size_t n)
{
    fp_pool_opts x = a->opts, y = b->opts;
    memset(x.roundup_divisions, 0, sizeof x.roundup_divisions);
    memset(y.roundup_divisions, 0, sizeof y.roundup_divisions);
    if (a->gc != b->gc || memcmp(&x, &y, sizeof x))
        return false;
    for (size_t i = 0; i < n; i++) {
        size_t sz = sizes[i] > SIZE_MAX ? SIZE_MAX : (size_t)sizes[i];
        if (fp_round_size(&a->opts, sz) != fp_round_size(&b->opts, sz))
            return false;
    }
    return true;
}

/* twin[i] for rows [from, n): the first earlier row (not a twin itself)
 * that replays alike, or SIZE_MAX. */
static void find_twins(const fp_tune_row *rows, size_t from, size_t n, const uint64_t *sizes,
                       size_t nsizes, size_t *twin)
{
    for (size_t i = from; i < n; i++) {
        twin[i] = SIZE_MAX;
        for (size_t j = 0; j < i && twin[i] == SIZE_MAX; j++)
            if (twin[j] == SIZE_MAX && replay_alike(&rows[i].set, &rows[j].set, sizes, nsizes))
                twin[i] = j;
    }
}

/* A twin's row: its own setting, the results of the row it replays like. */
static void copy_twins(fp_tune_row *rows, size_t from, size_t n, const size_t *twin)
{
    for (size_t i = from; i < n; i++) {
        if (twin[i] == SIZE_MAX)
            continue;
        fp_tune_setting set = rows[i].set;
        rows[i] = rows[twin[i]];
        rows[i].set = set;
        rows[i].is_default = set.conf[0] == '\0';
        rows[i].shared = 1;
    }
}

/* ---- many settings on a few threads -------------------------------------- */

typedef struct tune_jobs {
    const fp_trace *t;
    fp_tune_row *rows;        /* rows[i].set is the input of job i  */
    const size_t *twin;       /* twin[i] != SIZE_MAX: job i is not run    */
    const fp_tune_row *bases; /* earlier rows, done: base_of's indexes */
    const size_t *base_of;    /* base_of[i] != SIZE_MAX: job i takes that
                               row's unlimited replay (may be NULL)  */
    const size_t *order;      /* the jobs in the order they are taken (long_first) */
    size_t n, next;
    size_t before, done; /* jobs of earlier stages; of this one done */
    const fp_tune_params *p;
    int err; /* first error                        */
    pthread_mutex_t lock;
} tune_jobs;

static void *tune_worker(void *arg)
{
    tune_jobs *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        size_t i = j->next < j->n && !j->err ? j->order[j->next++] : j->n;
        pthread_mutex_unlock(&j->lock);
        if (i == j->n)
            return NULL;
        if (j->twin[i] != SIZE_MAX) {
            pthread_mutex_lock(&j->lock);
            j->done++;
            pthread_mutex_unlock(&j->lock);
            continue;
        }
        fp_tune_setting s = j->rows[i].set;
        size_t b = j->base_of ? j->base_of[i] : SIZE_MAX;
        int err = b != SIZE_MAX ? eval_on_base(j->t, &s, j->p, &j->bases[b], &j->rows[i])
                                : fp_tune_eval(j->t, &s, j->p, &j->rows[i]);
        pthread_mutex_lock(&j->lock);
        j->err = j->err ? j->err : err;
        j->done++;
        if (j->p->progress)
            j->p->progress(j->p->progress_ud, j->before + j->done, j->before + j->n);
        pthread_mutex_unlock(&j->lock);
    }
}

/* The order jobs are taken in: classic segments first (a bisection over a
 * wide range of budgets, about twice the replays), then the others, so
 * that short jobs fill the end of a stage and no thread waits long for
 * the last one.  Which thread runs a job never changes its result. */
static void long_first(const fp_tune_row *rows, size_t n, size_t *order)
{
    size_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++)
            if ((rows[i].set.opts.expandable_segments == FP_VMM_OFF) == (pass == 0))
                order[k++] = i;
}

/* Runs the jobs of j (its inputs filled) on threads threads. */
static int eval_all(tune_jobs *j, unsigned threads)
{
    pthread_t tid[TUNE_MAX_THREADS];
    unsigned started = 0;
    size_t *order = malloc((j->n ? j->n : 1) * sizeof *order);
    if (!order)
        return ENOMEM;
    long_first(j->rows, j->n, order);
    j->order = order;
    if (pthread_mutex_init(&j->lock, NULL)) {
        free(order);
        return ENOMEM;
    }
    for (unsigned k = 1; k < threads && k < j->n; k++)
        if (!pthread_create(&tid[started], NULL, tune_worker, j))
            started++;
    tune_worker(j); /* this thread works too */
    for (unsigned k = 0; k < started; k++)
        pthread_join(tid[k], NULL);
    pthread_mutex_destroy(&j->lock);
    free(order);
    return j->err;
}

/* ---- the settings ----------------------------------------------------------------- */

static int add_setting(fp_tune_row *rows, size_t *n, const char *conf, const fp_conf *over)
{
    int err = fp_tune_setting_init_over(&rows[*n].set, conf, over);
    if (!err)
        rows[*n].set.order = *n, (*n)++;
    return err;
}

/* The default segments (virtual memory) with each roundup value, then the
 * classic segments (expandable_segments:False) crossing the max_split
 * values with the roundup values: max_split shapes classic placement only. */
static int base_settings(const fp_trace *t, fp_tune_row *rows, size_t *n, const fp_conf *over,
                         int lean)
{
    size_t nroundups = lean ? 1 : TUNE_NROUNDUPS;
    size_t mb[TUNE_MAX_SPLITS + 1];
    size_t nmb = fp_tune_split_values(t, mb + 1, TUNE_MAX_SPLITS);
    mb[0] = 0; /* unset */
    for (size_t k = 0; k < nroundups; k++) {
        char conf[FP_TUNE_CONF_MAX];
        snprintf(conf, sizeof conf, "%s%s", roundups[k] ? "roundup_power2_divisions:" : "",
                 roundups[k] ? roundups[k] : "");
        int err = add_setting(rows, n, conf, over);
        if (err)
            return err;
    }
    for (size_t i = 0; i <= nmb; i++)
        for (size_t k = 0; k < nroundups; k++) {
            char conf[FP_TUNE_CONF_MAX];
            int m = snprintf(conf, sizeof conf, "expandable_segments:False");
            if (mb[i])
                m += snprintf(conf + m, sizeof conf - (size_t)m, ",max_split_size_mb:%zu", mb[i]);
            if (roundups[k])
                snprintf(conf + m, sizeof conf - (size_t)m, ",roundup_power2_divisions:%s",
                         roundups[k]);
            int err = add_setting(rows, n, conf, over);
            if (err)
                return err;
        }
    return 0;
}

/* Smallest budget first (none last), then peak reserved, then order. */
static int by_budget(const void *a, const void *b)
{
    const fp_tune_row *x = *(fp_tune_row *const *)a, *y = *(fp_tune_row *const *)b;
    size_t bx = x->min_budget ? x->min_budget : SIZE_MAX;
    size_t by = y->min_budget ? y->min_budget : SIZE_MAX;
    if (bx != by)
        return bx < by ? -1 : 1;
    if (x->peak_reserved != y->peak_reserved)
        return x->peak_reserved < y->peak_reserved ? -1 : 1;
    return (x->set.order > y->set.order) - (x->set.order < y->set.order);
}

static int gc_settings(fp_tune_row *rows, size_t nbase, size_t *n, unsigned top, int full,
                       const fp_conf *over)
{
    fp_tune_row **best = malloc(nbase * sizeof *best);
    if (!best)
        return ENOMEM;
    for (size_t i = 0; i < nbase; i++)
        best[i] = &rows[i];
    qsort(best, nbase, sizeof *best, by_budget);
    int err = 0;
    for (size_t i = 0; i < nbase && !err; i++) {
        const char *base = best[i]->set.conf;
        if (!full && i >= top && !best[i]->is_default)
            continue;
        for (size_t k = 0; k < TUNE_NGC && !err; k++) {
            char conf[FP_TUNE_CONF_MAX];
            int m = snprintf(conf, sizeof conf,
                             "%s%sgarbage_collection_threshold:%s,per_process_memory_fraction:1",
                             base, *base ? "," : "", gc_thresholds[k]);
            err = m < 0 || (size_t)m >= sizeof conf ? EINVAL : add_setting(rows, n, conf, over);
        }
    }
    free(best);
    return err;
}

static unsigned thread_count(unsigned want)
{
    if (!want) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        want = c > 0 ? (unsigned)c : 1;
    }
    return want > TUNE_MAX_THREADS ? TUNE_MAX_THREADS : want;
}

int fp_tune_run(const fp_trace *t, const fp_tune_params *params, fp_tune_row **out, size_t *nout)
{
    unsigned threads = thread_count(params->threads);
    unsigned top = params->gc_top ? params->gc_top : 3;
    size_t nbase_max = (TUNE_MAX_SPLITS + 2) * TUNE_NROUNDUPS;
    fp_tune_row *rows = calloc(nbase_max * (1 + TUNE_NGC), sizeof *rows);
    if (!rows)
        return ENOMEM;
    size_t nbase = 0, n, nsizes = 0;
    size_t *twin = malloc(nbase_max * (1 + TUNE_NGC) * 2 * sizeof *twin);
    size_t *base_of = twin + nbase_max * (1 + TUNE_NGC);
    uint64_t *sizes = distinct_sizes(t, &nsizes);
    int err = twin && sizes ? base_settings(t, rows, &nbase, params->over, params->lean) : ENOMEM;
    if (!err) {
        find_twins(rows, 0, nbase, sizes, nsizes, twin);
        tune_jobs j = {.t = t, .rows = rows, .twin = twin, .n = nbase, .p = params};
        err = eval_all(&j, threads);
        copy_twins(rows, 0, nbase, twin);
    }
    n = nbase;
    if (!err && (!params->peaks_only || params->at_budget)) /* GC acts only under a cap */
        err = gc_settings(rows, nbase, &n, top, params->full, params->over);
    if (!err) {
        find_twins(rows, nbase, n, sizes, nsizes, twin);
        find_bases(rows, nbase, n, base_of);
        tune_jobs j = {.t = t,
                       .rows = rows + nbase,
                       .twin = twin + nbase,
                       .bases = rows,
                       .base_of = base_of + nbase,
                       .before = nbase,
                       .n = n - nbase,
                       .p = params};
        err = eval_all(&j, threads);
        copy_twins(rows, nbase, n, twin);
    }
    free(twin);
    free(sizes);
    if (err) {
        free(rows);
        return err;
    }
    fp_tune_rank(rows, n);
    *out = rows;
    *nout = n;
    return 0;
}

static int by_rank(const void *a, const void *b)
{
    const fp_tune_row *x = a, *y = b;
    if (x->peak_reserved != y->peak_reserved)
        return x->peak_reserved < y->peak_reserved ? -1 : 1;
    size_t bx = x->min_budget ? x->min_budget : SIZE_MAX;
    size_t by = y->min_budget ? y->min_budget : SIZE_MAX;
    if (bx != by)
        return bx < by ? -1 : 1;
    return (x->set.order > y->set.order) - (x->set.order < y->set.order);
}

void fp_tune_rank(fp_tune_row *rows, size_t n)
{
    qsort(rows, n, sizeof *rows, by_rank);
}
