/* cmd_tune.c - `fragpool tune`: placeholder until the tuner lands. */
#include "cli.h"
#include <stdio.h>

int fp_cmd_tune(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "fragpool tune: not built yet\n");
    return 1;
}
