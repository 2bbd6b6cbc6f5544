/* The C ABI's edges (issue 15), one line of output per check, read by tests/c_abi.rs:
 * unknown mode bits, a failed NV_CREATE, the parent's pool in a fork()ed child, a
 * transaction committed by another thread than the one that began it, the bound on
 * open transactions, and the simulated power cuts' session rules.
 *
 *   abi_edges DIR
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvarray_pm.h"

static char path[4096];

static void *begin_and_write(void *arg)
{
    int64_t *p = arg;
    nv_tid_t t = nv_txbegin();
    int64_t x = 42;
    if (t < 0 || nv_write(t, &p[0], &x, sizeof x) != NV_OK)
        return (void *)(intptr_t)-1;
    return (void *)(intptr_t)t;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: abi_edges DIR\n");
        return 2;
    }
    struct stat st;

    /* 1. Unknown mode bits are refused, and nothing is created. */
    snprintf(path, sizeof path, "%s/mode.pool", argv[1]);
    void *m = nv_allocate(path, 1 << 20, NV_CREATE | 0x40);
    printf("mode: %s created=%d msg=%s\n", m ? "accepted" : "refused", stat(path, &st) == 0,
           nv_last_error());

    /* 2. A refused NV_CREATE (no size for a new file) leaves no file behind. */
    snprintf(path, sizeof path, "%s/empty.pool", argv[1]);
    void *e = nv_allocate(path, 0, NV_CREATE);
    printf("create: %s left=%d msg=%s\n", e ? "accepted" : "refused", stat(path, &st) == 0,
           nv_last_error());

    snprintf(path, sizeof path, "%s/edges.pool", argv[1]);
    int64_t *p = nv_allocate(path, 1 << 20, NV_CREATE);
    if (p == NULL) {
        fprintf(stderr, "nv_allocate: %s\n", nv_last_error());
        return 1;
    }

    /* 3. A transaction begun and written on one thread, committed on another. */
    pthread_t th;
    void *ret;
    pthread_create(&th, NULL, begin_and_write, p);
    pthread_join(th, &ret);
    nv_tid_t t = (nv_tid_t)(intptr_t)ret;
    int rc = t > 0 ? nv_commit(t) : -99;
    printf("handoff: rc=%d value=%lld\n", rc, (long long)p[0]);

    /* 4. The parent's pool in a child: a clean refusal, not a panic; reopening works. */
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        nv_tid_t c = nv_txbegin();
        int64_t x = 7;
        int wrc = nv_write(c, &p[1], &x, sizeof x);
        printf("fork-write: rc=%d msg=%s\n", wrc, nv_last_error());
        nv_abort(c);
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("fork-exit: %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);

    /* 5. nv_read sees the transaction's own writes; the pointer sees committed data only. */
    nv_tid_t r = nv_txbegin();
    int64_t mine = 1234, seen = 0, none = 0;
    int wr = nv_write(r, &p[2], &mine, sizeof mine);
    int rd = nv_read(r, &seen, &p[2], sizeof seen);
    int64_t through_pointer = p[2];
    int bad = nv_read(r + 1000000, &none, &p[2], sizeof none);
    int null_dst = nv_read(r, NULL, &p[2], sizeof none);
    int outside = nv_read(r, &none, &none, sizeof none);
    int crc = nv_commit(r);
    printf("read: write=%d read=%d seen=%lld pointer=%lld bad_tid=%d null=%d outside=%d "
           "commit=%d after=%lld\n", wr, rd, (long long)seen, (long long)through_pointer, bad,
           null_dst, outside, crc, (long long)p[2]);

    /* 5b. A transaction larger than a quarter of the log (1 MiB here) is refused with
     * NV_EFULL at the write that would pass it; aborted, it leaves nothing. */
    {
        static char page[4096];
        nv_tid_t big = nv_txbegin();
        int wrc = NV_OK;
        long pages = 0;
        memset(page, 0x5a, sizeof page);
        while (wrc == NV_OK && pages < 128) {
            wrc = nv_write(big, (char *)p + 65536 + pages * 4096, page, sizeof page);
            pages += wrc == NV_OK;
        }
        nv_abort(big);
        int untouched = 1;
        for (long i = 0; i < 128 * 4096; i++)
            untouched &= ((char *)p)[65536 + i] == 0;
        printf("too-large: rc=%d after=%ld untouched=%d\n", wrc, pages, untouched);
    }

    /* 6. Open transactions are bounded; finishing one makes room again. */
    long opened = 0;
    nv_tid_t first = 0, last = 0;
    for (long i = 0; i < 1000000; i++) {
        nv_tid_t x = nv_txbegin();
        if (x < 0)
            break;
        if (!first)
            first = x;
        last = x;
        opened++;
    }
    printf("open-bound: opened=%ld msg=%s\n", opened, nv_last_error());
    nv_abort(last);
    nv_tid_t again = nv_txbegin();
    printf("open-after-abort: %s\n", again > 0 ? "ok" : "refused");
    for (nv_tid_t x = first; x < last; x++)
        nv_abort(x);
    nv_abort(again);

    /* 7. Simulated power cuts (nv_sim_*): refused while pools are open and outside a
     * session; a simulated pool closed cleanly reopens as it was; one cut off before its
     * first commit is refused until recovered, then recovers to nothing committed. */
    int start_open = nv_sim_start(7, NV_SIM_NEVER, 1);
    if (nv_free(p) != NV_OK)
        return 1;
    int outside_session = nv_sim_recover();
    snprintf(path, sizeof path, "%s/sim.pool", argv[1]);
    nv_sim_start(7, NV_SIM_NEVER, 1);
    int64_t *q = nv_allocate(path, 1 << 20, NV_CREATE);
    uint64_t opened_at = nv_sim_ops();
    int64_t v = 99;
    nv_tid_t w = nv_txbegin();
    nv_write(w, &q[0], &v, sizeof v);
    nv_commit(w);
    nv_free(q);
    q = nv_allocate(path, 0, 0);
    int64_t reopened = q ? q[0] : -1;
    uint64_t clean_recoveries = nv_sim_recoveries();
    stat(path, &st);
    nv_free(q);
    unlink(path);
    /* The same workload, cut before its commit's first operation. */
    nv_sim_start(7, opened_at, 1);
    q = nv_allocate(path, 1 << 20, NV_CREATE);
    w = nv_txbegin();
    nv_write(w, &q[0], &v, sizeof v);
    nv_commit(w);
    int crashed = nv_sim_crashed();
    int stop_open = nv_sim_stop();
    nv_free(q);
    int lost_refused = nv_allocate(path, 0, 0) == NULL &&
                       strstr(nv_last_error(), "nv_sim_recover") != NULL;
    int replaced = nv_sim_recover();
    q = nv_allocate(path, 0, 0);
    int64_t recovered = q ? q[0] : -1;
    printf("sim: start_open=%d outside=%d ops=%d reopened=%lld clean_recoveries=%llu "
           "file=%lld crashed=%d stop_open=%d lost_refused=%d replaced=%d recoveries=%llu "
           "recovered=%lld\n", start_open, outside_session, opened_at > 0, (long long)reopened,
           (unsigned long long)clean_recoveries, (long long)st.st_size, crashed, stop_open,
           lost_refused, replaced, (unsigned long long)nv_sim_recoveries(),
           (long long)recovered);
    if (q)
        nv_free(q);
    return nv_sim_stop() == NV_OK ? 0 : 1;
}
