/* cmd_config.c - `fragpool config [K:V,...]`: every key of the option
 * table with its default, accepted values and meaning (and, for a key of
 * one segment mode, which); with an argument,
 * that text is checked as FRAGPOOL_CONF would be: its problems, one line
 * each, and exit status 1; or, with none, the effective configuration (and
 * a line on stderr for each key that has no effect with the segments the
 * text asks for, and when a virtual-memory key is past what any device
 * allows)
 * (exit status 1 when stdout cannot be written: one line on stderr says
 * so). */
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
        if (o->acts == FP_ACTS_CLASSIC)
            printf("%-30s acts with classic segments only (expandable_segments:False)\n", "");
        else if (o->acts == FP_ACTS_VMM)
            printf("%-30s acts with virtual-memory segments only (the default)\n", "");
    }
}

int fp_cmd_config(int argc, char **argv)
{
    if (argc < 2) {
        print_table();
        return fp_cli_output_done("config", 0);
    }
    if (argc > 2) { /* one setting: K:V,K:V is one argument */
        fprintf(stderr,
                "fragpool config: unexpected argument '%s' (the setting is one argument: "
                "K:V,K:V,...)\n",
                argv[2]);
        fp_cli_usage(stderr, &fp_cli_config);
        return 2;
    }
    fp_conf c;
    fp_conf_default(&c);
    if (fp_conf_parse(argv[1], &c, print_problem, NULL))
        return 1; /* the problems said what; the whole setting would bury them */
    fp_conf_inert(&c, c.set_mask, fp_conf_segs(&c), NULL, print_problem, NULL);
    fp_cli_vmm_note(&c, 0); /* no device here: the address space's limits */
    char buf[4096];
    fp_conf_format(&c, buf, sizeof buf);
    printf("%s\n", buf);
    return fp_cli_output_done("config", 0) ? 1 : 0;
}
