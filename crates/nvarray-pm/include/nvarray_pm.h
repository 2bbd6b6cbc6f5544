/* nvarray_pm.h: C interface of nvarray-pm, the transactional virtual NVM library.
 *
 * The names are vNVML's (Chou et al., 2019, slide 11). Link with libnvarray_pm.a (plus
 * -lpthread -ldl -lm) or libnvarray_pm.so, both built by `cargo build --release -p nvarray-pm`.
 *
 *   int64_t *p = nv_allocate("/data/pool", 1 << 30, NV_CREATE);   // read through p
 *   nv_tid_t t = nv_txbegin();
 *   int64_t x = p[0] + 1;
 *   if (nv_write(t, &p[0], &x, sizeof x) == 0 && nv_commit(t) == 0) { ...durable... }
 *   else nv_abort(t);
 *   nv_free(p);
 *
 * Reads through the pointer see committed data only (read committed). Never store through
 * the pointer: write with nv_write. A transaction's writes must all target one pool.
 * Options come from the environment: NVARRAY_PM_NVM_DIR (default /dev/shm), NVARRAY_PM_TECH
 * (dram, pcm, stt-mram, optane, ...), NVARRAY_PM_LOG_SIZE, NVARRAY_PM_CACHE_SIZE (e.g. 64m),
 * NVARRAY_PM_WRITEBACK (dirty fraction, default 0.3); NVARRAY_PM_PREFAULT=1 faults both tiers in
 * at nv_allocate (for benchmarks: no first-touch page faults in the timed part).
 *
 * Threads: a transaction id is a handle, not a thread's property. Any thread may write to,
 * commit or abort it (hand-off between threads is allowed), one call at a time: a second call
 * on the same id while one is running returns NV_EBADTID. At most 65,536 transactions are
 * open in a process; nv_txbegin returns -1 beyond that.
 *
 * fork(): pools belong to the process that opened them. In the child, calls on the parent's
 * pools are refused with NV_ERROR ("opened before fork()"); call nv_allocate again there.
 * Do not fork while another thread is inside an nv_* call.
 */
#ifndef NVARRAY_PM_H
#define NVARRAY_PM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int64_t nv_tid_t;

/* nv_allocate mode flag: create the backing file if it does not exist. */
#define NV_CREATE 1

#define NV_OK 0
#define NV_ERROR (-1)     /* see nv_last_error() */
/* Not done, retry: from nv_write, an older transaction holds these bytes (abort, then retry);
 * from nv_commit, the transaction stalled over a second between reserving log space and
 * writing its record (the process was stopped) and later commits fenced it off: nothing was
 * committed and the id is gone. */
#define NV_ECONFLICT (-2)
#define NV_EBADTID (-3)   /* unknown, committed or aborted transaction id */
/* From nv_write: the transaction would grow larger than one transaction may be (a quarter of
 * the NVM log, NVARRAY_PM_LOG_SIZE, or half the write cache, NVARRAY_PM_CACHE_SIZE); the write
 * was not added. Abort the transaction; it cannot commit as one. */
#define NV_EFULL (-4)

/* Opens the pool over the file at path (size bytes; 0 = the existing file's size) and
 * returns its mapping, or NULL (see nv_last_error()). mode is 0 or NV_CREATE; other bits are
 * refused. A file this call created is removed again if the open fails. The file's blocks
 * are reserved here, so a file system without room fails now, not with SIGBUS later. A file
 * at the path of a pool whose process died before writing its commits back, but which is not
 * that pool (removed and made anew, replaced, copied), is refused and left untouched; the
 * message names the command that discards the dead pool's commits
 * (nvarray pm clean --discard-commits). */
void *nv_allocate(const char *path, uint64_t size, int mode);

/* Starts a transaction; returns its id (> 0) or -1 (65,536 already open). */
nv_tid_t nv_txbegin(void);

/* Writes len bytes from src to dst (inside a pool's mapping) within tid. */
int nv_write(nv_tid_t tid, void *dst, const void *src, size_t len);

/* Reads len bytes at src (inside a pool's mapping) into dst as tid sees them: committed data
 * with tid's own writes on top. */
int nv_read(nv_tid_t tid, void *dst, const void *src, size_t len);

/* Commits tid: durable and visible to every process when it returns NV_OK. */
int nv_commit(nv_tid_t tid);

/* Aborts tid, discarding its writes. */
int nv_abort(nv_tid_t tid);

/* Closes the pool mapped at ptr; its open transactions are aborted. */
int nv_free(void *ptr);

/* Message of the last error on this thread ("" if none). The library owns the string: it
 * stays valid on this thread until the thread's next failing nv_* call or its exit. Copy it
 * to keep it; never free it. */
const char *nv_last_error(void);

/* Who holds a lock on the file at path, in words ("process PID (COMMAND) holds it as the
 * backing of a device", ...), or "" if nobody does: for a program that refuses a file for its
 * own reasons and wants to name who else has it. Reads only. The library owns the string: it
 * stays valid on this thread until the thread's next nv_file_holder call. */
const char *nv_file_holder(const char *path);

/* Faults NVARRAY_INJECT_FAULTS has injected into this process's pools so far (0 without it).
 * For tests and campaigns: the variable fails the pools' fdatasyncs and fallocates on a plan
 * (e.g. "one-in=3,seed=7,ops=fsync+fallocate"; see crate nvarray-faults). */
uint64_t nv_injected_faults(void);

/* ---- Power cuts, for crash tests (src/ffi_sim.rs) ----------------------------------------
 * Between nv_sim_start and nv_sim_stop, nv_allocate opens a simulated pool kept in this
 * process's memory, one per path (a sparse file of the pool's size is still made at the path,
 * for programs that stat or lock it). Power is cut before the pool's operation crash_at
 * (writes, flushes, fences and syncs, counted from its first nv_allocate): fenced lines and
 * synced pages survive, every other pending unit survives or not by a coin seeded with seed,
 * and with tear_lines a pending line may be torn at 8-byte words. The pool keeps running
 * after the cut; nv_sim_crashed() says it happened. Close the pool, call nv_sim_recover(),
 * and the next nv_allocate of the path opens (and recovers) what the cut left. */
#define NV_SIM_NEVER UINT64_MAX

/* Starts a session (forgetting an earlier one's pools). NV_ERROR while pools are open. */
int nv_sim_start(uint64_t seed, uint64_t crash_at, int tear_lines);
/* 1 while a session runs, else 0: a simulated pool's file holds none of its bytes, so a
 * program that reads a pool's file itself must look through the mapping instead. */
int nv_sim_active(void);
/* Operations the session's pools have performed (a dry run's count bounds crash_at). */
uint64_t nv_sim_ops(void);
/* 1 once a pool of the session has lost power, else 0. */
int nv_sim_crashed(void);
/* Replaces each pool that lost power by what the cut left; returns how many, or NV_ERROR
 * outside a session or while pools are open. */
int nv_sim_recover(void);
/* Pools of the session opened with a recovery. */
uint64_t nv_sim_recoveries(void);
/* Ends the session; nv_allocate opens file pools again. NV_ERROR while pools are open. */
int nv_sim_stop(void);

#ifdef __cplusplus
}
#endif

#endif /* NVARRAY_PM_H */
