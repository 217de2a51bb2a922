/* fp_report.h - fragpool's memory summary (a text table in the layout of
 * torch.cuda.memory_summary() and a JSON document) and the explanation
 * printed after an out-of-memory failure.  docs/summary.md describes both
 * formats.  The writers they use are fp_emit.h (box, JSON, sizes); reading
 * the JSON back is fp_jread.h, and `fragpool merge` is fp_merge.h.
 *
 * Invariants:
 *  - every byte goes through an fp_sink (base/fp_text.h);
 *  - the emitter, the summary and the OOM message never allocate, lock, or
 *    call stdio or locale code, so they are safe at exit and from a thread
 *    that a signal handler handed work to (only fp_merge_json and
 *    fp_report_collect_leaks, through fp_pool_walk, may allocate);
 *  - the text and the JSON summary walk the same rows (fp_row, below): the
 *    pool's from one list here, the caller's from the caller's groups, so
 *    every counter appears in both (tests/test_report.c walks the rows);
 *  - report/ knows nothing of the shim: its counters arrive as groups,
 *    whose names and order on a device are report/'s one table
 *    (FP_DEV_GROUPS, fp_groups.h) and whose rows are the caller's.
 */
#ifndef FP_REPORT_H
#define FP_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "fp_pool.h"
#include "fp_text.h"
#include "fp_emit.h"

/* ---- input model -------------------------------------------------------- */

typedef struct fp_leak {
    uint64_t addr; /* device address of the live block     */
    size_t size;   /* bytes requested                      */
    uint64_t seq;  /* allocation order number              */
} fp_leak;

/* ---- the metric list ----------------------------------------------------------
 * Every counter of the summary is one row: its JSON key, its text, its kind
 * and its value.  fp_report_text and fp_report_json walk the same rows, so
 * a counter shown in one is shown in the other.  Rows come in groups: the
 * pool's counters (fp_report_pool_rows, the list report/ owns) and groups
 * the caller owns (the shim's deferral and IPC, a replay's trace problems),
 * which report/ shows without knowing what they mean.
 *
 * Adding a counter: the pool's, one line in FP_POOL_COUNTERS (fp_summary.c);
 * a caller's, one row in the caller's list (shim/shim_counts.h X-lists, or
 * the replay's rows in replay/fp_replay.c).  Adding a group of a device:
 * one row in FP_DEV_GROUPS (fp_groups.h), filled by FP_GROUP_<ID>.  Text
 * and JSON follow. */
enum {
    FP_ROW_COUNT = 0, /* a count: text "N<one>" or "N<many>"            */
    FP_ROW_BYTES = 1, /* bytes: text "1.50 GiB<one>"                    */
    FP_ROW_FLAG = 2,  /* 0 or 1: text "<one>: yes" / "<one>: no"        */
    FP_ROW_RATIO = 3, /* value/den: JSON 4 decimals (den 0: null), text
                           a percentage ("n/a") then <one>                */
    FP_ROW_LIMIT = 4  /* bytes, 0: none: JSON null, text "no <one>"    */
};

typedef struct fp_row {
    const char *key;  /* JSON member name                               */
    const char *one;  /* text after the number (a count of 1)           */
    const char *many; /* text after any other count; NULL: as one       */
    int kind;         /* FP_ROW_*                                       */
    uint64_t value;
    uint64_t den; /* FP_ROW_RATIO only                              */
} fp_row;

typedef struct fp_group {
    const char *key;    /* JSON: an object of the device under this name;
                           NULL: the rows are members of the device itself */
    const char *label;  /* text: the row label of the first line          */
    const fp_row *rows; /* NULL: the group is absent (JSON null, no text)  */
    size_t nrows;
    unsigned per_line; /* text: rows per line, 0: all on one (wrapped)   */
    const char *zero;  /* text when every row is 0: NULL shows the zeros,
                           "" shows no line, else this text               */
    const char *note;  /* text: one more line after the rows, or NULL    */
    bool omit;         /* JSON: absent leaves no member (else null)      */
} fp_group;

typedef struct fp_dev_report {
    int device;              /* device ordinal                             */
    const char *device_name; /* may be NULL                                */
    size_t total_capacity;   /* device bytes, 0 unknown                    */
    size_t device_free;      /* free per driver, (size_t)-1 unknown        */
    fp_pool_stats stats;     /* the pool's counters                        */
    size_t idle_now;         /* reserved - allocated now                   */
    uint64_t alloc_ns;       /* time spent inside the allocator            */
    const fp_group *groups;  /* the caller's counters, in output order     */
    size_t ngroups;
    const fp_leak *leaks;           /* live at exit, largest first, up to 10      */
    size_t nleaks;                  /* entries in leaks                           */
    uint64_t leak_count;            /* all live allocations                       */
    uint64_t leak_bytes;            /* their requested bytes                      */
    const char *const *leak_stacks; /* per leak: who allocated it, one frame a
                                   line ("SYMBOL (OBJECT)\n"), "" or NULL:
                                   unknown (trace_stacks); may be NULL        */
    int running;                    /* 1: a snapshot while the program runs (the
                                   live blocks are not leaks yet)            */
    uint64_t since_seq;             /* blocks of this allocation number or lower
                                   are not this process's (a forked child's
                                   parent made them): no leaks; 0: none      */
    const char *segments_why;       /* why the pool's segments are what they are
                                   (fp_segments_why); NULL: not said          */
    int replay;                     /* 1: a replay of a trace: no device, no
                                   timing, and the trace's end, not an exit  */
} fp_dev_report;

/* 1 when the text summary shows the pool counter row key in a line of its
 * own ("Largest free block", "Served from cache", "Segments", ...) and the
 * "Pool counters" lines leave it out: one value in one place (the JSON
 * has every row). */
int fp_report_row_in_prose(const char *key);

/* Why a pool runs the segments it runs, from expandable_segments as set
 * (FP_VMM_*) and whether the pool has virtual-memory segments: the one
 * text the summary, the replay and the docs use. */
const char *fp_segments_why(int asked, int vmm);

/* ---- pinned host memory: the shim's host pool ---- */
typedef struct fp_host_report {
    fp_pool_stats stats; /* the host pool's counters (zero: no pool)   */
    uint64_t alloc_ns;   /* time in the host allocator                 */
    uint64_t to_driver;  /* pinned requests passed to the driver       */
    uint64_t fallbacks;  /* of which: reuse could not be ordered then  */
    uint64_t fences;     /* context events recorded after frees        */
    uint64_t waits;      /* reuses that waited for one still running   */
    uint64_t syncs;      /* reuses (or sync frees) that synchronized   */
    int pooling;         /* host_pool:1                                */
    size_t max_reserved; /* host_max_reserved_mb in bytes, 0: none     */
} fp_host_report;

/* From this much pinned memory on, the OOM explanation mentions it. */
#define FP_HOST_LARGE ((size_t)1 << 30)

typedef struct fp_run_report {
    int pid;                          /* process id, <= 0 unknown                   */
    int rank;                         /* -1 when none                               */
    const char *host;                 /* may be NULL                                */
    const fp_kv *config;              /* effective config as config/ parsed it      */
    size_t nconfig;                   /* entries in config; 0: "defaults"           */
    const unsigned char *config_set;  /* parallel to config: 1 where the value is
                                         not the default; the text shows only those
                                         (NULL: all); JSON shows every key           */
    const char *const *config_errors; /* one line each, arbitrary text       */
    size_t nconfig_errors;
    size_t config_errors_more; /* problems not in config_errors (no room)    */
    const char *mode;          /* "shim", "replay", ...; may be NULL         */
    const char *config_source; /* where config came from: "FRAGPOOL_CONF",
                                   "PYTORCH_ALLOC_CONF", "defaults", ...;
                                   NULL: not shown (null in JSON)            */
    const char *const *notes;  /* advice, one line each (PyTorch's cache)    */
    size_t nnotes;
    const fp_dev_report *devs; /* one per device                             */
    size_t ndevs;
    const fp_host_report *pinned; /* pinned host memory; NULL: none (JSON null) */
} fp_run_report;

#define FP_REPORT_TOP_LEAKS 10

/* The part of a device's report that comes from its pool, filled the one
 * way the shim and the replay both use: stats (already read by the
 * caller), idle_now from them, and the largest live blocks newer than
 * d->since_seq into leaks (FP_REPORT_TOP_LEAKS entries). */
void fp_report_fill_pool(fp_dev_report *d, fp_pool *p, const fp_pool_stats *st, fp_leak *leaks);

/* The pool's rows of the metric list for st (the list report/ owns):
 * fills rows (FP_POOL_NROWS of them) and returns the count. */
#define FP_POOL_NROWS 17
size_t fp_report_pool_rows(const fp_pool_stats *st, fp_row rows[FP_POOL_NROWS]);
/* One row as the text summary shows it ("3 fences", "1.00 GiB largest free
 * block", "context events: yes"). */
void fp_report_put_row(fp_sink *o, const fp_row *r);

/* Walk p and keep the ntop largest live blocks allocated after allocation
 * number since in top (largest first, ties by allocation order), with the
 * count and requested bytes of all such blocks.  Returns the entries
 * filled.  Uses no memory of its own (the pool's walk may). */
size_t fp_report_collect_leaks(fp_pool *p, uint64_t since, fp_leak *top, size_t ntop,
                               uint64_t *count, uint64_t *bytes);

/* ---- summary (fp_summary.c) ----------------------------------------------- */

/* Both flush out and return fp_sink_flush's result (0, ENOSPC, errno). */
int fp_report_text(const fp_run_report *r, fp_sink *out);
int fp_report_json(const fp_run_report *r, fp_sink *out);

/* ---- pinned host memory (fp_host_summary.c) --------------------------------- */
/* The rows of the pinned section, in groups: fp_summary.c walks them for
 * the text box "pinned host memory" and for the JSON object "pinned". */
#define FP_HOST_NROWS   22
#define FP_HOST_NGROUPS 11
typedef struct fp_host_list {
    fp_row rows[FP_HOST_NROWS];
    fp_group groups[FP_HOST_NGROUPS];
    size_t nrows, ngroups;
} fp_host_list;
void fp_report_host_rows(const fp_host_report *h, fp_host_list *o);
/* One line "fragpool: note: ..." when h holds FP_HOST_LARGE or more
 * pinned; nothing otherwise.  Flushes out; returns as fp_sink_flush. */
int fp_report_host_oom_note(const fp_host_report *h, fp_sink *out);

/* ---- OOM (fp_oom.c) -------------------------------------------------------- */

/* Two lines, each starting "fragpool: ": the PyTorch-shaped OOM line and
 * "cause: ..." (the "fix: ..." a replay proves follows from replay/'s
 * fp_advise).  st and opts may be NULL; total_capacity 0
 * and device_free (size_t)-1 mean unknown.  Flushes out; returns as
 * fp_sink_flush. */
int fp_oom_message(const fp_oom_info *o, const fp_pool_stats *st, const fp_pool_opts *opts,
                   int device, size_t total_capacity, size_t device_free, fp_sink *out);

#endif
