/* test_tune.c - the search behind `fragpool tune` (replay/fp_tune.c): the
 * budget it reports runs without an OOM and 2 MiB less does not, on the
 * PyTorch trace and on a synthetic one; the ranking order; determinism
 * whatever the thread count; the replay hooks the search relies on; the
 * settings that replay alike share one search (twins); a peaks-only
 * replay cut at stop_above; the search's shortcuts against a search
 * without them; the lean statistics of its replays.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fp_tune.h"

#define G (2 * FP_MIB)

static fp_trace shared, synth;

/* Phases of live sets of mixed sizes (1..48 MiB and small ones) that free
 * in a shuffled order, so that cached blocks do not fit the next phase's
 * requests well: fragmentation that the budget search has to work around. */
static void make_synth(fp_trace *t)
{
    uint64_t x = 88172645463325252ull, id = 0;
    *t = (fp_trace){0};
    for (int phase = 0; phase < 40; phase++) {
        uint64_t first = id;
        int n = 12 + (int)(x % 20);
        for (int i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            uint64_t size = (i % 4 == 3) ? 4096 + x % (512 * 1024) : FP_MIB + x % (48 * FP_MIB);
            assert_int_equal(fp_trace_push(t, 'a', id++, size, 0), 0);
        }
        uint64_t m = id - first, stride = m % 7 ? 7 : 11; /* coprime with m */
        for (uint64_t k = 0; k < m; k++) {                /* free in a shuffled order */
            uint64_t j = first + (k * stride + (uint64_t)phase) % m;
            if ((j + (uint64_t)phase) % 5 == 0 && phase + 1 < 40)
                continue; /* some survive a phase */
            assert_int_equal(fp_trace_push(t, 'f', j, 0, 0), 0);
        }
    }
}

static int setup(void **state)
{
    (void)state;
    char err[256];
    int rc = fp_trace_load(FP_TEST_DATA "/resnet50_varres.csv.gz", &shared, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    make_synth(&synth);
    return rc;
}

static int teardown(void **state)
{
    (void)state;
    fp_trace_free(&shared);
    fp_trace_free(&synth);
    return 0;
}

static size_t ooms_at(const fp_trace *t, const fp_tune_setting *s, size_t budget)
{
    fp_replay_result r;
    assert_int_equal(fp_replay(t, &s->opts, budget, &r, NULL), 0);
    return r.ooms;
}

/* The row's budget runs clean and the budget one step below does not. */
static void check_min_budget(const fp_trace *t, const char *conf, fp_tune_row *row)
{
    fp_tune_setting s;
    assert_int_equal(fp_tune_setting_init(&s, conf), 0);
    assert_int_equal(fp_tune_eval(t, &s, &(fp_tune_params){.granularity = G}, row), 0);
    assert_true(row->min_budget > G);
    assert_int_equal(row->min_budget % G, 0);
    assert_int_equal(ooms_at(t, &s, row->min_budget), 0);
    assert_true(ooms_at(t, &s, row->min_budget - G) > 0);
    assert_true(row->min_budget >= fp_trace_peak_live(t, &s.opts));
}

/* The default (virtual-memory segments) holds its pages within 1% of the
 * blocks, and fits in less; the classic pool as PyTorch's. */
static void shared_default_budget(void **state)
{
    (void)state;
    fp_tune_row row;
    check_min_budget(&shared, "", &row);
    assert_true(row.is_default);
    assert_int_equal(row.peak_reserved, 4854906880ULL);
    assert_int_equal(row.peak_allocated, 4814778368ULL);
    assert_true(row.min_budget < row.peak_reserved); /* reclaim packs tighter */
    assert_true(row.replays < 16);                   /* bisection, not a scan */
    check_min_budget(&shared, "expandable_segments:False", &row);
    assert_false(row.is_default);
    assert_int_equal(row.peak_reserved, 6440353792ULL);
    assert_int_equal(row.peak_allocated, 4835815424ULL);
    /* Under pressure release-and-retry packs tighter than an unlimited run. */
    assert_true(row.min_budget < row.peak_reserved);
}

static void shared_max_split_budget(void **state)
{
    (void)state;
    fp_tune_row row;
    check_min_budget(&shared, "expandable_segments:False,max_split_size_mb:100", &row);
    assert_true(row.peak_reserved > 6440353792ULL);
}

static void shared_gc_budget(void **state)
{
    (void)state;
    fp_tune_row row;
    check_min_budget(&shared, "garbage_collection_threshold:0.8,per_process_memory_fraction:1",
                     &row);
    assert_true(row.set.gc);
}

static void synth_default_budget(void **state)
{
    (void)state;
    fp_tune_row row;
    check_min_budget(&synth, "", &row);
    /* On this trace the answer is the true minimum: every budget below it,
     * down to the peak live bytes, fails. */
    fp_tune_setting s;
    assert_int_equal(fp_tune_setting_init(&s, ""), 0);
    size_t lo = fp_trace_peak_live(&synth, &s.opts) / G * G;
    for (size_t b = lo; b < row.min_budget; b += G)
        if (b)
            assert_true(ooms_at(&synth, &s, b) > 0);
    assert_true(row.min_budget < row.peak_reserved);
}

static void synth_other_settings_budget(void **state)
{
    (void)state;
    fp_tune_row row;
    check_min_budget(&synth,
                     "expandable_segments:False,max_split_size_mb:32,"
                     "roundup_power2_divisions:4",
                     &row);
    check_min_budget(&synth, "roundup_power2_divisions:[32:1,>:4]", &row);
    check_min_budget(&synth, "garbage_collection_threshold:0.6,per_process_memory_fraction:1",
                     &row);
}

static void same_rows(const fp_tune_row *a, const fp_tune_row *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(a[i].set.conf, b[i].set.conf);
        assert_int_equal(a[i].peak_reserved, b[i].peak_reserved);
        assert_int_equal(a[i].peak_allocated, b[i].peak_allocated);
        assert_int_equal(a[i].min_budget, b[i].min_budget);
        assert_int_equal(a[i].replays, b[i].replays);
    }
}

static void check_ranked(const fp_tune_row *rows, size_t n)
{
    size_t defaults = 0;
    for (size_t i = 0; i < n; i++) {
        defaults += rows[i].is_default;
        fp_tune_setting s; /* the printed text is what was replayed */
        assert_int_equal(fp_tune_setting_init(&s, rows[i].set.conf), 0);
        assert_memory_equal(&s.opts, &rows[i].set.opts, sizeof s.opts);
        if (i == 0)
            continue;
        const fp_tune_row *p = &rows[i - 1], *r = &rows[i];
        assert_true(p->peak_reserved <= r->peak_reserved);
        if (p->peak_reserved == r->peak_reserved) {
            size_t bp = p->min_budget ? p->min_budget : SIZE_MAX;
            size_t br = r->min_budget ? r->min_budget : SIZE_MAX;
            assert_true(bp <= br);
            if (bp == br)
                assert_true(p->set.order < r->set.order);
        }
    }
    assert_int_equal(defaults, 1);
}

static void ranking_and_determinism(void **state)
{
    (void)state;
    fp_tune_params one = {.threads = 1}, two = {.threads = 2};
    fp_tune_row *a, *b;
    size_t na, nb;
    assert_int_equal(fp_tune_run(&synth, &one, &a, &na), 0);
    assert_int_equal(fp_tune_run(&synth, &two, &b, &nb), 0);
    assert_int_equal(na, nb);
    assert_true(na > 20);
    check_ranked(a, na);
    same_rows(a, b, na);
    for (size_t i = 0; i < na; i++) /* every row's budget holds */
        if (a[i].min_budget) {
            assert_int_equal(ooms_at(&synth, &a[i].set, a[i].min_budget), 0);
            assert_true(ooms_at(&synth, &a[i].set, a[i].min_budget - G) > 0);
        }
    free(a);
    free(b);
}

static void shared_ranking(void **state)
{
    (void)state;
    fp_tune_params p = {0};
    fp_tune_row *rows;
    size_t n, nsplit = 0;
    assert_int_equal(fp_tune_run(&shared, &p, &rows, &n), 0);
    check_ranked(rows, n);
    for (size_t i = 0; i < n; i++) {
        static const char split[] = "expandable_segments:False,max_split_size_mb:";
        const char *c = rows[i].set.conf;
        if (rows[i].is_default)
            assert_int_equal(rows[i].peak_reserved, 4854906880ULL);
        if (!strcmp(c, "expandable_segments:False"))
            assert_int_equal(rows[i].peak_reserved, 6440353792ULL);
        if (!strncmp(c, split, sizeof split - 1) && !strchr(c + sizeof split - 1, ','))
            nsplit++, assert_true(rows[i].peak_reserved > 6440353792ULL);
    }
    assert_true(nsplit >= 3);
    free(rows);
}

static void split_values(void **state)
{
    (void)state;
    size_t mb[16];
    size_t n = fp_tune_split_values(&shared, mb, 16);
    static const size_t want[] = {32, 38, 64, 96, 128};
    assert_int_equal(n, sizeof want / sizeof *want);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(mb[i], want[i]);
}

static void bad_settings(void **state)
{
    (void)state;
    fp_tune_setting s;
    assert_int_equal(fp_tune_setting_init(&s, "max_split_size_mb:5"), EINVAL);
    assert_int_equal(fp_tune_setting_init(&s, "no_such_key:1"), EINVAL);
    char big[FP_TUNE_CONF_MAX + 8];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(fp_tune_setting_init(&s, big), EINVAL);
}

static int stop_after_100(void *ud, fp_pool *p, size_t i, int refused)
{
    (void)p, (void)refused;
    ++*(size_t *)ud;
    return i + 1 == 100;
}

static void replay_hooks(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    fp_replay_result full, cut;
    assert_int_equal(fp_replay(&shared, &o, 4 * FP_GIB, &full, NULL), 0);
    assert_true(full.ooms > 1);
    fp_replay_hook h = {.stop_at_oom = 1};
    assert_int_equal(fp_replay_ex(&shared, &o, 4 * FP_GIB, &h, &cut, NULL), 0);
    assert_int_equal(cut.ooms, 1);
    assert_int_equal(cut.events, full.first_oom_event + 1);
    assert_int_equal(cut.first_oom_event, full.first_oom_event);
    size_t calls = 0;
    fp_replay_hook h2 = {.after_event = stop_after_100, .ud = &calls};
    assert_int_equal(fp_replay_ex(&shared, &o, 0, &h2, &cut, NULL), 0);
    assert_int_equal(cut.events, 100);
    assert_int_equal(calls, 100);
    size_t live = fp_trace_peak_live(&shared, &o);
    assert_int_equal(live, 4814778368ULL); /* shared/traces/README.md */
}

/* A setting that rounds every request of the trace as an earlier one
 * does is not replayed again (shared): its results are that one's, and
 * they are what a replay of its own gives. */
static void twins_share_results(void **state)
{
    (void)state;
    fp_tune_params p = {.threads = 1};
    fp_tune_row *rows;
    size_t n, nshared = 0;
    assert_int_equal(fp_tune_run(&shared, &p, &rows, &n), 0);
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].shared)
            continue;
        nshared++;
        fp_tune_row own;
        assert_int_equal(fp_tune_eval(&shared, &rows[i].set, &p, &own), 0);
        assert_int_equal(own.peak_reserved, rows[i].peak_reserved);
        assert_int_equal(own.peak_allocated, rows[i].peak_allocated);
        assert_int_equal(own.min_budget, rows[i].min_budget);
        /* a GC row of the run took its base row's unlimited replay: one
         * replay fewer than a row evaluated alone */
        assert_int_equal(own.replays, rows[i].replays + (rows[i].set.gc ? 1 : 0));
    }
    /* [256:1,512:2,1024:4,>:8] rounds nothing of this trace: the defaults'
     * twin, in both kinds of segments */
    assert_true(nshared >= 2);
    free(rows);
}

/* stop_above (fp_advise without a budget): the unlimited replay stops as
 * soon as reserved passes it, and the row says its peak is cut. */
static void stop_above_cuts(void **state)
{
    (void)state;
    fp_tune_setting s;
    assert_int_equal(fp_tune_setting_init(&s, "expandable_segments:False"), 0);
    fp_tune_params p = {.peaks_only = 1};
    fp_tune_row full, cut;
    assert_int_equal(fp_tune_eval(&shared, &s, &p, &full), 0);
    assert_false(full.cut);
    p.stop_above = full.peak_reserved / 2;
    assert_int_equal(fp_tune_eval(&shared, &s, &p, &cut), 0);
    assert_true(cut.cut);
    assert_true(cut.peak_reserved > p.stop_above && cut.peak_reserved <= full.peak_reserved);
    p.stop_above = full.peak_reserved; /* never passed */
    assert_int_equal(fp_tune_eval(&shared, &s, &p, &cut), 0);
    assert_false(cut.cut);
    assert_int_equal(cut.peak_reserved, full.peak_reserved);
}

/* ---- the search without shortcuts ----------------------------------------
 * What the search did before it reused replays (fp_tune.c, "budgets that
 * replay alike", "GC variants' unlimited replays"): every budget the
 * bisection visits is replayed, every setting's unlimited run too.  Its
 * answers must be the search's, to the byte. */

static size_t plain_replays; /* replays of the plain search */

static int plain_clean(const fp_trace *t, const fp_tune_setting *s, size_t budget)
{
    plain_replays++;
    fp_replay_hook h = {.stop_at_oom = 1};
    fp_replay_result r;
    assert_int_equal(fp_replay_ex(t, &s->opts, budget, &h, &r, NULL), 0);
    return r.ooms == 0;
}

static size_t plain_min_budget(const fp_trace *t, const fp_tune_setting *s, size_t upper)
{
    size_t lower = fp_trace_peak_live(t, &s->opts);
    size_t lo = lower ? (lower - 1) / G : 0, hi = upper / G + (upper % G != 0);
    hi = hi <= lo ? lo + 1 : hi;
    for (int clean = !s->gc; !clean;) { /* GC: hi must be tried */
        clean = plain_clean(t, s, hi * G);
        if (!clean) {
            lo = hi;
            hi += hi / 8 ? hi / 8 : 1;
            if (hi * G > 4 * upper + G)
                return 0;
        }
    }
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        *(plain_clean(t, s, mid * G) ? &hi : &lo) = mid;
    }
    return hi * G;
}

/* Every row of a run (GC rows and classic ones, where replays are reused)
 * against plain replays: peaks, smallest budget, the fit at a budget. */
static void check_rows_plainly(const fp_trace *t, size_t at_budget, int lean)
{
    fp_tune_params p = {.threads = 2, .at_budget = at_budget, .lean = lean};
    fp_tune_row *rows;
    size_t n, replays = 0;
    assert_int_equal(fp_tune_run(t, &p, &rows, &n), 0);
    plain_replays = 0;
    for (size_t i = 0; i < n; i++) {
        const fp_tune_row *r = &rows[i];
        size_t before = plain_replays++;
        fp_replay_result u;
        assert_int_equal(fp_replay(t, &r->set.opts, 0, &u, NULL), 0);
        assert_int_equal(r->peak_reserved, (size_t)u.stats.reserved_bytes[FP_ALL].peak);
        assert_int_equal(r->peak_allocated, (size_t)u.stats.allocated_bytes[FP_ALL].peak);
        if (!u.ooms) {
            assert_int_equal(r->min_budget, plain_min_budget(t, &r->set, r->peak_reserved));
            assert_int_equal(r->fits, plain_clean(t, &r->set, at_budget));
        }
        if (r->shared) /* a twin: no replays of its own */
            plain_replays = before;
        else
            replays += r->replays;
    }
    assert_true(replays < plain_replays); /* the shortcuts acted */
    free(rows);
}

static void reuse_matches_plain_search(void **state)
{
    (void)state;
    check_rows_plainly(&synth, 300 * FP_MIB, 0);
    check_rows_plainly(&shared, 4700 * FP_MIB, 1); /* lean: a seventh of the replays */
}

/* A replay holds for every budget of [budget_from, budget_below): replays
 * at both ends go event for event as it did, with the same statistics. */
static void budget_interval_replays_alike(void **state)
{
    (void)state;
    fp_tune_setting s;
    assert_int_equal(fp_tune_setting_init(&s, "expandable_segments:False,max_split_size_mb:32"), 0);
    fp_replay_result u, r, a, b;
    assert_int_equal(fp_replay(&synth, &s.opts, 0, &u, NULL), 0);
    size_t lower = fp_trace_peak_live(&synth, &s.opts);
    size_t peak = (size_t)u.stats.reserved_bytes[FP_ALL].peak, tried = 0;
    for (size_t budget = lower; budget < peak; budget += (peak - lower) / 7) {
        assert_int_equal(fp_replay(&synth, &s.opts, budget, &r, NULL), 0);
        assert_true(r.budget_from <= budget && budget < r.budget_below);
        size_t ends[2] = {r.budget_from > lower ? r.budget_from : lower,
                          r.budget_below == SIZE_MAX ? SIZE_MAX / 2 : r.budget_below - 1};
        fp_replay_result *got[2] = {&a, &b};
        for (int k = 0; k < 2; k++) {
            assert_int_equal(fp_replay(&synth, &s.opts, ends[k], got[k], NULL), 0);
            assert_int_equal(got[k]->ooms, r.ooms);
            assert_int_equal(got[k]->events, r.events);
            assert_memory_equal(&got[k]->stats, &r.stats, sizeof r.stats);
        }
        tried += r.ooms > 0;
    }
    assert_true(tried > 0); /* some of them under the pressure of the budget */
}

/* The search's replays keep only the statistics it reads (lean_stats)
 * and no live map (frees by handle): the same peaks and OOMs, the same
 * replay event for event, a pool the checker passes, and the statistics
 * it does not read left at 0. */
static void lean_stats_keep_the_peaks(void **state)
{
    (void)state;
    static const char *const confs[] = {"", "expandable_segments:False,max_split_size_mb:32"};
    for (int i = 0; i < 2; i++) {
        fp_tune_setting s;
        assert_int_equal(fp_tune_setting_init(&s, confs[i]), 0);
        fp_pool_opts lean = s.opts; /* as the search replays: no live map either */
        lean.lean_stats = lean.no_live_map = 1;
        for (size_t budget = 0; budget <= 400 * FP_MIB; budget += 400 * FP_MIB) {
            fp_replay_result full, cut;
            fp_pool *p;
            assert_int_equal(fp_replay(&synth, &s.opts, budget, &full, NULL), 0);
            assert_int_equal(fp_replay(&synth, &lean, budget, &cut, &p), 0);
            char msg[256];
            assert_int_equal(fp_pool_check(p, msg, sizeof msg), 0);
            fp_pool_destroy(p, 1);
            assert_int_equal(cut.ooms, full.ooms);
            assert_int_equal(cut.first_oom_event, full.first_oom_event);
            assert_memory_equal(cut.stats.reserved_bytes, full.stats.reserved_bytes,
                                sizeof full.stats.reserved_bytes);
            assert_memory_equal(cut.stats.allocated_bytes, full.stats.allocated_bytes,
                                sizeof full.stats.allocated_bytes);
            assert_int_equal(cut.stats.num_allocs, full.stats.num_allocs);
            assert_true(full.stats.requested_bytes[FP_ALL].peak > 0);
            assert_int_equal(cut.stats.requested_bytes[FP_ALL].peak, 0); /* not kept */
            assert_int_equal(cut.stats.active_bytes[FP_ALL].peak, 0);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_values),
        cmocka_unit_test(bad_settings),
        cmocka_unit_test(replay_hooks),
        cmocka_unit_test(shared_default_budget),
        cmocka_unit_test(shared_max_split_budget),
        cmocka_unit_test(shared_gc_budget),
        cmocka_unit_test(synth_default_budget),
        cmocka_unit_test(synth_other_settings_budget),
        cmocka_unit_test(ranking_and_determinism),
        cmocka_unit_test(shared_ranking),
        cmocka_unit_test(twins_share_results),
        cmocka_unit_test(stop_above_cuts),
        cmocka_unit_test(reuse_matches_plain_search),
        cmocka_unit_test(budget_interval_replays_alike),
        cmocka_unit_test(lean_stats_keep_the_peaks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
