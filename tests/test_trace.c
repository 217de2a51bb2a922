/* test_trace.c - the trace loader and replay on bad input: every
 * malformed, cut, corrupt, empty or non-regular input is an error naming the file and the line (or byte),
 * never a shorter trace and never a hang; ids cover all of uint64; the
 * replay counts frees of unknown ids and allocations of live ids; tune
 * ends on sizes near 2^64.
 *
 * Files live in /tmp/fp-trace-<pid>-*; alarm() turns a hang into a
 * failure (ctest's TIMEOUT backs it up).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "fp_groups.h"
#include "fp_report.h"
#include "fp_tune.h"

static char dir_path[128];

static const char *tmp_name(const char *stem)
{
    static char name[8][192];
    static int k;
    k = (k + 1) % 8;
    snprintf(name[k], sizeof name[k], "/tmp/fp-trace-%d-%s", (int)getpid(), stem);
    return name[k];
}

static void write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, n), (ssize_t)n);
    close(fd);
}

static void write_text(const char *path, const char *text)
{
    write_file(path, text, strlen(text));
}

/* Loads path, which must fail; returns the message (static). */
static const char *load_fails(const char *path)
{
    static char err[512];
    fp_trace t;
    err[0] = '\0';
    int rc = fp_trace_load(path, &t, err, sizeof err);
    if (rc == 0)
        fail_msg("'%s' loaded as %zu events; want an error", path, t.n);
    assert_null(t.ev);
    assert_non_null(strstr(err, path));
    assert_null(strchr(err, '\n'));
    return err;
}

static void has(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("'%s' lacks '%s'", text, needle);
}

/* ---- non-regular files (item 4, 7) ----------------------------------------- */

static void rejects_non_regular(void **state)
{
    (void)state;
    has(load_fails("/dev/zero"), "a character device, not a regular file");
    has(load_fails("/dev/null"), "not a regular file");
    snprintf(dir_path, sizeof dir_path, "%s", tmp_name("dir"));
    assert_int_equal(mkdir(dir_path, 0755), 0);
    has(load_fails(dir_path), "a directory, not a regular file");
    const char *fifo = tmp_name("fifo");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    alarm(20); /* a FIFO with no writer must not block */
    has(load_fails(fifo), "a FIFO, not a regular file");
    alarm(0);
    has(load_fails(tmp_name("missing")), "No such file");
}

/* ---- gzip: cuts, CRC, bare header (item 7) --------------------------------- */

static char *make_csv(size_t events, size_t *len)
{
    size_t cap = events * 48 + 64, n = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    n += (size_t)snprintf(s + n, cap - n, "seq,op,id,size,stream\n");
    for (size_t i = 0; i < events; i++)
        n += (size_t)snprintf(s + n, cap - n, "%zu,%c,%zu,%zu,0\n", i, i % 2 ? 'f' : 'a', i / 2,
                              1000 + i);
    *len = n;
    return s;
}

static unsigned char *gzip_of(const char *text, size_t n, size_t *out_len)
{
    z_stream z = {0};
    assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, n) + 64;
    unsigned char *out = malloc(cap);
    assert_non_null(out);
    z.next_in = (unsigned char *)text;
    z.avail_in = (unsigned)n;
    z.next_out = out;
    z.avail_out = (unsigned)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    *out_len = z.total_out;
    deflateEnd(&z);
    return out;
}

static void gzip_cut_or_corrupt_fails(void **state)
{
    (void)state;
    size_t n, gz_len;
    char *csv = make_csv(100000, &n);
    unsigned char *gz = gzip_of(csv, n, &gz_len);
    const char *path = tmp_name("t.csv.gz");
    char err[512];
    fp_trace t;
    write_file(path, gz, gz_len);
    assert_int_equal(fp_trace_load(path, &t, err, sizeof err), 0);
    assert_int_equal(t.n, 100000);
    fp_trace_free(&t);
    for (int k = 1; k <= 100; k++) { /* every cut fails; none loads shorter */
        write_file(path, gz, gz_len * (size_t)k / 101);
        const char *msg = load_fails(path);
        if (k > 1)
            has(msg, "cut short");
    }
    write_file(path, gz, 10); /* a bare gzip header */
    has(load_fails(path), "cut short");
    gz[gz_len - 8] ^= 0xff; /* the CRC */
    write_file(path, gz, gz_len);
    has(load_fails(path), "corrupt");
    gz[gz_len - 8] ^= 0xff;
    gz[gz_len / 2] ^= 0x55; /* the data */
    write_file(path, gz, gz_len);
    load_fails(path);
    free(gz);
    free(csv);
}

/* ---- empty and binary files (item 7) --------------------------------------- */

static void empty_traces_fail(void **state)
{
    (void)state;
    const char *path = tmp_name("empty.csv");
    write_text(path, "");
    has(load_fails(path), "no events");
    write_text(path, "seq,op,id,size,stream\n");
    has(load_fails(path), "no events");
    write_text(path, "# only a comment\n\n   \n0,s,1,2097152,0\n");
    has(load_fails(path), "no events");
    char *nul = calloc(1, 1 << 20);
    assert_non_null(nul);
    write_file(path, nul, 1 << 20);
    has(load_fails(path), ":1: not a trace row");
    free(nul);
}

/* ---- lines of any length (item 8) ------------------------------------------ */

static void long_lines(void **state)
{
    (void)state;
    size_t big = 100000;
    char *text = malloc(big + 2048);
    assert_non_null(text);
    memset(text, 'x', big);
    text[0] = '#';
    size_t n = big;
    /* the tail of the comment looks like a row: it must stay a comment */
    n += (size_t)sprintf(text + n, ",a,5,1073741824,0\n0,a,1,100");
    memset(text + n, ' ', 1000); /* a valid row with trailing spaces */
    n += 1000;
    n += (size_t)sprintf(text + n, "\r\n1,f,1,100\n");
    const char *path = tmp_name("long.csv");
    write_file(path, text, n);
    fp_trace t;
    char err[512];
    if (fp_trace_load(path, &t, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.ev[0].size, 100);
    assert_int_equal(t.ev[1].op, 'f');
    fp_trace_free(&t);
    /* an over-long row that is no row: its own line number */
    memset(text, '7', big);
    memcpy(text + big, "\n", 2);
    char *two = malloc(big + 64);
    assert_non_null(two);
    n = (size_t)sprintf(two, "0,a,1,100\n");
    memcpy(two + n, text, big + 2);
    write_text(path, two);
    has(load_fails(path), ":2: not a trace row");
    free(two);
    free(text);
}

/* ---- strict fields (item 9) ------------------------------------------------ */

static void strict_fields(void **state)
{
    (void)state;
    static const struct {
        const char *row, *want;
    } bad[] = {
        {"0,a,1,-1,0", ":2: field size is '-1'"},
        {"0,a,1,18446744073709551616,0", ":2: field size is '18446744073709551616'"},
        {"0,a,1,100xyz,0", ":2: field size is '100xyz'"},
        {"0,a,1,+300,0", ":2: field size is '+300'"},
        {"0,a,1,0x10,0", ":2: field size is '0x10'"},
        {"0,a,1, 300,0", ":2: field size is ' 300'"},
        {"0,a,1,,0", ":2: field size is ''"},
        {"0,a,-1,100,0", ":2: field id is '-1'"},
        {"x,a,1,100,0", ":2: field seq is 'x'"},
        {" 0,a,1,100,0", ":2: field seq is ' 0'"},
        {"0,x,1,100,0", ":2: field op is 'x'"},
        {"0,aa,1,100,0", ":2: field op is 'aa'"},
        {"0,a,1,100,4294967296", ":2: field stream is '4294967296'"},
        {"0,a,1,100,0 x", ":2: field stream is '0 x'"},
        {"0,a,1", ":2: not a trace row (3 fields"},
        {"0,a,1,100,0,7,1", ":2: not a trace row (more than 6 fields"},
        {"0,a,1,100,0,x", ":2: field thread is 'x'"},
        {"0,a,1,100,0,-1", ":2: field thread is '-1'"},
        {"0,a,1,100,0,18446744073709551616", ":2: field thread is '18446744073709551616'"},
        {"0,jj,0,100,0,1", ":2: field op is 'jj'"},
        {"0,s,1,-5,0", ":2: field size is '-5'"},
    };
    const char *path = tmp_name("bad.csv");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[256];
        snprintf(text, sizeof text, "seq,op,id,size,stream\n%s\n1,f,1,0,0\n", bad[i].row);
        write_text(path, text);
        const char *msg = load_fails(path);
        if (!strstr(msg, bad[i].want))
            fail_msg("row '%s': '%s' lacks '%s'", bad[i].row, msg, bad[i].want);
    }
    write_text(path, "0,a,18446744073709551615,18446744073709551615,4294967295\r\n"
                     "1,f,18446744073709551615,0\n");
    fp_trace t;
    char err[512];
    if (fp_trace_load(path, &t, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(t.n, 2);
    assert_true(t.ev[0].id == UINT64_MAX && t.ev[0].size == UINT64_MAX);
    assert_int_equal(t.ev[0].stream, UINT32_MAX);
    fp_trace_free(&t);
}

/* ---- replay: every id, unknown frees, live-id allocations (items 9, 10) ----- */

static void replay_t(const fp_trace *t, fp_replay_result *r, fp_pool **p)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    assert_int_equal(fp_replay(t, &o, 0, r, p), 0);
}

static void id_max_is_an_id(void **state)
{
    (void)state;
    fp_trace t = {0};
    assert_int_equal(fp_trace_push(&t, 'a', UINT64_MAX, 1000, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'a', 0, 2000, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'f', UINT64_MAX, 0, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'a', UINT64_MAX, 3000, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'f', UINT64_MAX, 0, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'f', 0, 0, 0), 0);
    fp_replay_result r;
    fp_pool *p;
    replay_t(&t, &r, &p);
    assert_int_equal(r.bad_frees, 0);
    assert_int_equal(r.dup_allocs, 0);
    assert_int_equal(r.stats.num_allocs, 3);
    assert_int_equal(r.stats.allocated_bytes[FP_ALL].current, 0);
    fp_pool_destroy(p, 1);
    fp_trace_free(&t);
}

static void counts_trace_problems(void **state)
{
    (void)state;
    fp_trace t = {0};
    assert_int_equal(fp_trace_push(&t, 'a', 1, 1000, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'f', 7, 0, 0), 0);    /* unknown */
    assert_int_equal(fp_trace_push(&t, 'a', 1, 5000, 0), 0); /* live    */
    assert_int_equal(fp_trace_push(&t, 'f', 1, 0, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'f', 1, 0, 0), 0); /* no longer live */
    fp_replay_result r;
    fp_pool *p;
    replay_t(&t, &r, &p);
    assert_int_equal(r.bad_frees, 2);
    assert_int_equal(r.first_bad_free, 1);
    assert_int_equal(r.dup_allocs, 1);
    assert_int_equal(r.first_dup_alloc, 2);
    assert_int_equal(r.ooms, 0); /* a refusal of a live id is no OOM */
    assert_int_equal(r.stats.num_allocs, 1);
    fp_row rows[2];
    fp_group g, groups[FP_DEV_NGROUPS];
    fp_replay_trace_group(&r, rows, &g);
    fp_dev_report d = {.stats = r.stats, .device_free = (size_t)-1};
    fp_report_groups_init(&d, groups); /* as the CLI does: the key and label from report/'s table */
    fp_report_group_set(groups, FP_GROUP_TRACE, &g);
    fp_run_report run = {.rank = -1, .devs = &d, .ndevs = 1};
    static char buf[1 << 16];
    fp_sink s = fp_sink_buffer(buf, sizeof buf);
    assert_int_equal(fp_report_text(&run, &s), 0);
    has(buf, "| Trace problems        | 2 frees of unknown ids (skipped), 1");
    has(buf, "of a live id (refused)");
    s = fp_sink_buffer(buf, sizeof buf);
    assert_int_equal(fp_report_json(&run, &s), 0);
    has(buf, "\"trace\":{\"unknown_frees\":2,\"duplicate_allocs\":1}");
    groups[FP_GROUP_TRACE].rows = NULL; /* a group the caller has no rows for: null */
    s = fp_sink_buffer(buf, sizeof buf);
    assert_int_equal(fp_report_json(&run, &s), 0);
    has(buf, "\"trace\":null");
    fp_pool_destroy(p, 1);
    fp_trace_free(&t);
}

/* ---- tune on sizes near 2^64 (item 2) -------------------------------------- */

static void tune_huge_sizes_end(void **state)
{
    (void)state;
    fp_trace t = {0};
    assert_int_equal(fp_trace_push(&t, 'a', 1, UINT64_MAX, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'a', 2, (uint64_t)1 << 63, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'a', 3, 64 * FP_MIB, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'f', 1, 0, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'f', 3, 0, 0), 0);
    alarm(60);
    size_t mb[16];
    size_t n = fp_tune_split_values(&t, mb, 16);
    for (size_t i = 0; i < n; i++)
        assert_true(mb[i] > 20 && mb[i] <= 64);
    fp_tune_params prm = {.threads = 2};
    fp_tune_row *rows;
    size_t nrows;
    assert_int_equal(fp_tune_run(&t, &prm, &rows, &nrows), 0);
    assert_true(nrows > 0);
    free(rows);
    /* the budget search on an upper bound near SIZE_MAX ends too */
    fp_tune_setting s;
    assert_int_equal(fp_tune_setting_init(&s, "garbage_collection_threshold:0.8"), 0);
    size_t out = 1;
    assert_int_equal(fp_tune_min_budget(&t, &s, 0, SIZE_MAX - 5, 2 * FP_MIB, &out, NULL), 0);
    assert_int_equal(fp_tune_min_budget(&t, &s, SIZE_MAX / 2, SIZE_MAX / 3, 2 * FP_MIB, &out, NULL),
                     0);
    alarm(0);
    assert_true(fp_trace_peak_live(&t, &s.opts) > 0);
    fp_trace_free(&t);
}

/* Threads past FP_TRACE_MAX_THREADS stop the load with the line. */
static void too_many_threads(void **state)
{
    (void)state;
    const char *path = tmp_name("threads.csv");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (unsigned i = 0; i <= FP_TRACE_MAX_THREADS; i++)
        fprintf(f, "%u,a,%u,512,0,%u\n", i, i, i + 7);
    fclose(f);
    const char *msg = load_fails(path);
    if (!strstr(msg, ":65537: more than 65536 threads"))
        fail_msg("'%s' lacks the line and the limit", msg);
}

/* The segments a replay reserved: address and size, in order. */
typedef struct seg_log {
    uint64_t addr[16], size[16];
    size_t n;
} seg_log;

static void log_segment(void *ud, int kind, uint64_t addr, uint64_t size, size_t event)
{
    seg_log *l = ud;
    (void)event;
    if (kind == FP_REPLAY_SEGMENT_ALLOC && l->n < 16) {
        l->addr[l->n] = addr;
        l->size[l->n++] = size;
    }
}

/* Classic segments of `rows` after the 's' rows `hints`: their log, and
 * the peak reserved. */
static size_t replay_hinted(const char *hints, const char *rows, seg_log *l)
{
    char text[1024];
    snprintf(text, sizeof text, "%s%s", hints, rows);
    const char *path = tmp_name("hints.csv");
    write_text(path, text);
    fp_trace t;
    char err[256];
    if (fp_trace_load(path, &t, err, sizeof err))
        fail_msg("%s", err);
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.expandable_segments = FP_VMM_OFF;
    fp_replay_hook h = {.on_change = log_segment, .ud = l};
    fp_replay_result r;
    memset(l, 0, sizeof *l);
    assert_int_equal(fp_replay_ex(&t, &o, 0, &h, &r, NULL), 0);
    assert_int_equal(r.ooms, 0);
    fp_trace_free(&t);
    return (size_t)r.stats.reserved_bytes[FP_ALL].peak;
}

/* The run's segment addresses ('s' rows) are used in order while the
 * replay reserves what the run reserved; a row that overlaps a segment
 * the replay holds, wraps past 2^64 or names another size ends that, for
 * good, and the replay takes its own addresses above every recorded one.
 * The peaks are those of the rows without any 's' row. */
static void segment_rows_give_addresses(void **state)
{
    (void)state;
    static const char rows[] = "0,a,1,3000000,0\n1,a,2,50000000,0\n2,a,3,700,0\n"
                               "3,a,4,90000000,0\n4,f,2,0,0\n";
    seg_log ref, l;
    size_t peak = replay_hinted("", rows, &ref);
    assert_true(ref.n >= 3);
    const uint64_t base = 0x100000000000ull;
    char hints[512];
    /* every segment where the run had it, in reverse address order */
    int n = 0;
    for (size_t i = 0; i < ref.n; i++)
        n += snprintf(hints + n, sizeof hints - (size_t)n, "0,s,%llu,%llu,0\n",
                      (unsigned long long)(base + (ref.n - i) * 0x10000000ull),
                      (unsigned long long)ref.size[i]);
    assert_int_equal(replay_hinted(hints, rows, &l), peak);
    for (size_t i = 0; i < ref.n; i++)
        assert_true(l.addr[i] == base + (ref.n - i) * 0x10000000ull);
    /* the second overlaps the first: both from then on are the replay's own */
    snprintf(hints, sizeof hints, "0,s,%llu,%llu,0\n0,s,%llu,%llu,0\n", (unsigned long long)base,
             (unsigned long long)ref.size[0], (unsigned long long)(base + ref.size[0] / 2),
             (unsigned long long)ref.size[1]);
    assert_int_equal(replay_hinted(hints, rows, &l), peak);
    assert_true(l.addr[0] == base && l.addr[1] >= base + ref.size[0]);
    /* wrapping, and a size never reserved: the replay's own from the start */
    snprintf(hints, sizeof hints, "0,s,18446744073709549568,%llu,0\n",
             (unsigned long long)ref.size[0]);
    assert_int_equal(replay_hinted(hints, rows, &l), peak);
    assert_true(l.addr[0] != 18446744073709549568ull);
    assert_int_equal(replay_hinted("0,s,140000000000000,123,0\n", rows, &l), peak);
    assert_true(l.addr[0] != 140000000000000ull);
}

/* A run that ended in an OOM left an 'o' row for the failing request:
 * loaded, replayed under the budget the run had, it fails again; with more
 * room it is served and given straight back. */
static void recorded_oom_replays(void **state)
{
    (void)state;
    const char *path = tmp_name("oom.csv");
    write_text(path, "seq,op,id,size,stream\n0,a,1,8388608,0\n1,a,2,8388608,0\n"
                     "2,o,0,16777216,0\n");
    fp_trace t = {0};
    char err[256];
    assert_int_equal(fp_trace_load(path, &t, err, sizeof err), 0);
    assert_int_equal(t.n, 3);
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    fp_replay_result r;
    /* pages 8 + 8 + 16 (classic: a 20 MiB segment + 16) > 30 */
    assert_int_equal(fp_replay(&t, &o, 30 * FP_MIB, &r, NULL), 0);
    assert_int_equal(r.recorded_ooms, 1);
    assert_int_equal(r.recorded_refused, 1);
    assert_int_equal(r.ooms, 1);
    assert_int_equal(r.first_oom_event, 2);
    assert_int_equal(fp_replay(&t, &o, 0, &r, NULL), 0);
    assert_int_equal(r.recorded_refused, 0);
    assert_int_equal(r.ooms, 0);
    assert_int_equal(r.stats.allocated_bytes[FP_ALL].current, 16 * FP_MIB);
    fp_trace_free(&t);
}

static int cleanup(void **state)
{
    (void)state;
    char pat[128];
    glob_t g;
    snprintf(pat, sizeof pat, "/tmp/fp-trace-%d-*", (int)getpid());
    if (glob(pat, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            if (unlink(g.gl_pathv[i]) != 0)
                rmdir(g.gl_pathv[i]);
        globfree(&g);
    }
    return 0;
}

/* Each event's slot (fp_trace.h): a replay keeps an id's address by it,
 * in an array of the ids live at once, not a map sized for the trace.
 * 100,000 pairs with at most 3 ids live use 3 slots; a free of an id not
 * live has none; a live id's second allocation shares its slot. */
static void slots_follow_live_ids(void **state)
{
    (void)state;
    fp_trace t = {0};
    for (uint64_t i = 0; i < 100000; i++) {
        assert_int_equal(fp_trace_push(&t, 'a', 3 * i, 1000, 0), 0);
        assert_int_equal(fp_trace_push(&t, 'a', 3 * i + 1, 1000, 0), 0);
        assert_int_equal(fp_trace_push(&t, 'a', 3 * i + 2, 1000, 0), 0);
        assert_int_equal(fp_trace_push(&t, 'f', 3 * i + 1, 0, 0), 0);
        assert_int_equal(fp_trace_push(&t, 'f', 3 * i, 0, 0), 0);
        assert_int_equal(fp_trace_push(&t, 'f', 3 * i + 2, 0, 0), 0);
    }
    assert_int_equal(t.nslots, 3);
    assert_int_equal(fp_trace_push(&t, 'f', 42, 0, 0), 0); /* not live */
    assert_int_equal(t.slot[t.n - 1], FP_TRACE_NO_SLOT);
    assert_int_equal(fp_trace_push(&t, 'a', 9, 1000, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'a', 9, 1000, 0), 0); /* live: its slot */
    assert_int_equal(t.slot[t.n - 1], t.slot[t.n - 2]);
    assert_int_equal(fp_trace_push(&t, 'o', 0, 1000, 0), 0);
    assert_int_equal(t.slot[t.n - 1], FP_TRACE_NO_SLOT);
    fp_replay_result r;
    fp_pool *p;
    replay_t(&t, &r, &p);
    assert_int_equal(r.bad_frees, 1);
    assert_int_equal(r.dup_allocs, 1);
    assert_int_equal(r.stats.num_allocs, 300001 + 1); /* the 'o' row is served and given back */
    fp_pool_destroy(p, 1);
    fp_trace_free(&t);
}

/* An allocation the replay refused leaves its id free to be allocated
 * again (no duplicate), and its free is one of an id not live: as with
 * the map of ids the slots replaced. */
static void refused_id_allocates_again(void **state)
{
    (void)state;
    fp_trace t = {0};
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    assert_int_equal(fp_trace_push(&t, 'a', 1, (uint64_t)64 << 30, 0), 0); /* over the budget */
    assert_int_equal(fp_trace_push(&t, 'a', 1, 1000, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'f', 1, 0, 0), 0);
    assert_int_equal(fp_trace_push(&t, 'f', 1, 0, 0), 0);
    fp_replay_result r;
    assert_int_equal(fp_replay(&t, &o, (size_t)1 << 30, &r, NULL), 0);
    assert_int_equal(r.ooms, 1);
    assert_int_equal(r.dup_allocs, 0);
    assert_int_equal(r.bad_frees, 1);
    assert_int_equal(r.stats.num_allocs, 1);
    fp_trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rejects_non_regular),
        cmocka_unit_test(gzip_cut_or_corrupt_fails),
        cmocka_unit_test(empty_traces_fail),
        cmocka_unit_test(long_lines),
        cmocka_unit_test(strict_fields),
        cmocka_unit_test(id_max_is_an_id),
        cmocka_unit_test(counts_trace_problems),
        cmocka_unit_test(slots_follow_live_ids),
        cmocka_unit_test(refused_id_allocates_again),
        cmocka_unit_test(tune_huge_sizes_end),
        cmocka_unit_test(recorded_oom_replays),
        cmocka_unit_test(too_many_threads),
        cmocka_unit_test(segment_rows_give_addresses),
    };
    return cmocka_run_group_tests(tests, NULL, cleanup);
}
