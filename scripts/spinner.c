/* An independent measure of this machine's jitter, to set beside the emulator's own probe
 * (the "machine jitter" line of `nvarray bench`; issue 37). It only spins on the clock, on
 * whichever CPU the scheduler gives it, and reports the same statistic as the probe: instants
 * sampled every microsecond, each late by the time from it to the thread's next clock reading,
 * so a 40 us stall gives 40 instants late by 40, 39, ..., 1 us.
 *
 *   cc -O2 -o spinner scripts/spinner.c && ./spinner 1.0
 *
 * prints one JSON object: {"seconds": .., "samples": .., "p50": .., "p99": .., "p9999": ..,
 * "max": .., "gaps_over_5us": .., "gaps_over_10us": ..} (nanoseconds). Written apart from the
 * emulator on purpose: it shares no code with the probe it checks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define PERIOD_NS 1000
#define BUCKET_NS 10
#define BUCKETS 1000000 /* 10 ns buckets up to 10 ms; longer goes in the last */

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t at(const uint64_t *h, uint64_t n, double q, uint64_t max) {
    uint64_t rank = (uint64_t)(q * (double)n), seen = 0;
    for (uint64_t b = 0; b < BUCKETS; b++) {
        seen += h[b];
        if (seen > rank) {
            uint64_t top = (b + 1) * BUCKET_NS;
            return top < max ? top : max;
        }
    }
    return max;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    uint64_t *h = calloc(BUCKETS, sizeof *h);
    if (!h || seconds <= 0) {
        fprintf(stderr, "usage: spinner SECONDS\n");
        return 2;
    }
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
    uint64_t prev = start, next = (start / PERIOD_NS + 1) * PERIOD_NS;
    uint64_t n = 0, max_gap = 0, over5 = 0, over10 = 0;
    for (;;) {
        uint64_t t = now_ns();
        uint64_t gap = t - prev;
        if (gap > max_gap) max_gap = gap;
        over5 += gap > 5000;
        over10 += gap > 10000;
        for (; next <= t; next += PERIOD_NS, n++) {
            uint64_t b = (t - next) / BUCKET_NS;
            h[b < BUCKETS ? b : BUCKETS - 1]++;
        }
        prev = t;
        if (t >= end) break;
    }
    printf("{\"seconds\": %.3f, \"samples\": %llu, \"p50\": %llu, \"p99\": %llu, \"p9999\": %llu, "
           "\"max\": %llu, \"gaps_over_5us\": %llu, \"gaps_over_10us\": %llu}\n",
           (double)(prev - start) / 1e9, (unsigned long long)n,
           (unsigned long long)at(h, n, 0.50, max_gap), (unsigned long long)at(h, n, 0.99, max_gap),
           (unsigned long long)at(h, n, 0.9999, max_gap), (unsigned long long)max_gap,
           (unsigned long long)over5, (unsigned long long)over10);
    free(h);
    return 0;
}
