/* cmd_config.c - `fragpool config [K:V,...]`: every key of the option
 * table with its default, accepted values and meaning; with an argument,
 * that text is checked as FRAGPOOL_CONF would be and the effective
 * configuration is printed (exit status 1 when it has problems, or when
 * stdout cannot be written: one line on stderr says so). */
#include "cli.h"
#include <stdio.h>

static void print_problem(void *ud, const char *line)
{
    (void)ud;
    fprintf(stderr, "%s\n", line);
}

static void print_table(void)
{
    for (size_t i = 0; i < fp_conf_noptions(); i++) {
        const fp_option *o = fp_conf_option(i);
        char range[256];
        fp_conf_range(o, range, sizeof range);
        printf("%-30s default %-10s %s\n", o->name, o->deflt, range);
        printf("%-30s %s\n", "", o->help);
    }
}

int fp_cmd_config(int argc, char **argv)
{
    if (argc < 2) {
        print_table();
        return fp_cli_output_done("config", 0);
    }
    fp_conf c;
    fp_conf_default(&c);
    int problems = fp_conf_parse(argv[1], &c, print_problem, NULL);
    char buf[4096];
    fp_conf_format(&c, buf, sizeof buf);
    printf("%s\n", buf);
    int rc = fp_cli_output_done("config", 0);
    return problems || rc ? 1 : 0;
}
