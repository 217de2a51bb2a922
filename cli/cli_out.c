/* cli_out.c - what the subcommands share about their arguments and their
 * output: the --budget check, and reporting a stdout that could not be
 * written (docs/files.md); strict numbers for counts.
 *
 * Invariant: a subcommand whose output did not reach stdout says so in one
 * line on stderr and exits 1; it never exits 0 after losing output.
 */
#include "cli.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>

int fp_parse_count(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return EINVAL;
    for (; *s; s++) {
        unsigned d = (unsigned)(unsigned char)*s - '0';
        if (d > 9 || d > max || v > (max - d) / 10)
            return EINVAL;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int fp_parse_budget(const char *cmd, const char *s, size_t *out)
{
    if (fp_parse_size(s, out)) {
        fprintf(stderr, "fragpool %s: bad --budget '%s' (want e.g. 8GiB)\n", cmd, s);
        return 2;
    }
    if (*out == 0) {
        fprintf(stderr,
                "fragpool %s: bad --budget '%s': less than one byte (want e.g. "
                "8GiB; leave --budget out for an unlimited device)\n",
                cmd, s);
        return 2;
    }
    return 0;
}

int fp_cli_output_done(const char *cmd, int sink_err)
{
    int err = sink_err;
    if (fflush(stdout) != 0 || ferror(stdout))
        err = err ? err : (errno ? errno : EIO);
    if (!err)
        return 0;
    fprintf(stderr, "fragpool %s: cannot write the output to stdout: %s\n", cmd, strerror(err));
    return 1;
}
