/* cli.h - the `fragpool` command: one file per subcommand, sharing the
 * argument helpers below.  Every subcommand returns the process exit
 * status: 0 success, 1 failure, 2 usage error.
 */
#ifndef FP_CLI_H
#define FP_CLI_H

#include "fp_conf.h"
#include "fp_report.h"
#include "fp_trace.h"
#include <stddef.h>
#include <stdint.h>

int fp_cmd_replay(int argc, char **argv);
int fp_cmd_tune(int argc, char **argv);
int fp_cmd_run(int argc, char **argv);
int fp_cmd_demo(int argc, char **argv);
int fp_cmd_merge(int argc, char **argv);
int fp_cmd_report(int argc, char **argv);
int fp_cmd_config(int argc, char **argv);

/* The summary of a replay, as the shim would write it: the pool p after
 * replaying, its result r, the settings c and the device budget. */
typedef struct fp_replay_report {
    fp_run_report run;
    fp_dev_report dev;
    fp_leak leaks[FP_REPORT_TOP_LEAKS];
    char conf[4096];     /* fp_conf_format: 4 KiB always suffice */
} fp_replay_report;
void fp_replay_run_report(fp_pool *p, const fp_replay_result *r, const fp_conf *c,
                          size_t budget, fp_replay_report *out);

/* "8GiB", "512M", "1.5g", "4096" -> bytes.  0, or EINVAL. */
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
/* Defaults, then FRAGPOOL_CONF from the environment, then text; problems
 * are printed on stderr, those of text labelled "--conf".  Returns the
 * number of problems. */
int fp_cli_conf(const char *text, fp_conf *c);
/* The folder holding this executable's libraries (build/lib). */
int fp_lib_dir(char *out, size_t len);

#endif
