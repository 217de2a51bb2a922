/* cmd_report.c - `fragpool report`: placeholder until the HTML report lands. */
#include "cli.h"
#include <stdio.h>

int fp_cmd_report(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "fragpool report: not built yet\n");
    return 1;
}
