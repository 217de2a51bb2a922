/* fp_advise.c - the verdict (design in fp_advise.h and docs/advice.md).
 *
 * Invariants: a FIX names only text that was itself replayed clean at the
 * budget; the setting in force is never a verdict; fp_advise_put_fix
 * formats into the caller's sink without allocating.
 */
#include "fp_advise.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G_STEP     (2 * FP_MIB) /* tune's budget step */
#define MAX_VERIFY 8            /* candidates replayed at the budget at most */

/* The keys a verdict chooses; the run's other keys are kept. */
static const char *const policy_keys[] = {"max_split_size_mb", "roundup_power2_divisions",
                                          "expandable_segments", "garbage_collection_threshold",
                                          "vmm_page_mb"};
#define NPOLICY (sizeof policy_keys / sizeof *policy_keys)

static uint64_t key_bit(const char *name)
{
    int i = fp_conf_find(name, strlen(name));
    return i < 0 ? 0 : (uint64_t)1 << i;
}

static uint64_t policy_mask(void)
{
    uint64_t m = 0;
    for (size_t i = 0; i < NPOLICY; i++)
        m |= key_bit(policy_keys[i]);
    return m;
}

/* The run's settings with the chosen keys at their defaults and no cap
 * (the budget stands for the cap and the device): what candidates are
 * parsed over. */
static void make_over(const fp_conf *cur, fp_conf *over)
{
    fp_conf d;
    fp_conf_default(&d);
    *over = cur ? *cur : d;
    over->pool.max_split_size = d.pool.max_split_size;
    memcpy(over->pool.roundup_divisions, d.pool.roundup_divisions, sizeof d.pool.roundup_divisions);
    over->pool.expandable_segments = d.pool.expandable_segments;
    over->pool.vmm_page = d.pool.vmm_page; /* a page too large may be the cause */
    over->pool.gc_threshold = 0;
    over->pool.memory_fraction = 0;
    over->pool.max_reserved = 0;
    over->pool.device_total = 0;
    over->pool.record_bytes = 0;
    over->set_mask &= ~policy_mask();
}

/* The setting in force, as tune replays it: no cap but the budget. */
static void current_setting(const fp_conf *cur, fp_tune_setting *s)
{
    fp_conf c;
    if (cur)
        c = *cur;
    else
        fp_conf_default(&c);
    memset(s, 0, sizeof *s);
    s->opts = c.pool;
    s->opts.max_reserved = 0;
    s->opts.device_total = 0;
    s->opts.record_bytes = 0;
    s->gc = s->opts.gc_threshold > 0;
    s->opts.memory_fraction = s->gc ? 1.0 : 0; /* GC: the budget is the cap */
    s->order = SIZE_MAX;
}

/* expandable_segments:True and the default (auto) are one policy. */
static int same_policy(const fp_pool_opts *a, const fp_pool_opts *b)
{
    return a->max_split_size == b->max_split_size && a->vmm_page == b->vmm_page &&
           !a->expandable_segments == !b->expandable_segments &&
           a->gc_threshold == b->gc_threshold &&
           !memcmp(a->roundup_divisions, b->roundup_divisions, sizeof a->roundup_divisions);
}

/* ---- the text printed ------------------------------------------------------ */

/* cand, naming virtual-memory segments when it runs them without saying
 * so (it leaves expandable_segments at fragpool's default): a verdict
 * must mean the same under any configuration, and PyTorch's default is
 * classic segments. */
static int explicit_text(const char *cand, char *out, size_t len)
{
    fp_conf c;
    fp_conf_default(&c);
    if (fp_conf_parse(cand, &c, NULL, NULL))
        return EINVAL;
    uint64_t es = key_bit("expandable_segments");
    int n = c.pool.expandable_segments && !(c.set_mask & es)
                ? snprintf(out, len, "expandable_segments:True%s%s", cand[0] ? "," : "", cand)
                : snprintf(out, len, "%s", cand);
    return n < 0 || (size_t)n >= len ? ENOSPC : 0;
}

/* s without ",per_process_memory_fraction:1" (tune's GC cap), into out;
 * 1 when it was there. */
static int strip_gc_cap(const char *s, char *out, size_t len)
{
    static const char cap[] = "per_process_memory_fraction:1";
    const char *at = strstr(s, cap);
    size_t n = at ? (size_t)(at - s) : strlen(s);
    if (at && n && s[n - 1] == ',')
        n--;
    if (n >= len)
        n = len - 1;
    memcpy(out, s, n);
    out[n] = '\0';
    return at != NULL;
}

/* The output keys given a file path (summary, trace, snapshot): a fix
 * line leaves them out, so that it stays short and a rerun pasted from it
 * does not write over this run's files.  "off" and "stderr" are kept. */
static uint64_t path_mask(const fp_conf *c)
{
    uint64_t m = 0;
    for (size_t i = 0; fp_conf_option(i); i++) {
        const fp_option *o = fp_conf_option(i);
        char v[FP_CONF_PATH_MAX + 8];
        if (strcmp(o->type, "destination") != 0)
            continue;
        fp_sink s = fp_sink_buffer(v, sizeof v);
        o->format(o, c, &s);
        if (fp_sink_error(&s) || (strcmp(v, "off") != 0 && strcmp(v, "stderr") != 0))
            m |= (uint64_t)1 << i;
    }
    return m;
}

/* The run's keys but those of mask and the output paths, into others; ""
 * when they do not fit (the candidate is then printed alone, and what is
 * printed is still what verify replays). */
static void other_keys(const fp_conf *cur, uint64_t mask, char *others, size_t len)
{
    others[0] = '\0';
    if (!cur)
        return;
    fp_conf c = *cur;
    c.set_mask &= ~(mask | path_mask(cur));
    if (fp_conf_format_set(&c, others, len))
        others[0] = '\0';
}

/* FRAGPOOL_CONF: the run's other keys, then the candidate; a GC candidate
 * names its cap as max_reserved_mb of the budget (the memory this process
 * may reserve), as tune's table does.  The PyTorch form is the candidate
 * alone, when every key of it is PyTorch's. */
static int verdict_text(const fp_conf *cur, const char *cand, size_t budget, fp_advice *a)
{
    char core[FP_ADVICE_CONF_MAX], bare[FP_ADVICE_CONF_MAX], others[FP_ADVICE_CONF_MAX];
    int gc = strip_gc_cap(cand, bare, sizeof bare);
    if (explicit_text(bare, core, sizeof core))
        return EINVAL;
    fp_conf named;
    fp_conf_default(&named);
    if (fp_conf_parse(core, &named, NULL, NULL))
        return EINVAL;
    /* the run's keys but the candidate's, and those that would not act
     * with the candidate's segments (a fix line carries no dead key) */
    uint64_t mask = policy_mask() | named.set_mask | (gc ? key_bit("max_reserved_mb") : 0) |
                    fp_conf_inert_mask(fp_conf_segs(&named));
    /* room left for the candidate (under FP_TUNE_CONF_MAX), made explicit, and its cap */
    other_keys(cur, mask, others, sizeof others - FP_TUNE_CONF_MAX - 64);
    fp_sink s = fp_sink_buffer(a->conf, sizeof a->conf);
    fp_puts(&s, others);
    if (others[0] && core[0])
        fp_putc(&s, ',');
    fp_puts(&s, core);
    if (gc) {
        fp_puts(&s, others[0] || core[0] ? ",max_reserved_mb:" : "max_reserved_mb:");
        fp_put_u64(&s, budget / FP_MIB);
    }
    if (fp_sink_error(&s))
        return ENOSPC;
    fp_sink t = fp_sink_buffer(a->torch, sizeof a->torch);
    fp_puts(&t, gc ? "" : core);
    return fp_sink_error(&t) ? ENOSPC : 0;
}

/* The printed text, replayed at budget: 1 when it runs clean. */
static int verify(const fp_trace *t, const fp_advice *a, const fp_advice_req *req, size_t budget,
                  size_t *replays)
{
    fp_conf c;
    fp_conf_default(&c);
    if (fp_conf_parse(a->conf, &c, NULL, NULL))
        return 0;
    c.pool.record_bytes = 0;
    c.pool.device_total = req->device_total ? req->device_total : budget;
    fp_replay_hook h = {.stop_at_oom = 1};
    fp_replay_result r;
    ++*replays;
    return fp_replay_ex(t, &c.pool, budget, &h, &r, NULL) == 0 && r.ooms == 0;
}

/* The run's keys with its cap raised to need: "...,max_reserved_mb:N". */
static int raised_cap_text(const fp_conf *cur, size_t need, fp_advice *a)
{
    char others[FP_ADVICE_CONF_MAX - 64];
    other_keys(cur, key_bit("max_reserved_mb") | key_bit("per_process_memory_fraction"), others,
               sizeof others);
    fp_sink s = fp_sink_buffer(a->conf, sizeof a->conf);
    fp_puts(&s, others);
    fp_puts(&s, others[0] ? ",max_reserved_mb:" : "max_reserved_mb:");
    fp_put_u64(&s, need / FP_MIB + (need % FP_MIB != 0));
    a->torch[0] = '\0';
    return fp_sink_error(&s) ? ENOSPC : 0;
}

/* Nothing fits under the cap, but the setting in force fits in the room
 * the device had: raise the cap, proven at the room. */
static int try_raise_cap(const fp_trace *t, const fp_advice_req *req, fp_advice *a)
{
    if (req->room <= req->budget || !a->current_need || a->current_need > req->room)
        return 0;
    if (raised_cap_text(req->current, a->current_need, a) ||
        !verify(t, a, req, req->room, &a->replays))
        return 0;
    a->kind = FP_ADVICE_RAISE_CAP;
    a->need = a->current_need;
    return 1;
}

/* ---- choosing ------------------------------------------------------------------- */

/* Candidates in verdict order: the least unlimited peak reserved first
 * (the most room left under the budget), then generation order. */
static int leaner(const fp_tune_row *x, const fp_tune_row *y)
{
    if (x->peak_reserved != y->peak_reserved)
        return x->peak_reserved < y->peak_reserved;
    return x->set.order < y->set.order;
}

static const fp_tune_row **ordered(const fp_tune_row *rows, size_t n)
{
    const fp_tune_row **v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++) { /* insertion sort: n is below 200 */
        size_t k = i;
        while (k > 0 && leaner(&rows[i], v[k - 1])) {
            v[k] = v[k - 1];
            k--;
        }
        v[k] = &rows[i];
    }
    return v;
}

/* r's smallest clean budget: the row's when the search ran (tune), else
 * searched now, as tune would.  0 when none was found. */
static size_t need_of(const fp_trace *t, const fp_tune_row *r, fp_advice *a)
{
    if (r->min_budget || r->fits < 0)
        return r->min_budget;
    size_t out = 0;
    size_t lower = fp_trace_peak_live(t, &r->set.opts);
    if (fp_tune_min_budget(t, &r->set, lower, r->peak_reserved, G_STEP, &out, &a->replays))
        return 0;
    return out;
}

/* The first candidate, in verdict order, that fits the budget, is not the
 * setting in force, and whose printed text replays clean at the budget. */
static const fp_tune_row *first_fit(const fp_trace *t, const fp_tune_row **v, size_t n,
                                    const fp_tune_row *cur, const fp_advice_req *req, fp_advice *a)
{
    size_t tried = 0;
    for (size_t i = 0; i < n && tried < MAX_VERIFY; i++) {
        const fp_tune_row *r = v[i];
        if (r->fits != 1 || same_policy(&r->set.opts, &cur->set.opts))
            continue;
        tried++;
        if (!verdict_text(req->current, r->set.conf, req->budget, a) &&
            verify(t, a, req, req->budget, &a->replays))
            return r;
    }
    a->conf[0] = a->torch[0] = '\0';
    return NULL;
}

static int choose_fit(const fp_trace *t, const fp_tune_row **v, size_t n, const fp_tune_row *cur,
                      const fp_advice_req *req, fp_advice *a)
{
    const fp_tune_row *fix = first_fit(t, v, n, cur, req, a);
    if (cur->fits == 1 || !fix)
        a->current_need = need_of(t, cur, a);
    if (fix) {
        size_t need = need_of(t, fix, a);
        a->need = need && need < req->budget ? need : req->budget;
        if (cur->fits != 1 || !a->current_need || a->need < a->current_need) {
            a->kind = FP_ADVICE_FIX;
            return 0;
        }
        a->conf[0] = a->torch[0] = '\0'; /* needs no less than the setting in force */
    }
    if (cur->fits == 1) {
        a->kind = FP_ADVICE_CURRENT_FITS;
        return 0;
    }
    if (try_raise_cap(t, req, a))
        return 0;
    a->kind = FP_ADVICE_NONE_FITS;
    for (size_t i = 0; i < n && !a->best_need; i++) /* the leanest setting's need */
        if ((a->best_need = need_of(t, v[i], a)) != 0 &&
            explicit_text(v[i]->set.conf, a->leanest, sizeof a->leanest))
            snprintf(a->leanest, sizeof a->leanest, "%s", v[i]->set.conf);
    if (a->current_need && (!a->best_need || a->current_need <= a->best_need)) {
        a->best_need = a->current_need;
        snprintf(a->leanest, sizeof a->leanest, "the settings in force");
    }
    return 0;
}

static int choose_best(const fp_tune_row **v, size_t n, const fp_tune_row *cur,
                       const fp_advice_req *req, fp_advice *a)
{
    a->current_need = cur->peak_reserved;
    a->kind = FP_ADVICE_KEEP;
    for (size_t i = 0; i < n && cur->peak_reserved; i++) { /* none holds less than 0 */
        const fp_tune_row *r = v[i];
        if (same_policy(&r->set.opts, &cur->set.opts) || r->set.gc)
            continue;
        uint64_t lhs = (uint64_t)r->peak_reserved * 100;
        uint64_t rhs = (uint64_t)cur->peak_reserved * (100 - FP_ADVICE_SAVING_PCT);
        if (r->peak_reserved < cur->peak_reserved && lhs <= rhs &&
            !verdict_text(req->current, r->set.conf, 0, a)) {
            a->kind = FP_ADVICE_BEST;
            a->need = r->peak_reserved;
        }
        break; /* only the leanest is worth naming */
    }
    return 0;
}

/* The largest request no pool serves (0: none) and its first event. */
static uint64_t too_large(const fp_trace *t, size_t *at)
{
    uint64_t most = 0;
    for (size_t i = 0; i < t->n; i++) {
        const fp_tracer_event *e = &t->ev[i];
        if ((e->op == 'a' || e->op == 'o') && e->size > FP_MAX_REQUEST && e->size > most) {
            most = e->size;
            *at = i;
        }
    }
    return most;
}

/* searched: the rows carry tune's budget search (min_budget 0 is none). */
static int every_row_ooms(const fp_tune_row *rows, size_t n, int searched)
{
    if (!searched || !n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (rows[i].min_budget)
            return 0;
    return 1;
}

static int decide(const fp_trace *t, const fp_tune_row *rows, size_t n, const fp_tune_row *cur,
                  const fp_advice_req *req, int searched, fp_advice *a)
{
    const fp_tune_row **v = ordered(rows, n);
    if (!v)
        return ENOMEM;
    a->settings = n + (cur->set.order == SIZE_MAX);
    a->budget = req->budget;
    a->room = req->room;
    for (size_t i = 0; i < n; i++)
        a->replays += rows[i].replays;
    a->replays += cur->set.order == SIZE_MAX ? cur->replays : 0;
    a->peak_live = fp_trace_peak_live(t, &cur->set.opts);
    a->too_large = too_large(t, &a->too_large_at);
    if (a->too_large || every_row_ooms(rows, n, searched)) {
        a->kind = FP_ADVICE_ALL_OOM;
        free(v);
        return 0;
    }
    int err = req->budget ? choose_fit(t, v, n, cur, req, a) : choose_best(v, n, cur, req, a);
    free(v);
    return err;
}

int fp_advise(const fp_trace *t, const fp_advice_req *req, fp_advice *out)
{
    fp_conf over;
    make_over(req->current, &over);
    memset(out, 0, sizeof *out);
    fp_tune_params p = {.threads = req->threads,
                        .over = &over,
                        .peaks_only = 1,
                        .at_budget = req->budget,
                        .lean = req->lean && !req->budget};
    fp_tune_row *rows = NULL, cur;
    size_t n = 0;
    fp_tune_setting s;
    current_setting(req->current, &s);
    int err = fp_tune_eval(t, &s, &p, &cur);
    /* Without a budget the verdict names only a setting whose peak is
     * FP_ADVICE_SAVING_PCT% under the current one's (choose_best): a
     * replay may stop as soon as its reserved bytes pass that, which on a
     * long trace is most replays stopping near the first peak. */
    if (!err && !req->budget)
        p.stop_above = cur.peak_reserved / 100 * (100 - FP_ADVICE_SAVING_PCT) +
                       cur.peak_reserved % 100 * (100 - FP_ADVICE_SAVING_PCT) / 100;
    if (!err)
        err = fp_tune_run(t, &p, &rows, &n);
    if (!err) {
        cur.set.order = SIZE_MAX;
        err = decide(t, rows, n, &cur, req, 0, out);
    }
    if (!err && fp_trace_past_deadline(t))
        err = ETIMEDOUT; /* a replay may have been cut: nothing is proven */
    free(rows);
    return err;
}

/* The rows must carry fits for req->budget (fp_tune_params.at_budget). */
int fp_advise_rows(const fp_trace *t, const fp_tune_row *rows, size_t n, const fp_advice_req *req,
                   fp_advice *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < n; i++)
        if (rows[i].is_default)
            return decide(t, rows, n, &rows[i], req, 1, out);
    return EINVAL;
}

/* ---- the fix line ------------------------------------------------------------ */

void fp_advise_put_mib(fp_sink *s, size_t bytes)
{
    uint64_t mib = bytes / FP_MIB + (bytes % FP_MIB != 0), div = 1;
    while (mib / div >= 1000)
        div *= 1000;
    fp_put_u64(s, mib / div);
    for (div /= 1000; div; div /= 1000) {
        char d[4] = {(char)('0' + mib / div % 1000 / 100), (char)('0' + mib / div % 100 / 10),
                     (char)('0' + mib / div % 10), '\0'};
        fp_putc(s, ',');
        fp_puts(s, d);
    }
    fp_puts(s, " MiB");
}

#define DASH " \xe2\x80\x94 " /* " — " */

/* "FRAGPOOL_CONF=X — a replay of SUBJECT": how every named verdict starts. */
static void put_named(fp_sink *s, const fp_advice *a, const char *between, const char *subject)
{
    fp_puts(s, "FRAGPOOL_CONF=");
    fp_puts(s, a->conf);
    fp_puts(s, a->conf[0] ? DASH : " (fragpool's defaults)" DASH);
    fp_puts(s, between);
    fp_puts(s, "a replay of ");
    fp_puts(s, subject);
}

static void put_fix(fp_sink *s, const fp_advice *a, const char *subject)
{
    put_named(s, a, "", subject);
    fp_puts(s, " fits in ");
    fp_advise_put_mib(s, a->need);
    fp_puts(s, "; it had ");
    fp_advise_put_mib(s, a->budget);
    if (a->torch[0]) {
        fp_puts(s, " (PyTorch: PYTORCH_CUDA_ALLOC_CONF=");
        fp_puts(s, a->torch);
        fp_putc(s, ')');
    }
}

static void put_raise_cap(fp_sink *s, const fp_advice *a, const char *subject)
{
    put_named(s, a, "the cap binds: ", subject);
    fp_puts(s, " under the settings in force fits in ");
    fp_advise_put_mib(s, a->need);
    fp_puts(s, ", over the cap's ");
    fp_advise_put_mib(s, a->budget);
    fp_puts(s, ", and no setting fits under the cap; the device had ");
    fp_advise_put_mib(s, a->room);
}

static void put_none(fp_sink *s, const fp_advice *a)
{
    fp_puts(s, "no setting fits" DASH "the peak live bytes are ");
    if (a->peak_live == SIZE_MAX)
        fp_puts(s, "more than 2^64 (the count stops there)");
    else
        fp_advise_put_mib(s, a->peak_live);
    fp_puts(s, " (each request rounded), and ");
    if (a->best_need) {
        fp_puts(s, "the leanest setting (");
        fp_puts(s, a->leanest[0] ? a->leanest : "fragpool's defaults");
        fp_puts(s, ") needs ");
        fp_advise_put_mib(s, a->best_need);
        fp_puts(s, ", ");
        fp_advise_put_mib(s, a->best_need > a->budget ? a->best_need - a->budget : 0);
        fp_puts(s, " more than the ");
    } else {
        fp_puts(s, "no setting fits any budget tried, against the ");
    }
    fp_advise_put_mib(s, a->budget);
    fp_puts(
        s,
        " it had: too little memory for this run under any setting; reduce the working set (batch "
        "size, sequence length) or free the memory held outside the pool");
}

static void put_all_oom(fp_sink *s, const fp_advice *a)
{
    fp_puts(s, "every setting runs out of memory, whatever the budget" DASH);
    if (!a->too_large) {
        fp_puts(s, "no setting replays without an OOM even on an unlimited device: at some "
                   "moment the live requests need more than the 64-bit address space");
        return;
    }
    fp_puts(s, "event ");
    fp_put_u64(s, a->too_large_at);
    fp_puts(s, " asks for ");
    fp_put_u64(s, a->too_large);
    fp_puts(s, " bytes, more than the 281474976710655 (2^48 - 1) that fragpool serves in "
               "one request, so it is refused as out of memory under every setting; check "
               "the size the program computes");
}

/* oom: after a real failure, which the layout did not cause. */
static void put_current(fp_sink *s, const fp_advice *a, const char *subject, int oom)
{
    fp_puts(s, oom ? "none proven" DASH "a replay of " : "none needed" DASH "a replay of ");
    fp_puts(s, subject);
    fp_puts(s, " under the settings in force fits in ");
    fp_advise_put_mib(s, a->current_need);
    fp_puts(s, ", within the ");
    fp_advise_put_mib(s, a->budget);
    fp_puts(s, " it had, and no setting needs less");
    if (oom)
        fp_puts(s, ": the pool's layout did not cause this; memory outside the pool grew "
                   "while the run held its blocks");
}

static void put_best(fp_sink *s, const fp_advice *a, const char *subject)
{
    if (a->kind == FP_ADVICE_KEEP && !a->current_need) {
        fp_puts(s, "keep the settings in force" DASH "a replay of ");
        fp_puts(s, subject);
        fp_puts(s, " holds no memory at peak under any setting");
        return;
    }
    if (a->kind == FP_ADVICE_KEEP || !a->current_need) {
        fp_puts(s, "keep the settings in force" DASH "no setting holds ");
        fp_put_u64(s, FP_ADVICE_SAVING_PCT);
        fp_puts(s, "% less than their ");
        fp_advise_put_mib(s, a->current_need);
        fp_puts(s, " at peak in a replay of ");
        fp_puts(s, subject);
        return;
    }
    put_named(s, a, "", subject);
    fp_puts(s, " holds ");
    fp_advise_put_mib(s, a->need);
    fp_puts(s, " at peak, ");
    fp_put_u64(s, (uint64_t)(a->current_need - a->need) * 100 / a->current_need);
    fp_puts(s, "% less than the ");
    fp_advise_put_mib(s, a->current_need);
    fp_puts(s, " of the settings in force");
}

static void put_verdict(fp_sink *s, const fp_advice *a, const char *lead, const char *subject,
                        int oom)
{
    fp_puts(s, lead);
    if (a->kind == FP_ADVICE_FIX)
        put_fix(s, a, subject);
    else if (a->kind == FP_ADVICE_RAISE_CAP)
        put_raise_cap(s, a, subject);
    else if (a->kind == FP_ADVICE_CURRENT_FITS)
        put_current(s, a, subject, oom);
    else if (a->kind == FP_ADVICE_NONE_FITS)
        put_none(s, a);
    else if (a->kind == FP_ADVICE_ALL_OOM)
        put_all_oom(s, a);
    else
        put_best(s, a, subject);
    fp_putc(s, '\n');
}

void fp_advise_put(fp_sink *s, const fp_advice *a, const char *lead, const char *subject)
{
    put_verdict(s, a, lead, subject, 0);
}

void fp_advise_put_fix(fp_sink *s, const fp_advice *a)
{
    put_verdict(s, a, "fragpool: fix: ", "this run up to this failure", 1);
}

void fp_advise_put_paste(fp_sink *s, const fp_advice *a)
{
    if (a->kind != FP_ADVICE_FIX && a->kind != FP_ADVICE_RAISE_CAP && a->kind != FP_ADVICE_BEST)
        return;
    fp_puts(s, "FRAGPOOL_CONF=");
    fp_puts(s, a->conf);
    fp_putc(s, '\n');
    if (a->torch[0]) {
        fp_puts(s, "PYTORCH_CUDA_ALLOC_CONF=");
        fp_puts(s, a->torch);
        fp_putc(s, '\n');
    }
}
