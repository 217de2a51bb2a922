/* fake_c10.c - builds libc10_cuda.so: a stand-in for PyTorch's CUDA
 * library, for the tests of fragpool's PyTorch detection.  The shim only
 * looks at the name of what is loaded, so it needs nothing inside. */
int fp_fake_c10_cuda_marker(void);
int fp_fake_c10_cuda_marker(void)
{
    return 10;
}
