/* cmd_merge.c - `fragpool merge SUMMARY.json...`: one table of the JSON
 * summaries that several ranks wrote, one row per rank and a total. */
#include "cli.h"
#include "fp_report.h"
#include "fp_merge.h"
#include <stdio.h>

int fp_cmd_merge(int argc, char **argv)
{
    if (argc < 2) { /* as fp_cli_parse says it of a missing positional */
        fprintf(stderr, "fragpool merge: no SUMMARY.json given\n");
        fp_cli_usage(stderr, &fp_cli_merge);
        return 2;
    }
    char err[512];
    fflush(stdout);
    fp_sink s = fp_sink_fd(1);
    if (fp_merge_json((const char *const *)argv + 1, (size_t)argc - 1, &s, err, sizeof err)) {
        fprintf(stderr, "fragpool merge: %s\n", err);
        return 1;
    }
    return fp_cli_output_done("merge", 0);
}
