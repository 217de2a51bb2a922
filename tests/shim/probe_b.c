/* probe_b.c - the second definition of fp_probe (see probe_a.c). */
__attribute__((visibility("default"))) int fp_probe(void)
{
    return 2;
}

__attribute__((visibility("default"))) int fp_probe_b_loaded(void)
{
    return 1;
}
