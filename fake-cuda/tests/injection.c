/* The injection library of the fake's own tests (`CUDA_INJECTION64_PATH`): counts the calls of
 * its entry point, which the test reads through `fake_cuda_test_injection_calls`. */

static int calls;

int InitializeInjection(void) {
    calls += 1;
    return 1;
}

int fake_cuda_test_injection_calls(void) {
    return calls;
}
