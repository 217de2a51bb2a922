/* cli.h - the `fragpool` command: one file per subcommand, sharing the
 * argument helpers below.  Every subcommand returns the process exit
 * status: 0 success, 1 failure, 2 usage error.
 */
#ifndef FP_CLI_H
#define FP_CLI_H

#include "fp_conf.h"
#include <stddef.h>

int fp_cmd_replay(int argc, char **argv);
int fp_cmd_tune(int argc, char **argv);
int fp_cmd_run(int argc, char **argv);
int fp_cmd_demo(int argc, char **argv);
int fp_cmd_merge(int argc, char **argv);
int fp_cmd_report(int argc, char **argv);
int fp_cmd_config(int argc, char **argv);

/* "8GiB", "512M", "1.5g", "4096" -> bytes.  0, or EINVAL. */
int fp_parse_size(const char *s, size_t *out);
/* Defaults, then FRAGPOOL_CONF from the environment, then text; problems
 * are printed on stderr.  Returns the number of problems. */
int fp_cli_conf(const char *text, fp_conf *c);
/* The folder holding this executable's libraries (build/lib). */
int fp_lib_dir(char *out, size_t len);

#endif
