/* The seed's example (vNVML slide 11) as a program: two counters in a pool, both advanced in
 * one transaction per run. Run it twice and the second run starts where the first stopped.
 *
 *   gcc -O2 -Icrates/nvarray-pm/include crates/nvarray-pm/examples/c/counters.c \
 *       target/release/libnvarray_pm.a -lpthread -ldl -lm -o counters
 *   ./counters /tmp/counters.pool 1000
 */
#include <stdio.h>
#include <stdlib.h>

#include "nvarray_pm.h"

static int fail(const char *what)
{
    fprintf(stderr, "counters: %s: %s\n", what, nv_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: counters POOL_FILE TRANSACTIONS\n");
        return 2;
    }
    long n = strtol(argv[2], NULL, 10);
    int64_t *ptr = nv_allocate(argv[1], 1 << 20, NV_CREATE);
    if (ptr == NULL)
        return fail("nv_allocate");
    printf("start x=%lld y=%lld\n", (long long)ptr[0], (long long)ptr[1]);

    for (long i = 0; i < n; i++) {
        nv_tid_t tid = nv_txbegin(); /* TX starts */
        int64_t x = *ptr;            /* read */
        int64_t y = *(ptr + 1);      /* read */
        x = x + 1;
        y = y + 2;
        if (nv_write(tid, ptr, &x, sizeof(x)) != NV_OK ||
            nv_write(tid, ptr + 1, &y, sizeof(y)) != NV_OK) {
            nv_abort(tid);
            return fail("nv_write");
        }
        if (nv_commit(tid) != NV_OK) /* TX commits */
            return fail("nv_commit");
    }

    /* An aborted transaction leaves nothing behind. */
    nv_tid_t tid = nv_txbegin();
    int64_t junk = -1;
    if (nv_write(tid, ptr, &junk, sizeof(junk)) != NV_OK)
        return fail("nv_write (to abort)");
    nv_abort(tid);

    /* A write outside the pool is refused with a message. */
    tid = nv_txbegin();
    if (nv_write(tid, (char *)ptr + (1 << 20) - 4, &junk, sizeof(junk)) == NV_OK) {
        fprintf(stderr, "counters: a write past the end was accepted\n");
        return 1;
    }
    printf("refused: %s\n", nv_last_error());
    nv_abort(tid);

    printf("end x=%lld y=%lld\n", (long long)ptr[0], (long long)ptr[1]);
    return nv_free(ptr) == NV_OK ? 0 : fail("nv_free");
}
