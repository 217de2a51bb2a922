/* tests/pool/random.c - 110,000 random operations in four phases (plain,
 * max_split, roundup divisions, everything with a cap and the GC), each
 * run by the model checker (model.c): every operation cross-checked
 * against the model and followed by fp_pool_check.  Each phase must have
 * met an OOM and a cache hit.
 *
 * "test_pool_random PHASE" runs only that phase (ctest runs the four side
 * by side); a name that is no phase is refused with the list of names.
 */
#include "model.h"

static const char *g_only; /* the one phase to run; NULL: all */

static const rphase phases[] = {
    {"plain", 1, 30000, 768 * MiB, SIZE_MAX, 0, 0, 0, 0.0, 120},
    {"max_split", 2, 30000, 512 * MiB, 32 * MiB, 0, 0, 0, 0.0, 120},
    {"divisions", 3, 25000, 1 * GiB, SIZE_MAX, 0, 1, 0, 0.0, 160},
    {"all", 4, 25000, 1 * GiB, 24 * MiB, 8 * MiB, 2, 400 * MiB, 0.7, 100},
};
#define NPHASES (sizeof phases / sizeof phases[0])

static void test_random(void **state)
{
    (void)state;
    for (size_t i = 0; i < NPHASES; i++)
        if (!g_only || strcmp(g_only, phases[i].name) == 0)
            model_run_phase(&phases[i]);
}

int main(int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "usage: test_pool_random [PHASE]\n");
        return 2;
    }
    if (argc == 2) {
        size_t i = 0;
        while (i < NPHASES && strcmp(argv[1], phases[i].name) != 0)
            i++;
        if (i == NPHASES) {
            fprintf(stderr,
                    "test_pool_random: no phase '%s' (plain, max_split, "
                    "divisions, all); nothing run\n",
                    argv[1]);
            return 2;
        }
        g_only = argv[1];
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
