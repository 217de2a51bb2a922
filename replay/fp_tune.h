/* fp_tune.h - the search behind `fragpool tune`: which pool settings hold
 * the least memory for one trace, and the smallest device budget each
 * runs in without an out-of-memory failure.
 *
 * A setting is a FRAGPOOL_CONF text (also a valid PYTORCH_CUDA_ALLOC_CONF
 * value) over PyTorch's defaults; it is parsed by config/ so that the text
 * printed and the options replayed cannot disagree.
 *
 * Budget search: budgets are multiples of a granularity g (2 MiB).  Every
 * budget below the trace's peak live bytes (each request rounded) fails,
 * and a budget of the unlimited run's peak reserved behaves exactly like
 * an unlimited device, so the answer lies between the two and bisection
 * finds it.  OOM-freeness need not be monotonic in the budget (release-
 * and-retry and GC change the segment layout), so the result is the
 * smallest budget B found such that B runs clean and B - g does not; a
 * smaller clean budget may exist below a failing one.  Both facts about B
 * are checked by replays, never assumed.
 *
 * Deterministic: results depend only on the trace and the parameters, not
 * on the number of threads or their timing.
 */
#ifndef FP_TUNE_H
#define FP_TUNE_H

#include "fp_trace.h"
#include "fp_conf.h"
#include <stddef.h>

#define FP_TUNE_CONF_MAX 192

typedef struct fp_tune_setting {
    char conf[FP_TUNE_CONF_MAX]; /* FRAGPOOL_CONF text; "" = the defaults      */
    fp_pool_opts opts;           /* conf parsed over fp_pool_opts_default      */
    int gc;                      /* 1: GC is on, so the budget is also the cap */
    size_t order;                /* position in generation order (tie-break)   */
} fp_tune_setting;

typedef struct fp_tune_row {
    fp_tune_setting set;
    size_t peak_reserved;  /* unlimited device                              */
    size_t peak_allocated; /* unlimited device                              */
    size_t min_budget;     /* smallest clean budget found; 0 = none         */
    size_t replays;        /* replays run for this row's results (fewer
                               than the budgets tried: fp_tune.c, "budgets
                               that replay alike")                          */
    size_t ooms;           /* OOMs of the unlimited replay (requests no
                               device could hold): no budget search then    */
    int cut;               /* 1: stopped past params.stop_above: the peaks
                               are lower bounds, no more                    */
    int shared;            /* 1: an earlier row replays alike (fp_tune.c,
                               "twins"); these are its results and replays  */
    int is_default;        /* 1 for the row of PyTorch's defaults           */
    int fits;              /* params.at_budget: 1 when the replay at it ran
                               clean, 0 when it did not; -1 not tried        */
} fp_tune_row;

typedef struct fp_tune_params {
    size_t granularity;  /* budget step in bytes; 0 = 2 MiB               */
    unsigned threads;    /* workers; 0 = one per online CPU               */
    unsigned gc_top;     /* GC variants for this many best settings, and  */
                         /* the defaults; 0 = 3                           */
    int full;            /* 1: GC variants of every setting               */
    const fp_conf *over; /* settings are parsed over this; NULL: the
                               defaults (the OOM advice: the run's own keys) */
    int peaks_only;      /* 1: no budget search (min_budget stays 0)      */
    size_t at_budget;    /* nonzero: each setting is also replayed at this
                               budget (fp_tune_row.fits)                     */
    int lean;            /* 1: no roundup_power2_divisions variants (the
                               exit summary's quick look: 1/7 the replays)   */
    /* Called (may be NULL) after each setting is evaluated, with the
     * settings done and known so far, on the worker's thread, one call at
     * a time. */
    void (*progress)(void *ud, size_t done, size_t total);
    void *progress_ud;
    size_t stop_above; /* nonzero (with peaks_only): an unlimited replay
                               stops once reserved passes this; its row's
                               peak is then only "more than this" (cut) */
} fp_tune_params;

/* Fill s from conf (parsed over the defaults).  0, or EINVAL when conf has
 * a problem or does not fit. */
int fp_tune_setting_init(fp_tune_setting *s, const char *conf);
/* The same, parsed over *over instead of the defaults (NULL: defaults). */
int fp_tune_setting_init_over(fp_tune_setting *s, const char *conf, const fp_conf *over);

/* The max_split_size_mb values worth trying for t, ascending, each > 20:
 * powers of two from 32 MiB up to the largest request, and the median and
 * 90th percentile of the requests over 20 MiB, rounded up to whole MiB.
 * Returns the count written (at most cap). */
size_t fp_tune_split_values(const fp_trace *t, size_t *mb, size_t cap);

/* The smallest budget (a multiple of g) found to replay t under s without
 * an OOM, searching from lower (known too small below it) to upper (the
 * unlimited peak reserved).  *out 0 when none was found up to 4 x upper.
 * *replays (may be NULL) counts the replays.  0, or ENOMEM. */
int fp_tune_min_budget(const fp_trace *t, const fp_tune_setting *s, size_t lower, size_t upper,
                       size_t g, size_t *out, size_t *replays);

/* Evaluate one setting: an unlimited replay, then (unless p->peaks_only)
 * the budget search, and (with p->at_budget) one replay at that budget.
 * p may be NULL: the budget search only, 2 MiB steps. */
int fp_tune_eval(const fp_trace *t, const fp_tune_setting *s, const fp_tune_params *p,
                 fp_tune_row *row);

/* 1 when s replays t at budget without an OOM (GC: the budget is the cap),
 * in *clean; 0 or ENOMEM. */
int fp_tune_runs_clean(const fp_trace *t, const fp_tune_setting *s, size_t budget, int *clean);

/* Generate the settings for t, evaluate them on params->threads threads,
 * and rank them (fp_tune_rank).  *rows is malloc'd (the caller frees).
 * 0, EINVAL on a bad parameter, or ENOMEM. */
int fp_tune_run(const fp_trace *t, const fp_tune_params *params, fp_tune_row **rows, size_t *nrows);

/* Order rows by peak reserved, then min budget (none last), then
 * generation order. */
void fp_tune_rank(fp_tune_row *rows, size_t n);

#endif
