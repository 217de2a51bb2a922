/* test_replay.c - replays the ResNet-50 trace recorded from PyTorch on an
 * H200 and checks the pool against PyTorch's measured peaks, exactly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include "fp_trace.h"

static fp_trace trace;

static int load(void **state)
{
    (void)state;
    char err[256];
    int rc = fp_trace_load(FP_TEST_DATA "/resnet50_varres.csv.gz", &trace, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    return rc;
}

static int unload(void **state)
{
    (void)state;
    fp_trace_free(&trace);
    return 0;
}

/* The classic pool (PyTorch's default allocator) unless vmm. */
static void replay_mode(int vmm, size_t max_split_mb, size_t budget, fp_replay_result *r)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    if (!vmm)
        o.expandable_segments = FP_VMM_OFF;
    if (max_split_mb)
        o.max_split_size = max_split_mb * FP_MIB;
    fp_pool *p;
    assert_int_equal(fp_replay(&trace, &o, budget, r, &p), 0);
    char msg[256];
    int bad = fp_pool_check(p, msg, sizeof msg);
    if (bad)
        fail_msg("%s", msg);
    fp_pool_destroy(p, 1);
}

static void replay_with(size_t max_split_mb, size_t budget, fp_replay_result *r)
{
    replay_mode(0, max_split_mb, budget, r);
}

/* The default mode's peaks on this trace: 4,630.0 MiB of pages for a
 * peak of 4,591.7 MiB in blocks (docs/vmm.md). */
#define VMM_PEAK_RESERVED  4854906880LL
#define VMM_PEAK_ALLOCATED 4814778368LL

static void trace_shape(void **state)
{
    (void)state;
    assert_int_equal(trace.n, 29745);
}

static void pytorch_peaks_exact(void **state)
{
    (void)state;
    fp_replay_result r;
    replay_with(0, 0, &r);
    assert_int_equal(r.ooms, 0);
    assert_int_equal(r.bad_frees, 0);
    assert_int_equal(r.stats.reserved_bytes[FP_ALL].peak, 6440353792LL);
    assert_int_equal(r.stats.allocated_bytes[FP_ALL].peak, 4835815424LL);
}

static void max_split_holds_more(void **state)
{
    (void)state;
    fp_replay_result r;
    replay_with(100, 0, &r);
    assert_true(r.stats.reserved_bytes[FP_ALL].peak > 6440353792LL);
    assert_int_equal(r.stats.allocated_bytes[FP_ALL].peak, 4835815424LL);
}

static void budget_causes_oom(void **state)
{
    (void)state;
    fp_replay_result r;
    replay_with(0, 4 * FP_GIB, &r);
    assert_true(r.ooms > 0);
    assert_true(r.first_oom_event < trace.n);
    assert_true(r.stats.reserved_bytes[FP_ALL].peak <= (int64_t)(4 * FP_GIB));
    assert_true(r.stats.num_alloc_retries > 0);
}

/* The default: virtual-memory segments, within 1% of the peak live bytes,
 * and max_split_size_mb changes nothing there. */
static void default_is_vmm(void **state)
{
    (void)state;
    fp_replay_result r, m;
    replay_mode(1, 0, 0, &r);
    assert_int_equal(r.ooms, 0);
    assert_int_equal(r.stats.page_size, 2 * FP_MIB);
    assert_int_equal(r.stats.allocated_bytes[FP_ALL].peak, VMM_PEAK_ALLOCATED);
    assert_int_equal(r.stats.reserved_bytes[FP_ALL].peak, VMM_PEAK_RESERVED);
    assert_true(VMM_PEAK_RESERVED < VMM_PEAK_ALLOCATED / 100 * 101);
    replay_mode(1, 100, 0, &m);
    assert_int_equal(m.stats.reserved_bytes[FP_ALL].peak, VMM_PEAK_RESERVED);
}

static void deterministic(void **state)
{
    (void)state;
    fp_replay_result a, b;
    replay_with(128, 5 * FP_GIB, &a);
    replay_with(128, 5 * FP_GIB, &b);
    assert_memory_equal(&a.stats, &b.stats, sizeof a.stats);
    assert_int_equal(a.ooms, b.ooms);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(trace_shape),          cmocka_unit_test(pytorch_peaks_exact),
        cmocka_unit_test(max_split_holds_more), cmocka_unit_test(budget_causes_oom),
        cmocka_unit_test(default_is_vmm),       cmocka_unit_test(deterministic),
    };
    return cmocka_run_group_tests(tests, load, unload);
}
