/* faults.c: a seeded stream of opens, transactions and closes of one pool through the C ABI
 * while NVARRAY_INJECT_FAULTS fails the pool's fdatasyncs and fallocates (issue 58; run by
 * tests/c_abi.rs). After every open, every 64-byte line of the pool must hold what the
 * commits that returned NV_OK left there, or, where a commit failed, possibly that one's.
 *
 *   faults POOL STEPS SEED
 *
 * Prints one summary line; exits 1 naming the line and step where a commit was lost. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvarray_pm.h"

#define SIZE (256u << 10)
#define LINE 64u
#define LINES (SIZE / LINE)
/* Writes remembered per line; a line that may show more may show anything. */
#define MAY 6
#define ANY 0xff

static uint32_t may[LINES][MAY];
static uint8_t n_may[LINES];
static uint64_t rng_state;

static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Line `line` as write `id` leaves it; zeroes for id 0 (never written). */
static void content(uint32_t id, uint64_t line, unsigned char *out) {
    uint64_t word = id ? ((uint64_t)id << 32 | line) : 0;
    for (unsigned i = 0; i < LINE; i += 8) memcpy(out + i, &word, 8);
}

/* 0 if every line shows a write it may, else 1 (said on stderr). */
static int check(const unsigned char *p, uint64_t step) {
    unsigned char want[LINE];
    for (uint64_t line = 0; line < LINES; line++) {
        if (n_may[line] == ANY) continue;
        int ok = 0;
        for (int i = 0; i < n_may[line] && !ok; i++) {
            content(may[line][i], line, want);
            ok = memcmp(p + line * LINE, want, LINE) == 0;
        }
        if (!ok) {
            fprintf(stderr, "step %" PRIu64 ": line %" PRIu64 " holds no write it may show\n",
                    step, line);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s POOL STEPS SEED\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    uint64_t steps = strtoull(argv[2], NULL, 10);
    rng_state = strtoull(argv[3], NULL, 10) * 2654435761u | 1;
    for (uint64_t line = 0; line < LINES; line++) n_may[line] = 1; /* may[..][0] = 0: zeroes */
    unsigned char *p = NULL;
    uint32_t next_id = 0;
    uint64_t commits = 0, failed_commits = 0, opens = 0, failed_opens = 0, failed_closes = 0;
    unsigned char buf[LINE];
    for (uint64_t step = 0; step < steps || !p; step++) {
        if (!p) {
            p = nv_allocate(path, SIZE, NV_CREATE);
            if (!p) {
                failed_opens++;
                continue;
            }
            opens++;
            if (check(p, step)) return 1;
            continue;
        }
        if (rnd() % 100 < 85) {
            uint64_t n = 1 + rnd() % 8;
            uint64_t first = rnd() % (LINES - n + 1);
            uint32_t id = ++next_id;
            nv_tid_t t = nv_txbegin();
            int ok = t > 0;
            for (uint64_t line = first; ok && line < first + n; line++) {
                content(id, line, buf);
                ok = nv_write(t, p + line * LINE, buf, LINE) == NV_OK;
            }
            ok = ok && nv_commit(t) == NV_OK;
            if (!ok && t > 0) nv_abort(t); /* gone already if the commit failed: ignored */
            for (uint64_t line = first; line < first + n; line++) {
                if (ok) {
                    may[line][0] = id;
                    n_may[line] = 1;
                } else if (n_may[line] == ANY || n_may[line] == MAY) {
                    n_may[line] = ANY;
                } else {
                    may[line][n_may[line]++] = id;
                }
            }
            commits += ok;
            failed_commits += !ok;
        } else {
            failed_closes += nv_free(p) != NV_OK;
            p = NULL;
        }
    }
    /* The last open checked everything; close it. */
    failed_closes += nv_free(p) != NV_OK;
    printf("c abi faults: %" PRIu64 " faults injected; %" PRIu64 " commits returned NV_OK over %"
           PRIu64 " opens; failed: %" PRIu64 " commits, %" PRIu64 " opens, %" PRIu64
           " closes; 0 lost\n",
           nv_injected_faults(), commits, opens, failed_commits, failed_opens, failed_closes);
    return 0;
}
