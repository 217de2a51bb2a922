/* fp_advise.h - the one verdict on a run: which setting to use, proven by
 * replaying the run (docs/advice.md).
 *
 * The shim gives it the pool's record after an out-of-memory failure and
 * the memory the run had; `fragpool tune --budget` gives it a trace and a
 * budget; both print what it decides, so the two always agree.
 *
 * With a budget, the verdict is a setting whose replay fits in it:
 *  - every setting tune searches (fp_tune.h) is replayed over the run's own
 *    other keys twice: without a limit (its peak reserved) and at the
 *    budget (fp_tune_params.at_budget);
 *  - a candidate must run clean at the budget and must not be the setting
 *    in force; of those, the one with the least peak reserved (the most
 *    room left), and its smallest clean budget is then searched for the
 *    message; when the setting in force runs clean too, the candidate must
 *    need less than it;
 *  - the exact FRAGPOOL_CONF text printed is then replayed at the budget and
 *    must run clean, or the next candidate is tried: what is printed is
 *    what was proven;
 *  - no candidate: when a cap made the budget smaller than the room the
 *    device had and the setting in force fits in that room, the verdict is
 *    that cap, raised to what the replay needs (replayed too); else either
 *    the setting in force itself replays clean in the budget (the pool's
 *    layout did not cause the failure), or nothing fits (exhaustion), with
 *    the run's peak live bytes and the least any setting needs.
 * A request no pool serves (over FP_MAX_REQUEST), or rows of tune
 * that found no clean budget for any setting, make the verdict that every
 * setting runs out of memory, whatever the budget.
 * Without a budget (at exit, tune without --budget), the verdict is the
 * setting with the smallest unlimited peak reserved, named only when it
 * holds at least 5% less than the setting in force; at exit (req.lean) it
 * looks at the settings without roundup_power2_divisions only.
 *
 * Deterministic: the same trace, budget and settings give the same verdict
 * for any number of threads.
 */
#ifndef FP_ADVISE_H
#define FP_ADVISE_H

#include "fp_conf.h"
#include "fp_trace.h"
#include "fp_tune.h"

#define FP_ADVICE_CONF_MAX 1024
/* The least saving (percent of peak reserved) that a verdict without a
 * budget names. */
#define FP_ADVICE_SAVING_PCT 5

enum {
    FP_ADVICE_FIX,          /* a setting that fits the budget             */
    FP_ADVICE_RAISE_CAP,    /* only a larger cap fits (it had the room)   */
    FP_ADVICE_NONE_FITS,    /* no setting fits: exhaustion                */
    FP_ADVICE_CURRENT_FITS, /* the setting in force replays clean         */
    FP_ADVICE_BEST,         /* no budget: a setting >= 5% leaner          */
    FP_ADVICE_KEEP,         /* no budget: none is 5% leaner               */
    FP_ADVICE_ALL_OOM       /* every setting OOMs, even unlimited: a
                               request over FP_MAX_REQUEST, or (tune)
                               no budget found for any setting            */
};

typedef struct fp_advice_req {
    size_t budget;          /* bytes the run had; 0: no budget            */
    const fp_conf *current; /* the settings in force; NULL: the defaults  */
    size_t device_total;    /* device bytes for per_process_memory_fraction;
                               0: the budget                              */
    size_t room;            /* bytes it had without its cap (reserved plus
                               free), when a cap made budget smaller; 0:
                               no cap bound                               */
    unsigned threads;       /* replay workers; 0: one per CPU             */
    int lean;               /* no budget: only the settings without
                               roundup_power2_divisions (the exit summary) */
} fp_advice_req;

typedef struct fp_advice {
    int kind;                            /* FP_ADVICE_*                          */
    char conf[FP_ADVICE_CONF_MAX];       /* FIX, BEST: the FRAGPOOL_CONF value    */
    char torch[FP_ADVICE_CONF_MAX];      /* the same as PYTORCH_CUDA_ALLOC_CONF,
                                       "" when some key has no PyTorch name */
    size_t need;                         /* FIX, RAISE_CAP: the verdict's smallest clean
                               budget;
                               BEST: its peak reserved                      */
    size_t current_need;                 /* the setting in force: smallest clean budget
                               (with a budget; 0 none found) or peak
                               reserved (without)                           */
    size_t best_need;                    /* NONE_FITS: what the leanest setting needs, 0:
                               it fits no budget tried                      */
    char leanest[FP_TUNE_CONF_MAX + 32]; /* NONE_FITS: which setting that is
                                            ("" PyTorch's defaults)         */
    size_t peak_live;                    /* the trace's peak live bytes, rounded         */
    size_t budget;
    size_t room;         /* req->room                                    */
    uint64_t too_large;  /* ALL_OOM: the largest request no pool serves
                               (over FP_MAX_REQUEST); 0 none           */
    size_t too_large_at; /* ALL_OOM: the event of its first request      */
    size_t settings;     /* settings replayed                            */
    size_t replays;
} fp_advice;

/* The verdict on t (req as above).  0, EINVAL, or ENOMEM; ETIMEDOUT when
 * t->deadline_ns passed before the verdict was reached (a replay was cut
 * short, so nothing is proven). */
int fp_advise(const fp_trace *t, const fp_advice_req *req, fp_advice *out);

/* The same from rows fp_tune_run already made over the defaults (tune):
 * the setting in force is the defaults' row. */
int fp_advise_rows(const fp_trace *t, const fp_tune_row *rows, size_t n, const fp_advice_req *req,
                   fp_advice *out);

/* The verdict in one line: lead, then the setting and the replay's
 * figures for subject ("this trace"), "\n".  No allocation, no stdio. */
void fp_advise_put(fp_sink *s, const fp_advice *a, const char *lead, const char *subject);
/* The fix line of an OOM message: "fragpool: fix: ..." about "this run up
 * to this failure". */
void fp_advise_put_fix(fp_sink *s, const fp_advice *a);
/* The paste-ready lines of a verdict that names a setting:
 * "FRAGPOOL_CONF=...\n", and "PYTORCH_CUDA_ALLOC_CONF=...\n" when every
 * key has a PyTorch name; nothing for other verdicts. */
void fp_advise_put_paste(fp_sink *s, const fp_advice *a);
/* "fits in 18,474 MiB": whole MiB (rounded up) with thousands commas. */
void fp_advise_put_mib(fp_sink *s, size_t bytes);

#endif
