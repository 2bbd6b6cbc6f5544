/* PMDK peer for `nvarray pm-bench`: the same benchmarks on libpmemobj (Debian libpmemobj-dev),
 * printing the same JSON lines, so scripts/perf_pm.py can put them side by side.
 *
 *   gcc -O2 -Wall -Wextra -o target/pmdk_peer crates/nvarray-pm/peer/pmdk_peer.c -lpmemobj -lpmem -lpthread
 *   PMEM_IS_PMEM_FORCE=1 target/pmdk_peer tx --pool /dev/shm/p --threads 1 --tx-bytes 256 --seconds 3
 *   PMEM_IS_PMEM_FORCE=1 target/pmdk_peer pages --pool /dev/shm/p --array-bytes 2g --write-bytes 64 --passes 1
 *   target/pmdk_peer plain --file /dev/shm/p --array-bytes 2g --write-bytes 64 --passes 1
 *
 * On tmpfs PMDK does not detect persistent memory and flushes with msync(2), a system call
 * per persist; PMEM_IS_PMEM_FORCE=1 makes it flush cache lines instead, as on real PM. That is
 * the fair comparison with nvarray-pm, which flushes cache lines.
 */
#define _GNU_SOURCE
#include <libpmem.h>
#include <libpmemobj.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>
#include <fcntl.h>

#define PAGE 4096
#define BUCKETS 64 /* log2 buckets of nanoseconds: p50/p99 are bucket upper bounds */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "pmdk_peer: %s: %s\n", what, pmemobj_errormsg());
    exit(1);
}

static uint64_t parse_size(const char *s)
{
    char *end;
    uint64_t n = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': return n << 10;
    case 'm': case 'M': return n << 20;
    case 'g': case 'G': return n << 30;
    case '\0': return n;
    default:
        fprintf(stderr, "pmdk_peer: bad size %s\n", s);
        exit(2);
    }
}

/* Value of option --name, or def. */
static const char *opt(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 2; i + 1 < argc; i += 2)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return def;
}

static PMEMobjpool *create_pool(const char *path, uint64_t size)
{
    unlink(path);
    if (size < PMEMOBJ_MIN_POOL)
        size = PMEMOBJ_MIN_POOL;
    PMEMobjpool *pop = pmemobj_create(path, "nvarray-peer", size, 0600);
    if (pop == NULL)
        die("pmemobj_create");
    return pop;
}

struct worker {
    PMEMobjpool *pop;
    char *objects; /* this thread's objects, inside the pool */
    size_t tx_bytes, count;
    uint64_t deadline, done;
    uint64_t hist[BUCKETS];
    pthread_barrier_t *start;
};

static void *tx_worker(void *arg)
{
    struct worker *w = arg;
    char *data = malloc(w->tx_bytes);
    pthread_barrier_wait(w->start);
    while (now_ns() < w->deadline) {
        char *obj = w->objects + (w->done % w->count) * w->tx_bytes;
        memset(data, (int)w->done, w->tx_bytes);
        uint64_t t0 = now_ns();
        TX_BEGIN(w->pop) {
            pmemobj_tx_add_range_direct(obj, w->tx_bytes);
            memcpy(obj, data, w->tx_bytes);
        } TX_ONABORT {
            die("transaction aborted");
        } TX_END
        uint64_t ns = now_ns() - t0;
        w->hist[ns ? 64 - __builtin_clzll(ns) : 0]++;
        w->done++;
    }
    free(data);
    return NULL;
}

static uint64_t quantile(const uint64_t *hist, uint64_t total, double q)
{
    uint64_t seen = 0;
    for (int b = 0; b < BUCKETS; b++) {
        seen += hist[b];
        if (seen >= (uint64_t)(q * (double)total))
            return b ? (1ull << b) - 1 : 0;
    }
    return 0;
}

static int run_tx(int argc, char **argv)
{
    const char *path = opt(argc, argv, "--pool", "/dev/shm/pmdk-peer.pool");
    int threads = atoi(opt(argc, argv, "--threads", "1"));
    size_t tx_bytes = parse_size(opt(argc, argv, "--tx-bytes", "256"));
    size_t count = parse_size(opt(argc, argv, "--objects", "1024"));
    double seconds = atof(opt(argc, argv, "--seconds", "3"));
    if (threads < 1 || tx_bytes == 0 || count == 0 || seconds <= 0) {
        fprintf(stderr, "pmdk_peer tx: --threads, --tx-bytes, --objects, --seconds must be > 0\n");
        return 2;
    }
    uint64_t region = (uint64_t)tx_bytes * count;
    PMEMobjpool *pop = create_pool(path, region * threads * 2 + (64u << 20));
    PMEMoid root = pmemobj_root(pop, region * threads);
    if (OID_IS_NULL(root))
        die("pmemobj_root");
    char *base = pmemobj_direct(root);

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, threads + 1);
    struct worker *ws = calloc(threads, sizeof *ws);
    pthread_t *ts = calloc(threads, sizeof *ts);
    for (int t = 0; t < threads; t++) {
        ws[t] = (struct worker){ .pop = pop, .objects = base + t * region, .tx_bytes = tx_bytes,
                                 .count = count, .start = &start };
    }
    uint64_t t0 = now_ns();
    for (int t = 0; t < threads; t++) {
        ws[t].deadline = t0 + (uint64_t)(seconds * 1e9);
        pthread_create(&ts[t], NULL, tx_worker, &ws[t]);
    }
    pthread_barrier_wait(&start);
    uint64_t hist[BUCKETS] = { 0 }, total = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(ts[t], NULL);
        total += ws[t].done;
        for (int b = 0; b < BUCKETS; b++)
            hist[b] += ws[t].hist[b];
    }
    double elapsed = (double)(now_ns() - t0) / 1e9;
    printf("{\"peer\":\"pmdk\",\"bench\":\"tx\",\"threads\":%d,\"tx_bytes\":%zu,"
           "\"transactions\":%llu,\"seconds\":%.6f,\"tx_per_s\":%.1f,\"p50_ns\":%llu,"
           "\"p99_ns\":%llu,\"pmem_is_pmem\":%d}\n",
           threads, tx_bytes, (unsigned long long)total, elapsed, (double)total / elapsed,
           (unsigned long long)quantile(hist, total, 0.5),
           (unsigned long long)quantile(hist, total, 0.99), pmem_is_pmem(base, region));
    pmemobj_close(pop);
    unlink(path);
    free(ws);
    free(ts);
    return 0;
}

/* One transaction writing n bytes at dst (its own function: TX_BEGIN is a setjmp, and locals
 * of the caller's loop would be clobbered). */
static void tx_write(PMEMobjpool *pop, char *dst, const char *data, size_t n)
{
    TX_BEGIN(pop) {
        pmemobj_tx_add_range_direct(dst, n);
        memcpy(dst, data, n);
    } TX_ONABORT {
        die("transaction aborted");
    } TX_END
}

/* Writes n bytes into every page of array[0..bytes), passes times; returns seconds. */
static double page_passes(PMEMobjpool *pop, char *array, uint64_t bytes, size_t n, int passes)
{
    char data[PAGE];
    memset(data, 0xa5, sizeof data);
    uint64_t t0 = now_ns();
    for (int p = 0; p < passes; p++) {
        for (uint64_t off = 0; off < bytes; off += PAGE) {
            if (pop == NULL)
                memcpy(array + off, data, n);
            else
                tx_write(pop, array + off, data, n);
        }
    }
    return (double)(now_ns() - t0) / 1e9;
}

static int run_pages(int argc, char **argv, int plain)
{
    const char *path = opt(argc, argv, plain ? "--file" : "--pool", "/dev/shm/pmdk-peer.pool");
    uint64_t bytes = parse_size(opt(argc, argv, "--array-bytes", "2g")) / PAGE * PAGE;
    size_t n = parse_size(opt(argc, argv, "--write-bytes", "64"));
    int passes = atoi(opt(argc, argv, "--passes", "1"));
    if (bytes == 0 || n == 0 || n > PAGE || passes < 1) {
        fprintf(stderr, "pmdk_peer: --array-bytes >= 4k, --write-bytes 1..4096, --passes >= 1\n");
        return 2;
    }
    PMEMobjpool *pop = NULL;
    char *array;
    int fd = -1;
    if (plain) {
        /* The unlogged baseline: a shared mapping, prefaulted, plain stores, no flushes. It
         * starts as the pools do: blocks reserved (PMDK's pool and nvarray-pm's both
         * fallocate) and every page faulted in writable. MAP_POPULATE alone faults a shared
         * mapping in readable only, and the timed passes then paid a write fault per page. */
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        int err = fd < 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
        if (err != 0) {
            fprintf(stderr, "pmdk_peer: %s: %s\n", path, strerror(err));
            return 1;
        }
        array = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (array == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        if (madvise(array, bytes, MADV_POPULATE_WRITE) != 0) {
            /* Before Linux 5.14: store the zeros the fresh file already holds. */
            for (uint64_t off = 0; off < bytes; off += PAGE)
                array[off] = 0;
        }
    } else {
        pop = create_pool(path, bytes + (256u << 20));
        PMEMoid oid;
        /* zalloc zeroes, and so faults in, the whole array before the timed passes. */
        if (pmemobj_zalloc(pop, &oid, bytes, 1) != 0)
            die("pmemobj_zalloc");
        array = pmemobj_direct(oid);
    }
    double secs = page_passes(pop, array, bytes, n, passes);
    printf("{\"peer\":\"%s\",\"bench\":\"pages\",\"array_bytes\":%llu,\"write_bytes\":%zu,"
           "\"passes\":%d,\"transactions\":%llu,\"seconds\":%.6f,\"pmem_is_pmem\":%d}\n",
           plain ? "plain" : "pmdk", (unsigned long long)bytes, n, passes,
           (unsigned long long)(bytes / PAGE * passes), secs, plain ? 0 : pmem_is_pmem(array, PAGE));
    if (plain) {
        munmap(array, bytes);
        close(fd);
    } else {
        pmemobj_close(pop);
    }
    unlink(path);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "tx") == 0)
        return run_tx(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "pages") == 0)
        return run_pages(argc, argv, 0);
    if (argc >= 2 && strcmp(argv[1], "plain") == 0)
        return run_pages(argc, argv, 1);
    fprintf(stderr, "usage: pmdk_peer tx|pages|plain [--option value ...] (see the comment at the top)\n");
    return 2;
}
