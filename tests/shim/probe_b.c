/* probe_b.c - the second definition of fp_probe (see probe_a.c). */
__attribute__((visibility("default"))) int fp_probe(void)
{
    return 2;
}
