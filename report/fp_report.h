/* fp_report.h - the one emitter: fragpool's memory summary (a text table in
 * the layout of torch.cuda.memory_summary() and a JSON document), the
 * explanation printed after an out-of-memory failure, and the merge of the
 * JSON summaries of several ranks.  docs/summary.md describes both formats.
 *
 * Invariants:
 *  - every byte goes through an fp_sink: a caller's fixed buffer, or a file
 *    descriptor fed in chunks from an array inside the sink;
 *  - the emitter, the summary and the OOM message never allocate, lock, or
 *    call stdio or locale code, so they are safe at exit and from a thread
 *    that a signal handler handed work to (only fp_merge_json and
 *    fp_report_collect_leaks, through fp_pool_walk, may allocate);
 *  - the text and the JSON summary read the same fields through one metric
 *    table, so they cannot disagree.
 */
#ifndef FP_REPORT_H
#define FP_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include "fp_pool.h"

/* ---- input model -------------------------------------------------------- */

/* Device calls the shim passed straight to the driver, by kind. */
enum {
    FP_PT_MANAGED = 0,    /* cuMemAllocManaged                        */
    FP_PT_ASYNC_POOL = 1, /* cuMemAllocAsync / cuMemAllocFromPoolAsync */
    FP_PT_HOST = 2,       /* cuMemAllocHost / cuMemHostAlloc           */
    FP_PT_VMM = 3,        /* cuMemCreate / cuMemMap                    */
    FP_PT_OTHER = 4,      /* anything else not served by the pool      */
    FP_PT_NKINDS = 5
};
/* "managed", "async_pool", "host", "vmm", "other"; "?" out of range. */
const char *fp_pt_name(int kind);

typedef struct fp_leak {
    uint64_t addr;       /* device address of the live block     */
    size_t size;         /* bytes requested                      */
    uint64_t seq;        /* allocation order number              */
} fp_leak;

/* Deferred reuse (the shim's free_policy:deferred): how freed memory was
 * made safe to hand out again.  One list gives the fields, the JSON keys
 * and the text of each counter: X(field, json_key, one, many). */
#define FP_DEFER_COUNTS(X)                                                  \
    X(fences, "fences", " fence", " fences")                                \
    X(ctx_waits, "ctx_waits", " context wait", " context waits")            \
    X(stream_waits, "stream_waits", " stream wait", " stream waits")        \
    X(stream_reuses, "stream_reuses", " same-stream reuse", " same-stream reuses") \
    X(syncs, "syncs", " synchronization", " synchronizations")              \
    X(failed, "failed_fences", " failed fence", " failed fences")

typedef struct fp_defer_counts {
#define FP_DEFER_FIELD(field, key, one, many) uint64_t field;
    FP_DEFER_COUNTS(FP_DEFER_FIELD)
#undef FP_DEFER_FIELD
    int ctx_events;           /* 1: the driver has context events         */
} fp_defer_counts;
/* fences: cuCtxRecordEvent calls; ctx_waits / stream_waits: reuses that
 * made the context / the allocating stream wait for one; stream_reuses:
 * cuMemAllocAsync served by its stream's own cuMemFreeAsync, no call;
 * syncs: reuses that synchronized instead (no context events, or a fence
 * refused); failed: fences the driver refused. */

/* Legacy IPC through the shim (cuIpc*), process-wide. */
typedef struct fp_ipc_counts {
    uint64_t exports;          /* handles given (cuIpcGetMemHandle)         */
    uint64_t exports_fragpool; /* of which fragpool handles (ipc_export)    */
    uint64_t refused;          /* exports refused: a block inside a segment */
    uint64_t opens;            /* handles opened (cuIpcOpenMemHandle)       */
    uint64_t opens_fragpool;   /* of which fragpool handles                 */
    uint64_t closes;           /* cuIpcCloseMemHandle                       */
    uint64_t own_segments;     /* allocations sent to the driver whole
                                  (own_segment_mb)                          */
} fp_ipc_counts;

typedef struct fp_dev_report {
    int device;                 /* device ordinal                             */
    const char *device_name;    /* may be NULL                                */
    size_t total_capacity;      /* device bytes, 0 unknown                    */
    size_t device_free;         /* free per driver, (size_t)-1 unknown        */
    fp_pool_stats stats;        /* the pool's counters                        */
    size_t idle_now;            /* reserved - allocated now                   */
    uint64_t alloc_ns;          /* time spent inside the allocator            */
    uint64_t passthrough[FP_PT_NKINDS]; /* calls passed to the driver         */
    int deferred;               /* 1: defer holds deferred reuse's counters   */
    fp_defer_counts defer;
    const fp_leak *leaks;       /* live at exit, largest first, up to 10      */
    size_t nleaks;              /* entries in leaks                           */
    uint64_t leak_count;        /* all live allocations                       */
    uint64_t leak_bytes;        /* their requested bytes                      */
    int running;                /* 1: a snapshot while the program runs (the
                                   live blocks are not leaks yet)            */
    int replay;                 /* 1: a trace replay, with the two below     */
    uint64_t unknown_frees;     /* trace frees of ids not live: skipped      */
    uint64_t duplicate_allocs;  /* trace allocations of live ids: refused    */
    fp_ipc_counts ipc;          /* process-wide: the first entry has them     */
} fp_dev_report;

typedef struct fp_run_report {
    int pid;                    /* process id, <= 0 unknown                   */
    int rank;                   /* -1 when none                               */
    const char *host;           /* may be NULL                                */
    const char *config;         /* effective config "k:v,k:v", may be NULL    */
    const char *const *config_errors; /* one line each, arbitrary text       */
    size_t nconfig_errors;
    size_t config_errors_more;  /* problems not in config_errors (no room)    */
    const char *mode;           /* "shim", "replay", ...; may be NULL         */
    const char *config_source;  /* where config came from: "FRAGPOOL_CONF",
                                   "PYTORCH_ALLOC_CONF", "defaults", ...;
                                   NULL: not shown (null in JSON)            */
    const char *const *notes;   /* advice, one line each (PyTorch's cache)    */
    size_t nnotes;
    const fp_dev_report *devs;  /* one per device                             */
    size_t ndevs;
} fp_run_report;

#define FP_REPORT_TOP_LEAKS 10

/* Walk p and keep the ntop largest live blocks in top (largest first, ties
 * by allocation order), with the count and requested bytes of all live
 * blocks.  Returns the entries filled.  Uses no memory of its own (the
 * pool's walk may). */
size_t fp_report_collect_leaks(fp_pool *p, fp_leak *top, size_t ntop,
                               uint64_t *count, uint64_t *bytes);

/* ---- sink: where output goes ------------------------------------------------ */

#define FP_SINK_CHUNK 1024

/* Fields are private; use the functions.  An fd sink buffers in chunk and
 * writes with write(2); a buffer sink keeps the caller's buffer
 * NUL-terminated and never writes past it. */
typedef struct fp_sink {
    char *buf;           /* buffer mode: the caller's buffer, or NULL     */
    size_t cap;          /* buffer mode: usable bytes (len - 1 for NUL)   */
    size_t len;          /* bytes held (buffer, or chunk not yet written) */
    size_t total;        /* bytes the emitter was asked to write          */
    int fd;              /* >= 0: fd mode                                 */
    int err;             /* first error: ENOSPC, or write's errno         */
    char chunk[FP_SINK_CHUNK]; /* fd mode: bytes not yet written          */
} fp_sink;

fp_sink fp_sink_buffer(char *buf, size_t len);
fp_sink fp_sink_fd(int fd);
/* Write out what an fd sink holds.  Returns the first error: 0, ENOSPC when
 * a buffer sink truncated, or write(2)'s errno. */
int fp_sink_flush(fp_sink *s);
int fp_sink_error(const fp_sink *s);
size_t fp_sink_total(const fp_sink *s);   /* bytes asked for, kept or not */
size_t fp_sink_length(const fp_sink *s);  /* buffer mode: bytes kept      */

/* ---- emitter primitives (fp_emit.c) -------------------------------------- */
void fp_put(fp_sink *s, const char *p, size_t n);
void fp_puts(fp_sink *s, const char *str);           /* NULL writes nothing */
void fp_putc(fp_sink *s, char c);
void fp_put_pad(fp_sink *s, char c, size_t n);
void fp_put_u64(fp_sink *s, uint64_t v);
void fp_put_i64(fp_sink *s, int64_t v);
void fp_put_hex(fp_sink *s, uint64_t v);             /* "0x1f"              */
/* num/den with exactly `decimals` digits, ties to even (as printf rounds
 * an exact binary value); den 0 writes "n/a". */
void fp_put_fixed(fp_sink *s, uint64_t num, uint64_t den, unsigned decimals);
/* 100*num/den with one decimal and a '%', or "n/a" when den is 0. */
void fp_put_percent(fp_sink *s, uint64_t num, uint64_t den);
/* Bytes as printable text: control characters and bytes that are not
 * valid UTF-8 become \n, \t, \r or \xNN. */
void fp_put_visible(fp_sink *s, const char *p, size_t n);
/* Display columns of UTF-8 text (continuation bytes take none). */
size_t fp_text_width(const char *p, size_t n);

/* ---- the 75-column box of torch.cuda.memory_summary() ------------------- */
#define FP_TBL_WIDTH 75
#define FP_TBL_LABEL 21
void fp_tbl_rule(fp_sink *s, char c);                 /* |=====...=|        */
/* Boxed text: indent spaces then text (indent SIZE_MAX: centred); text
 * wider than the box is word-wrapped onto further lines. */
void fp_tbl_text(fp_sink *s, const char *text, size_t n, size_t indent);
/* " label | c0 | c1 | c2 | c3 " with the label padded to 21 columns. */
void fp_tbl_row(fp_sink *s, const char *label, const char *const cells[4]);
/* " label | value" boxed, the value word-wrapped onto further lines. */
void fp_tbl_kv(fp_sink *s, const char *label, const char *value, size_t n);

/* ---- JSON writer ------------------------------------------------------------ */
typedef struct fp_json {
    fp_sink *s;          /* output                                         */
    unsigned depth;      /* open containers (at most 63)                   */
    uint64_t more;       /* bit d: depth d already holds a member          */
} fp_json;

void fp_json_init(fp_json *j, fp_sink *s);
/* key is the member name inside an object, NULL inside an array. */
void fp_json_obj(fp_json *j, const char *key);
void fp_json_arr(fp_json *j, const char *key);
void fp_json_end_obj(fp_json *j);
void fp_json_end_arr(fp_json *j);
void fp_json_u64(fp_json *j, const char *key, uint64_t v);
void fp_json_i64(fp_json *j, const char *key, int64_t v);
void fp_json_null(fp_json *j, const char *key);
void fp_json_str(fp_json *j, const char *key, const char *str); /* NULL: null */
void fp_json_strn(fp_json *j, const char *key, const char *p, size_t n);
/* A member from counted strings: "key":"val", or "key":null when val is
 * NULL (only inside an object). */
void fp_json_pair(fp_json *j, const char *key, size_t klen, const char *val,
                  size_t vlen);
void fp_json_hex(fp_json *j, const char *key, uint64_t v);      /* "0x.." */
void fp_json_fixed(fp_json *j, const char *key, uint64_t num, uint64_t den,
                   unsigned decimals);                          /* den 0: null */
/* A JSON string literal: quotes, backslashes and control characters
 * escaped, invalid UTF-8 replaced by \ufffd. */
void fp_put_json_string(fp_sink *s, const char *p, size_t n);

/* ---- sizes (fp_size.c) ----------------------------------------------------- */

/* PyTorch's format_size (the OOM message): "512 bytes" up to 1024, then two
 * decimals of KiB up to 1 MiB, of MiB up to 1 GiB, else of GiB. */
void fp_format_size(size_t bytes, char out[32]);
void fp_put_size(fp_sink *s, size_t bytes);
/* memory_summary's table cells, 10 columns: the unit is picked by pref
 * (the "all" row's value), "%6d B  " / KiB / MiB / GiB / TiB / PiB with
 * floor division; counts "%7d   " / K / M by thousands. */
void fp_format_size_col(int64_t v, int64_t pref, char out[24]);
void fp_format_count_col(int64_t v, int64_t pref, char out[24]);
/* A duration: "850 ns", "12.50 µs", "3.20 ms", "1.05 s". */
void fp_put_duration(fp_sink *s, uint64_t ns);

/* ---- summary (fp_summary.c) ----------------------------------------------- */

/* Both flush out and return fp_sink_flush's result (0, ENOSPC, errno). */
int fp_summary_text(const fp_run_report *r, fp_sink *out);
int fp_summary_json(const fp_run_report *r, fp_sink *out);

/* Step through "k:v,k:v" where a value may hold commas inside [ ].  On
 * each call fills key/value (trimmed; value NULL/0 when there is no ':')
 * and returns 1, or 0 at the end.  *pos starts at 0. */
int fp_conf_entry_next(const char *conf, size_t *pos, const char **key,
                       size_t *klen, const char **val, size_t *vlen);

/* ---- OOM (fp_oom.c) -------------------------------------------------------- */

/* Three lines, each starting "fragpool: ": the PyTorch-shaped OOM line,
 * "cause: ..." and "fix: ...".  st and opts may be NULL; total_capacity 0
 * and device_free (size_t)-1 mean unknown.  Flushes out; returns as
 * fp_sink_flush. */
int fp_oom_message(const fp_oom_info *o, const fp_pool_stats *st,
                   const fp_pool_opts *opts, int device, size_t total_capacity,
                   size_t device_free, fp_sink *out);
/* The max_split_size_mb the advice names for a failing request: the
 * largest even MiB count below it; 0 when that is not above 20. */
size_t fp_oom_split_advice_mb(size_t requested);

/* ---- reading our JSON back (fp_merge.c) ------------------------------------ */
enum { FP_JNULL, FP_JBOOL, FP_JNUM, FP_JSTR, FP_JARR, FP_JOBJ };

typedef struct fp_jtok {
    int type;            /* FP_J*                                          */
    size_t start, end;   /* bytes of the value in the text (strings: the  */
                         /* contents between the quotes)                  */
    int next;            /* index of the token after this whole value     */
    int n;               /* arrays: elements; objects: members            */
} fp_jtok;               /* an object's members: key token, then value    */

typedef struct fp_jdoc {
    const char *text;    /* the parsed text, not owned                     */
    const fp_jtok *tok;  /* tokens, not owned; tok[0] is the root          */
    int ntok;
} fp_jdoc;

/* Parse one JSON value (RFC 8259, depth <= 64) into the caller's tokens.
 * 0, EINVAL with *errpos at the bad byte, or ENOMEM when cap is short. */
int fp_jdoc_parse(fp_jdoc *d, const char *text, size_t len, fp_jtok *tok,
                  size_t cap, size_t *errpos);
int fp_jdoc_get(const fp_jdoc *d, int obj, const char *key); /* -1: none */
int fp_jdoc_at(const fp_jdoc *d, int arr, size_t i);         /* -1: none */
/* "devices.0.allocated.peak" from the root; -1 when absent. */
int fp_jdoc_path(const fp_jdoc *d, const char *path);
/* 0 and *v for an integer number token, else EINVAL. */
int fp_jdoc_int(const fp_jdoc *d, int t, int64_t *v);
/* Unescaped string into buf (NUL-terminated when len > 0); returns the
 * length the whole string needs, or (size_t)-1 when t is no string. */
size_t fp_jdoc_str(const fp_jdoc *d, int t, char *buf, size_t len);

/* ---- merge (fp_merge.c) ---------------------------------------------------- */

/* Read the JSON summaries at paths and write one row per rank and device
 * (rank, pid, device, peak allocated, peak reserved, fragmentation, OOMs,
 * retries), sorted by rank, then a total row: sums, with fragmentation
 * recomputed from the summed peaks.  0, or an errno with a message in err
 * ("PATH: what"). */
int fp_merge_json(const char *const *paths, size_t n, fp_sink *out,
                  char *err, size_t errlen);

#endif
