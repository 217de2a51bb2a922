/* test_config.c - FRAGPOOL_CONF parsing: defaults, every key, both forms of
 * roundup_power2_divisions, a table of bad inputs with their exact report
 * lines, hostile input (1 MiB of separators, odd bytes), and the
 * format -> parse round trip; where the text comes from: FRAGPOOL_CONF, or
 * PyTorch's PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF read leniently,
 * and the label every line carries.
 *
 * Invariants checked: each problem is one report line that starts with
 * the prefix, holds no newline and stays bounded; a rejected entry leaves
 * the config untouched; the formatted config parses back with no problem.
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
#include "fp_conf.h"

#define P             "fragpool: FRAGPOOL_CONF: "
#define T             "; ignoring this entry, the rest still applies"
#define KT(key, cur)  "; ignoring this entry (" key " stays " cur "), the rest still applies"
#define NEAR(a, b, c) "nearest keys: " a ", " b ", " c " (fragpool config lists every key)"
#define KNOWN         NEAR("tools", "lend", "trace")
#define MSS                                                                                        \
    "must be an integer number of MiB >= 21 (up to 17592186044415), "                              \
    "or unlimited" KT("max_split_size_mb", "unlimited")
#define NSR                                                                                        \
    "must be an integer number of MiB >= 20 (up to 17592186044415)" KT(                            \
        "max_non_split_rounding_mb", "20")
#define RPD                                                                                        \
    "must be 0 or a power of two up to 1024, or a list like "                                      \
    "[256:1,512:2,>:8] of increasing power-of-two sizes in MiB "                                   \
    "with such values, '>' last" KT("roundup_power2_divisions", "0")
#define GC                                                                                         \
    "must be a decimal number > 0 and < 1 such as 0.6 (at most 15 "                                \
    "decimals), or off" KT("garbage_collection_threshold", "off")
#define PPF                                                                                        \
    "must be a decimal number > 0 and <= 1 such as 0.5 (at most 15 "                               \
    "decimals), or unlimited" KT("per_process_memory_fraction", "unlimited")
#define MR                                                                                         \
    "must be an integer number of MiB >= 1 (up to 17592186044415), "                               \
    "or unlimited" KT("max_reserved_mb", "unlimited")
#define ST "must be 0, 1, true, false, True or False" KT("strict", "0")

#define MIB        ((size_t)1 << 20)
#define LINE_BOUND 2048

/* ---- capture of report lines ------------------------------------------ */
typedef struct capture {
    int n;             /* lines reported          */
    size_t len;        /* bytes kept in buf        */
    char buf[1 << 16]; /* lines, each + '\n', while they fit */
} capture;

static void on_report(void *ud, const char *line)
{
    capture *c = ud;
    size_t n = strlen(line);
    assert_true(n < LINE_BOUND);
    assert_null(strchr(line, '\n'));
    assert_memory_equal(line, P, strlen(P));
    c->n++;
    if (c->len + n + 2 > sizeof c->buf)
        return;
    memcpy(c->buf + c->len, line, n);
    c->len += n;
    c->buf[c->len++] = '\n';
    c->buf[c->len] = '\0';
}

static capture *cap_new(void)
{
    capture *c = calloc(1, sizeof *c);
    assert_non_null(c);
    return c;
}

/* Parse text over the defaults; returns the problem count. */
static int parse(const char *text, fp_conf *c, capture *cap)
{
    fp_conf_default(c);
    int n = fp_conf_parse(text, c, on_report, cap);
    assert_int_equal(n, cap->n);
    return n;
}

static void expect_all_divs(const fp_conf *c, uint32_t v)
{
    for (int i = 0; i < FP_ROUNDUP_INTERVALS; i++)
        assert_int_equal(c->pool.roundup_divisions[i], v);
}

static void expect_divs(const fp_conf *c, const uint32_t *want)
{
    for (int i = 0; i < FP_ROUNDUP_INTERVALS; i++) {
        if (c->pool.roundup_divisions[i] != want[i])
            fail_msg("interval %d: %u, want %u", i, c->pool.roundup_divisions[i], want[i]);
    }
}

/* ---- defaults and the table ------------------------------------------- */
#define DEFAULTS                                                                                   \
    "max_split_size_mb:unlimited,max_non_split_rounding_mb:20,"                                    \
    "roundup_power2_divisions:0,"                                                                  \
    "garbage_collection_threshold:off,"                                                            \
    "per_process_memory_fraction:unlimited,"                                                       \
    "max_reserved_mb:unlimited,strict:0,"                                                          \
    "meminfo_counts_cache:1,debug_check:0,free_policy:deferred,"                                   \
    "defer_headroom_mb:0,summary:stderr,"                                                          \
    "summary_format:text,dump_on_sigusr1:0,trace:off,record_mb:16,"                                \
    "advice_budget_ms:1000,lend:1,lend_wait_ms:1000,lend_dir:/dev/shm,"                            \
    "ipc_export:fragpool,own_segment_mb:off,"                                                      \
    "snapshot:off,trace_stacks:0,tools:passthrough,"                                               \
    "expandable_segments:auto,vmm_page_mb:granularity,"                                            \
    "vmm_reserve_mb:device,vmm_headroom_mb:64,thread_cache_mb:off,host_pool:1,"                    \
    "host_max_reserved_mb:unlimited,host_max_cached_mb:unlimited,"                                 \
    "pinned_max_cached_size_mb:unlimited"

/* vmm_headroom_mb: MiB, 0 and off turn it off; a bad value is one
 * problem and leaves the default (64 MiB). */
static void test_vmm_headroom(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t want;
        int problems;
    } cases[] = {
        {"vmm_headroom_mb:128", 128 * FP_MIB, 0},
        {"vmm_headroom_mb:0", 0, 0},
        {"vmm_headroom_mb:off", 0, 0},
        {"vmm_headroom_mb:x", 64 * FP_MIB, 1},
        {"vmm_headroom_mb:-1", 64 * FP_MIB, 1},
        {"vmm_headroom_mb:", 64 * FP_MIB, 1},
        {"vmm_headroom_mb:17592186044416", 64 * FP_MIB, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fp_conf c;
        fp_conf_default(&c);
        assert_int_equal(c.pool.vmm_headroom, 64 * FP_MIB);
        assert_int_equal(fp_conf_parse(cases[i].text, &c, NULL, NULL), cases[i].problems);
        if (c.pool.vmm_headroom != cases[i].want)
            fail_msg("%s: %zu, want %zu", cases[i].text, c.pool.vmm_headroom, cases[i].want);
    }
}

static void test_defaults(void **state)
{
    (void)state;
    fp_conf c;
    char buf[1024];
    fp_conf_default(&c);
    assert_int_equal(c.pool.max_split_size, SIZE_MAX);
    assert_int_equal(c.pool.max_non_split_rounding, 20 * MIB);
    expect_all_divs(&c, 0);
    assert_true(c.pool.gc_threshold == 0.0);
    assert_true(c.pool.memory_fraction == 0.0);
    assert_int_equal(c.pool.max_reserved, 0);
    assert_int_equal(c.strict, 0);
    assert_int_equal(c.pool.expandable_segments, FP_VMM_AUTO);
    assert_int_equal(c.set_mask, 0);
    assert_int_equal(fp_conf_format(&c, buf, sizeof buf), 0);
    assert_string_equal(buf, DEFAULTS);
    /* the three states of expandable_segments, each printed back */
    static const struct {
        const char *text;
        int v;
        const char *printed;
    } es[] = {
        {"expandable_segments:False", FP_VMM_OFF, "expandable_segments:0"},
        {"expandable_segments:True", FP_VMM_ON, "expandable_segments:1"},
        {"expandable_segments:auto", FP_VMM_AUTO, "expandable_segments:auto"},
    };
    for (size_t i = 0; i < sizeof es / sizeof *es; i++) {
        fp_conf_default(&c);
        assert_int_equal(fp_conf_parse(es[i].text, &c, NULL, NULL), 0);
        assert_int_equal(c.pool.expandable_segments, es[i].v);
        assert_int_equal(fp_conf_format_set(&c, buf, sizeof buf), 0);
        assert_string_equal(buf, es[i].printed);
    }
}

/* Each row's documented default is what the formatter prints. */
static void test_table(void **state)
{
    (void)state;
    fp_conf c;
    char buf[1024], want[1024] = "";
    fp_conf_default(&c);
    assert_int_equal(fp_conf_noptions(), 34);
    assert_null(fp_conf_option(fp_conf_noptions()));
    for (size_t i = 0; i < fp_conf_noptions(); i++) {
        const fp_option *o = fp_conf_option(i);
        assert_non_null(o->type);
        char range[256], accept[512];
        assert_int_equal(fp_conf_range(o, range, sizeof range), 0);
        assert_true(range[0] != '\0');
        assert_int_equal(fp_conf_accept(o, accept, sizeof accept), 0);
        assert_true(accept[0] != '\0');
        assert_non_null(o->help);
        assert_int_equal(fp_conf_find(o->name, strlen(o->name)), (int)i);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s:%s", i ? "," : "", o->name,
                 o->deflt);
    }
    /* ranges and messages come from the bounds */
    static const char *const ranges[][3] = {
        {"max_split_size_mb", "21..17592186044415, unlimited",
         "an integer number of MiB >= 21 (up to 17592186044415), or unlimited"},
        {"garbage_collection_threshold", "(0,1), off",
         "a decimal number > 0 and < 1 such as 0.6 (at most 15 decimals), or off"},
        {"per_process_memory_fraction", "(0,1], unlimited",
         "a decimal number > 0 and <= 1 such as 0.5 (at most 15 decimals), or unlimited"},
        {"free_policy", "deferred, sync", "deferred or sync"},
        {"strict", "0, 1, true, false, True, False", "0, 1, true, false, True or False"},
        {"defer_headroom_mb", "0..17592186044415",
         "an integer number of MiB >= 0 (up to 17592186044415)"}};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        const fp_option *o =
            fp_conf_option((size_t)fp_conf_find(ranges[i][0], strlen(ranges[i][0])));
        char got[512];
        assert_int_equal(fp_conf_range(o, got, sizeof got), 0);
        assert_string_equal(got, ranges[i][1]);
        assert_int_equal(fp_conf_accept(o, got, sizeof got), 0);
        assert_string_equal(got, ranges[i][2]);
        assert_int_equal(fp_conf_range(o, got, 4), ENOSPC);
    }
    assert_int_equal(fp_conf_find("strict_", 7), -1);
    assert_int_equal(fp_conf_find("stric", 5), -1);
    fp_conf_format(&c, buf, sizeof buf);
    assert_string_equal(buf, want);
}

static void test_empty_text(void **state)
{
    (void)state;
    capture *cap = cap_new();
    fp_conf c;
    assert_int_equal(parse(NULL, &c, cap), 0);
    assert_int_equal(parse("", &c, cap), 0);
    assert_int_equal(parse(" \t\n ", &c, cap), 0);
    assert_int_equal(c.set_mask, 0);
    fp_conf_default(&c);
    assert_int_equal(fp_conf_parse("foo:1,,", &c, NULL, NULL), 3);
    free(cap);
}

/* ---- good values --------------------------------------------------------- */
typedef struct good_mib {
    const char *text;
    size_t want;
} good_mib;

static size_t field_of(const fp_conf *c, int which)
{
    switch (which) {
    case 0: return c->pool.max_split_size;
    case 1: return c->pool.max_non_split_rounding;
    default: return c->pool.max_reserved;
    }
}

static void check_mibs(const good_mib *g, size_t n, int which)
{
    for (size_t i = 0; i < n; i++) {
        capture cap0 = {0}, *cap = &cap0;
        fp_conf c;
        if (parse(g[i].text, &c, cap))
            fail_msg("'%s': %s", g[i].text, cap->buf);
        assert_int_equal(field_of(&c, which), g[i].want);
    }
}

static void test_good_mib(void **state)
{
    (void)state;
    static const good_mib split[] = {
        {"max_split_size_mb:21", 21 * MIB},
        {"max_split_size_mb:512", 512 * MIB},
        {"max_split_size_mb:0000512", 512 * MIB},
        {"max_split_size_mb:17592186044415", 17592186044415 * MIB},
        {"max_split_size_mb:unlimited", SIZE_MAX},
    };
    static const good_mib rounding[] = {
        {"max_non_split_rounding_mb:20", 20 * MIB},
        {"max_non_split_rounding_mb:64", 64 * MIB},
        {"max_non_split_rounding_mb:17592186044415", 17592186044415 * MIB},
    };
    static const good_mib reserved[] = {
        {"max_reserved_mb:1", MIB},
        {"max_reserved_mb:40960", 40960 * MIB},
        {"max_reserved_mb:unlimited", 0},
    };
    check_mibs(split, sizeof split / sizeof split[0], 0);
    check_mibs(rounding, sizeof rounding / sizeof rounding[0], 1);
    check_mibs(reserved, sizeof reserved / sizeof reserved[0], 2);
}

typedef struct good_real {
    const char *text;
    double gc, fraction;
} good_real;

static void test_good_real(void **state)
{
    (void)state;
    static const good_real g[] = {
        {"garbage_collection_threshold:0.6", 0.6, 0},
        {"garbage_collection_threshold:.5", 0.5, 0},
        {"garbage_collection_threshold:0.50000000000000000000", 0.5, 0},
        {"garbage_collection_threshold:0.000000000000001", 1e-15, 0},
        {"garbage_collection_threshold:0.999999999999999", 0.999999999999999, 0},
        {"garbage_collection_threshold:off", 0, 0},
        {"per_process_memory_fraction:1", 0, 1.0},
        {"per_process_memory_fraction:1.", 0, 1.0},
        {"per_process_memory_fraction:1.000", 0, 1.0},
        {"per_process_memory_fraction:0.25", 0, 0.25},
        {"per_process_memory_fraction:0.123456789012345", 0, 0.123456789012345},
        {"per_process_memory_fraction:unlimited", 0, 0},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        capture cap = {0};
        fp_conf c;
        if (parse(g[i].text, &c, &cap))
            fail_msg("'%s': %s", g[i].text, cap.buf);
        assert_true(c.pool.gc_threshold == g[i].gc);
        assert_true(c.pool.memory_fraction == g[i].fraction);
    }
}

/* The shim's keys: booleans, an enum and a destination. */
static void test_good_shim_keys(void **state)
{
    (void)state;
    fp_conf c;
    fp_conf_default(&c);
    assert_int_equal(c.meminfo_counts_cache, 1);
    assert_string_equal(c.summary, "stderr");
    assert_int_equal(fp_conf_parse("meminfo_counts_cache:0,debug_check:true,"
                                   "summary:/tmp/fp-%p-%r.json,summary_format:json",
                                   &c, NULL, NULL),
                     0);
    assert_int_equal(c.meminfo_counts_cache, 0);
    assert_int_equal(c.debug_check, 1);
    assert_string_equal(c.summary, "/tmp/fp-%p-%r.json");
    assert_int_equal(c.summary_format, FP_SUMMARY_JSON);
    assert_int_equal(fp_conf_parse("summary:off", &c, NULL, NULL), 0);
    assert_int_equal(c.free_policy, FP_FREE_DEFERRED);
    assert_int_equal(fp_conf_parse("free_policy:sync", &c, NULL, NULL), 0);
    assert_int_equal(c.free_policy, FP_FREE_SYNC);
    assert_int_equal(c.defer_headroom, 0);
    assert_int_equal(fp_conf_parse("defer_headroom_mb:512", &c, NULL, NULL), 0);
    assert_int_equal(c.defer_headroom, 512 * MIB);
    assert_int_equal(fp_conf_parse("defer_headroom_mb:0", &c, NULL, NULL), 0);
    assert_int_equal(c.defer_headroom, 0);
    assert_int_equal(c.ipc_export, FP_IPC_FRAGPOOL);
    assert_int_equal(fp_conf_parse("ipc_export:refuse", &c, NULL, NULL), 0);
    assert_int_equal(c.ipc_export, FP_IPC_REFUSE);
    assert_int_equal(c.own_segment, 0);
    assert_int_equal(fp_conf_parse("trace_stacks:32,snapshot:/tmp/s.%p", &c, NULL, NULL), 0);
    assert_int_equal(c.trace_stacks, 32);
    assert_string_equal(c.snapshot, "/tmp/s.%p");
    assert_int_equal(fp_conf_parse("record_mb:64", &c, NULL, NULL), 0);
    assert_int_equal(c.pool.record_bytes, 64 * FP_MIB);
    assert_int_equal(fp_conf_parse("record_mb:off", &c, NULL, NULL), 0);
    assert_int_equal(c.pool.record_bytes, 0);
    assert_int_equal(c.advice_budget_ms, 1000);
    assert_int_equal(fp_conf_parse("advice_budget_ms:1", &c, NULL, NULL), 0);
    assert_int_equal(c.advice_budget_ms, 1);
    assert_int_equal(fp_conf_parse("advice_budget_ms:3600000", &c, NULL, NULL), 0);
    assert_int_equal(c.advice_budget_ms, 3600000);
    assert_int_equal(fp_conf_parse("own_segment_mb:2", &c, NULL, NULL), 0);
    assert_int_equal(c.own_segment, 2 * MIB);
    assert_int_equal(fp_conf_parse("own_segment_mb:off", &c, NULL, NULL), 0);
    assert_int_equal(c.own_segment, 0);
    assert_int_equal(fp_conf_parse("trace:/tmp/t-%p.csv,dump_on_sigusr1:1", &c, NULL, NULL), 0);
    assert_string_equal(c.trace, "/tmp/t-%p.csv");
    assert_int_equal(c.dump_on_sigusr1, 1);
    assert_string_equal(c.summary, "off");
}

static void test_good_strict(void **state)
{
    (void)state;
    static const char *const on[] = {"strict:1", "strict:true", "strict:True"};
    static const char *const off[] = {"strict:0", "strict:false", "strict:False"};
    for (size_t i = 0; i < 3; i++) {
        capture cap = {0};
        fp_conf c;
        assert_int_equal(parse(on[i], &c, &cap), 0);
        assert_int_equal(c.strict, 1);
        c.strict = 1;
        assert_int_equal(fp_conf_parse(off[i], &c, on_report, &cap), 0);
        assert_int_equal(c.strict, 0);
    }
}

static void test_divs_single(void **state)
{
    (void)state;
    static const uint32_t ok[] = {0, 1, 2, 4, 8, 64, 1024};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char text[64];
        capture cap = {0};
        fp_conf c;
        snprintf(text, sizeof text, "roundup_power2_divisions:%u", ok[i]);
        assert_int_equal(parse(text, &c, &cap), 0);
        expect_all_divs(&c, ok[i]);
    }
}

typedef struct divs_case {
    const char *list;
    uint32_t want[FP_ROUNDUP_INTERVALS];
} divs_case;

static void test_divs_list(void **state)
{
    (void)state;
    static const divs_case d[] = {
        /* interval i covers [2^i MiB, 2^(i+1) MiB); 256 MiB is i = 8 */
        {"[256:1,512:2,>:8]", {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 8, 8, 8, 8}},
        {"[1:4]", {4}},
        /* '>' fills after the last size named: after interval 0 when none */
        {"[>:8]", {0, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}},
        {"[65536:4]", {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
        /* intervals between two sizes keep 0, as in PyTorch */
        {"[256:1,1024:4]", {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 4}},
        {"[32768:4]", {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
        {"[2:2,64:4,1024:8]", {2, 2, 0, 0, 0, 0, 4, 0, 0, 0, 8}},
        {"[1:0,2:1,4:2,8:4,16:8,32:16,64:32,128:64,256:128,512:256,"
         "1024:512,2048:1024,4096:0,8192:1,16384:2,32768:4]",
         {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 0, 1, 2, 4}},
        {"[ 256 : 1 ,\t> : 8 ]", {1, 1, 1, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8, 8, 8, 8}},
        {"[16384:2,>:16]", {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 16}},
        {"[32768:2,>:16]", {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}},
    };
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        char text[256];
        capture cap = {0};
        fp_conf c;
        snprintf(text, sizeof text, "roundup_power2_divisions:%s", d[i].list);
        if (parse(text, &c, &cap))
            fail_msg("'%s': %s", text, cap.buf);
        expect_divs(&c, d[i].want);
    }
}

static void test_whitespace_and_many(void **state)
{
    (void)state;
    capture cap = {0};
    fp_conf c;
    const char *text = "  max_split_size_mb : 512 ,\tgarbage_collection_threshold:0.6\n,"
                       " roundup_power2_divisions : [256:1, 512:2, >:8] , max_reserved_mb:"
                       "4096,per_process_memory_fraction:0.8,max_non_split_rounding_mb:20,"
                       "strict:True ";
    assert_int_equal(parse(text, &c, &cap), 0);
    assert_int_equal(c.pool.max_split_size, 512 * MIB);
    assert_true(c.pool.gc_threshold == 0.6);
    assert_int_equal(c.pool.roundup_divisions[8], 1);
    assert_int_equal(c.pool.roundup_divisions[9], 2);
    assert_int_equal(c.pool.roundup_divisions[15], 8);
    assert_int_equal(c.pool.max_reserved, 4096 * MIB);
    assert_true(c.pool.memory_fraction == 0.8);
    assert_int_equal(c.pool.max_non_split_rounding, 20 * MIB);
    assert_int_equal(c.strict, 1);
    assert_int_equal(c.set_mask, 0x7f);
}

static void test_bad_in_middle(void **state)
{
    (void)state;
    capture cap = {0};
    fp_conf c;
    const char *text = "max_split_size_mb:512,garbage_collection_threshold:1.5,"
                       "foo:1,roundup_power2_divisions:[256:1,512:2],strict:1";
    assert_int_equal(parse(text, &c, &cap), 2);
    assert_string_equal(cap.buf, P "'garbage_collection_threshold:1.5': " GC "\n" P
                                   "unknown key 'foo' (in 'foo:1'); " KNOWN T "\n");
    assert_int_equal(c.pool.max_split_size, 512 * MIB);
    assert_true(c.pool.gc_threshold == 0.0);
    assert_int_equal(c.pool.roundup_divisions[9], 2);
    assert_int_equal(c.pool.roundup_divisions[10], 0);
    assert_int_equal(c.strict, 1);
    /* bits: 0 max_split, 2 roundup, 6 strict; not 3 (rejected) */
    assert_int_equal(c.set_mask, (1u << 0) | (1u << 2) | (1u << 6));
}

/* An unclosed '[' spoils only its own entry. */
static void test_unclosed_bracket(void **state)
{
    (void)state;
    capture cap = {0};
    fp_conf c;
    assert_int_equal(parse("roundup_power2_divisions:[256:1,"
                           "max_split_size_mb:512",
                           &c, &cap),
                     1);
    assert_string_equal(cap.buf, P "'roundup_power2_divisions:[256:1': "
                                   "no closing ']'; " RPD "\n");
    assert_int_equal(c.pool.max_split_size, 512 * MIB);
}

static void test_duplicate(void **state)
{
    (void)state;
    capture cap = {0};
    fp_conf c;
    assert_int_equal(parse("max_split_size_mb:512,max_split_size_mb:1024", &c, &cap), 1);
    assert_string_equal(cap.buf,
                        "fragpool: FRAGPOOL_CONF: 'max_split_size_mb:1024': duplicate key, "
                        "only the first max_split_size_mb counts; ignoring this entry "
                        "(max_split_size_mb stays 512), the rest still applies\n");
    assert_int_equal(c.pool.max_split_size, 512 * MIB);

    /* the first occurrence counts even when it is bad */
    memset(&cap, 0, sizeof cap);
    assert_int_equal(parse("max_split_size_mb:20,max_split_size_mb:1024", &c, &cap), 2);
    assert_int_equal(c.pool.max_split_size, SIZE_MAX);

    /* an alias after its other name, either way round: the first counts */
    memset(&cap, 0, sizeof cap);
    assert_int_equal(parse("host_max_cached_mb:3,pinned_max_cached_size_mb:5", &c, &cap), 1);
    assert_string_equal(cap.buf, "fragpool: FRAGPOOL_CONF: 'pinned_max_cached_size_mb:5': "
                                 "pinned_max_cached_size_mb is another name of "
                                 "host_max_cached_mb, given before; only the first counts; "
                                 "ignoring this entry (pinned_max_cached_size_mb stays 3), "
                                 "the rest still applies\n");
    assert_int_equal(c.host_max_cached, 3 * MIB);
    memset(&cap, 0, sizeof cap);
    assert_int_equal(parse("pinned_max_cached_size_mb:5,host_max_cached_mb:3", &c, &cap), 1);
    assert_non_null(strstr(cap.buf, "'host_max_cached_mb:3': host_max_cached_mb is another "
                                    "name of pinned_max_cached_size_mb, given before"));
    assert_int_equal(c.host_max_cached, 5 * MIB);
    /* ... even when the first was bad: then the default stays */
    memset(&cap, 0, sizeof cap);
    assert_int_equal(parse("host_max_cached_mb:x,pinned_max_cached_size_mb:5", &c, &cap), 2);
    assert_int_equal(c.host_max_cached, SIZE_MAX);
    /* the same value twice (as fp_conf_format writes it) is no problem */
    memset(&cap, 0, sizeof cap);
    assert_int_equal(parse("host_max_cached_mb:7,pinned_max_cached_size_mb:7", &c, &cap), 0);
    assert_int_equal(c.host_max_cached, 7 * MIB);

    /* a second call is not a duplicate: later text overrides */
    memset(&cap, 0, sizeof cap);
    assert_int_equal(parse("strict:1", &c, &cap), 0);
    assert_int_equal(fp_conf_parse("strict:0", &c, on_report, &cap), 0);
    assert_int_equal(c.strict, 0);
}

/* vmm_page_mb and vmm_reserve_mb past what the device (or, with no size,
 * the address space) allows: the parser takes them, fp_conf_vmm_note
 * words the clamp in one line; within the limits there is no line. */
static void test_vmm_note(void **state)
{
    (void)state;
    char line[512];
    fp_conf c;
    capture cap = {0};
    assert_int_equal(parse("vmm_page_mb:20000,vmm_reserve_mb:8796093022208", &c, &cap), 0);
    c.pool.device_total = (size_t)16 << 30;
    assert_int_equal(fp_conf_vmm_note(&c.pool, 2 * MIB, "the device's", line, sizeof line), 1);
    assert_string_equal(line, "vmm_page_mb:20000 is more than a page may be (at most an eighth "
                              "of the device's 16384 MiB); using 2048 MiB pages; "
                              "vmm_reserve_mb:8796093022208 is more address space than a range "
                              "may take (at most 4 times the device's 16384 MiB); reserving "
                              "65536 MiB per range");
    c.pool.device_total = 0;
    assert_int_equal(fp_conf_vmm_note(&c.pool, 2 * MIB, "the device's", line, sizeof line), 1);
    assert_string_equal(line, "vmm_reserve_mb:8796093022208 is more address space than a range "
                              "may take (at most 4 TiB with no device size known); reserving "
                              "4180000 MiB per range"); /* whole 20000 MiB pages */
    assert_int_equal(parse("vmm_page_mb:2048,vmm_reserve_mb:65536", &c, &cap), 0);
    c.pool.device_total = (size_t)16 << 30;
    assert_int_equal(fp_conf_vmm_note(&c.pool, 2 * MIB, "the device's", line, sizeof line), 0);
    assert_string_equal(line, "");
    assert_int_equal(fp_conf_vmm_note(&c.pool, 2 * MIB, "the device's", line, 8), 0);
}

/* ---- the table of bad inputs ------------------------------------------- */
#define A16 "aaaaaaaaaaaaaaaa"
#define A64 A16 A16 A16 A16

typedef struct bad_case {
    const char *text;
    int problems;
    const char *lines; /* every line, each followed by '\n' */
} bad_case;

static const bad_case bad[] = {
    {"meminfo_counts_cache:2", 1,
     P "'meminfo_counts_cache:2': must be 0, 1, true, false, True or False" KT(
         "meminfo_counts_cache", "1") "\n"},
    {"debug_check:yes", 1,
     P "'debug_check:yes': must be 0, 1, true, false, True or False" KT("debug_check", "0") "\n"},
    {"dump_on_sigusr1:2", 1,
     P "'dump_on_sigusr1:2': must be 0, 1, true, false, True or False" KT("dump_on_sigusr1",
                                                                          "0") "\n"},
    {"expandable_segments:maybe", 1,
     P "'expandable_segments:maybe': must be 0, 1, true, false, True, False or auto" KT(
         "expandable_segments", "auto") "\n"},
    {"trace:", 1,
     P "'trace:': empty value; must be off, or a file path shorter than 256 "
       "bytes (%p pid, %r rank, %h host)" KT("trace", "off") "\n"},
    {"defer_headroom_mb:-1", 1,
     P "'defer_headroom_mb:-1': must be an integer number of MiB >= 0 (up to "
       "17592186044415)" KT("defer_headroom_mb", "0") "\n"},
    {"defer_headroom_mb:1.5", 1,
     P "'defer_headroom_mb:1.5': must be an integer number of MiB >= 0 (up to "
       "17592186044415)" KT("defer_headroom_mb", "0") "\n"},
    {"ipc_export:block", 1,
     P "'ipc_export:block': must be refuse or fragpool" KT("ipc_export", "fragpool") "\n"},
    {"ipc_export:", 1,
     P "'ipc_export:': empty value; must be refuse or fragpool" KT("ipc_export", "fragpool") "\n"},
    {"tools:maybe", 1,
     P "'tools:maybe': must be passthrough or pool" KT("tools", "passthrough") "\n"},
    {"trace_stacks:33", 1,
     P "'trace_stacks:33': must be an integer from 0 to 32" KT("trace_stacks", "0") "\n"},
    {"trace_stacks:-1", 1,
     P "'trace_stacks:-1': must be an integer from 0 to 32" KT("trace_stacks", "0") "\n"},
    {"trace_stacks:4x", 1,
     P "'trace_stacks:4x': must be an integer from 0 to 32" KT("trace_stacks", "0") "\n"},
    {"record_mb:0", 1,
     P "'record_mb:0': must be an integer number of MiB >= 1 (up to 65536), or off" KT("record_mb",
                                                                                       "16") "\n"},
    {"record_mb:65537", 1,
     P "'record_mb:65537': must be an integer number of MiB >= 1 (up to 65536), or off" KT(
         "record_mb", "16") "\n"},
    {"record_mb:abc", 1,
     P "'record_mb:abc': must be an integer number of MiB >= 1 (up to 65536), or off" KT(
         "record_mb", "16") "\n"},
    {"lend:maybe", 1,
     P "'lend:maybe': must be 0, 1, true, false, True or False" KT("lend", "1") "\n"},
    {"lend_wait_ms:0", 1,
     P "'lend_wait_ms:0': must be an integer from 1 to 60000" KT("lend_wait_ms", "1000") "\n"},
    {"lend_wait_ms:60001", 1,
     P "'lend_wait_ms:60001': must be an integer from 1 to 60000" KT("lend_wait_ms", "1000") "\n"},
    {"lend_dir:/tmp/a\x01"
     "b",
     1,
     P "'lend_dir:/tmp/a\\x01b': control byte in path; must be a directory path shorter than 256 "
       "bytes" KT("lend_dir", "/dev/shm") "\n"},
    {"advice_budget_ms:0", 1,
     P "'advice_budget_ms:0': must be an integer from 1 to 3600000" KT("advice_budget_ms",
                                                                       "1000") "\n"},
    {"advice_budget_ms:3600001", 1,
     P "'advice_budget_ms:3600001': must be an integer from 1 to 3600000" KT("advice_budget_ms",
                                                                             "1000") "\n"},
    {"advice_budget_ms:1s", 1,
     P "'advice_budget_ms:1s': must be an integer from 1 to 3600000" KT("advice_budget_ms",
                                                                        "1000") "\n"},
    {"own_segment_mb:0", 1,
     P "'own_segment_mb:0': must be an integer number of MiB >= 1 (up to "
       "17592186044415), or off" KT("own_segment_mb", "off") "\n"},
    {"own_segment_mb:2.5", 1,
     P "'own_segment_mb:2.5': must be an integer number of MiB >= 1 (up to "
       "17592186044415), or off" KT("own_segment_mb", "off") "\n"},
    {"own_segment_mb:17592186044416", 1,
     P "'own_segment_mb:17592186044416': must be an integer number of MiB >= 1 (up to "
       "17592186044415), or off" KT("own_segment_mb", "off") "\n"},
    {"host_max_reserved_mb:0", 1,
     P "'host_max_reserved_mb:0': must be an integer number of MiB >= 1 (up to "
       "17592186044415), or unlimited" KT("host_max_reserved_mb", "unlimited") "\n"},
    {"host_max_cached_mb:-3", 1,
     P "'host_max_cached_mb:-3': must be an integer number of MiB >= 0 (up to "
       "17592186044415), or unlimited" KT("host_max_cached_mb", "unlimited") "\n"},
    {"host_pool:maybe", 1,
     P "'host_pool:maybe': must be 0, 1, true, false, True or False" KT("host_pool", "1") "\n"},
    {"free_policy:lazy", 1,
     P "'free_policy:lazy': must be deferred or sync" KT("free_policy", "deferred") "\n"},
    {"summary_format:xml", 1,
     P "'summary_format:xml': must be text or json" KT("summary_format", "text") "\n"},
    {"summary:a\tb", 1,
     P "'summary:a\\x09b': control byte in path; must be off, stderr, or a "
       "file path shorter than 256 bytes (%p pid, %r rank, %h host)" KT("summary", "stderr") "\n"},
    {"foo:1", 1, P "unknown key 'foo' (in 'foo:1'); " KNOWN T "\n"},
    /* an escape the shim would refuse at its first write is refused here */
    {"trace:x-%q.csv", 1,
     P "'trace:x-%q.csv': unknown escape %q (the escapes are %p pid, %r rank, %h host, %% a "
       "'%'); must be off, or a file path shorter than 256 bytes (%p pid, %r rank, %h "
       "host)" KT("trace", "off") "\n"},
    {"summary:x-%", 1,
     P "'summary:x-%': a lone '%' at the end (write %% for a '%'); must be off, stderr, or a "
       "file path shorter than 256 bytes (%p pid, %r rank, %h host)" KT("summary", "stderr") "\n"},
    {"Max_split_size_mb:512", 1,
     P "unknown key 'Max_split_size_mb' (in 'Max_split_size_mb:512'); "
       "did you mean max_split_size_mb? (fragpool config lists every key)" T "\n"},
    /* typos: two edits at most (a swap of neighbours is one), one for short keys */
    {"max_split_sise_mb:512", 1,
     P "unknown key 'max_split_sise_mb' (in 'max_split_sise_mb:512'); "
       "did you mean max_split_size_mb? (fragpool config lists every key)" T "\n"},
    {"expnadable_segmnts:True", 1,
     P "unknown key 'expnadable_segmnts' (in 'expnadable_segmnts:True'); "
       "did you mean expandable_segments? (fragpool config lists every key)" T "\n"},
    {"tool:pool", 1,
     P "unknown key 'tool' (in 'tool:pool'); "
       "did you mean tools? (fragpool config lists every key)" T "\n"},
    {"tol:pool", 1, P "unknown key 'tol' (in 'tol:pool'); " NEAR("tools", "trace", "lend") T "\n"},
    {"max_split_mb:512", 1,
     P "unknown key 'max_split_mb' (in 'max_split_mb:512'); " NEAR(
         "max_split_size_mb", "max_reserved_mb", "lend_wait_ms") T "\n"},
    /* no typo of any key, but part of one: that one first */
    {"split_size:512", 1,
     P "unknown key 'split_size' (in 'split_size:512'); " NEAR("max_split_size_mb", "strict",
                                                               "host_pool") T "\n"},
    {"max_split_size_mb", 1, P "'max_split_size_mb': no ':' in entry; expected key:value" T "\n"},
    {":5", 1, P "':5': empty key; expected key:value" T "\n"},
    {"max_split_size_mb:", 1, P "'max_split_size_mb:': empty value; " MSS "\n"},
    {"max_split_size_mb:  ", 1, P "'max_split_size_mb:': empty value; " MSS "\n"},
    {",,", 3,
     P "empty entry at byte 0 (stray ','); expected key:value" T "\n" P
       "empty entry at byte 1 (stray ','); expected key:value" T "\n" P
       "empty entry at byte 2 (stray ','); expected key:value" T "\n"},
    {",strict:1", 1, P "empty entry at byte 0 (stray ','); expected key:value" T "\n"},
    {"strict:1,", 1, P "empty entry at byte 9 (stray ','); expected key:value" T "\n"},
    {"strict:1, ,strict:0", 2,
     P "empty entry at byte 9 (stray ','); expected key:value" T "\n" P
       "'strict:0': duplicate key, only the first strict counts" KT("strict", "1") "\n"},
    {"max_split_size_mb:abc", 1, P "'max_split_size_mb:abc': " MSS "\n"},
    {"max_split_size_mb:12x", 1, P "'max_split_size_mb:12x': " MSS "\n"},
    {"max_split_size_mb:1e999", 1, P "'max_split_size_mb:1e999': " MSS "\n"},
    {"max_split_size_mb:-5", 1, P "'max_split_size_mb:-5': " MSS "\n"},
    {"max_split_size_mb:+512", 1, P "'max_split_size_mb:+512': " MSS "\n"},
    {"max_split_size_mb:5 12", 1, P "'max_split_size_mb:5 12': " MSS "\n"},
    {"max_split_size_mb:99999999999999999999999", 1,
     P "'max_split_size_mb:99999999999999999999999': " MSS "\n"},
    {"max_split_size_mb:17592186044416", 1, P "'max_split_size_mb:17592186044416': " MSS "\n"},
    {"max_split_size_mb:20", 1,
     "fragpool: FRAGPOOL_CONF: 'max_split_size_mb:20': must be an integer "
     "number of MiB >= 21 (up to 17592186044415), or unlimited; ignoring "
     "this entry (max_split_size_mb stays unlimited), the rest still "
     "applies\n"},
    {"max_split_size_mb:Unlimited", 1, P "'max_split_size_mb:Unlimited': " MSS "\n"},
    {"max_non_split_rounding_mb:-1", 1, P "'max_non_split_rounding_mb:-1': " NSR "\n"},
    {"max_non_split_rounding_mb:unlimited", 1,
     P "'max_non_split_rounding_mb:unlimited': " NSR "\n"},
    {"max_reserved_mb:0", 1, P "'max_reserved_mb:0': " MR "\n"},
    {"garbage_collection_threshold:1.5", 1, P "'garbage_collection_threshold:1.5': " GC "\n"},
    {"garbage_collection_threshold:0", 1, P "'garbage_collection_threshold:0': " GC "\n"},
    {"garbage_collection_threshold:1", 1, P "'garbage_collection_threshold:1': " GC "\n"},
    {"garbage_collection_threshold:1e999", 1, P "'garbage_collection_threshold:1e999': " GC "\n"},
    {"garbage_collection_threshold:6e-1", 1, P "'garbage_collection_threshold:6e-1': " GC "\n"},
    {"garbage_collection_threshold:-0.5", 1, P "'garbage_collection_threshold:-0.5': " GC "\n"},
    {"garbage_collection_threshold:.", 1, P "'garbage_collection_threshold:.': " GC "\n"},
    {"garbage_collection_threshold:0.1234567890123456", 1,
     P "'garbage_collection_threshold:0.1234567890123456': " GC "\n"},
    {"garbage_collection_threshold:0.6.1", 1, P "'garbage_collection_threshold:0.6.1': " GC "\n"},
    {"garbage_collection_threshold:nan", 1, P "'garbage_collection_threshold:nan': " GC "\n"},
    {"per_process_memory_fraction:0", 1, P "'per_process_memory_fraction:0': " PPF "\n"},
    {"per_process_memory_fraction:1.01", 1, P "'per_process_memory_fraction:1.01': " PPF "\n"},
    {"per_process_memory_fraction:1.000000000000001", 1,
     P "'per_process_memory_fraction:1.000000000000001': " PPF "\n"},
    {"strict:yes", 1, P "'strict:yes': " ST "\n"},
    {"strict:2", 1, P "'strict:2': " ST "\n"},
    {"strict:TRUE", 1, P "'strict:TRUE': " ST "\n"},
    {"roundup_power2_divisions:3", 1, P "'roundup_power2_divisions:3': " RPD "\n"},
    {"roundup_power2_divisions:2048", 1, P "'roundup_power2_divisions:2048': " RPD "\n"},
    {"roundup_power2_divisions:[256:1", 1,
     P "'roundup_power2_divisions:[256:1': no closing ']'; " RPD "\n"},
    {"roundup_power2_divisions:[abc:1]", 1,
     P "'roundup_power2_divisions:[abc:1]': item 'abc:1': size must be a "
       "power of two (MiB); " RPD "\n"},
    {"roundup_power2_divisions:[3:1]", 1,
     P "'roundup_power2_divisions:[3:1]': item '3:1': size must be a "
       "power of two (MiB); " RPD "\n"},
    {"roundup_power2_divisions:[0:1]", 1,
     P "'roundup_power2_divisions:[0:1]': item '0:1': size must be a "
       "power of two (MiB); " RPD "\n"},
    {"roundup_power2_divisions:[65535:1]", 1,
     P "'roundup_power2_divisions:[65535:1]': item '65535:1': size must "
       "be a power of two (MiB); " RPD "\n"},
    {"roundup_power2_divisions:[512:2,256:1]", 1,
     P "'roundup_power2_divisions:[512:2,256:1]': item '256:1': sizes "
       "must increase; " RPD "\n"},
    {"roundup_power2_divisions:[256:1,256:2]", 1,
     P "'roundup_power2_divisions:[256:1,256:2]': item '256:2': sizes "
       "must increase; " RPD "\n"},
    {"roundup_power2_divisions:[>:8,256:1]", 1,
     P "'roundup_power2_divisions:[>:8,256:1]': item '256:1' follows '>', "
       "which must be last; " RPD "\n"},
    {"roundup_power2_divisions:[256:3]", 1,
     P "'roundup_power2_divisions:[256:3]': item '256:3': divisions must "
       "be 0 or a power of two up to 1024; " RPD "\n"},
    {"roundup_power2_divisions:[256:2048]", 1,
     P "'roundup_power2_divisions:[256:2048]': item '256:2048': divisions "
       "must be 0 or a power of two up to 1024; " RPD "\n"},
    {"roundup_power2_divisions:[256]", 1,
     P "'roundup_power2_divisions:[256]': item '256' is not "
       "size:divisions; " RPD "\n"},
    {"roundup_power2_divisions:[]", 1, P "'roundup_power2_divisions:[]': empty list; " RPD "\n"},
    {"roundup_power2_divisions:[256:1,]", 1,
     P "'roundup_power2_divisions:[256:1,]': item 2 is empty; " RPD "\n"},
    {"roundup_power2_divisions:[256:1]x", 1,
     P "'roundup_power2_divisions:[256:1]x': text after ']'; " RPD "\n"},
    {"roundup_power2_divisions:[[256:1]]", 1,
     P "'roundup_power2_divisions:[[256:1]]': text after ']'; " RPD "\n"},
    {"max_split_size_mb:512,max_split_size_mb:1024,max_split_size_mb:20", 2,
     P "'max_split_size_mb:1024': duplicate key, only the first "
       "max_split_size_mb counts" KT(
           "max_split_size_mb",
           "512") "\n" P "'max_split_size_mb:20': duplicate key, only the first "
                  "max_split_size_mb counts" KT("max_split_size_mb", "512") "\n"},
    /* odd bytes are shown as \xNN, so a line stays one line */
    {"strict:\x01y\x7f\xff", 1, P "'strict:\\x01y\\x7f\\xff': " ST "\n"},
    {"stri\nct:1", 1,
     P "unknown key 'stri\\x0act' (in 'stri\\x0act:1'); "
       "did you mean strict? (fragpool config lists every key)" T "\n"},
    /* long keys and values are cut at 64 bytes */
    {A64 "aaaa:1", 1,
     P "unknown key '" A64 "...' (in '" A64 "...'); " NEAR("trace", "lend", "tools") T "\n"},
    {"max_reserved_mb:1234567890123456789012345678901234567890123456789012"
     "345678901234567890",
     1,
     P "'max_reserved_mb:123456789012345678901234567890123456789012345678"
       "...': " MR "\n"},
};

static void test_bad_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        capture cap = {0};
        fp_conf c, d;
        int n = parse(bad[i].text, &c, &cap);
        if (n != bad[i].problems || strcmp(cap.buf, bad[i].lines) != 0)
            fail_msg("case %zu '%s': %d problems, want %d\ngot:\n%s\nwant:\n%s", i, bad[i].text, n,
                     bad[i].problems, cap.buf, bad[i].lines);
        /* whatever was rejected left the defaults in place */
        fp_conf_default(&d);
        if (!c.set_mask)
            assert_memory_equal(&c.pool, &d.pool, sizeof d.pool);
    }
}

/* ---- hostile input ------------------------------------------------------- */
static char *filled(size_t n, const char *pattern)
{
    size_t plen = strlen(pattern);
    char *s = malloc(n + 1);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++)
        s[i] = pattern[i % plen];
    s[n] = '\0';
    return s;
}

static int parse_count(const char *text)
{
    capture *cap = cap_new();
    fp_conf c;
    int n = parse(text, &c, cap);
    free(cap);
    return n;
}

static void test_long_inputs(void **state)
{
    (void)state;
    const size_t n = (size_t)1 << 20;
    static const char *const patterns[] = {
        ":",    "[",    "]",       "[]",        "][",
        ":[,]", "[:,",  "a:[1:1,", "strict:1,", "roundup_power2_divisions:[",
        "1:1,", ">:8,", " \t",     "\x01\xff",
    };
    char *s = filled(n, ",");
    assert_int_equal(parse_count(s), (int)n + 1);
    free(s);
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        s = filled(n, patterns[i]);
        assert_true(parse_count(s) >= 0);
        free(s);
    }
    /* one huge list value */
    s = filled(n, "1:1,");
    memcpy(s, "roundup_power2_divisions:[", 26);
    s[n - 1] = ']';
    assert_int_equal(parse_count(s), 1);
    free(s);
}

static void test_random_bytes(void **state)
{
    (void)state;
    static const char alphabet[] = "[]:,> 0123456789.ab_\t\x01\xff";
    uint64_t x = 88172645463325252u;
    char buf[512];
    for (int round = 0; round < 20000; round++) {
        size_t len = (size_t)(x % (sizeof buf - 1));
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
            buf[i] = (round & 1) ? alphabet[x % (sizeof alphabet - 1)] : (char)(x % 255 + 1);
        }
        buf[len] = '\0';
        assert_true(parse_count(buf) >= 0);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    }
}

/* ---- format -> parse ----------------------------------------------------- */
static void round_trip(const fp_conf *c)
{
    char buf[2048];
    capture cap = {0};
    fp_conf back;
    assert_int_equal(fp_conf_format(c, buf, sizeof buf), 0);
    fp_conf_default(&back);
    if (fp_conf_parse(buf, &back, on_report, &cap))
        fail_msg("'%s' does not parse back:\n%s", buf, cap.buf);
    assert_memory_equal(&back.pool, &c->pool, sizeof c->pool);
    assert_int_equal(back.strict, c->strict);
    assert_int_equal(back.set_mask, ((uint64_t)1 << fp_conf_noptions()) - 1);
}

static void test_round_trip(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "",
        "max_split_size_mb:21,max_non_split_rounding_mb:20,strict:1",
        "garbage_collection_threshold:0.6,per_process_memory_fraction:1",
        "garbage_collection_threshold:0.000000000000001,"
        "per_process_memory_fraction:0.123456789012345",
        "max_reserved_mb:17592186044415,max_split_size_mb:17592186044415",
        "roundup_power2_divisions:4",
        "roundup_power2_divisions:[256:1,512:2,>:8]",
        "roundup_power2_divisions:[1:4]",
        "roundup_power2_divisions:[16384:2,>:16]",
        "roundup_power2_divisions:[2:2,64:4,1024:8]",
        "roundup_power2_divisions:[2:2,64:4,1024:8,>:0]",
        "roundup_power2_divisions:[1:0,2:1,4:2,8:4,16:8,32:16,64:32,128:64,"
        "256:128,512:256,1024:512,2048:1024,4096:0,8192:1,16384:2,32768:4]",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        fp_conf c;
        fp_conf_default(&c);
        assert_int_equal(fp_conf_parse(texts[i], &c, NULL, NULL), 0);
        round_trip(&c);
    }
}

/* Every 16-interval vector made of a few values round-trips. */
static void test_round_trip_divs(void **state)
{
    (void)state;
    static const uint32_t vals[] = {0, 1, 8};
    for (uint32_t code = 0; code < 43046721u; code += 4099) { /* 3^16 */
        fp_conf c;
        uint32_t k = code;
        fp_conf_default(&c);
        for (int i = 0; i < FP_ROUNDUP_INTERVALS; i++, k /= 3)
            c.pool.roundup_divisions[i] = vals[k % 3];
        round_trip(&c);
    }
}

/* The list form the formatter picks for a few vectors. */
static void test_format_divs(void **state)
{
    (void)state;
    static const char *const io[][2] = {
        {"[256:1,512:2,>:8]", "[256:1,512:2,>:8]"},
        {"[2:2,64:4,1024:8]", "[2:2,64:4,1024:8]"},
        {"[256:1]", "[256:1]"},
        {"[256:1,>:0]", "[256:1]"},
        {"[256:1,>:2]", "[256:1,>:2]"},
        {"[1:0,256:1]", "[128:0,256:1]"},
        {"[32768:8]", "8"},
        {"[>:2]", "[1:0,>:2]"},
        {"[2:2,64:4,>:8]", "[2:2,64:4,>:8]"},
        {"[2:2,1024:8,2048:8]", "[2:2,1024:8,2048:8]"},
    };
    for (size_t i = 0; i < sizeof io / sizeof io[0]; i++) {
        char text[128], buf[1024], want[128];
        fp_conf c;
        fp_conf_default(&c);
        snprintf(text, sizeof text, "roundup_power2_divisions:%s", io[i][0]);
        assert_int_equal(fp_conf_parse(text, &c, NULL, NULL), 0);
        assert_int_equal(fp_conf_format(&c, buf, sizeof buf), 0);
        snprintf(want, sizeof want, ",roundup_power2_divisions:%s,", io[i][1]);
        if (!strstr(buf, want))
            fail_msg("'%s' formats as '%s', want '%s'", text, buf, want);
    }
}

/* Paths holding [ ] , and % round-trip, and the formatted text splits
 * into every key. */
static void test_path_round_trip(void **state)
{
    (void)state;
    static const char *const in[][3] = {
        {"trace:/tmp/b],summary:/tmp/[a", "/tmp/[a", "/tmp/b]"},
        {"summary:/tmp/[a,b],trace:/t/%%5B%p", "/tmp/[a,b]", "/t/%%5B%p"},
        {"summary:/tmp/%5ba%2C%5D", "/tmp/[a,]", "off"},
        {"summary:/x/%%5%5B", "/x/%%5[", "off"},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        fp_conf c, back;
        char buf[4096];
        fp_conf_default(&c);
        assert_int_equal(fp_conf_parse(in[i][0], &c, NULL, NULL), 0);
        assert_string_equal(c.summary, in[i][1]);
        assert_string_equal(c.trace, in[i][2]);
        assert_int_equal(fp_conf_format(&c, buf, sizeof buf), 0);
        assert_null(strchr(strstr(buf, "summary:"), '['));
        fp_conf_default(&back);
        assert_int_equal(fp_conf_parse(buf, &back, NULL, NULL), 0);
        assert_string_equal(back.summary, c.summary);
        assert_string_equal(back.trace, c.trace);
        assert_int_equal(back.summary_format, c.summary_format);
        assert_int_equal(back.dump_on_sigusr1, c.dump_on_sigusr1);
        int entries = 1;
        for (const char *p = buf; *p; p++)
            entries += *p == ',' && !strchr("0123456789>", p[1]);
        assert_int_equal(entries, (int)fp_conf_noptions());
    }
    /* a '%' right before [ ] , is no escape and would not read back */
    fp_conf c;
    fp_conf_default(&c);
    assert_int_equal(fp_conf_parse("summary:/a%],trace:/b%%5D", &c, NULL, NULL), 1);
    assert_string_equal(c.summary, "stderr");
    assert_string_equal(c.trace, "/b%%5D");
}

static void test_format_enospc(void **state)
{
    (void)state;
    fp_conf c;
    char buf[32];
    fp_conf_default(&c);
    memset(buf, 'x', sizeof buf);
    assert_int_equal(fp_conf_format(&c, buf, sizeof buf), ENOSPC);
    assert_int_equal(strlen(buf), sizeof buf - 1);
    assert_memory_equal(buf, DEFAULTS, sizeof buf - 1);
    assert_int_equal(fp_conf_format(&c, buf, 0), ENOSPC);
    assert_int_equal(fp_conf_format(&c, buf, 1), ENOSPC);
    assert_string_equal(buf, "");
    char exact[sizeof DEFAULTS];
    assert_int_equal(fp_conf_format(&c, exact, sizeof exact), 0);
}

/* ---- where the text comes from ------------------------------------------ */

/* Lines of any label, kept whole. */
static void on_any(void *ud, const char *line)
{
    capture *c = ud;
    size_t n = strlen(line);
    assert_null(strchr(line, '\n'));
    c->n++;
    if (c->len + n + 2 > sizeof c->buf)
        return;
    memcpy(c->buf + c->len, line, n);
    c->len += n;
    c->buf[c->len++] = '\n';
    c->buf[c->len] = '\0';
}

/* A fake environment for fp_conf_from_env: NAME=VALUE strings. */
static const char *const *fake_env;

static char *fake_getenv(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; fake_env && fake_env[i]; i++)
        if (!strncmp(fake_env[i], name, n) && fake_env[i][n] == '=')
            return (char *)fake_env[i] + n + 1;
    return NULL;
}

static int from_env(const char *const *env, fp_conf *c, capture *cap, const char **src)
{
    fake_env = env;
    fp_conf_default(c);
    int n = fp_conf_from_env(c, fake_getenv, on_any, cap, src);
    assert_int_equal(n, cap->n);
    return n;
}

/* A label names the source in every line; FP_CONF_LENIENT drops only the
 * keys PyTorch alone knows, silently, and nothing else. */
/* The pinned host pool's keys, and PyTorch's name for one. */
static void test_host_keys(void **state)
{
    (void)state;
    fp_conf c;
    fp_conf_default(&c);
    assert_int_equal(c.host_pool, 1);
    assert_int_equal(c.host_max_reserved, 0);
    assert_true(c.host_max_cached == SIZE_MAX);
    assert_int_equal(fp_conf_parse("host_pool:0,host_max_reserved_mb:256,"
                                   "host_max_cached_mb:64",
                                   &c, NULL, NULL),
                     0);
    assert_int_equal(c.host_pool, 0);
    assert_int_equal(c.host_max_reserved, 256 * MIB);
    assert_int_equal(c.host_max_cached, 64 * MIB);
    assert_int_equal(fp_conf_parse("host_max_cached_mb:0", &c, NULL, NULL), 0);
    assert_int_equal(c.host_max_cached, 0);
    /* PyTorch's pinned_max_cached_size_mb sets the same value, also when
     * it comes from PYTORCH_ALLOC_CONF (no longer a PyTorch-only key). */
    fp_conf_default(&c);
    assert_false(fp_conf_pytorch_only("pinned_max_cached_size_mb", 25));
    assert_true(fp_conf_pytorch_only("pinned_max_round_threshold_mb", 29));
    assert_int_equal(fp_conf_parse_as("pinned_max_cached_size_mb:1024,"
                                      "pinned_max_round_threshold_mb:1024",
                                      "PYTORCH_ALLOC_CONF", FP_CONF_LENIENT, &c, NULL, NULL),
                     0);
    assert_int_equal(c.host_max_cached, 1024 * MIB);
    assert_int_equal(fp_conf_parse("host_max_reserved_mb:unlimited,host_max_cached_mb:unlimited",
                                   &c, NULL, NULL),
                     0);
    assert_int_equal(c.host_max_reserved, 0);
    assert_true(c.host_max_cached == SIZE_MAX);
}

static void test_label_and_lenient(void **state)
{
    (void)state;
    capture *cap = cap_new();
    fp_conf c;
    fp_conf_default(&c);
    assert_int_equal(fp_conf_parse_as("foo:1", "--conf", 0, &c, on_any, cap), 1);
    assert_memory_equal(cap->buf, "fragpool: --conf: unknown key 'foo'", 35);
    memset(cap, 0, sizeof *cap);
    const char *torch = "expandable_segments:True,max_split_size_mb:512,backend:native,"
                        "pinned_use_background_threads:True,garbage_collection_threshold:0.6,"
                        "release_lock_on_cudamalloc:True,large_segment_size_mb:64";
    fp_conf_default(&c);
    assert_int_equal(
        fp_conf_parse_as(torch, "PYTORCH_ALLOC_CONF", FP_CONF_LENIENT, &c, on_any, cap), 0);
    assert_int_equal(c.pool.max_split_size, 512 * MIB);
    assert_true(c.pool.gc_threshold == 0.6);
    assert_int_equal(c.pool.expandable_segments, 1); /* a key of both */
    /* Not lenient: the same keys are problems. */
    fp_conf_default(&c);
    assert_int_equal(fp_conf_parse_as(torch, "X", 0, &c, on_any, cap), 4);
    memset(cap, 0, sizeof *cap);
    /* Lenient still reports a key neither knows, and a bad value. */
    fp_conf_default(&c);
    assert_int_equal(fp_conf_parse_as("expandable_segment:True,max_split_size_mb:20",
                                      "PYTORCH_ALLOC_CONF", FP_CONF_LENIENT, &c, on_any, cap),
                     2);
    assert_non_null(
        strstr(cap->buf, "fragpool: PYTORCH_ALLOC_CONF: unknown key 'expandable_segment'"));
    assert_non_null(strstr(cap->buf, "fragpool: PYTORCH_ALLOC_CONF: 'max_split_size_mb:20': must"));
    assert_true(fp_conf_pytorch_only("backend", 7));
    assert_false(fp_conf_pytorch_only("max_split_size_mb", 17));
    assert_false(fp_conf_pytorch_only("backen", 6));
    free(cap);
}

/* FRAGPOOL_CONF when set (even empty), else PYTORCH_ALLOC_CONF, else
 * PYTORCH_CUDA_ALLOC_CONF; the source line says which. */
static void test_from_env(void **state)
{
    (void)state;
    capture *cap = cap_new();
    fp_conf c;
    const char *src;
    char line[512];

    static const char *const none[] = {"PATH=/bin", NULL};
    assert_int_equal(from_env(none, &c, cap, &src), 0);
    assert_null(src);
    assert_int_equal(fp_conf_source_line(&c, src, line, sizeof line), ENOENT);

    static const char *const torch[] = {
        "PYTORCH_ALLOC_CONF=max_split_size_mb:512,expandable_segments:True",
        "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256", NULL};
    assert_int_equal(from_env(torch, &c, cap, &src), 0);
    assert_string_equal(src, "PYTORCH_ALLOC_CONF");
    assert_int_equal(c.pool.max_split_size, 512 * MIB);
    assert_int_equal(fp_conf_source_line(&c, src, line, sizeof line), 0);
    assert_string_equal(
        line, "fragpool: FRAGPOOL_CONF is unset; taking max_split_size_mb:512,"
              "expandable_segments:1 from PYTORCH_ALLOC_CONF (keys only PyTorch knows are left to "
              "PyTorch)");

    static const char *const cuda[] = {"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256,"
                                       "backend:native",
                                       NULL};
    assert_int_equal(from_env(cuda, &c, cap, &src), 0);
    assert_string_equal(src, "PYTORCH_CUDA_ALLOC_CONF");
    assert_int_equal(c.pool.max_split_size, 256 * MIB);

    static const char *const only_torch_keys[] = {
        "PYTORCH_ALLOC_CONF=pinned_use_background_threads:True", NULL};
    assert_int_equal(from_env(only_torch_keys, &c, cap, &src), 0);
    assert_int_equal(fp_conf_source_line(&c, src, line, sizeof line), 0);
    assert_string_equal(line, "fragpool: FRAGPOOL_CONF is unset; PYTORCH_ALLOC_CONF has no key "
                              "fragpool uses, so fragpool runs with its defaults");

    static const char *const both[] = {"PYTORCH_ALLOC_CONF=max_split_size_mb:512",
                                       "FRAGPOOL_CONF=max_split_size_mb:64", NULL};
    assert_int_equal(from_env(both, &c, cap, &src), 0);
    assert_string_equal(src, "FRAGPOOL_CONF");
    assert_int_equal(c.pool.max_split_size, 64 * MIB);
    assert_int_equal(fp_conf_source_line(&c, src, line, sizeof line), ENOENT);

    /* Empty but set: FRAGPOOL_CONF still wins (the way to opt out). */
    static const char *const empty[] = {
        "FRAGPOOL_CONF=", "PYTORCH_ALLOC_CONF=max_split_size_mb:512", NULL};
    assert_int_equal(from_env(empty, &c, cap, &src), 0);
    assert_string_equal(src, "FRAGPOOL_CONF");
    assert_int_equal(c.pool.max_split_size, SIZE_MAX);

    /* FRAGPOOL_CONF is strict about PyTorch's keys. */
    static const char *const own[] = {"FRAGPOOL_CONF=backend:native", NULL};
    assert_int_equal(from_env(own, &c, cap, &src), 1);
    assert_non_null(strstr(cap->buf, "fragpool: FRAGPOOL_CONF: unknown key 'backend'"));
    free(cap);
}

/* The summary's pairs are fp_conf_format's entries, key for key; a short
 * buffer gives fewer pairs, never a cut value. */
static void test_entries(void **state)
{
    (void)state;
    fp_conf c;
    fp_conf_default(&c);
    assert_int_equal(
        fp_conf_parse("max_split_size_mb:512,roundup_power2_divisions:[256:1,>:8]", &c, NULL, NULL),
        0);
    char buf[4096], joined[4096] = "", want[4096];
    fp_kv kv[FP_CONF_MAX_OPTIONS];
    size_t n = fp_conf_entries(&c, kv, FP_CONF_MAX_OPTIONS, buf, sizeof buf);
    assert_int_equal(n, fp_conf_noptions());
    for (size_t i = 0; i < n; i++)
        snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s%s:%s", i ? "," : "",
                 kv[i].key, kv[i].value);
    assert_int_equal(fp_conf_format(&c, want, sizeof want), 0);
    assert_string_equal(joined, want);
    assert_string_equal(kv[2].value, "[256:1,>:8]");
    n = fp_conf_entries(&c, kv, FP_CONF_MAX_OPTIONS, buf, 12);
    assert_true(n < fp_conf_noptions());
    for (size_t i = 0; i < n; i++)
        assert_true(strlen(kv[i].value) < 12);
    assert_int_equal(fp_conf_entries(&c, kv, 3, buf, sizeof buf), 3);
}

static void test_format_set(void **state)
{
    (void)state;
    capture *cap = cap_new();
    fp_conf c;
    char buf[256];
    parse("", &c, cap);
    assert_int_equal(fp_conf_format_set(&c, buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    parse("trace:/tmp/t,max_split_size_mb:512,bogus:1,strict:0", &c, cap);
    assert_int_equal(fp_conf_format_set(&c, buf, sizeof buf), 0);
    assert_string_equal(buf, "max_split_size_mb:512,strict:0,trace:/tmp/t");
    assert_int_equal(fp_conf_format_set(&c, buf, 8), ENOSPC);
    assert_int_equal(strlen(buf), 7);
    free(cap);
}

/* ---- keys that have no effect with the segments in force ---------------- */
static void on_inert(void *ud, const char *line)
{
    capture *c = ud;
    size_t n = strlen(line);
    assert_null(strchr(line, '\n'));
    c->n++;
    if (c->len + n + 2 <= sizeof c->buf) {
        memcpy(c->buf + c->len, line, n);
        c->len += n;
        c->buf[c->len++] = '\n';
        c->buf[c->len] = '\0';
    }
}

static int inert(const char *text, fp_segs segs, capture *cap)
{
    fp_conf c;
    memset(cap, 0, sizeof *cap);
    fp_conf_default(&c);
    assert_int_equal(fp_conf_parse(text, &c, NULL, NULL), 0);
    if (segs == (fp_segs)-1)
        segs = fp_conf_segs(&c);
    int n = fp_conf_inert(&c, c.set_mask, segs, "FRAGPOOL_CONF", on_inert, cap);
    assert_int_equal(n, cap->n);
    return n;
}

#define VMM_SAID                                                                                   \
    " has no effect with virtual-memory segments (the default): add "                              \
    "expandable_segments:False for PyTorch's classic rules\n"

static void test_inert(void **state)
{
    (void)state;
    capture *cap = cap_new();
    /* every row says where it acts */
    for (size_t i = 0; i < fp_conf_noptions(); i++) {
        const fp_option *o = fp_conf_option(i);
        assert_true(o->acts && (o->acts & ~FP_ACTS_ALL) == 0);
    }
    /* the seeds' key under the default: one line, and how to make it act */
    assert_int_equal(inert("max_split_size_mb:128", -1, cap), 1);
    assert_string_equal(cap->buf, P "max_split_size_mb:128" VMM_SAID);
    /* the classic keys, each once; keys of both modes say nothing */
    assert_int_equal(inert("max_split_size_mb:128,roundup_power2_divisions:4,"
                           "max_non_split_rounding_mb:64,garbage_collection_threshold:0.5,"
                           "max_reserved_mb:100,vmm_page_mb:4",
                           -1, cap),
                     3);
    assert_string_equal(cap->buf, P "max_split_size_mb:128" VMM_SAID P
                                    "max_non_split_rounding_mb:64" VMM_SAID P
                                    "garbage_collection_threshold:0.5" VMM_SAID);
    /* asked for by name */
    assert_int_equal(inert("expandable_segments:True,max_split_size_mb:128", -1, cap), 1);
    assert_non_null(strstr(cap->buf, "(expandable_segments:True): use expandable_segments:False"));
    /* classic: the virtual-memory keys instead */
    assert_int_equal(inert("expandable_segments:False,max_split_size_mb:128,vmm_page_mb:4,"
                           "vmm_reserve_mb:1024,vmm_headroom_mb:off",
                           -1, cap),
                     3);
    assert_string_equal(cap->buf,
                        P "vmm_page_mb:4 has no effect with classic segments "
                          "(expandable_segments:False): leave expandable_segments out (or set "
                          "it True) for virtual-memory segments\n" P
                          "vmm_reserve_mb:1024 has no effect with classic segments "
                          "(expandable_segments:False): leave expandable_segments out (or set "
                          "it True) for virtual-memory segments\n" P
                          "vmm_headroom_mb:off has no effect with classic segments "
                          "(expandable_segments:False): leave expandable_segments out (or set "
                          "it True) for virtual-memory segments\n");
    /* a driver without virtual memory management */
    assert_int_equal(inert("vmm_page_mb:4", FP_SEGS_CLASSIC_NO_VMM, cap), 1);
    assert_non_null(strstr(cap->buf, "(the driver has no virtual memory management here)"));
    /* keys of neither kind, and nothing set: silent */
    assert_int_equal(inert("", -1, cap), 0);
    assert_int_equal(inert("summary:off,trace:x.csv,roundup_power2_divisions:4", -1, cap), 0);
    /* the mode follows expandable_segments */
    fp_conf c;
    fp_conf_default(&c);
    assert_int_equal(fp_conf_segs(&c), FP_SEGS_VMM_DEFAULT);
    c.pool.expandable_segments = FP_VMM_OFF;
    assert_int_equal(fp_conf_segs(&c), FP_SEGS_CLASSIC);
    c.pool.expandable_segments = FP_VMM_ON;
    assert_int_equal(fp_conf_segs(&c), FP_SEGS_VMM_ASKED);
    free(cap);
}

/* A snapshot's allocator_settings: PyTorch's keys not at their default,
 * expandable_segments as it ran, and none of fragpool's own (paths). */
static void test_format_pytorch(void **state)
{
    (void)state;
    fp_conf c;
    char buf[512];
    fp_conf_default(&c);
    assert_int_equal(fp_conf_format_pytorch(&c, 1, buf, sizeof buf), 0);
    assert_string_equal(buf, "expandable_segments:True");
    assert_int_equal(fp_conf_parse("summary:/tmp/s-%p.txt,trace:/tmp/t.csv,max_split_size_mb:128,"
                                   "roundup_power2_divisions:[256:1,>:8],vmm_page_mb:4,"
                                   "pinned_max_cached_size_mb:64",
                                   &c, NULL, NULL),
                     0);
    assert_int_equal(fp_conf_format_pytorch(&c, 0, buf, sizeof buf), 0);
    assert_string_equal(buf, "max_split_size_mb:128,roundup_power2_divisions:[256:1,>:8],"
                             "pinned_max_cached_size_mb:64,expandable_segments:False");
    assert_int_equal(fp_conf_format_pytorch(&c, 0, buf, 8), ENOSPC);
    assert_int_equal(strlen(buf), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_host_keys),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_vmm_headroom),
        cmocka_unit_test(test_entries),
        cmocka_unit_test(test_empty_text),
        cmocka_unit_test(test_good_mib),
        cmocka_unit_test(test_good_real),
        cmocka_unit_test(test_good_strict),
        cmocka_unit_test(test_good_shim_keys),
        cmocka_unit_test(test_divs_single),
        cmocka_unit_test(test_divs_list),
        cmocka_unit_test(test_whitespace_and_many),
        cmocka_unit_test(test_bad_in_middle),
        cmocka_unit_test(test_unclosed_bracket),
        cmocka_unit_test(test_duplicate),
        cmocka_unit_test(test_vmm_note),
        cmocka_unit_test(test_bad_table),
        cmocka_unit_test(test_long_inputs),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_round_trip_divs),
        cmocka_unit_test(test_format_divs),
        cmocka_unit_test(test_path_round_trip),
        cmocka_unit_test(test_format_enospc),
        cmocka_unit_test(test_label_and_lenient),
        cmocka_unit_test(test_from_env),
        cmocka_unit_test(test_format_set),
        cmocka_unit_test(test_inert),
        cmocka_unit_test(test_format_pytorch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
