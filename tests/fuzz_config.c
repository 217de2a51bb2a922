/* fuzz_config.c - libFuzzer harness for the FRAGPOOL_CONF parser.
 *
 * Feeds any bytes (as a NUL-terminated copy) to fp_conf_parse, then checks
 * what must hold for every input:
 *  - the problem count equals the number of report lines, and every line
 *    starts with the prefix, holds no newline and stays bounded;
 *  - the formatted effective config fits a fixed buffer, parses back with
 *    zero problems, and gives the same pool options and strict flag.
 * Any breach aborts, which libFuzzer reports as a crash.
 *
 * Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DFP_FUZZ=ON
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fp_conf.h"

#define PREFIX "fragpool: FRAGPOOL_CONF: "

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_line(void *ud, const char *line)
{
    size_t n = strlen(line);
    if (n >= 2048 || memchr(line, '\n', n) || strncmp(line, PREFIX, strlen(PREFIX)) != 0)
        abort();
    ++*(int *)ud;
}

static void check_round_trip(const fp_conf *c)
{
    char buf[4096];
    fp_conf back;
    int lines = 0;
    if (fp_conf_format(c, buf, sizeof buf) != 0)
        abort();
    fp_conf_default(&back);
    if (fp_conf_parse(buf, &back, check_line, &lines) != 0 || lines != 0)
        abort();
    if (memcmp(&back.pool, &c->pool, sizeof c->pool) != 0 || back.strict != c->strict)
        abort();
    /* every other field too: paths with [ ] , % included */
    if (strcmp(back.summary, c->summary) || strcmp(back.trace, c->trace) ||
        back.summary_format != c->summary_format || back.free_policy != c->free_policy ||
        back.defer_headroom != c->defer_headroom || back.debug_check != c->debug_check ||
        back.dump_on_sigusr1 != c->dump_on_sigusr1 ||
        back.meminfo_counts_cache != c->meminfo_counts_cache)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    fp_conf c;
    int lines = 0;
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    fp_conf_default(&c);
    if (fp_conf_parse(text, &c, check_line, &lines) != lines)
        abort();
    check_round_trip(&c);
    free(text);
    return 0;
}
