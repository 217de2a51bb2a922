/* fp_conf.h - FRAGPOOL_CONF: one option table and a pure parser for it.
 *
 * FRAGPOOL_CONF has the shape of PYTORCH_CUDA_ALLOC_CONF: "key:value"
 * entries separated by commas, where a value may be a bracketed list that
 * holds commas of its own:
 *     max_split_size_mb:512,roundup_power2_divisions:[256:1,512:2,>:8]
 *
 * Invariants:
 *  - every key is one row of the table (fp_conf_option); adding a key is
 *    one row plus one field of fp_conf or fp_pool_opts;
 *  - fp_conf_parse never leaves a field half-set: an entry is applied
 *    whole or not at all, and every rejected entry is exactly one report;
 *  - the parser and formatter are pure: no globals, no I/O, no getenv (the
 *    environment comes through the caller's lookup), no malloc, no
 *    locale; every message line is built in a fixed buffer;
 *  - fp_conf_format's output parses back with zero problems into the same
 *    values (docs/config.md: "Round trip").
 */
#ifndef FP_CONF_H
#define FP_CONF_H

#include <stddef.h>
#include <stdint.h>
#include "fp_pool.h"
#include "fp_text.h"

#define FP_CONF_PATH_MAX 256

enum { FP_SUMMARY_TEXT = 0, FP_SUMMARY_JSON = 1 };
enum { FP_FREE_DEFERRED = 0, FP_FREE_SYNC = 1 };
enum { FP_IPC_REFUSE = 0, FP_IPC_FRAGPOOL = 1 };
enum { FP_TOOLS_PASSTHROUGH = 0, FP_TOOLS_POOL = 1 };

typedef struct fp_conf {
    fp_pool_opts pool;               /* tunables handed to the pool                   */
    int strict;                      /* 1: any config problem is fatal (shim exits 2) */
    int meminfo_counts_cache;        /* cuMemGetInfo's free includes idle cache  */
    int debug_check;                 /* run the pool checker after every operation    */
    int free_policy;                 /* FP_FREE_DEFERRED or FP_FREE_SYNC              */
    size_t defer_headroom;           /* bytes pending reuse while the pool may grow */
    char summary[FP_CONF_PATH_MAX];  /* "off", "stderr" or a path pattern  */
    int summary_format;              /* FP_SUMMARY_TEXT or FP_SUMMARY_JSON            */
    int dump_on_sigusr1;             /* SIGUSR1 writes the summary, the program runs on */
    char trace[FP_CONF_PATH_MAX];    /* "off" or where to record the trace   */
    char snapshot[FP_CONF_PATH_MAX]; /* "off" or where the snapshot goes  */
    int trace_stacks;                /* host frames recorded per allocation, 0..32     */
    int advice_budget_ms;            /* bound on an OOM's search, in ms (docs/advice.md) */
    int lend;                        /* 1: ask peers for idle memory and answer them    */
    int lend_wait_ms;                /* bound on an ask's wait, in ms (docs/lending.md) */
    char lend_dir[FP_CONF_PATH_MAX]; /* where the lending rendezvous files live      */
    int tools;                       /* FP_TOOLS_*: under an injected CUDA tool        */
    int ipc_export;                  /* FP_IPC_FRAGPOOL (default) or FP_IPC_REFUSE: IPC export of
                            a block inside its segment                     */
    size_t own_segment;              /* allocations of this many bytes or more go to
                            the driver whole; 0 = off                      */
    /* ---- pinned host memory ---- */
    int host_pool;            /* 1: cuMemHostAlloc/cuMemAllocHost from a pool  */
    size_t host_max_reserved; /* cap on pinned bytes the pool holds; 0 = none */
    size_t host_max_cached;   /* requests above this go to the driver
                                 uncached; SIZE_MAX = no limit             */
    uint64_t set_mask;        /* bit i: option i was given and accepted        */
} fp_conf;

/* Receives one problem: a single line, no trailing newline. */
typedef void (*fp_conf_report_fn)(void *ud, const char *line);

/* PyTorch's defaults (fp_pool_opts_default), strict off, nothing set. */
void fp_conf_default(fp_conf *c);

/* Parse text over c's current contents: apply every good entry, skip and
 * report each bad one.  text may be NULL or blank; report may be NULL.
 * Returns the number of problems (saturates at INT_MAX). */
int fp_conf_parse(const char *text, fp_conf *c, fp_conf_report_fn report, void *ud);

/* ---- where the text comes from -------------------------------------------
 * fragpool reads FRAGPOOL_CONF.  When that variable is unset (not merely
 * empty), it reads the keys it knows from PyTorch's PYTORCH_ALLOC_CONF or,
 * when that is unset too, PYTORCH_CUDA_ALLOC_CONF: the same key names
 * mean the same there.  Keys only PyTorch knows are skipped without a
 * report; anything else wrong is reported as usual, under the variable's
 * own name. */

/* Text written for PyTorch: skip keys only PyTorch knows, silently. */
#define FP_CONF_LENIENT 1u

/* fp_conf_parse, for text from label (a variable, or "--conf"): every
 * problem line starts "fragpool: <label>: ".  flags: 0 or FP_CONF_LENIENT.
 * fp_conf_parse(t, ...) is fp_conf_parse_as(t, "FRAGPOOL_CONF", 0, ...). */
int fp_conf_parse_as(const char *text, const char *label, unsigned flags, fp_conf *c,
                     fp_conf_report_fn report, void *ud);

/* 1 when name[0..n) is a key of PyTorch's allocator config that fragpool
 * has no row for (expandable_segments, backend, pinned_*, ...), else 0. */
int fp_conf_pytorch_only(const char *name, size_t n);

/* A lookup such as getenv: the variable's value, or NULL when unset. */
typedef char *(*fp_conf_getenv_fn)(const char *name);

/* Parses, over c, the first of FRAGPOOL_CONF, PYTORCH_ALLOC_CONF and
 * PYTORCH_CUDA_ALLOC_CONF that get finds set (PyTorch's two leniently),
 * and sets *source to its name, or to NULL when none is set.  Returns the
 * number of problems, as fp_conf_parse. */
int fp_conf_from_env(fp_conf *c, fp_conf_getenv_fn get, fp_conf_report_fn report, void *ud,
                     const char **source);

/* The one line that says a PyTorch variable supplied the config:
 * "fragpool: FRAGPOOL_CONF is unset; taking K:V,... from SOURCE (...)".
 * 0; ENOENT when source is NULL or FRAGPOOL_CONF (nothing to say, buf
 * untouched); ENOSPC when buf is too small (still NUL-terminated). */
int fp_conf_source_line(const fp_conf *c, const char *source, char *buf, size_t len);

/* Like fp_conf_format, but only the keys given and accepted (set_mask);
 * "" when there are none. */
int fp_conf_format_set(const fp_conf *c, char *buf, size_t len);

/* The effective config, every key in table order, "k:v,k:v,...".
 * Returns 0, or ENOSPC when buf is too small (then still NUL-terminated
 * when len > 0). */
int fp_conf_format(const fp_conf *c, char *buf, size_t len);

/* Most keys the table may ever have (set_mask has 64 bits). */
#define FP_CONF_MAX_OPTIONS 64

/* The effective config as pairs, every key in table order: out[i].key is
 * the key and out[i].value its value exactly as fp_conf_format writes it,
 * kept NUL-terminated in buf.  So the summary shows what config/ parsed
 * and never cuts a formatted string apart again.  Returns the pairs
 * filled: all of them (fp_conf_noptions(), at most max), or fewer when
 * buf is too small (4 KiB always suffice). */
size_t fp_conf_entries(const fp_conf *c, fp_kv *out, size_t max, char *buf, size_t len);

/* The setting as PYTORCH_CUDA_ALLOC_CONF would say it, for a snapshot's
 * allocator_settings: the keys PyTorch has (fp_option.pytorch) that are
 * not at their default, and expandable_segments as it ran (vmm: True,
 * else False; PyTorch has no "auto").  fragpool's own keys (paths among
 * them) are left out.  0, or ENOSPC (still NUL-terminated). */
int fp_conf_format_pytorch(const fp_conf *c, int vmm, char *buf, size_t len);

/* 1 when key i of the table (fp_conf_entries' order) has its default
 * value in c, as fp_conf_format writes both; else 0 (the summary's
 * Configuration row shows only the others). */
int fp_conf_is_default(const fp_conf *c, size_t i);

/* ---- the option table ------------------------------------------------- */
typedef struct fp_option fp_option;

/* Parse value v[0..n) (trimmed, non-empty) into c.  0, or -1 with an
 * optional detail written to why (may stay empty). */
typedef int (*fp_opt_parse_fn)(const fp_option *o, const char *v, size_t n, fp_conf *c,
                               fp_sink *why);
/* Append o's current value in c, in a form that parses back. */
typedef void (*fp_opt_format_fn)(const fp_option *o, const fp_conf *c, fp_sink *out);

struct fp_option {
    const char *name;         /* the key                                       */
    const char *type;         /* kind of value, for docs                       */
    const char *deflt;        /* default, exactly as fp_conf_format prints it  */
    const char *range;        /* rows without bounds or words (lists, paths):
                            accepted values, short form for docs          */
    const char *help;         /* one-line meaning                              */
    const char *accept;       /* the same rows: accepted values, as error lines
                            say them (others: derived, fp_conf_accept)    */
    const char *example;      /* real rows: a value the message shows          */
    size_t offset;            /* offsetof(fp_conf, field)                      */
    uint64_t min, max;        /* integer bounds (in MiB for _mb keys)          */
    double rmin, rmax;        /* real bounds                                   */
    int open_min;             /* 1: rmin itself is excluded                    */
    int open_max;             /* 1: rmax itself is excluded                    */
    const char *off_word;     /* word meaning "no limit/off", or NULL          */
    size_t off_value;         /* stored value for off_word (size_t fields)     */
    const char *const *words; /* enum keys: the accepted words, NULL-ended */
    unsigned acts;            /* FP_ACTS_*: the segment modes the key acts in  */
    int pytorch;              /* 1: PyTorch's allocator config has this key,
                                 with the same meaning                         */
    fp_opt_parse_fn parse;
    fp_opt_format_fn format;
};

/* Where a key acts (fp_option.acts; never 0): with PyTorch's classic
 * segments (expandable_segments:False, or a driver without virtual memory
 * management), with virtual-memory segments (the default), or both. */
#define FP_ACTS_CLASSIC 1u
#define FP_ACTS_VMM     2u
#define FP_ACTS_ALL     (FP_ACTS_CLASSIC | FP_ACTS_VMM)

/* The segments in force and why: what a line about a key that does not
 * act there says would make it act. */
typedef enum fp_segs {
    FP_SEGS_VMM_DEFAULT,   /* expandable_segments unset or auto: virtual memory */
    FP_SEGS_VMM_ASKED,     /* expandable_segments:True                          */
    FP_SEGS_CLASSIC,       /* expandable_segments:False                         */
    FP_SEGS_CLASSIC_NO_VMM /* the driver has no virtual memory management       */
} fp_segs;

/* The segments c asks for where the driver has virtual memory management
 * (replay, tune, config: the simulated device has it). */
fp_segs fp_conf_segs(const fp_conf *c);

/* One line per key of mask (bits of set_mask) that has no effect with the
 * segments segs, saying what would make it act:
 *   "fragpool: LABEL: max_split_size_mb has no effect with virtual-memory
 *    segments (the default): add expandable_segments:False for PyTorch's
 *    classic rules"
 * given to report (which may be NULL).  Returns the number of lines. */
int fp_conf_inert(const fp_conf *c, uint64_t mask, fp_segs segs, const char *label,
                  fp_conf_report_fn report, void *ud);

/* The keys (bits of set_mask) that have no effect with the segments segs:
 * the OOM advice leaves them out of the run's keys it repeats. */
uint64_t fp_conf_inert_mask(fp_segs segs);

/* Accepted values of o, written from its bounds (numeric rows), its words
 * (word and bool rows) or its range/accept text (the rest): the short form
 * for the key list ("21..17592186044415, unlimited"), and the form a
 * message's "must be ..." uses.  0, or ENOSPC (still NUL-terminated). */
int fp_conf_range(const fp_option *o, char *buf, size_t len);
int fp_conf_accept(const fp_option *o, char *buf, size_t len);

/* Adding a key: one row in fp_options (fp_conf.c) and its field in fp_conf
 * or fp_pool_opts.  A numeric row gives min/max (or rmin/rmax, open_*,
 * example) and off_word once; its range and messages follow from them. */
size_t fp_conf_noptions(void);
const fp_option *fp_conf_option(size_t i); /* NULL past the end */
/* Index of the key name[0..n), or -1. */
int fp_conf_find(const char *name, size_t n);

/* The line "vmm_page_mb:N is more than ...; using M MiB pages" (the
 * caller puts "fragpool: " before it)
 * (and its vmm_reserve_mb part) when o asks for more than a device of
 * o->device_total bytes (0: unknown) and granularity gran allows
 * (fp_vmm_size); device names that size ("the device's", "the budget's").
 * 1 when there is a line in buf, else 0 and buf is empty (fp_conf_vmm.c). */
int fp_conf_vmm_note(const fp_pool_opts *o, size_t gran, const char *device, char *buf, size_t len);

#endif
