/* test_report.c - the report module: size formatting, the text and JSON
 * summaries (every row, every field, escaping), the OOM message (cause and
 * exact advice), fd and buffer sinks, and the merge of ranks' summaries.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fp_report.h"
#include "fp_groups.h"
#include "fp_merge.h"
#include "fp_jread.h"

#define GIB ((int64_t)FP_GIB)
#define MIB ((int64_t)FP_MIB)

/* ---- fixtures ------------------------------------------------------------------- */

static void set3(fp_stat s[FP_NKINDS], int64_t cur, int64_t peak, int64_t tot, int64_t freed)
{
    s[FP_ALL] = (fp_stat){cur, peak, tot, freed, peak};
    s[FP_SMALL] = (fp_stat){cur / 4, peak / 4, tot / 4, freed / 4, peak / 4};
    s[FP_LARGE] = (fp_stat){cur - cur / 4, peak - peak / 4, tot - tot / 4, freed - freed / 4,
                            peak - peak / 4};
}

static fp_pool_stats known_stats(void)
{
    fp_pool_stats st;
    memset(&st, 0, sizeof st);
    set3(st.allocated_bytes, 1 * GIB, 3 * GIB, 10 * GIB, 9 * GIB);
    set3(st.active_bytes, 1 * GIB, 3 * GIB, 10 * GIB, 9 * GIB);
    set3(st.requested_bytes, GIB - 10 * MIB, 3 * GIB - 20 * MIB, 10 * GIB, 9 * GIB);
    set3(st.reserved_bytes, 2 * GIB, 4 * GIB, 6 * GIB, 4 * GIB);
    set3(st.inactive_split_bytes, 300 * MIB, 600 * MIB, 9 * GIB, 8 * GIB);
    set3(st.allocations, 120, 400, 1000, 880);
    set3(st.active, 120, 400, 1000, 880);
    set3(st.segments, 10, 30, 40, 30);
    set3(st.inactive_split, 7, 20, 500, 493);
    st.oversize_allocations = (fp_stat){1, 2, 3, 2, 2};
    st.oversize_segments = (fp_stat){1, 1, 2, 1, 1};
    st.num_allocs = 1000;
    st.num_frees = 900;
    st.num_cache_hits = 990;
    st.num_reserve_calls = 40;
    st.num_release_calls = 30;
    st.num_alloc_retries = 5;
    st.num_ooms = 2;
    st.largest_free = 512 * FP_MIB;
    st.largest_free_at_peak = FP_GIB;
    return st;
}

static const fp_leak leaks[3] = {
    {0x7f0000001000ULL, FP_GIB, 17},
    {0x7f0040000000ULL, 3 * FP_MIB / 2, 4},
    {0x7f0080000000ULL, 512, 99},
};

static const char *const conf_errors[2] = {
    "Invalid conf pair: foo:bar",
    "weird \"quoted\" \\ back\nnew\ttab\x01"
    "ctl\xff end",
};

/* Counter groups as a caller (the shim) hands them over, in the slots of
 * report/'s group table (fp_groups.h): report/ knows their keys and
 * labels, nothing of what their rows mean. */
static fp_row pt_rows[5], defer_rows[7], ipc_rows[7];
static fp_group groups[FP_DEV_NGROUPS];

static void make_groups(fp_dev_report *d)
{
    static const char *const pt[5][2] = {{"managed", " managed"},
                                         {"async_pool", " async_pool"},
                                         {"host", " host"},
                                         {"vmm", " vmm"},
                                         {"other", " other"}};
    for (int k = 0; k < 5; k++)
        pt_rows[k] = (fp_row){pt[k][0], pt[k][1], NULL, FP_ROW_COUNT, (uint64_t)k + 1, 0};
    static const fp_row defer[7] = {
        {"fences", " fence", " fences", FP_ROW_COUNT, 120, 0},
        {"ctx_waits", " context wait", " context waits", FP_ROW_COUNT, 118, 0},
        {"stream_waits", " stream wait", " stream waits", FP_ROW_COUNT, 1, 0},
        {"stream_reuses", " same-stream reuse", " same-stream reuses", FP_ROW_COUNT, 0, 0},
        {"syncs", " synchronization", " synchronizations", FP_ROW_COUNT, 3, 0},
        {"failed_fences", " failed fence", " failed fences", FP_ROW_COUNT, 1, 0},
        {"ctx_events", "context events", NULL, FP_ROW_FLAG, 1, 0}};
    memcpy(defer_rows, defer, sizeof defer);
    static const char *const ipc[7] = {"exports",        "exports_fragpool", "refused",     "opens",
                                       "opens_fragpool", "closes",           "own_segments"};
    for (int k = 0; k < 7; k++)
        ipc_rows[k] = (fp_row){ipc[k], " ipc", NULL, FP_ROW_COUNT, 0, 0};
    fp_report_groups_init(d, groups); /* the trace group stays absent */
    fp_report_group_set(groups, FP_GROUP_PASSTHROUGH, &(fp_group){.rows = pt_rows, .nrows = 5});
    fp_report_group_set(groups, FP_GROUP_DEFERRED,
                        &(fp_group){.rows = defer_rows,
                                    .nrows = 7,
                                    .per_line = 2,
                                    .note = "the device orders reuse (context events)"});
    fp_report_group_set(groups, FP_GROUP_IPC,
                        &(fp_group){.rows = ipc_rows, .nrows = 7, .per_line = 3, .zero = ""});
}

static const fp_kv conf_entries[3] = {
    {"max_split_size_mb", "512"},
    {"roundup_power2_divisions", "[256:1,>:8]"},
    {"garbage_collection_threshold", "0.6"},
};

static fp_dev_report dev;
static fp_run_report run;

static void make_run(int rank)
{
    memset(&dev, 0, sizeof dev);
    dev.device = 0;
    dev.device_name = "NVIDIA H200";
    dev.total_capacity = 140 * FP_GIB;
    dev.device_free = 100 * FP_GIB;
    dev.stats = known_stats();
    dev.idle_now = FP_GIB;
    dev.alloc_ns = 1234567;
    make_groups(&dev);
    dev.leaks = leaks;
    dev.nleaks = 3;
    dev.leak_count = 12;
    dev.leak_bytes = FP_GIB + 3 * FP_MIB;
    memset(&run, 0, sizeof run);
    run.pid = 4242;
    run.rank = rank;
    run.host = "node-7";
    run.config = conf_entries;
    run.nconfig = 3;
    run.config_errors = conf_errors;
    run.nconfig_errors = 2;
    run.mode = "simulated device";
    run.devs = &dev;
    run.ndevs = 1;
}

static char big[1 << 17];

static const char *text_summary(void)
{
    fp_sink s = fp_sink_buffer(big, sizeof big);
    assert_int_equal(fp_report_text(&run, &s), 0);
    return big;
}

static const char *json_summary(void)
{
    fp_sink s = fp_sink_buffer(big, sizeof big);
    assert_int_equal(fp_report_json(&run, &s), 0);
    return big;
}

static void has(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) {
        fputs(hay, stderr); /* whole: cmocka cuts long messages */
        fail_msg("missing \"%s\" (output above)", needle);
    }
}

/* ---- sizes ------------------------------------------------------------------------ */

static void format_size_table(void **state)
{
    (void)state;
    static const struct {
        size_t in;
        const char *out;
    } t[] = {
        {0, "0 bytes"},
        {1, "1 bytes"},
        {1023, "1023 bytes"},
        {1024, "1024 bytes"},
        {1025, "1.00 KiB"},
        {1536, "1.50 KiB"},
        {1152, "1.12 KiB"},
        {1048575, "1024.00 KiB"},
        {1048576, "1024.00 KiB"},
        {1048577, "1.00 MiB"},
        {3 * 1048576 / 2, "1.50 MiB"},
        {98 * 1048576, "98.00 MiB"},
        {1073741824, "1024.00 MiB"},
        {1073741825, "1.00 GiB"},
        {8ULL << 30, "8.00 GiB"},
        {2ULL << 40, "2048.00 GiB"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char out[32];
        fp_format_size(t[i].in, out);
        assert_string_equal(out, t[i].out);
    }
}

/* PyTorch's format_size, with printf, as the reference. */
static void ref_format_size(size_t size, char *out, size_t len)
{
    if (size <= 1024)
        snprintf(out, len, "%zu bytes", size);
    else if (size <= 1048576)
        snprintf(out, len, "%.2f KiB", (double)size / 1024.0);
    else if (size <= 1073741824ULL)
        snprintf(out, len, "%.2f MiB", (double)size / 1048576.0);
    else
        snprintf(out, len, "%.2f GiB", (double)size / 1073741824.0);
}

static void format_size_matches_printf(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t v = (size_t)(x >> (14 + i % 50));
        char a[32], b[64];
        fp_format_size(v, a);
        ref_format_size(v, b, sizeof b);
        if (strcmp(a, b))
            fail_msg("%zu: got %s, printf %s", v, a, b);
    }
}

static void format_columns(void **state)
{
    (void)state;
    char out[24];
    fp_format_size_col(0, 0, out);
    assert_string_equal(out, "     0 B  ");
    fp_format_size_col(767 * 1024, 767 * 1024, out);
    assert_string_equal(out, "785408 B  ");
    fp_format_size_col(2 * MIB, 2 * MIB, out);
    assert_string_equal(out, "  2048 KiB");
    fp_format_size_col(GIB, GIB, out);
    assert_string_equal(out, "  1024 MiB");
    fp_format_size_col(512 * MIB, 2 * GIB, out); /* unit from the all row */
    assert_string_equal(out, "   512 MiB");
    fp_format_size_col(1000 * GIB, 1000 * GIB, out);
    assert_string_equal(out, "  1000 GiB");
    fp_format_count_col(5, 5, out);
    assert_string_equal(out, "      5   ");
    fp_format_count_col(1500000, 1500000, out);
    assert_string_equal(out, "   1500 K ");
    fp_format_count_col(999, 1500000, out);
    assert_string_equal(out, "      0 K ");
    fp_format_count_col(2000000000, 2000000000, out);
    assert_string_equal(out, "   2000 M ");
}

static void fixed_and_duration(void **state)
{
    (void)state;
    char out[64];
    fp_sink s = fp_sink_buffer(out, sizeof out);
    fp_put_fixed(&s, 1, 3, 4);
    fp_putc(&s, ' ');
    fp_put_fixed(&s, 2, 3, 0);
    fp_putc(&s, ' ');
    fp_put_fixed(&s, 999999, 1000000, 2);
    fp_putc(&s, ' ');
    fp_put_percent(&s, 1, 0);
    fp_putc(&s, ' ');
    fp_emit_duration(&s, 850);
    fp_putc(&s, ' ');
    fp_emit_duration(&s, 12500);
    fp_putc(&s, ' ');
    fp_emit_duration(&s, 3200000);
    fp_putc(&s, ' ');
    fp_put_i64(&s, INT64_MIN);
    assert_string_equal(out, "0.3333 1 1.00 n/a 850 ns 12.50 \xc2\xb5s 3.20 ms "
                             "-9223372036854775808");
}

/* ---- text summary -------------------------------------------------------------------- */

/* Every line is "|" + 75 columns + "|". */
static void check_boxed(const char *t)
{
    int lines = 0;
    for (const char *p = t; *p;) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        size_t n = (size_t)(nl - p);
        if (n < 2 || p[0] != '|' || p[n - 1] != '|' || fp_text_width(p, n) != FP_TBL_WIDTH + 2)
            fail_msg("line %d not boxed: [%.*s]", lines, (int)n, p);
        p = nl + 1;
        lines++;
    }
    assert_true(lines > 40);
}

static void text_every_line_boxed(void **state)
{
    (void)state;
    make_run(3);
    check_boxed(text_summary());
}

static void text_rows_and_header(void **state)
{
    (void)state;
    make_run(3);
    const char *t = text_summary();
    static const char *const rows[] = {
        "| Allocated memory      |",
        "| Active memory         |",
        "| Requested memory      |",
        "| GPU reserved memory   |",
        "| Non-releasable memory |",
        "| Allocations           |",
        "| Active allocs         |",
        "| GPU reserved segments |",
        "| Non-releasable allocs |",
        "| Oversize allocations  |",
        "| Oversize GPU segments |",
        "|       from large pool |",
        "|       from small pool |",
        "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |",
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        has(t, rows[i]);
    has(t, "|                  fragpool memory summary, device ID 0");
    has(t, "|            CUDA OOMs: 2            |        cudaMalloc retries: 5         |");
    has(t, "NVIDIA H200, 140.00 GiB; pid 4242, rank 3");
    has(t, "| Allocated memory      |   1024 MiB |   3072 MiB |  10240 MiB |   9216 MiB |");
    has(t, "| Allocations           |     120    |     400    |    1000    |     880    |");
    has(t, "| Oversize GPU segments |       1    |       1    |       2    |       1    |");
}

static void text_extras(void **state)
{
    (void)state;
    make_run(3);
    const char *t = text_summary();
    has(t, "| Fragmentation at peak | 25.0% (1 - peak allocated 3.00 GiB / peak");
    has(t, "| Largest free block    | 512.00 MiB now; 1024.00 MiB at peak allocated");
    has(t, "| Idle in cached blocks | 1024.00 MiB reserved but not allocated, now");
    has(t, "| Free on the device    | 100.00 GiB of 140.00 GiB");
    has(t, "| Served from cache     | 990 of 1000 allocations (99.0%)");
    has(t, "| Driver calls saved    | ~1980 ");
    has(t, "| Time in allocator     | 1.23 ms; 649 ns per call (1900 allocs and frees) ");
    has(t, "| Passed to the driver  | 1 managed, 2 async_pool, 3 host, 4 vmm, 5");
    has(t, "| Deferred reuse        | 120 fences, 118 context waits ");
    has(t, "|                       | 1 stream wait, 0 same-stream reuses ");
    has(t, "|                       | 3 synchronizations, 1 failed fence ");
    has(t, "|                       | context events: yes ");
    has(t, "|                       | the device orders reuse (context events) ");
    has(t, "| Pool counters         | 2 OOMs ");
    has(t, "|                       | 5 alloc retries ");
    assert_null(strstr(t, "25.0% fragmentation at peak")); /* shown once, above */
    assert_null(strstr(t, "largest free block at peak "));
    assert_null(strstr(t, "page size")); /* classic: no Segments rows */
    has(t, "|                       | 0 invalid frees ");
    assert_null(strstr(t, "Trace problems")); /* an absent group: no line */
    has(t, "| Live at exit          | 12 allocations, 1.00 GiB, largest first:");
    has(t, "|                       | 1024.00 MiB at 0x7f0000001000 (allocation #17)");
    has(t, "|                       | 1.50 MiB at 0x7f0040000000 (allocation #4)");
    has(t, "|                       | 512 bytes at 0x7f0080000000 (allocation #99)");
    has(t, "|                       | ... and 9 more");
    has(t, "| Process               | pid 4242, rank 3, host node-7");
    has(t, "| Mode                  | simulated device");
    has(t, "| Version               | fragpool ");
    has(t, "| Configuration         | max_split_size_mb:512 ");
    has(t, "|                       | roundup_power2_divisions:[256:1,>:8] ");
    has(t, "|                       | garbage_collection_threshold:0.6 ");
    has(t, "| Config errors         | Invalid conf pair: foo:bar ");
    has(t, "|                       | weird \"quoted\" \\ back\\nnew\\ttab\\x01ctl\\xff end");
    /* only the keys not at their default, then how many are; JSON: all */
    static const unsigned char set[3] = {1, 0, 1};
    run.config_set = set;
    t = text_summary();
    has(t, "| Configuration         | max_split_size_mb:512 ");
    has(t, "|                       | garbage_collection_threshold:0.6 ");
    has(t, "|                       | the other 1 key: its default ");
    assert_null(strstr(t, "roundup_power2_divisions"));
    has(json_summary(), "\"roundup_power2_divisions\"");
    /* a note that names a setting: the setting follows the box whole, to paste */
    static const char *const notes[] = {
        "FRAGPOOL_CONF=expandable_segments:True,roundup_power2_divisions:[32:1,>:4] \xe2\x80\x94 a "
        "replay of this run holds 288 MiB at peak, 29% less than the 406 MiB of the settings in "
        "force (PyTorch: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)"};
    run.notes = notes;
    run.nnotes = 1;
    t = text_summary();
    has(t, "|===========================================================================|\n"
           "fragpool: the setting the notes name, to paste:\n"
           "    FRAGPOOL_CONF=expandable_segments:True,roundup_power2_divisions:[32:1,>:4]\n"
           "    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n");
    run.notes = NULL;
    run.nnotes = 0;
    static const unsigned char none[3] = {0, 0, 0};
    run.config_set = none;
    has(text_summary(), "| Configuration         | defaults (fragpool config lists every key) ");
    run.config_set = NULL;
}

static void text_edge_cases(void **state)
{
    (void)state;
    make_run(-1);
    memset(&dev.stats, 0, sizeof dev.stats);
    dev.device_free = (size_t)-1;
    dev.leak_count = 0;
    dev.nleaks = 0;
    run.config = NULL;
    run.nconfig = 0;
    run.nconfig_errors = 0;
    run.pid = 0;
    run.host = NULL;
    const char *t = text_summary();
    has(t, "| Fragmentation at peak | n/a (nothing reserved)");
    has(t, "| Free on the device    | unknown");
    has(t, "| Live at exit          | none");
    has(t, "| Configuration         | defaults");
    has(t, "| Config errors         | none");
    assert_null(strstr(t, "| Process ")); /* nothing known about it: no line */
    run.config_errors_more = 7;           /* problems that did not fit */
    t = text_summary();
    has(t, "| Config errors         | none ");
    has(t, "|                       | ... and 7 more (all were printed on stderr at ");
    run.config_errors_more = 0;
    has(t, "| Time in allocator     | 1.23 ms ");
    /* a replay: no device, no timing, the end of the trace */
    dev.replay = 1;
    t = text_summary();
    assert_null(strstr(t, "| Free on the device"));
    assert_null(strstr(t, "| Time in allocator"));
    has(t, "| Live at the end       | none");
    dev.replay = 0;
}

static void text_wraps_long_values(void **state)
{
    (void)state;
    static char longerr[700];
    memset(longerr, 'x', sizeof longerr - 1);
    for (size_t i = 10; i < sizeof longerr - 1; i += 13)
        longerr[i] = ' ';
    const char *errs[1] = {longerr};
    make_run(0);
    run.config_errors = errs;
    run.nconfig_errors = 1;
    dev.device_name = "An Extremely Long Device Name That Goes On And On Past The Box Width";
    const char *t = text_summary();
    size_t xs = 0;
    for (const char *p = t; *p; p++)
        xs += *p == 'x';
    assert_true(xs > 400); /* wrapped, the fixed value buffer cuts at 512 */
    has(t, "...");
    check_boxed(t);
}

/* ---- JSON summary ---------------------------------------------------------------------- */

static fp_jtok toks[8192];

static void parse(fp_jdoc *d, const char *text)
{
    size_t pos;
    int rc = fp_jdoc_parse(d, text, strlen(text), toks, 8192, &pos);
    if (rc)
        fail_msg("JSON error %d at byte %zu: %.40s", rc, pos, text + pos);
}

static int64_t jint(const fp_jdoc *d, const char *path)
{
    int64_t v = 0;
    int t = fp_jdoc_path(d, path);
    if (t < 0 || fp_jdoc_int(d, t, &v))
        fail_msg("no integer at %s", path);
    return v;
}

static const char *jstr(const fp_jdoc *d, const char *path)
{
    static char buf[512];
    if (fp_jdoc_str(d, fp_jdoc_path(d, path), buf, sizeof buf) == (size_t)-1)
        fail_msg("no string at %s", path);
    return buf;
}

static void jtype(const fp_jdoc *d, const char *path, int type)
{
    int t = fp_jdoc_path(d, path);
    if (t < 0)
        fail_msg("missing %s", path);
    if (d->tok[t].type != type)
        fail_msg("%s has type %d, want %d", path, d->tok[t].type, type);
}

static const char *const stat_keys[] = {"current", "peak", "total_allocated", "total_freed"};
static const char *const metric_keys[] = {
    "allocated",     "active",         "requested",
    "reserved",      "non_releasable", "allocations",
    "active_allocs", "segments",       "non_releasable_allocs"};

static void check_stat_obj(const fp_jdoc *d, const char *prefix)
{
    char path[512];
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s.%s", prefix, stat_keys[i]);
        jtype(d, path, FP_JNUM);
    }
}

static void json_every_field(void **state)
{
    (void)state;
    make_run(3);
    fp_jdoc d;
    parse(&d, json_summary());
    assert_int_equal(jint(&d, "version"), 1);
    assert_int_equal(jint(&d, "pid"), 4242);
    assert_int_equal(jint(&d, "rank"), 3);
    assert_string_equal(jstr(&d, "host"), "node-7");
    assert_string_equal(jstr(&d, "mode"), "simulated device");
    jtype(&d, "config", FP_JOBJ);
    jtype(&d, "config_errors", FP_JARR);
    jtype(&d, "devices", FP_JARR);
    static const char *const dev_nums[] = {"device",
                                           "total_capacity",
                                           "device_free",
                                           "idle",
                                           "oom_count",
                                           "alloc_retries",
                                           "largest_free_block",
                                           "largest_free_block_at_peak",
                                           "fragmentation",
                                           "cache_hits",
                                           "allocs",
                                           "frees",
                                           "alloc_ns",
                                           "passthrough.managed",
                                           "passthrough.async_pool",
                                           "passthrough.host",
                                           "passthrough.vmm",
                                           "passthrough.other",
                                           "deferred.fences",
                                           "deferred.ctx_events",
                                           "deferred.ctx_waits",
                                           "deferred.stream_waits",
                                           "deferred.syncs",
                                           "deferred.stream_reuses",
                                           "deferred.failed_fences",
                                           "leaks.count",
                                           "leaks.bytes",
                                           "leaks.top.0.size",
                                           "leaks.top.0.seq",
                                           "leaks.top.2.size"};
    char path[160];
    for (size_t i = 0; i < sizeof dev_nums / sizeof dev_nums[0]; i++) {
        snprintf(path, sizeof path, "devices.0.%s", dev_nums[i]);
        jtype(&d, path, FP_JNUM);
    }
    jtype(&d, "devices.0.name", FP_JSTR);
    jtype(&d, "devices.0.leaks.top.0.addr", FP_JSTR);
    for (size_t i = 0; i < sizeof metric_keys / sizeof metric_keys[0]; i++) {
        snprintf(path, sizeof path, "devices.0.%s", metric_keys[i]);
        check_stat_obj(&d, path);
        snprintf(path, sizeof path, "devices.0.by_pool.small.%s", metric_keys[i]);
        check_stat_obj(&d, path);
        snprintf(path, sizeof path, "devices.0.by_pool.large.%s", metric_keys[i]);
        check_stat_obj(&d, path);
    }
    check_stat_obj(&d, "devices.0.oversize_allocations");
    check_stat_obj(&d, "devices.0.oversize_segments");
}

static void json_values(void **state)
{
    (void)state;
    make_run(3);
    fp_jdoc d;
    parse(&d, json_summary());
    assert_int_equal(jint(&d, "devices.0.allocated.peak"), 3 * GIB);
    assert_int_equal(jint(&d, "devices.0.reserved.current"), 2 * GIB);
    assert_int_equal(jint(&d, "devices.0.by_pool.small.reserved.peak"), GIB);
    assert_int_equal(jint(&d, "devices.0.by_pool.large.reserved.peak"), 3 * GIB);
    assert_int_equal(jint(&d, "devices.0.oversize_allocations.total_freed"), 2);
    assert_int_equal(jint(&d, "devices.0.oom_count"), 2);
    assert_int_equal(jint(&d, "devices.0.alloc_retries"), 5);
    assert_int_equal(jint(&d, "devices.0.cache_hits"), 990);
    assert_int_equal(jint(&d, "devices.0.passthrough.other"), 5);
    assert_int_equal(jint(&d, "devices.0.deferred.fences"), 120);
    assert_int_equal(jint(&d, "devices.0.deferred.syncs"), 3);
    assert_int_equal(jint(&d, "devices.0.deferred.ctx_waits"), 118);
    assert_int_equal(jint(&d, "devices.0.deferred.failed_fences"), 1);
    assert_int_equal(jint(&d, "devices.0.leaks.count"), 12);
    assert_int_equal(jint(&d, "devices.0.leaks.top.0.seq"), 17);
    assert_int_equal(jint(&d, "devices.0.largest_free_block_at_peak"), GIB);
    assert_string_equal(jstr(&d, "devices.0.leaks.top.0.addr"), "0x7f0000001000");
    assert_string_equal(jstr(&d, "devices.0.name"), "NVIDIA H200");
    int f = fp_jdoc_path(&d, "devices.0.fragmentation");
    assert_int_equal((int)(d.tok[f].end - d.tok[f].start), 6);
    assert_memory_equal(d.text + d.tok[f].start, "0.2500", 6);
    assert_int_equal(fp_jdoc_path(&d, "devices.1"), -1);
    assert_int_equal(fp_jdoc_path(&d, "devices.0.nope"), -1);
}

static void json_config_and_escaping(void **state)
{
    (void)state;
    make_run(3);
    fp_jdoc d;
    parse(&d, json_summary());
    assert_string_equal(jstr(&d, "config.max_split_size_mb"), "512");
    assert_string_equal(jstr(&d, "config.roundup_power2_divisions"), "[256:1,>:8]");
    assert_string_equal(jstr(&d, "config.garbage_collection_threshold"), "0.6");
    assert_int_equal(d.tok[fp_jdoc_path(&d, "config")].n, 3);
    assert_string_equal(jstr(&d, "config_errors.0"), conf_errors[0]);
    /* the invalid byte 0xff comes back as U+FFFD */
    assert_string_equal(jstr(&d, "config_errors.1"), "weird \"quoted\" \\ back\nnew\ttab\x01"
                                                     "ctl\xef\xbf\xbd end");
    has(big, "\\\"quoted\\\" \\\\ back\\nnew\\ttab\\u0001ctl\\ufffd end");
}

static void json_nulls(void **state)
{
    (void)state;
    make_run(-1);
    run.host = NULL;
    run.mode = NULL;
    run.pid = 0;
    static const fp_kv odd[2] = {{"strict", "1"}, {"oddentry", NULL}};
    run.config = odd;
    run.nconfig = 2;
    dev.device_name = NULL;
    dev.total_capacity = 0;
    dev.device_free = (size_t)-1;
    groups[FP_GROUP_DEFERRED].rows = NULL; /* no deferred reuse: null */
    memset(&dev.stats, 0, sizeof dev.stats);
    fp_jdoc d;
    parse(&d, json_summary());
    static const char *const nulls[] = {"rank",
                                        "host",
                                        "mode",
                                        "pid",
                                        "config.oddentry",
                                        "devices.0.name",
                                        "devices.0.total_capacity",
                                        "devices.0.device_free",
                                        "devices.0.fragmentation",
                                        "devices.0.deferred",
                                        "devices.0.trace"};
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        jtype(&d, nulls[i], FP_JNULL);
    assert_string_equal(jstr(&d, "config.strict"), "1");
}

static void json_reader_rejects(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",          "{",     "{\"a\":}", "[1,]",     "01",          "\"\x01\"",
        "{\"a\" 1}", "[1] x", "nul",      "\"\\x\"",  "\"\\u12g4\"", "-",
        "1.",        "1e",    "{1:2}",    "[\"a\",]", "{\"a\":1,}",  "\"abc",
    };
    fp_jdoc d;
    size_t pos;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (fp_jdoc_parse(&d, bad[i], strlen(bad[i]), toks, 8192, &pos) != EINVAL)
            fail_msg("accepted bad JSON [%s]", bad[i]);
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    assert_int_equal(fp_jdoc_parse(&d, deep, 200, toks, 8192, &pos), EINVAL);
    assert_int_equal(fp_jdoc_parse(&d, "[1,2,3]", 7, toks, 2, &pos), ENOMEM);
    const char *good = " {\"a\":[1,-2.5e3,true,false,null,\"\\u00e9\\ud83d\\ude00\\/\"],"
                       "\"b\":{}} ";
    parse(&d, good);
    assert_string_equal(jstr(&d, "a.5"), "\xc3\xa9\xf0\x9f\x98\x80/");
    int64_t v;
    assert_int_equal(fp_jdoc_int(&d, fp_jdoc_path(&d, "a.1"), &v), EINVAL);
    assert_int_equal(fp_jdoc_int(&d, fp_jdoc_path(&d, "a.0"), &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(d.tok[fp_jdoc_path(&d, "b")].n, 0);
    assert_int_equal(fp_jdoc_path(&d, "c"), -1);
}

/* ---- leaks from a real pool --------------------------------------------------------------- */

static int bump_reserve(void *ctx, size_t size, uint64_t *addr)
{
    uint64_t *next = ctx;
    *addr = *next;
    *next += (size + FP_GIB - 1) / FP_GIB * FP_GIB;
    return 0;
}

static int no_release(void *ctx, uint64_t addr, size_t size)
{
    (void)ctx;
    (void)addr;
    (void)size;
    return 0;
}

static void collect_leaks(void **state)
{
    (void)state;
    uint64_t next = 0x100000000ULL;
    fp_backend be = {.ctx = &next, .reserve = bump_reserve, .release = no_release};
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    fp_pool *p;
    assert_int_equal(fp_pool_create(&o, &be, &p), 0);
    size_t sizes[] = {100, 5 * FP_MIB, 30 * FP_MIB, 2 * FP_MIB, 1000, 30 * FP_MIB};
    uint64_t a[6];
    for (int i = 0; i < 6; i++)
        assert_int_equal(fp_pool_alloc(p, sizes[i], &a[i]), 0);
    assert_int_equal(fp_pool_free(p, a[3]), 0);
    fp_leak top[3];
    uint64_t count, bytes;
    size_t n = fp_report_collect_leaks(p, 0, top, 3, &count, &bytes);
    assert_int_equal(n, 3);
    assert_int_equal(count, 5);
    assert_int_equal(bytes, 100 + 5 * FP_MIB + 60 * FP_MIB + 1000);
    assert_int_equal(top[0].size, 30 * FP_MIB);
    assert_int_equal(top[0].addr, a[2]); /* the older of the two ties */
    assert_int_equal(top[1].addr, a[5]);
    assert_true(top[0].seq < top[1].seq);
    assert_int_equal(top[2].size, 5 * FP_MIB);
    assert_int_equal(fp_report_collect_leaks(p, 0, top, 0, &count, NULL), 0);
    assert_int_equal(count, 5);
    /* since: the blocks of the first 4 allocations (a forked child's parent's) are left out */
    n = fp_report_collect_leaks(p, 4, top, 3, &count, &bytes);
    assert_int_equal(n, 2);
    assert_int_equal(count, 2);
    assert_int_equal(bytes, 1000 + 30 * FP_MIB);
    assert_int_equal(top[0].addr, a[5]);
    fp_pool_destroy(p, 0);
}

/* ---- OOM -------------------------------------------------------------------------- */

static char oom[4096];

static void oom_run(const fp_oom_info *o, const fp_pool_opts *opts, size_t total, size_t dfree)
{
    fp_pool_stats st = known_stats();
    fp_sink s = fp_sink_buffer(oom, sizeof oom);
    assert_int_equal(fp_oom_message(o, &st, opts, 0, total, dfree, &s), 0);
    int lines = 0;
    for (const char *p = oom; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 2); /* the fix is replay/'s (test_advise.c) */
    assert_null(strstr(oom, "fix:"));
}

static fp_oom_info frag_info(size_t req)
{
    fp_oom_info o = {.requested = req,
                     .rounded = req,
                     .segment = req,
                     .allocated = 10 * FP_GIB,
                     .reserved = 13 * FP_GIB + 256 * FP_MIB,
                     .idle = 3 * FP_GIB + 256 * FP_MIB,
                     .largest_free = 50 * FP_MIB,
                     .cap = SIZE_MAX,
                     .over_cap = 0,
                     .backend_err = ENOMEM};
    return o;
}

static void oom_fragmentation(void **state)
{
    (void)state;
    fp_oom_info o = frag_info(98 * FP_MIB);
    oom_run(&o, NULL, 80 * FP_GIB, 100 * FP_MIB);
    has(oom, "fragpool: CUDA out of memory. Tried to allocate 98.00 MiB (GPU 0; "
             "80.00 GiB total capacity; 10.00 GiB allocated; 13.25 GiB reserved by "
             "fragpool, of which 3.25 GiB idle in cached blocks; 100.00 MiB free on "
             "the device; largest free block 50.00 MiB)\n");
    has(oom, "\nfragpool: cause: fragmentation \xe2\x80\x94 3.25 GiB idle in cached "
             "blocks would cover the 98.00 MiB request, but the largest free block "
             "is 50.00 MiB; 300.00 MiB of it sits in partly used segments");
}

/* Idle bytes that cannot be released, with the device's free memory,
 * would hold the segment: fragmentation, not exhaustion. */
static void oom_fragmentation_with_free(void **state)
{
    (void)state;
    fp_oom_info o = frag_info(1250 * FP_MIB);
    o.idle = 790 * FP_MIB;
    o.largest_free = 72 * FP_MIB;
    oom_run(&o, NULL, 80 * FP_GIB, 894 * FP_MIB);
    has(oom, "\nfragpool: cause: fragmentation \xe2\x80\x94 790.00 MiB idle in cached blocks "
             "and the 894.00 MiB free on the device would cover the 1.22 GiB segment the "
             "1.22 GiB request needed, but the largest free block is 72.00 MiB");
    oom_run(&o, NULL, 80 * FP_GIB, 400 * FP_MIB); /* together still short: exhaustion */
    has(oom, "\nfragpool: cause: exhaustion");
}

static void oom_fragmentation_small_request(void **state)
{
    (void)state;
    fp_oom_info o = frag_info(10 * FP_MIB);
    o.largest_free = 4 * FP_MIB;
    oom_run(&o, NULL, 80 * FP_GIB, 0);
    has(oom, "cause: fragmentation");
    fp_pool_opts opts;
    fp_pool_opts_default(&opts);
    opts.max_reserved = 20 * FP_GIB;
    oom_run(&o, &opts, 80 * FP_GIB, 0);
    has(oom, "cause: fragmentation");
}

static void oom_exhaustion(void **state)
{
    (void)state;
    fp_oom_info o = {.requested = 2 * FP_GIB,
                     .rounded = 2 * FP_GIB,
                     .segment = 2 * FP_GIB,
                     .allocated = 70 * FP_GIB,
                     .reserved = 70 * FP_GIB + 100 * FP_MIB,
                     .idle = 100 * FP_MIB,
                     .largest_free = 60 * FP_MIB,
                     .cap = SIZE_MAX,
                     .backend_err = ENOMEM};
    oom_run(&o, NULL, 80 * FP_GIB, FP_GIB);
    has(oom, "Tried to allocate 2.00 GiB (GPU 0; 80.00 GiB total capacity; "
             "70.00 GiB allocated;");
    has(oom, "\nfragpool: cause: exhaustion \xe2\x80\x94 live allocations hold "
             "70.00 GiB of 80.00 GiB; the device has 1024.00 MiB free\n");
    oom_run(&o, NULL, 0, (size_t)-1);
    has(oom, "(GPU 0; unknown total capacity;");
    has(oom, "; unknown free on the device;");
    has(oom, "cause: exhaustion \xe2\x80\x94 live allocations hold 70.00 GiB; "
             "the device's free memory is unknown\n");
}

static void oom_over_cap(void **state)
{
    (void)state;
    fp_pool_opts opts;
    fp_pool_opts_default(&opts);
    opts.max_reserved = 8 * FP_GIB;
    fp_oom_info o = {.requested = 900 * FP_MIB,
                     .rounded = 900 * FP_MIB,
                     .segment = FP_GIB,
                     .allocated = 7 * FP_GIB,
                     .reserved = 7 * FP_GIB + 512 * FP_MIB,
                     .idle = 512 * FP_MIB,
                     .largest_free = 300 * FP_MIB,
                     .cap = 8 * FP_GIB,
                     .over_cap = 1};
    oom_run(&o, &opts, 80 * FP_GIB, 60 * FP_GIB);
    has(oom, "\nfragpool: cause: the cap refused \xe2\x80\x94 reserved 7.50 GiB plus "
             "the 1024.00 MiB segment it needed would pass the cap 8.00 GiB "
             "(max_reserved_mb:8192)\n");

    fp_pool_opts_default(&opts);
    opts.memory_fraction = 0.5;
    opts.device_total = 80 * FP_GIB;
    o.reserved = 39 * FP_GIB + 512 * FP_MIB;
    o.cap = 40 * FP_GIB;
    oom_run(&o, &opts, 80 * FP_GIB, 30 * FP_GIB);
    has(oom, "(per_process_memory_fraction:0.50 of 80.00 GiB)\n");

    o.idle = 2 * FP_GIB; /* and fragmented as well */
    oom_run(&o, &opts, 80 * FP_GIB, 30 * FP_GIB);
    has(oom, "; fragmentation too: 2.00 GiB idle in cached blocks");

    /* a tiny fraction shows its digits, not "0.00" */
    fp_pool_opts_default(&opts);
    opts.memory_fraction = 0.00012;
    opts.device_total = 80 * FP_GIB;
    o.reserved = 0;
    o.idle = 0;
    o.cap = (size_t)(0.00012 * 80.0 * (double)FP_GIB);
    oom_run(&o, &opts, 80 * FP_GIB, 30 * FP_GIB);
    has(oom, "(per_process_memory_fraction:0.00012 of 80.00 GiB)");
    if (strstr(oom, "per_process_memory_fraction:0.00 "))
        fail_msg("%s", oom);
}

/* ---- sinks -------------------------------------------------------------------------- */

static char *read_back(int fd, size_t *n)
{
    static char buf[1 << 17];
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    ssize_t r = read(fd, buf, sizeof buf - 1);
    assert_true(r >= 0);
    buf[r] = '\0';
    *n = (size_t)r;
    return buf;
}

static int temp_fd(char *path)
{
    strcpy(path, "/tmp/fp_report_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    return fd;
}

static void fd_sink_same_bytes(void **state)
{
    (void)state;
    make_run(3);
    int (*const fns[2])(const fp_run_report *, fp_sink *) = {fp_report_text, fp_report_json};
    for (int i = 0; i < 2; i++) {
        char path[64];
        int fd = temp_fd(path);
        fp_sink s = fp_sink_fd(fd);
        assert_int_equal(fns[i](&run, &s), 0);
        size_t n;
        char *got = read_back(fd, &n);
        close(fd);
        unlink(path);
        fp_sink b = fp_sink_buffer(big, sizeof big);
        assert_int_equal(fns[i](&run, &b), 0);
        assert_true(n > FP_SINK_CHUNK);
        assert_int_equal(n, strlen(big));
        assert_int_equal(n, fp_sink_total(&s));
        assert_memory_equal(got, big, n);
    }
}

static void buffer_truncation(void **state)
{
    (void)state;
    make_run(3);
    const char *full = text_summary();
    size_t total = strlen(full);
    static char copy[1 << 17];
    memcpy(copy, full, total + 1);
    size_t lens[] = {1, 2, 77, 100, 1000, 4097, total - 1, total, total + 1};
    static char area[(1 << 17) + 64];
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        size_t len = lens[i];
        memset(area, 0xAA, len + 64);
        fp_sink s = fp_sink_buffer(area, len);
        int rc = fp_report_text(&run, &s);
        size_t kept = len - 1 < total ? len - 1 : total;
        assert_int_equal(rc, len > total ? 0 : ENOSPC);
        assert_int_equal(fp_sink_error(&s), rc);
        assert_int_equal(fp_sink_total(&s), total);
        assert_int_equal(fp_sink_length(&s), kept);
        assert_int_equal(strlen(area), kept);
        assert_memory_equal(area, copy, kept);
        for (size_t k = len; k < len + 64; k++)
            assert_int_equal((unsigned char)area[k], 0xAA);
    }
    fp_sink none = fp_sink_buffer(NULL, 0);
    assert_int_equal(fp_report_text(&run, &none), ENOSPC);
    assert_int_equal(fp_sink_total(&none), total);
}

static void fd_sink_errors(void **state)
{
    (void)state;
    make_run(3);
    fp_sink s = fp_sink_fd(-1);
    assert_int_equal(fp_report_text(&run, &s), EBADF);
    char path[64];
    int fd = temp_fd(path);
    close(fd);
    unlink(path);
    s = fp_sink_fd(fd); /* closed: write fails */
    errno = 1234;
    assert_int_equal(fp_report_text(&run, &s), EBADF);
    assert_int_equal(errno, 1234); /* the caller's errno kept */
}

/* ---- merge ------------------------------------------------------------------------------ */

static void write_summary(const char *path, int rank, int pid, int64_t peak_alloc, int64_t peak_res,
                          uint64_t ooms)
{
    make_run(rank);
    run.pid = pid;
    dev.device = rank;
    dev.stats.allocated_bytes[FP_ALL].peak = peak_alloc;
    dev.stats.reserved_bytes[FP_ALL].peak = peak_res;
    dev.stats.num_ooms = ooms;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    fp_sink s = fp_sink_fd(fd);
    assert_int_equal(fp_report_json(&run, &s), 0);
    close(fd);
}

static void merge_two_ranks(void **state)
{
    (void)state;
    char p0[64], p1[64];
    close(temp_fd(p0));
    close(temp_fd(p1));
    write_summary(p1, 1, 2001, GIB, 4 * GIB, 1);
    write_summary(p0, 0, 2000, 3 * GIB, 4 * GIB, 2);
    const char *paths[2] = {p1, p0};
    char out[4096], err[256];
    fp_sink s = fp_sink_buffer(out, sizeof out);
    assert_int_equal(fp_merge_json(paths, 2, &s, err, sizeof err), 0);
    has(out, "fragpool merge: 2 summaries, 2 devices\n");
    has(out, "|  Rank |       PID | Dev | Peak allocated | Peak reserved | "
             "Fragmentation | OOMs | Retries |\n");
    const char *r0 = strstr(out, "|     0 |      2000 |   0 |       3.00 GiB |"
                                 "      4.00 GiB |         25.0% |    2 |       5 |\n");
    const char *r1 = strstr(out, "|     1 |      2001 |   1 |    1024.00 MiB |"
                                 "      4.00 GiB |         75.0% |    1 |       5 |\n");
    assert_non_null(r0);
    assert_non_null(r1);
    assert_true(r0 < r1); /* sorted by rank */
    has(out, "| total |           |     |       4.00 GiB |      8.00 GiB |"
             "         50.0% |    3 |      10 |\n");
    unlink(p0);
    unlink(p1);
}

static void merge_errors(void **state)
{
    (void)state;
    char out[1024], err[256];
    fp_sink s = fp_sink_buffer(out, sizeof out);
    const char *missing[1] = {"/nonexistent/fp_summary.json"};
    assert_int_equal(fp_merge_json(missing, 1, &s, err, sizeof err), ENOENT);
    has(err, "/nonexistent/fp_summary.json: ");
    char p[64];
    int fd = temp_fd(p);
    assert_int_equal(write(fd, "{\"version\":1,", 13), 13);
    close(fd);
    const char *bad[1] = {p};
    assert_int_equal(fp_merge_json(bad, 1, &s, err, sizeof err), EINVAL);
    has(err, ": invalid JSON at byte 13");
    fd = open(p, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "{\"version\":2}", 13), 13);
    close(fd);
    assert_int_equal(fp_merge_json(bad, 1, &s, err, sizeof err), EINVAL);
    has(err, "not a fragpool summary");
    unlink(p);
    assert_int_equal(fp_merge_json(NULL, 0, &s, err, sizeof err), EINVAL);
}

/* The metric list, walked: every row of the pool's list and of each group
 * the caller gives appears in the JSON under its key and in the text as
 * fp_report_put_row writes it.  Values are made distinct first, so a row
 * that the text left out cannot be found by chance. */
static void check_row(const char *text, const fp_jdoc *d, const char *group, const fp_row *r)
{
    char path[160], want[160];
    if (group)
        snprintf(path, sizeof path, "devices.0.%s.%s", group, r->key);
    else
        snprintf(path, sizeof path, "devices.0.%s", r->key);
    int t = fp_jdoc_path(d, path);
    if (t < 0)
        fail_msg("JSON lacks %s", path);
    assert_int_equal(d->tok[t].type, FP_JNUM);
    fp_sink s = fp_sink_buffer(want, sizeof want);
    fp_report_put_row(&s, r);
    assert_int_equal(fp_sink_error(&s), 0);
    has(text, want);
}

/* The pinned section's rows (fp_report_host_rows), each under "pinned" (in its
 * group's object when it has a key) and in the text box, with distinct
 * values. */
static void check_pinned_rows(void)
{
    static fp_host_report h;
    memset(&h, 0, sizeof h);
    uint64_t *u[] = {&h.stats.num_allocs,
                     &h.stats.num_frees,
                     &h.stats.num_cache_hits,
                     &h.stats.num_reserve_calls,
                     &h.stats.num_release_calls,
                     &h.stats.num_invalid_frees,
                     &h.alloc_ns,
                     &h.to_driver,
                     &h.fallbacks,
                     &h.fences,
                     &h.waits,
                     &h.syncs};
    for (size_t k = 0; k < sizeof u / sizeof u[0]; k++)
        *u[k] = 200 + k;
    fp_stat *st[] = {&h.stats.reserved_bytes[FP_ALL], &h.stats.allocated_bytes[FP_ALL],
                     &h.stats.requested_bytes[FP_ALL], &h.stats.segments[FP_ALL]};
    for (int k = 0; k < 4; k++)
        *st[k] = (fp_stat){.current = (int64_t)FP_MIB * (3 + 2 * k),
                           .peak = (int64_t)FP_MIB * (4 + 2 * k)};
    h.pooling = 1;
    h.max_reserved = 13 * FP_MIB;
    run.pinned = &h;
    static char text[1 << 17];
    snprintf(text, sizeof text, "%s", text_summary());
    fp_jdoc d;
    parse(&d, json_summary());
    fp_host_list l;
    fp_report_host_rows(&h, &l);
    size_t walked = 0;
    for (size_t g = 0; g < l.ngroups; g++) {
        for (size_t i = 0; i < l.groups[g].nrows; i++, walked++) {
            const fp_row *r = &l.groups[g].rows[i];
            char path[160], want[160];
            if (l.groups[g].key)
                snprintf(path, sizeof path, "pinned.%s.%s", l.groups[g].key, r->key);
            else
                snprintf(path, sizeof path, "pinned.%s", r->key);
            int t = fp_jdoc_path(&d, path);
            if (t < 0)
                fail_msg("JSON lacks %s", path);
            assert_int_equal(d.tok[t].type, FP_JNUM);
            assert_int_equal(jint(&d, path), (int64_t)r->value);
            fp_sink s = fp_sink_buffer(want, sizeof want);
            fp_report_put_row(&s, r);
            assert_int_equal(fp_sink_error(&s), 0);
            has(text, want);
        }
    }
    assert_int_equal(walked, l.nrows);
    assert_int_equal(walked, FP_HOST_NROWS);
    run.pinned = NULL;
}

static void every_row_in_both(void **state)
{
    (void)state;
    make_run(0);
    dev.stats.num_gc_releases = 7;
    dev.stats.num_invalid_frees = 11;
    for (int k = 0; k < 7; k++)
        ipc_rows[k].value = 100 + (uint64_t)k;
    static char text[1 << 17];
    snprintf(text, sizeof text, "%s", text_summary());
    fp_jdoc d;
    parse(&d, json_summary());
    fp_row rows[FP_POOL_NROWS];
    size_t n = fp_report_pool_rows(&dev.stats, rows);
    assert_int_equal(n, FP_POOL_NROWS);
    for (size_t i = 0; i < n; i++) {
        if (!fp_report_row_in_prose(rows[i].key)) {
            check_row(text, &d, NULL, &rows[i]);
            continue;
        }
        /* in the JSON, and in the text once: its own line, not a counter */
        char path[160], twice[160];
        snprintf(path, sizeof path, "devices.0.%s", rows[i].key);
        jtype(&d, path, FP_JNUM);
        fp_sink s = fp_sink_buffer(twice, sizeof twice);
        fp_report_put_row(&s, &rows[i]);
        if (rows[i].value)
            assert_null(strstr(text, twice));
    }
    has(text, "| Largest free block    | 512.00 MiB now; 1024.00 MiB at peak allocated");
    has(text, "| Served from cache     | 990 of 1000 allocations");
    size_t walked = 0;
    for (size_t g = 0; g < dev.ngroups; g++) {
        for (size_t i = 0; i < groups[g].nrows && groups[g].rows; i++, walked++)
            check_row(text, &d, groups[g].key, &groups[g].rows[i]);
        if (!groups[g].rows)
            jtype(&d, "devices.0.trace", FP_JNULL);
    }
    assert_int_equal(walked, 5 + 7 + 7);
    check_pinned_rows();
    has(text, "| Pool counters         | 2 OOMs ");
    has(text, "7 GC releases");
    has(text, "11 invalid frees");
}

/* A group whose zero is "": no text line while all its rows are 0, always
 * in JSON (the shim's IPC counters). */
static void ipc_counts(void **state)
{
    (void)state;
    make_run(0);
    assert_null(strstr(text_summary(), "| IPC "));
    static const uint64_t v[7] = {3, 2, 1, 4, 1, 4, 1};
    for (int k = 0; k < 7; k++)
        ipc_rows[k].value = v[k];
    ipc_rows[0].one = " export";
    ipc_rows[0].many = " exports";
    const char *t = text_summary();
    has(t, "| IPC                   | 3 exports, 2 ipc, 1 ipc ");
    has(t, "|                       | 4 ipc, 1 ipc, 4 ipc ");
    has(t, "|                       | 1 ipc ");
    fp_jdoc d;
    parse(&d, json_summary());
    assert_int_equal(jint(&d, "devices.0.ipc.exports"), 3);
    assert_int_equal(jint(&d, "devices.0.ipc.exports_fragpool"), 2);
    assert_int_equal(jint(&d, "devices.0.ipc.refused"), 1);
    assert_int_equal(jint(&d, "devices.0.ipc.opens"), 4);
    assert_int_equal(jint(&d, "devices.0.ipc.opens_fragpool"), 1);
    assert_int_equal(jint(&d, "devices.0.ipc.closes"), 4);
    assert_int_equal(jint(&d, "devices.0.ipc.own_segments"), 1);
}

/* ---- pinned host memory ------------------------------------------------ */

static void host_section(void **state)
{
    (void)state;
    make_run(0);
    fp_jdoc d;
    parse(&d, json_summary());
    jtype(&d, "pinned", FP_JNULL); /* nothing pinned: null, no box */
    assert_null(strstr(text_summary(), "pinned host memory"));
    static fp_host_report h;
    memset(&h, 0, sizeof h);
    h.pooling = 1;
    h.stats.reserved_bytes[FP_ALL] =
        (fp_stat){.current = 3 * (int64_t)FP_GIB / 2, .peak = 2 * (int64_t)FP_GIB};
    h.stats.allocated_bytes[FP_ALL] =
        (fp_stat){.current = (int64_t)FP_GIB, .peak = 2 * (int64_t)FP_GIB};
    h.stats.requested_bytes[FP_ALL] =
        (fp_stat){.current = (int64_t)FP_GIB, .peak = 2 * (int64_t)FP_GIB - 2 * (int64_t)FP_MIB};
    h.stats.num_allocs = 40;
    h.stats.num_cache_hits = 30;
    h.stats.num_invalid_frees = 2;
    h.to_driver = 5;
    h.fences = 39;
    h.waits = 3;
    run.pinned = &h;
    const char *t = text_summary();
    has(t, "| fragpool: pinned host memory (cudaHostAlloc, cudaMallocHost)");
    has(t, "| Pooling               | host_pool: yes ");
    has(t, "| Reserved (pinned)     | 1.50 GiB now, 2.00 GiB at peak ");
    has(t, "| Pinned calls          | 40 allocations ");
    has(t, "|                       | 30 served from cache ");
    has(t, "|                       | 2 invalid frees ");
    has(t, "| Limit                 | no host_max_reserved_mb ");
    parse(&d, json_summary());
    assert_int_equal(jint(&d, "pinned.reserved_bytes.peak"), 2 * (int64_t)FP_GIB);
    assert_int_equal(jint(&d, "pinned.cache_hits"), 30);
    assert_int_equal(jint(&d, "pinned.invalid_frees"), 2);
    assert_int_equal(jint(&d, "pinned.to_driver"), 5);
    assert_int_equal(jint(&d, "pinned.waits"), 3);
    jtype(&d, "pinned.max_reserved", FP_JNULL);
    /* The OOM note: from 1 GiB pinned on, one line; below, nothing. */
    char buf[512];
    fp_sink s = fp_sink_buffer(buf, sizeof buf);
    assert_int_equal(fp_report_host_oom_note(&h, &s), 0);
    has(buf, "fragpool: note: 1.50 GiB of host memory is pinned through fragpool (512.00 MiB of it "
             "idle");
    h.stats.reserved_bytes[FP_ALL].current = (int64_t)FP_GIB - 1;
    h.stats.allocated_bytes[FP_ALL].current = 0;
    s = fp_sink_buffer(buf, sizeof buf);
    assert_int_equal(fp_report_host_oom_note(&h, &s), 0);
    assert_string_equal(buf, "");
    s = fp_sink_buffer(buf, sizeof buf);
    assert_int_equal(fp_report_host_oom_note(NULL, &s), 0);
    assert_string_equal(buf, "");
    run.pinned = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(format_size_table),
        cmocka_unit_test(format_size_matches_printf),
        cmocka_unit_test(format_columns),
        cmocka_unit_test(fixed_and_duration),
        cmocka_unit_test(text_every_line_boxed),
        cmocka_unit_test(text_rows_and_header),
        cmocka_unit_test(text_extras),
        cmocka_unit_test(text_edge_cases),
        cmocka_unit_test(text_wraps_long_values),
        cmocka_unit_test(json_every_field),
        cmocka_unit_test(host_section),
        cmocka_unit_test(json_values),
        cmocka_unit_test(json_config_and_escaping),
        cmocka_unit_test(json_nulls),
        cmocka_unit_test(json_reader_rejects),
        cmocka_unit_test(collect_leaks),
        cmocka_unit_test(oom_fragmentation),
        cmocka_unit_test(oom_fragmentation_with_free),
        cmocka_unit_test(oom_fragmentation_small_request),
        cmocka_unit_test(oom_exhaustion),
        cmocka_unit_test(oom_over_cap),
        cmocka_unit_test(fd_sink_same_bytes),
        cmocka_unit_test(buffer_truncation),
        cmocka_unit_test(fd_sink_errors),
        cmocka_unit_test(merge_two_ranks),
        cmocka_unit_test(merge_errors),
        cmocka_unit_test(ipc_counts),
        cmocka_unit_test(every_row_in_both),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
