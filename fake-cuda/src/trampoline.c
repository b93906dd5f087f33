// Where the fake driver runs a kernel's host build over its grid, and where a fault of that
// kernel is caught.
//
// A kernel touching memory it may not (never mapped, mapped without cuMemSetAccess, freed,
// unmapped: all PROT_NONE in the fake) raises SIGSEGV. While a kernel runs on a thread, the
// handler below siglongjmp's back to fc_run_kernel on that thread, which returns the faulting
// address: only the kernel's own C/C++ frames are skipped, never a Rust frame. A SIGSEGV or
// SIGBUS on any other thread, or outside a kernel, goes to the handler installed before ours
// (Rust's stack-overflow handler, or the default action).

#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// Set while a kernel runs on this thread: where a fault jumps back to.
static __thread sigjmp_buf *fc_jump;
static __thread volatile uintptr_t fc_fault_addr;
static __thread volatile int fc_fault_signal;
// The grid position running when a fault hit (for the message).
static __thread volatile unsigned int fc_block, fc_thread;

static struct sigaction fc_previous_segv, fc_previous_bus;

static void fc_chain(int sig, siginfo_t *info, void *context) {
    struct sigaction *previous = sig == SIGSEGV ? &fc_previous_segv : &fc_previous_bus;
    if (previous->sa_flags & SA_SIGINFO) {
        if (previous->sa_sigaction != NULL) {
            previous->sa_sigaction(sig, info, context);
            return;
        }
    } else if (previous->sa_handler == SIG_IGN) {
        return;
    } else if (previous->sa_handler != SIG_DFL) {
        previous->sa_handler(sig);
        return;
    }
    // The default action: restored, and the faulting instruction runs again and kills the
    // process as it would have without us.
    signal(sig, SIG_DFL);
}

static void fc_handler(int sig, siginfo_t *info, void *context) {
    sigjmp_buf *jump = fc_jump;
    if (jump != NULL) {
        fc_jump = NULL;
        fc_fault_addr = (uintptr_t)info->si_addr;
        fc_fault_signal = sig;
        siglongjmp(*jump, 1);
    }
    fc_chain(sig, info, context);
}

// Installs the handler for SIGSEGV and SIGBUS (once; the caller serialises).
int fc_install_fault_handler(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = fc_handler;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, &fc_previous_segv) != 0) {
        return -1;
    }
    if (sigaction(SIGBUS, &action, &fc_previous_bus) != 0) {
        return -1;
    }
    return 0;
}

typedef void (*fc_set_index_fn)(unsigned int, unsigned int, unsigned int, unsigned int);
typedef void (*fc_integer_kernel)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

// One launch, as the Rust side marshalled it from the PTX signature.
struct fc_launch {
    void *function;
    fc_set_index_fn set_index;
    unsigned int grid;
    unsigned int block;
    // 0: up to six integer-class parameters in `integers`; 1: one struct passed by value, its
    // bytes in `blob` (more than 16 bytes, alignment at most 8: passed in memory).
    int kind;
    uint64_t integers[6];
    const void *blob;
    size_t blob_size;
};

// The by-value struct, passed in memory (System V: more than two eightbytes): the callee reads
// its own fields from the start of the argument area, so a larger struct of the same alignment
// carries it. One size class per power of two keeps the copy per thread small.
#define FC_BLOB(bytes)                                                                        \
    typedef struct {                                                                          \
        uint64_t words[(bytes) / 8];                                                          \
    } fc_blob_##bytes;                                                                        \
    typedef void (*fc_blob_kernel_##bytes)(fc_blob_##bytes);                                  \
    static void fc_run_blob_##bytes(const struct fc_launch *l) {                              \
        fc_blob_##bytes arg;                                                                  \
        memset(&arg, 0, sizeof arg);                                                          \
        memcpy(&arg, l->blob, l->blob_size);                                                  \
        fc_blob_kernel_##bytes kernel = (fc_blob_kernel_##bytes)l->function;                  \
        for (unsigned int b = 0; b < l->grid; ++b) {                                          \
            fc_block = b;                                                                     \
            for (unsigned int t = 0; t < l->block; ++t) {                                     \
                fc_thread = t;                                                                \
                l->set_index(l->grid, l->block, b, t);                                        \
                kernel(arg);                                                                  \
            }                                                                                 \
        }                                                                                     \
    }

FC_BLOB(32)
FC_BLOB(64)
FC_BLOB(128)
FC_BLOB(256)
FC_BLOB(512)
FC_BLOB(1024)
FC_BLOB(2048)
FC_BLOB(4096)

static void fc_run_integers(const struct fc_launch *l) {
    fc_integer_kernel kernel = (fc_integer_kernel)l->function;
    const uint64_t *a = l->integers;
    for (unsigned int b = 0; b < l->grid; ++b) {
        fc_block = b;
        for (unsigned int t = 0; t < l->block; ++t) {
            fc_thread = t;
            l->set_index(l->grid, l->block, b, t);
            kernel(a[0], a[1], a[2], a[3], a[4], a[5]);
        }
    }
}

// Runs the launch over its whole grid, serially. Returns 0, or 1 after a fault (its address,
// signal and grid position in the out-parameters), or -1 for a blob larger than 4096 bytes.
int fc_run_kernel(const struct fc_launch *l, uintptr_t *fault_addr, int *fault_signal,
                  unsigned int *fault_block, unsigned int *fault_thread) {
    sigjmp_buf jump;
    if (l->kind == 1 && l->blob_size > 4096) {
        return -1;
    }
    if (sigsetjmp(jump, 1) != 0) {
        *fault_addr = fc_fault_addr;
        *fault_signal = fc_fault_signal;
        *fault_block = fc_block;
        *fault_thread = fc_thread;
        return 1;
    }
    fc_jump = &jump;
    if (l->kind == 0) {
        fc_run_integers(l);
    } else if (l->blob_size <= 32) {
        fc_run_blob_32(l);
    } else if (l->blob_size <= 64) {
        fc_run_blob_64(l);
    } else if (l->blob_size <= 128) {
        fc_run_blob_128(l);
    } else if (l->blob_size <= 256) {
        fc_run_blob_256(l);
    } else if (l->blob_size <= 512) {
        fc_run_blob_512(l);
    } else if (l->blob_size <= 1024) {
        fc_run_blob_1024(l);
    } else if (l->blob_size <= 2048) {
        fc_run_blob_2048(l);
    } else {
        fc_run_blob_4096(l);
    }
    fc_jump = NULL;
    return 0;
}
