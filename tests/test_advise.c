/* test_advise.c - the verdict on a run (replay/fp_advise.c) on the real
 * traces of tests/data:
 *  - the ResNet trace at 4,600 MiB: no setting fits (the leanest,
 *    expandable_segments:True, needs 4,602 MiB): no setting is named;
 *  - at 4,650 MiB, for a run of the classic pool: expandable_segments:True,
 *    and its text replays clean at the budget, while the classic pool and
 *    roundup_power2_divisions:4 (the old rule of thumb's) do not;
 *  - never the setting in force: with expandable_segments:True or the
 *    defaults (virtual memory too) in force at 4,650 MiB, the verdict is
 *    that the settings in force already fit;
 *  - the run's other keys are kept (summary, trace), the chosen keys are
 *    replaced, and a GC verdict names its cap as max_reserved_mb;
 *  - a cap that binds: the verdict raises it to what the replay needs;
 *  - tune's rows and the direct search give the same verdict;
 *  - without a budget: a >= 5% leaner setting is named, or none;
 *  - the fix line's words and the MiB format;
 *  - a trace whose every setting peaks at 0 bytes (one free of an
 *    unknown id): the verdict keeps the settings in force and says no
 *    memory is held (no "leaner" setting needing 0 bytes, no division by
 *    the 0-byte peak); with the budget search too;
 *  - a replay that runs out of host memory (RLIMIT_DATA lowered after the
 *    first event, in a child; skipped under ASan and TSan, whose own
 *    allocators abort there) fails with ENOMEM rather than count its
 *    refusals as device OOMs with 0-byte peaks.
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
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fp_advise.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FP_OWN_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FP_OWN_ALLOCATOR 1
#endif
#endif

static fp_trace resnet, gpt;

static int setup(void **state)
{
    (void)state;
    char err[256];
    int rc = fp_trace_load(FP_TEST_DATA "/resnet50_varres.csv.gz", &resnet, err, sizeof err);
    if (!rc)
        rc = fp_trace_load(FP_TEST_DATA "/gpt_varlen.csv.gz", &gpt, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    return rc;
}

static int teardown(void **state)
{
    (void)state;
    fp_trace_free(&resnet);
    fp_trace_free(&gpt);
    return 0;
}

static void advise(const fp_trace *t, size_t budget, const fp_conf *cur, fp_advice *a)
{
    fp_advice_req req = {.budget = budget, .current = cur, .threads = 2};
    assert_int_equal(fp_advise(t, &req, a), 0);
}

/* conf replayed over the defaults at budget: 1 when clean. */
static int clean_at(const fp_trace *t, const char *conf, size_t budget)
{
    fp_conf c;
    fp_conf_default(&c);
    assert_int_equal(fp_conf_parse(conf, &c, NULL, NULL), 0);
    fp_replay_result r;
    assert_int_equal(fp_replay(t, &c.pool, budget, &r, NULL), 0);
    return r.ooms == 0;
}

static char line[4096];

static const char *fix_line(const fp_advice *a)
{
    fp_sink s = fp_sink_buffer(line, sizeof line);
    fp_advise_put_fix(&s, a);
    return line;
}

/* The current configuration: the defaults with text over them. */
static const fp_conf *conf_of(const char *text)
{
    static fp_conf c;
    fp_conf_default(&c);
    assert_int_equal(fp_conf_parse(text, &c, NULL, NULL), 0);
    return &c;
}

static void nothing_fits_4600(void **state)
{
    (void)state;
    fp_advice a;
    advise(&resnet, 4600 * FP_MIB, NULL, &a); /* the defaults are the leanest */
    assert_int_equal(a.kind, FP_ADVICE_NONE_FITS);
    assert_int_equal(a.best_need, 4602 * FP_MIB);
    assert_string_equal(a.leanest, "the settings in force");
    advise(&resnet, 4600 * FP_MIB, conf_of("expandable_segments:False"), &a);
    assert_int_equal(a.kind, FP_ADVICE_NONE_FITS);
    assert_int_equal(a.best_need, 4602 * FP_MIB);
    assert_string_equal(a.leanest, "expandable_segments:True");
    assert_string_equal(a.conf, "");
    fix_line(&a);
    assert_non_null(strstr(line, "fragpool: fix: no setting fits \xe2\x80\x94 the peak live bytes "
                                 "are 4,592 MiB"));
    assert_non_null(
        strstr(line, "(expandable_segments:True) needs 4,602 MiB, 2 MiB more than "
                     "the 4,600 MiB it had: too little memory for this run under any setting"));
    assert_null(strstr(line, "FRAGPOOL_CONF="));
    assert_null(strstr(line, "empty_cache"));
}

static void expandable_fits_4650(void **state)
{
    (void)state;
    fp_advice a;
    advise(&resnet, 4650 * FP_MIB, conf_of("expandable_segments:False"), &a);
    assert_int_equal(a.kind, FP_ADVICE_FIX);
    assert_string_equal(a.conf, "expandable_segments:True");
    assert_string_equal(a.torch, "expandable_segments:True");
    assert_int_equal(a.need, 4602 * FP_MIB);
    assert_true(clean_at(&resnet, a.conf, 4650 * FP_MIB)); /* what is printed is proven */
    /* the classic pool OOMs there, with the old rule of thumb too */
    assert_false(clean_at(&resnet, "expandable_segments:False", 4650 * FP_MIB));
    assert_false(
        clean_at(&resnet, "expandable_segments:False,roundup_power2_divisions:4", 4650 * FP_MIB));
    assert_true(clean_at(&resnet, "", 4650 * FP_MIB)); /* fragpool's defaults fit */
    fix_line(&a);
    assert_string_equal(line, "fragpool: fix: FRAGPOOL_CONF=expandable_segments:True \xe2\x80\x94 "
                              "a replay of this run up to this failure fits in 4,602 MiB; it had "
                              "4,650 MiB (PyTorch: "
                              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)\n");
    fp_sink s = fp_sink_buffer(line, sizeof line);
    fp_advise_put_paste(&s, &a);
    assert_string_equal(line, "FRAGPOOL_CONF=expandable_segments:True\n"
                              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n");
}

/* expandable_segments:True and the defaults (virtual memory too) are the
 * setting in force alike. */
static void never_the_setting_in_force(void **state)
{
    (void)state;
    const fp_conf *in_force[] = {conf_of("expandable_segments:True"), NULL};
    for (int i = 0; i < 2; i++) {
        fp_advice a;
        advise(&resnet, 4650 * FP_MIB, in_force[i], &a);
        assert_int_equal(a.kind, FP_ADVICE_CURRENT_FITS);
        assert_int_equal(a.current_need, 4602 * FP_MIB);
        fix_line(&a);
        assert_non_null(strstr(line, "none proven"));
        assert_null(strstr(line, "FRAGPOOL_CONF="));
    }
}

static void other_keys_kept(void **state)
{
    (void)state;
    fp_conf cur;
    fp_conf_default(&cur);
    assert_int_equal(fp_conf_parse("summary:off,max_split_size_mb:200,roundup_power2_divisions:4",
                                   &cur, NULL, NULL),
                     0);
    fp_advice a;
    advise(&resnet, 4650 * FP_MIB, &cur, &a);
    assert_int_equal(a.kind, FP_ADVICE_FIX);
    /* the chosen keys replace the run's own; summary stays */
    assert_string_equal(a.conf, "summary:off,expandable_segments:True");
    assert_string_equal(a.torch, "expandable_segments:True");
}

/* A long FRAGPOOL_CONF (three output paths of 250 bytes and a dozen other
 * keys: over 1,024 bytes in all) keeps its proven fit: the fix line
 * leaves the paths out and keeps the rest. */
static void long_conf_keeps_fix(void **state)
{
    (void)state;
    char text[1400], path[251];
    memset(path, 'p', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = '\0';
    snprintf(text, sizeof text,
             "summary:%s,trace:%s,snapshot:%s,summary_format:json,expandable_segments:False,"
             "strict:0,meminfo_counts_cache:1,free_policy:deferred,dump_on_sigusr1:0,"
             "record_mb:16,ipc_export:fragpool,trace_stacks:2,tools:passthrough,host_pool:1,"
             "host_max_reserved_mb:unlimited,own_segment_mb:off,vmm_headroom_mb:64",
             path, path, path);
    assert_true(strlen(text) > FP_ADVICE_CONF_MAX);
    fp_conf cur;
    fp_conf_default(&cur);
    assert_int_equal(fp_conf_parse(text, &cur, NULL, NULL), 0);
    fp_advice a;
    advise(&resnet, 4650 * FP_MIB, &cur, &a);
    assert_int_equal(a.kind, FP_ADVICE_FIX);
    assert_string_equal(a.conf, "strict:0,meminfo_counts_cache:1,free_policy:deferred,"
                                "summary_format:json,dump_on_sigusr1:0,record_mb:16,"
                                "ipc_export:fragpool,own_segment_mb:off,trace_stacks:2,"
                                "tools:passthrough,vmm_headroom_mb:64,host_pool:1,"
                                "host_max_reserved_mb:unlimited,expandable_segments:True");
}

static void cap_raised(void **state)
{
    (void)state;
    fp_conf cur;
    fp_conf_default(&cur);
    assert_int_equal(fp_conf_parse("max_reserved_mb:4000", &cur, NULL, NULL), 0);
    fp_advice a;
    fp_advice_req req = {
        .budget = 4000 * FP_MIB, .room = 80000 * FP_MIB, .current = &cur, .threads = 2};
    assert_int_equal(fp_advise(&resnet, &req, &a), 0);
    assert_int_equal(a.kind, FP_ADVICE_RAISE_CAP);
    char want[64];
    snprintf(want, sizeof want, "max_reserved_mb:%zu", a.need / FP_MIB);
    assert_string_equal(a.conf, want);
    assert_true(a.need > 4000 * FP_MIB && a.need < 7000 * FP_MIB);
    assert_true(clean_at(&resnet, a.conf, 80000 * FP_MIB));
}

static void tune_rows_agree(void **state)
{
    (void)state;
    const size_t budgets[] = {4600 * FP_MIB, 4650 * FP_MIB, 6000 * FP_MIB};
    for (size_t k = 0; k < sizeof budgets / sizeof *budgets; k++) {
        fp_tune_params p = {.threads = 2, .at_budget = budgets[k]};
        fp_tune_row *rows;
        size_t n;
        assert_int_equal(fp_tune_run(&resnet, &p, &rows, &n), 0);
        fp_advice from_rows, direct;
        fp_advice_req req = {.budget = budgets[k], .threads = 2};
        assert_int_equal(fp_advise_rows(&resnet, rows, n, &req, &from_rows), 0);
        advise(&resnet, budgets[k], NULL, &direct);
        assert_int_equal(from_rows.kind, direct.kind);
        assert_string_equal(from_rows.conf, direct.conf);
        assert_int_equal(from_rows.need, direct.need);
        free(rows);
    }
}

static void gpt_budget(void **state)
{
    (void)state;
    fp_advice a;
    /* the classic pool needs 17,656 MiB */
    advise(&gpt, 17400 * FP_MIB, conf_of("expandable_segments:False"), &a);
    assert_int_equal(a.kind, FP_ADVICE_FIX);
    assert_true(a.need <= 17400 * FP_MIB);
    assert_true(clean_at(&gpt, a.conf, 17400 * FP_MIB));
    assert_false(clean_at(&gpt, "expandable_segments:False", 17400 * FP_MIB));
}

static void without_budget(void **state)
{
    (void)state;
    fp_advice a;
    advise(&resnet, 0, conf_of("expandable_segments:False"), &a);
    assert_int_equal(a.kind, FP_ADVICE_BEST); /* 4,606 against 6,142 MiB */
    assert_string_equal(a.conf, "expandable_segments:True");
    assert_true(a.need * 100 <= a.current_need * 95);
    advise(&resnet, 0, conf_of("expandable_segments:True"), &a);
    assert_int_equal(a.kind, FP_ADVICE_KEEP); /* nothing is 5% leaner than it */
    advise(&resnet, 0, NULL, &a);
    assert_int_equal(a.kind, FP_ADVICE_KEEP); /* nor than the defaults */
}

static void zero_peaks(void **state)
{
    (void)state;
    fp_trace t = {0};
    assert_int_equal(fp_trace_push(&t, 'f', 1, 100, 0), 0);
    fp_advice a;
    advise(&t, 0, NULL, &a);
    assert_int_equal(a.kind, FP_ADVICE_KEEP);
    assert_int_equal(a.current_need, 0);
    fp_sink s = fp_sink_buffer(line, sizeof line);
    fp_advise_put(&s, &a, "verdict: ", "this trace");
    assert_non_null(strstr(line, "holds no memory at peak under any setting"));
    assert_null(strstr(line, "FRAGPOOL_CONF="));
    advise(&t, 0, conf_of("expandable_segments:False"), &a);
    assert_int_equal(a.kind, FP_ADVICE_KEEP);
    fp_tune_params p = {.threads = 2};
    fp_tune_row *rows;
    size_t n;
    assert_int_equal(fp_tune_run(&t, &p, &rows, &n), 0);
    fp_advice_req req = {.threads = 2};
    assert_int_equal(fp_advise_rows(&t, rows, n, &req, &a), 0);
    assert_int_equal(a.kind, FP_ADVICE_KEEP);
    free(rows);
    fp_trace_free(&t);
}

/* After the first event: the data segment may grow 1 MiB more. */
static int squeeze(void *ud, fp_pool *p, size_t idx, int oom)
{
    (void)ud, (void)p, (void)oom;
    if (idx == 0) {
        long pages = 0, data = 0, skip5[5];
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld %ld %ld %ld %ld %ld", &skip5[0], &skip5[1], &skip5[2], &skip5[3],
                         &skip5[4], &data) != 6)
            _exit(3);
        fclose(f);
        pages = data + 256;
        struct rlimit rl = {(rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE),
                            (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE)};
        if (setrlimit(RLIMIT_DATA, &rl))
            _exit(3);
    }
    return 0;
}

/* In a child: 0 when the replay failed with ENOMEM, 1 when it reported
 * success, 2 when it ran clean (the limit never bit). */
static int replay_squeezed(const fp_trace *t, int vmm)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    if (!vmm)
        o.expandable_segments = FP_VMM_OFF;
    fp_replay_hook h = {.after_event = squeeze};
    fp_replay_result r;
    int err = fp_replay_ex(t, &o, 0, &h, &r, NULL);
    return err == ENOMEM && r.host_fails ? 0 : err ? 4 : r.ooms ? 1 : 2;
}

static void host_memory_runs_out(void **state)
{
    (void)state;
#ifdef FP_OWN_ALLOCATOR
    skip();
#endif
    fp_trace t = {0};
    for (uint64_t id = 1; id <= 400000; id++) /* 400,000 live blocks: headers */
        assert_int_equal(fp_trace_push(&t, 'a', id, 512, 0), 0);
    for (int vmm = 0; vmm < 2; vmm++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(replay_squeezed(&t, vmm));
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    fp_trace_free(&t);
}

static void mib_format(void **state)
{
    (void)state;
    const struct {
        size_t bytes;
        const char *want;
    } cases[] = {{0, "0 MiB"},
                 {1, "1 MiB"},
                 {FP_MIB, "1 MiB"},
                 {FP_MIB + 1, "2 MiB"},
                 {999 * FP_MIB, "999 MiB"},
                 {1000 * FP_MIB, "1,000 MiB"},
                 {18474 * FP_MIB, "18,474 MiB"},
                 {(size_t)1234567 * FP_MIB, "1,234,567 MiB"},
                 {(size_t)1000005 * FP_MIB, "1,000,005 MiB"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fp_sink s = fp_sink_buffer(line, sizeof line);
        fp_advise_put_mib(&s, cases[i].bytes);
        assert_string_equal(line, cases[i].want);
    }
}

/* A fix line keeps no value that caused the OOM, nor a key that would not
 * act under its segments: a page too large is searched at its default
 * (vmm_page_mb is chosen, like the policy keys), and a virtual-memory fix
 * drops the run's max_split_size_mb (docs/config.md, the acts table). */
static void fix_keeps_no_cause(void **state)
{
    (void)state;
    fp_conf cur;
    fp_advice a;
    fp_conf_default(&cur);
    assert_int_equal(fp_conf_parse("vmm_page_mb:512", &cur, NULL, NULL), 0);
    advise(&resnet, 4700 * FP_MIB, &cur, &a);
    assert_int_equal(a.kind, FP_ADVICE_FIX);
    assert_string_equal(a.conf, "expandable_segments:True");
    fp_conf_default(&cur);
    assert_int_equal(fp_conf_parse("expandable_segments:False,max_split_size_mb:128,"
                                   "vmm_headroom_mb:32",
                                   &cur, NULL, NULL),
                     0);
    advise(&resnet, 4650 * FP_MIB, &cur, &a);
    assert_int_equal(a.kind, FP_ADVICE_FIX);
    assert_null(strstr(a.conf, "max_split_size_mb"));      /* no effect there */
    assert_non_null(strstr(a.conf, "vmm_headroom_mb:32")); /* acts there: kept */
    assert_true(clean_at(&resnet, a.conf, 4650 * FP_MIB));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nothing_fits_4600),
        cmocka_unit_test(expandable_fits_4650),
        cmocka_unit_test(never_the_setting_in_force),
        cmocka_unit_test(other_keys_kept),
        cmocka_unit_test(long_conf_keeps_fix),
        cmocka_unit_test(cap_raised),
        cmocka_unit_test(tune_rows_agree),
        cmocka_unit_test(gpt_budget),
        cmocka_unit_test(without_budget),
        cmocka_unit_test(mib_format),
        cmocka_unit_test(zero_peaks),
        cmocka_unit_test(host_memory_runs_out),
        cmocka_unit_test(fix_keeps_no_cause),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
