/* cli.h - the `fragpool` command: one file per subcommand, sharing the
 * argument helpers below.  Every subcommand returns the process exit
 * status: 0 success, 1 failure, 2 usage error.
 */
#ifndef FP_CLI_H
#define FP_CLI_H

#include "fp_conf.h"
#include "fp_groups.h"
#include "fp_report.h"
#include "fp_trace.h"
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef FP_CLI_TRACE
#define FP_CLI_TRACE 1 /* replay, tune, report: 0 in a build without zlib */
#endif

int fp_cmd_replay(int argc, char **argv);
int fp_cmd_tune(int argc, char **argv);
int fp_cmd_run(int argc, char **argv);
int fp_cmd_demo(int argc, char **argv);
int fp_cmd_merge(int argc, char **argv);
int fp_cmd_report(int argc, char **argv);
int fp_cmd_config(int argc, char **argv);
int fp_cmd_snapshot(int argc, char **argv);

/* ---- arguments (cli_args.c: one table for parsing and for help) ---- */
/* One option of a subcommand: its spelling, the name of its argument
 * (NULL: a flag), its help line, whether it must be given, and a check of
 * its argument (NULL: none; 0, or 2 after one line on stderr). */
typedef struct fp_cli_opt {
    const char *name, *arg, *help;
    int required;
    int (*check)(const char *cmd, const char *value);
} fp_cli_opt;
/* A subcommand's arguments: its positional argument ("" none), and its
 * options. */
typedef struct fp_cli_spec {
    const char *cmd, *positional;
    const fp_cli_opt *opts;
    size_t nopts;
} fp_cli_spec;
extern const fp_cli_spec fp_cli_demo, fp_cli_run, fp_cli_replay, fp_cli_tune, fp_cli_report,
    fp_cli_snapshot, fp_cli_merge, fp_cli_config;
/* argv[1..argc) by s: val[i] gets option i's argument ("" for a flag given,
 * NULL when absent; s->nopts entries), *pos the positional argument.  0,
 * or 2 after one line on stderr and the usage line (an unknown word, an
 * option without its value, a second positional, a required one missing). */
int fp_cli_parse(const fp_cli_spec *s, int argc, char **argv, const char **val, const char **pos);
/* The value parsed for option name (NULL when absent or unknown). */
const char *fp_cli_value(const fp_cli_spec *s, const char *const *val, const char *name);
/* "TRACE [--conf K:V,...] ...", "usage: fragpool CMD ...\n", and one line
 * per option (then what SIZE means, when an option takes one). */
void fp_cli_put_synopsis(FILE *f, const fp_cli_spec *s);
void fp_cli_usage(FILE *f, const fp_cli_spec *s);
void fp_cli_put_options(FILE *f, const fp_cli_spec *s);
#define FP_CLI_MAX_OPTS 8

/* ---- the summary of a replay (cli_replay_report.c: replay and report) ---- */
/* The summary of a replay, as the shim would write it: the pool p after
 * replaying, its result r, the settings c and the device budget. */
typedef struct fp_replay_report {
    fp_run_report run;
    fp_dev_report dev;
    fp_leak leaks[FP_REPORT_TOP_LEAKS];
    fp_row trace_rows[2];
    fp_row front_rows[FP_REPLAY_FRONT_ROWS]; /* "Thread caches", when the trace has threads */
    fp_group groups[FP_DEV_NGROUPS];         /* the shim's (null here), the trace's problems */
    fp_kv entries[FP_CONF_MAX_OPTIONS];
    unsigned char set[FP_CONF_MAX_OPTIONS]; /* entries not at their default */
    char conf[4096];                        /* fp_conf_entries: 4 KiB always suffice   */
} fp_replay_report;
void fp_cli_replay_report(fp_pool *p, const fp_replay_result *r, const fp_conf *c, size_t budget,
                          fp_replay_report *out);

/* "8GiB", "512M", "1.5g", "4096" -> bytes, for every command's --budget:
 * a number by config/'s rules (digits, an optional fraction of at most 15
 * decimals; no sign, space, hex or exponent), then K, M, G or T (powers
 * of 1024, any case, optionally followed by "iB" or "B"); fractions of a
 * byte are dropped.  0, or EINVAL (also past 2^64 - 1). */
int fp_parse_size(const char *s, size_t *out);
/* Unsigned decimal digits only (no sign, space or 0x), at most max: 0 and
 * *out, or EINVAL. */
int fp_parse_count(const char *s, uint64_t max, uint64_t *out);
/* --budget's value for the subcommand cmd: 0, or 2 after one line on
 * stderr (not a size, or less than one byte: "0.5"). */
int fp_parse_budget(const char *cmd, const char *s, size_t *out);
/* After a subcommand wrote its output: flushes stdout; when that, or the
 * fp_sink error sink_err (0: none), failed, one line on stderr and 1. */
int fp_cli_output_done(const char *cmd, int sink_err);
/* Defaults, then FRAGPOOL_CONF from the environment (or, when it is
 * unset, PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF, with one line that
 * says so), then text as --conf; problems are printed on stderr, and so
 * is one line for each key given that has no effect with the segments
 * the result asks for (fp_conf_inert).  Returns the number of problems. */
int fp_cli_conf(const char *text, fp_conf *c);
/* The thread caches a replay of t models (fp_trace.h): the recorded run's
 * ('j' rows), unless c names thread_cache_mb (then c's, 0: off); c then
 * holds the value the replay uses, for its summary. */
void fp_cli_trace_threads(fp_conf *c, fp_trace *t);
/* For tune, which ranks settings of its own: one line for each key of
 * FRAGPOOL_CONF (or PyTorch's variable) that has no effect with the
 * segments it asks for (fp_conf_inert); its problems are not said. */
void fp_cli_env_inert(void);
/* With virtual-memory segments, one line on stderr when vmm_page_mb or
 * vmm_reserve_mb of c is more than a device of budget bytes (0: none
 * given) allows, and the limit the replay uses instead (fp_vmm_size). */
void fp_cli_vmm_note(const fp_conf *c, size_t budget);
/* ---- the progress line (cli_progress.c) ---- */
typedef struct fp_progress {
    const char *cmd; /* "tune": the line starts "fragpool tune: "      */
    int on;          /* stderr is a terminal and --quiet not given     */
    int shown;       /* a line is on the screen, to be wiped           */
    double t0, last; /* start, and when the line was last written (s)  */
    double after;    /* seconds before the first line (2)              */
} fp_progress;
/* Starts the clock; quiet: --quiet was given. */
void fp_progress_init(fp_progress *p, const char *cmd, int quiet);
/* "\rfragpool CMD: TEXT (N s)" once past 2 s, at most 4 times a second
 * (p may be NULL: nothing). */
void fp_progress_say(fp_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Wipes the line, if one was written. */
void fp_progress_done(fp_progress *p);
/* A replay's after_event hook saying "WHAT i of n events" (ud: this). */
typedef struct fp_progress_events {
    fp_progress *p;
    const char *what;
    size_t n;
} fp_progress_events;
int fp_progress_replay_hook(void *ud, fp_pool *pool, size_t i, int refused);

/* Where this fragpool's pieces are, found from this executable's own
 * path: the installed layout (PREFIX/BINDIR/fragpool, PREFIX/LIBDIR/fragpool/,
 * GNUInstallDirs) first, then the build tree (build/bin, build/lib). */
#define FP_PATH_LEN (PATH_MAX + 64)
typedef struct fp_paths {
    char lib[FP_PATH_LEN];      /* .../libfragpool.so                      */
    char simdev[FP_PATH_LEN];   /* the folder of the simulated libcuda.so.1 */
    char workload[FP_PATH_LEN]; /* the demo's workload program             */
    char python[FP_PATH_LEN];   /* fragpool's Python side (its sitecustomize) */
} fp_paths;
/* 0, or ENOENT after one line on stderr that says where it looked. */
int fp_find_paths(fp_paths *p);
/* For run and demo (cli_common.c): name=value:old in the environment
 * (name=value when old is unset or empty), built whole; 0 or an errno. */
int fp_cli_prepend_env(const char *name, const char *value);
/* libfragpool.so first in LD_PRELOAD, with simulate the simulated driver
 * first in LD_LIBRARY_PATH, and conf (unless NULL) as FRAGPOOL_CONF: 0,
 * or an errno after one line on stderr. */
int fp_cli_arm_env(const fp_paths *p, int simulate, const char *conf);

#endif
