/*
 * nvarray_sqlite.c: the SQLite VFS "nvarray", which keeps a database file in an nvarray-pm
 * pool (issue 42; vNVML, Chou et al. 2019, ran MongoDB on its library the same way).
 *
 *   sqlite3 shell:  .load target/native/nvarray-sqlite
 *                   .open file:/data/app.db?vfs=nvarray
 *   Python:         ctypes.CDLL("target/native/nvarray-sqlite.so").nvarray_sqlite_register()
 *                   sqlite3.connect("file:/data/app.db?vfs=nvarray", uri=True)
 *   any program:    call nvarray_sqlite_register(), then open with vfs "nvarray"
 *
 * What it guarantees. Every page SQLite writes to the main database file between two syncs
 * goes into one nvarray-pm transaction, committed at xSync, or when SQLite gives up its
 * write lock, whichever comes first (with synchronous=OFF SQLite never syncs). A commit is
 * durable and visible to every process when it returns; a process killed before it leaves
 * the database as the previous commit left it (the library's recovery drops a transaction
 * that never committed). So with journal_mode=OFF or MEMORY, SQLite's own atomicity is the
 * library's. Debian's SQLite (3.40) is built without SQLITE_ENABLE_BATCH_ATOMIC_WRITE, so
 * the SQLITE_IOCAP_BATCH_ATOMIC this VFS advertises, and the atomic-write file controls it
 * implements with the same transactions, are used only by a SQLite built with it; with the
 * default journal_mode=DELETE the rollback journal (an ordinary file, through the default
 * VFS) still works, and is only redundant.
 *
 * Layout: the pool's first PAGE_BYTES hold a header (magic, the database file's size); the
 * file's bytes follow. A new pool's size comes from the URI parameter pool_size (bytes) or
 * NVARRAY_SQLITE_POOL_SIZE, default 256 MiB; the pool's own settings (NVM directory,
 * technology, log and cache sizes) from nvarray-pm's NVARRAY_PM_* variables.
 *
 * Locking follows SQLite's VFS contract (shared, reserved, pending, exclusive) with the byte
 * ranges SQLite's own unix VFS locks, taken with open file description locks (F_OFD_SETLK)
 * on the pool's file: each connection has its own description, so two connections in one
 * process exclude each other as two processes do. Journals, temporary files and everything
 * but main databases go to the default VFS unchanged. WAL mode is not offered (no xShmMap).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* F_OFD_SETLK */
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "nvarray_pm.h"

#define VFS_NAME "nvarray"
#define PAGE_BYTES 4096
#define POOL_BYTES_DEFAULT (256ULL << 20)
static const char MAGIC[8] = { 'N', 'V', 'S', 'Q', 'L', 'D', 'B', '1' };

/* The header in the pool's first page. */
struct header {
	char magic[8];
	uint64_t file_bytes;
};

/* SQLite's lock bytes (os_unix.c): the same places, so the protocol is SQLite's. */
#define PENDING_BYTE 0x40000000
#define RESERVED_BYTE (PENDING_BYTE + 1)
#define SHARED_FIRST (PENDING_BYTE + 2)
#define SHARED_SIZE 510

/* The 512-byte blocks (SQLite's smallest page) an open transaction has written: one bit per
 * block, in chunks of CHUNK_BLOCKS blocks made when first written to (so a connection to a
 * large pool holds bits only for the part it writes), and the words holding set bits, so that
 * ending a transaction clears only those. Lets a write of bytes the pool already holds, to
 * blocks the transaction never wrote, be skipped (vfs_write_file). */
#define BLOCK_BYTES 512
#define CHUNK_BLOCKS 65536	/* 32 MiB of pool, 8 KiB of bits */
#define CHUNK_WORDS (CHUNK_BLOCKS / 64)
struct written {
	uint64_t **chunks;	/* one per CHUNK_BLOCKS blocks of the pool, NULL until written */
	size_t chunks_len;
	uint64_t *words;	/* global indices of words with set bits */
	size_t words_len, words_cap;
};

/* A pool open in this process, shared by every connection to it. */
struct pool {
	struct pool *next;
	char *path;
	char *map;
	uint64_t bytes;
	int users;
};

static struct pool *pools;
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

struct vfs_file {
	sqlite3_file base;
	struct pool *pool;
	int lock_fd;		/* this connection's own description, for its locks */
	int level;		/* SQLITE_LOCK_* held */
	nv_tid_t tid;		/* the open transaction, 0 if none */
	uint64_t file_bytes;	/* the file's size inside tid (valid while tid != 0) */
	int in_batch;		/* between BEGIN_ATOMIC_WRITE and COMMIT/ROLLBACK */
	struct written written;	/* the blocks tid has written */
};

static sqlite3_vfs *base_vfs;	/* the default VFS, for everything but main databases */

static struct header *header_of(struct vfs_file *f)
{
	return (struct header *) f->pool->map;
}

static char *data_of(struct vfs_file *f)
{
	return f->pool->map + PAGE_BYTES;
}

static uint64_t capacity_of(struct vfs_file *f)
{
	return f->pool->bytes - PAGE_BYTES;
}

/* The file's size as this connection sees it: its transaction's, or the last commit's. */
static uint64_t file_bytes(struct vfs_file *f)
{
	if (f->tid)
		return f->file_bytes;
	return __atomic_load_n(&header_of(f)->file_bytes, __ATOMIC_ACQUIRE);
}

/* Says why the VFS refused or failed where the user sees it: SQLite itself reports only "unable
 * to open database file" or "disk I/O error". The reason goes to SQLite's error log
 * (sqlite3_log, for programs that install one with SQLITE_CONFIG_LOG) and to stderr, once per
 * distinct message, so a retrying program does not flood it; NVARRAY_SQLITE_QUIET=1 keeps
 * stderr out of it. Returns rc. */
static int report(int rc, const char *fmt, ...)
{
	static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;
	static char last[1024];
	char msg[1024];
	const char *quiet = getenv("NVARRAY_SQLITE_QUIET");
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	sqlite3_log(rc, "nvarray: %s", msg);
	if (quiet && !strcmp(quiet, "1"))
		return rc;
	pthread_mutex_lock(&last_lock);
	if (strcmp(last, msg)) {
		snprintf(last, sizeof last, "%s", msg);
		fprintf(stderr, "nvarray: %s\n", msg);
	}
	pthread_mutex_unlock(&last_lock);
	return rc;
}

static int begin(struct vfs_file *f)
{
	if (f->tid)
		return SQLITE_OK;
	f->file_bytes = file_bytes(f);
	f->tid = nv_txbegin();
	if (f->tid <= 0) {
		f->tid = 0;
		return report(SQLITE_IOERR_WRITE, "%s: no transaction: %s", f->pool->path,
			      nv_last_error());
	}
	return SQLITE_OK;
}

/* Forgets every block written (the transaction ended). */
static void written_clear(struct written *w)
{
	for (size_t i = 0; i < w->words_len; i++)
		w->chunks[w->words[i] / CHUNK_WORDS][w->words[i] % CHUNK_WORDS] = 0;
	w->words_len = 0;
}

static void written_free(struct written *w)
{
	for (size_t i = 0; i < w->chunks_len; i++)
		free(w->chunks[i]);
	free(w->chunks);
	free(w->words);
	memset(w, 0, sizeof *w);
}

/* Whether any block of [offset, end) was written. */
static int written_any(const struct written *w, uint64_t offset, uint64_t end)
{
	for (uint64_t b = offset / BLOCK_BYTES; b < (end + BLOCK_BYTES - 1) / BLOCK_BYTES; b++) {
		uint64_t chunk = b / CHUNK_BLOCKS;
		uint64_t word = (b % CHUNK_BLOCKS) / 64;

		if (chunk < w->chunks_len && w->chunks[chunk] &&
		    (w->chunks[chunk][word] & (1ULL << (b % 64))))
			return 1;
	}
	return 0;
}

/* Marks the blocks of [offset, end) written, for a pool of capacity bytes; -1 without
 * memory (the caller then drops the transaction). */
static int written_mark(struct written *w, uint64_t capacity, uint64_t offset, uint64_t end)
{
	if (!w->chunks) {
		size_t chunks = (size_t) (capacity / BLOCK_BYTES / CHUNK_BLOCKS) + 1;

		w->chunks = calloc(chunks, sizeof *w->chunks);
		if (!w->chunks)
			return -1;
		w->chunks_len = chunks;
	}
	for (uint64_t b = offset / BLOCK_BYTES; b < (end + BLOCK_BYTES - 1) / BLOCK_BYTES; b++) {
		uint64_t chunk = b / CHUNK_BLOCKS;
		uint64_t *word;

		if (chunk >= w->chunks_len)
			return -1;
		if (!w->chunks[chunk] && !(w->chunks[chunk] = calloc(CHUNK_WORDS, sizeof(uint64_t))))
			return -1;
		word = &w->chunks[chunk][(b % CHUNK_BLOCKS) / 64];
		if (!*word) {
			if (w->words_len == w->words_cap) {
				size_t cap = w->words_cap ? 2 * w->words_cap : 64;
				uint64_t *grown = realloc(w->words, cap * sizeof *grown);

				if (!grown)
					return -1;
				w->words = grown;
				w->words_cap = cap;
			}
			w->words[w->words_len++] = b / 64;
		}
		*word |= 1ULL << (b % 64);
	}
	return 0;
}

static void rollback(struct vfs_file *f)
{
	if (f->tid)
		nv_abort(f->tid);
	f->tid = 0;
	written_clear(&f->written);
}

/* A failed nv_write, nv_commit or size check: the whole transaction is dropped at once, so
 * nothing of it can be committed later (SQLite's pager stops the transaction at the error;
 * with journal_mode=OFF it has no journal to undo the pages it already wrote, and this is
 * what keeps them out). A transaction the library cannot hold is SQLITE_FULL, like a pool
 * that is full; anything else an I/O error. Returns the SQLite code. */
static int fail(struct vfs_file *f, int nv_rc, int io_rc)
{
	rollback(f);
	if (nv_rc == NV_EFULL)
		return report(SQLITE_FULL, "%s: transaction refused whole, nothing of it kept: %s; "
			      "a larger NVARRAY_PM_LOG_SIZE (and NVARRAY_PM_CACHE_SIZE) lets one "
			      "transaction hold more (docs/sqlite.md, \"Limits\")",
			      f->pool->path, nv_last_error());
	return report(io_rc, "%s: transaction dropped whole, nothing of it kept: %s",
		      f->pool->path, nv_last_error());
}

/* Commits the open transaction, with the header if the size changed. */
static int commit(struct vfs_file *f)
{
	struct header *h = header_of(f);
	int rc;

	if (!f->tid)
		return SQLITE_OK;
	if (f->file_bytes != __atomic_load_n(&h->file_bytes, __ATOMIC_ACQUIRE)) {
		rc = nv_write(f->tid, &h->file_bytes, &f->file_bytes, sizeof f->file_bytes);
		if (rc != NV_OK)
			return fail(f, rc, SQLITE_IOERR_FSYNC);
	}
	rc = nv_commit(f->tid);
	/* The id is gone either way: committed, or aborted by the failed commit. */
	f->tid = 0;
	written_clear(&f->written);
	if (rc != NV_OK)
		return fail(f, rc, SQLITE_IOERR_FSYNC);
	return SQLITE_OK;
}

/* ---- pools ---------------------------------------------------------------------------- */

/* What is at a path before the VFS touches it. */
enum found {
	FOUND_NONE,	/* nothing: a new database */
	FOUND_EMPTY,	/* an empty regular file: made a pool, as SQLite makes it a database */
	FOUND_POOL,	/* a pool of this VFS (its header's magic) */
	FOUND_OTHER,	/* anything else: never written */
	FOUND_SIMULATED,	/* a power-cut test's simulated pool: looked at through its mapping */
};

/* Looks at path with reads only: a file that is not a pool of this VFS (a SQLite database
 * made without it, an image of zeros, another program's data, a FIFO) is left exactly as it
 * was, not even given the library's extended attribute. */
static enum found look(const char *path, char *why, size_t why_len)
{
	char magic[sizeof MAGIC];
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0) {
		if (errno == ENOENT)
			return FOUND_NONE;
		snprintf(why, why_len, "cannot open it: %s", strerror(errno));
		return FOUND_OTHER;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(why, why_len, "not a regular file");
		return FOUND_OTHER;
	}
	if (st.st_size == 0) {
		close(fd);
		return FOUND_EMPTY;
	}
	n = pread(fd, magic, sizeof magic, 0);
	close(fd);
	if (n == (ssize_t) sizeof magic && !memcmp(magic, MAGIC, sizeof MAGIC))
		return FOUND_POOL;
	snprintf(why, why_len,
		 "its %lld bytes do not begin with this VFS's header (NVSQLDB1), so it is not a "
		 "database kept by it; it was left unchanged. A database made without the VFS is "
		 "opened without it (or copied in with .backup / VACUUM INTO); a file of zeros or "
		 "other data is not made a pool: remove it, or open another path",
		 (long long) st.st_size);
	return FOUND_OTHER;
}

/* Writes the header of a pool whose bytes are all zeros, in one transaction. */
static int write_header(char *map)
{
	struct header fresh = { .file_bytes = 0 };
	nv_tid_t t;

	memcpy(fresh.magic, MAGIC, sizeof MAGIC);
	t = nv_txbegin();
	if (t <= 0)
		return -1;
	if (nv_write(t, map, &fresh, sizeof fresh) != NV_OK || nv_commit(t) != NV_OK) {
		nv_abort(t);
		return -1;
	}
	return 0;
}

/* Makes a new pool at path, whole or not at all: the pool is made and given its header under
 * a temporary name beside it, then linked to path. A process killed meanwhile leaves no file
 * at path that looks like a pool without being one (only the temporary, named after it), and
 * of two processes making the same database at once the first link wins; the other opens
 * that one. Returns 0, or -1 with the reason reported. */
static int make_pool(const char *path, uint64_t bytes)
{
	static unsigned counter;
	size_t len = strlen(path) + 64;
	char *tmp = malloc(len);
	char *map;
	int rc = -1;

	if (!tmp)
		return -1;
	snprintf(tmp, len, "%s.nvarray-new-%ld-%u", path, (long) getpid(),
		 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
	map = nv_allocate(tmp, bytes, NV_CREATE);
	if (!map) {
		report(SQLITE_CANTOPEN, "%s: cannot make a pool of %llu bytes: %s", path,
		       (unsigned long long) bytes, nv_last_error());
		unlink(tmp);
		free(tmp);
		return -1;
	}
	if (write_header(map) != 0) {
		report(SQLITE_CANTOPEN, "%s: cannot write the new pool's header: %s", path,
		       nv_last_error());
		nv_free(map);
		unlink(tmp);
		free(tmp);
		return -1;
	}
	if (nv_free(map) != NV_OK) {
		report(SQLITE_CANTOPEN, "%s: cannot close the new pool: %s", path, nv_last_error());
	} else if (link(tmp, path) == 0 || errno == EEXIST) {
		rc = 0;	/* ours, or another process's made first: open whichever is there */
	} else {
		report(SQLITE_CANTOPEN, "%s: cannot link the new pool into place: %s", path,
		       strerror(errno));
	}
	unlink(tmp);
	free(tmp);
	return rc;
}

/* Opens (and with create, makes) the pool at path. A new pool is bytes bytes. NULL when
 * refused, with the reason reported. */
static struct pool *pool_open(const char *path, uint64_t bytes, int create, int readonly)
{
	struct pool *p;
	struct header *h;
	enum found found;
	char why[512] = "";

	pthread_mutex_lock(&pools_lock);
	for (p = pools; p; p = p->next) {
		if (!strcmp(p->path, path)) {
			p->users++;
			pthread_mutex_unlock(&pools_lock);
			return p;
		}
	}
	/* A simulated pool's file (power-cut tests, nv_sim_start) is a placeholder that holds
	 * none of its bytes: it is looked at through the mapping (below) instead, made in
	 * place. */
	found = nv_sim_active() ? FOUND_SIMULATED : look(path, why, sizeof why);
	if (found == FOUND_NONE && create && !readonly) {
		if (make_pool(path, bytes) != 0)
			goto refused;
		found = look(path, why, sizeof why);
	}
	switch (found) {
	case FOUND_NONE:
		report(SQLITE_CANTOPEN, "%s: no such database", path);
		goto refused;
	case FOUND_EMPTY:
		if (readonly) {
			report(SQLITE_CANTOPEN, "%s: an empty file opened read-only: it is not a pool "
			       "yet, and a read-only open never writes; open it read-write once to "
			       "make it one", path);
			goto refused;
		}
		break;
	case FOUND_POOL:
		bytes = 0;	/* an existing pool keeps its size */
		break;
	case FOUND_SIMULATED:
		if (access(path, F_OK) == 0)
			bytes = 0;
		else if (!create || readonly)
			goto refused;
		break;
	case FOUND_OTHER: {
		const char *holder = nv_file_holder(path);

		report(SQLITE_CANTOPEN, "%s: refused: %s%s%s", path, why,
		       holder && *holder ? "; besides, " : "", holder ? holder : "");
		goto refused;
	}
	}
	p = calloc(1, sizeof(*p));
	if (!p || !(p->path = strdup(path))) {
		free(p);
		goto refused;
	}
	p->map = nv_allocate(path, bytes, found == FOUND_SIMULATED ? NV_CREATE : 0);
	if (!p->map) {
		report(SQLITE_CANTOPEN, "%s: %s", path, nv_last_error());
		goto refused_pool;
	}
	h = (struct header *) p->map;
	if (found == FOUND_SIMULATED && !memcmp(h, &(struct header){ 0 }, sizeof *h))
		found = FOUND_EMPTY;	/* a new simulated pool: all zeros */
	if (found == FOUND_EMPTY && write_header(p->map) != 0) {
		report(SQLITE_CANTOPEN, "%s: cannot write the new pool's header: %s", path,
		       nv_last_error());
		nv_free(p->map);
		goto refused_pool;
	}
	if (memcmp(h->magic, MAGIC, sizeof MAGIC)) {
		/* Replaced between the look and the open. */
		report(SQLITE_CANTOPEN, "%s: refused: the file changed while it was being opened "
		       "and is no longer a pool of this VFS", path);
		nv_free(p->map);
		goto refused_pool;
	}
	/* The pool's size: the file's. */
	{
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		off_t end = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;

		if (fd >= 0)
			close(fd);
		p->bytes = end > 0 ? (uint64_t) end : bytes;
	}
	p->users = 1;
	p->next = pools;
	pools = p;
	pthread_mutex_unlock(&pools_lock);
	return p;

refused_pool:
	free(p->path);
	free(p);
refused:
	pthread_mutex_unlock(&pools_lock);
	return NULL;
}

static void pool_close(struct pool *p)
{
	struct pool **at;

	pthread_mutex_lock(&pools_lock);
	if (--p->users == 0) {
		for (at = &pools; *at; at = &(*at)->next) {
			if (*at == p) {
				*at = p->next;
				break;
			}
		}
		nv_free(p->map);
		free(p->path);
		free(p);
	}
	pthread_mutex_unlock(&pools_lock);
}

/* ---- locks ----------------------------------------------------------------------------- */

/* Sets (F_RDLCK, F_WRLCK) or clears (F_UNLCK) a lock on [start, start + len) without
 * waiting. Returns 0, or SQLITE_BUSY when another description holds a conflicting lock. */
static int ofd_lock(struct vfs_file *f, short type, off_t start, off_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };

	if (fcntl(f->lock_fd, F_OFD_SETLK, &fl) == 0)
		return SQLITE_OK;
	return (errno == EAGAIN || errno == EACCES) ? SQLITE_BUSY : SQLITE_IOERR_LOCK;
}

static int vfs_lock(sqlite3_file *file, int level)
{
	struct vfs_file *f = (struct vfs_file *) file;
	int rc;

	if (f->level >= level)
		return SQLITE_OK;
	if (level == SQLITE_LOCK_SHARED) {
		/* A pending writer keeps new readers out (os_unix.c's protocol). */
		rc = ofd_lock(f, F_RDLCK, PENDING_BYTE, 1);
		if (rc)
			return rc;
		rc = ofd_lock(f, F_RDLCK, SHARED_FIRST, SHARED_SIZE);
		ofd_lock(f, F_UNLCK, PENDING_BYTE, 1);
		if (rc == SQLITE_OK)
			f->level = SQLITE_LOCK_SHARED;
		return rc;
	}
	if (level == SQLITE_LOCK_RESERVED) {
		rc = ofd_lock(f, F_WRLCK, RESERVED_BYTE, 1);
		if (rc == SQLITE_OK)
			f->level = SQLITE_LOCK_RESERVED;
		return rc;
	}
	/* EXCLUSIVE (SQLite asks PENDING of the VFS only through EXCLUSIVE): hold PENDING so no
	 * new reader comes, then wait for the readers there are. */
	if (f->level < SQLITE_LOCK_PENDING) {
		rc = ofd_lock(f, F_WRLCK, PENDING_BYTE, 1);
		if (rc)
			return rc;
		f->level = SQLITE_LOCK_PENDING;
	}
	rc = ofd_lock(f, F_WRLCK, SHARED_FIRST, SHARED_SIZE);
	if (rc == SQLITE_OK)
		f->level = SQLITE_LOCK_EXCLUSIVE;
	return rc;
}

static int vfs_unlock(sqlite3_file *file, int level)
{
	struct vfs_file *f = (struct vfs_file *) file;
	int rc = SQLITE_OK;

	if (f->level <= level)
		return SQLITE_OK;
	/* Giving up the write lock ends SQLite's write transaction. A commit reached one of the
	 * commit points first (xSync, SQLITE_FCNTL_SYNC, which SQLite sends even with
	 * synchronous=OFF, or SQLITE_FCNTL_COMMIT_PHASETWO); writes still open here belong to a
	 * transaction SQLite rolled back or gave up on after an error (with journal_mode=OFF or
	 * MEMORY, pages it spilled before a ROLLBACK, or before a full pool), so they are
	 * dropped, never committed. */
	if (f->level >= SQLITE_LOCK_RESERVED && !f->in_batch)
		rollback(f);
	if (level == SQLITE_LOCK_SHARED) {
		if (f->level == SQLITE_LOCK_EXCLUSIVE &&
		    ofd_lock(f, F_RDLCK, SHARED_FIRST, SHARED_SIZE) != SQLITE_OK)
			rc = SQLITE_IOERR_RDLOCK;
		ofd_lock(f, F_UNLCK, PENDING_BYTE, 2);	/* pending and reserved */
		f->level = SQLITE_LOCK_SHARED;
		return rc;
	}
	ofd_lock(f, F_UNLCK, 0, 0);	/* everything */
	f->level = SQLITE_LOCK_NONE;
	return rc;
}

static int vfs_check_reserved(sqlite3_file *file, int *out)
{
	struct vfs_file *f = (struct vfs_file *) file;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = RESERVED_BYTE,
			    .l_len = 1 };

	if (f->level >= SQLITE_LOCK_RESERVED) {
		*out = 1;
		return SQLITE_OK;
	}
	if (fcntl(f->lock_fd, F_OFD_GETLK, &fl) != 0)
		return SQLITE_IOERR_CHECKRESERVEDLOCK;
	*out = fl.l_type != F_UNLCK;
	return SQLITE_OK;
}

/* ---- I/O ------------------------------------------------------------------------------- */

static int vfs_close(sqlite3_file *file)
{
	struct vfs_file *f = (struct vfs_file *) file;

	/* SQLite commits (and unlocks) before it closes: anything still open was never meant
	 * to be kept. */
	rollback(f);
	written_free(&f->written);
	if (f->lock_fd >= 0)
		close(f->lock_fd);
	pool_close(f->pool);
	return SQLITE_OK;
}

static int vfs_read(sqlite3_file *file, void *buf, int amount, sqlite3_int64 offset)
{
	struct vfs_file *f = (struct vfs_file *) file;
	uint64_t size = file_bytes(f), have;

	if (offset < 0 || amount < 0)
		return SQLITE_IOERR_READ;
	/* SQLite reads the 16 bytes at 24 (the change counter, to see whether its cache is stale)
	 * only when its pager starts afresh, outside any transaction of its own (pager.c,
	 * sqlite3PagerSharedLock). Writes still open then belong to a transaction it gave up
	 * without unlocking: with locking_mode=EXCLUSIVE it never unlocks, and a ROLLBACK with
	 * journal_mode=OFF, after it spilled pages here, only resets its cache. They are dropped,
	 * as an unlock drops them, so the next commit cannot carry them. */
	if (f->tid && !f->in_batch && offset == 24 && amount == 16) {
		rollback(f);
		size = file_bytes(f);
	}
	have = (uint64_t) offset >= size ? 0 : size - (uint64_t) offset;
	if (have > (uint64_t) amount)
		have = (uint64_t) amount;
	if (have) {
		if (f->tid) {
			if (nv_read(f->tid, buf, data_of(f) + offset, have) != NV_OK)
				return SQLITE_IOERR_READ;
		} else {
			memcpy(buf, data_of(f) + offset, have);
		}
	}
	if (have < (uint64_t) amount) {
		/* SQLite's contract: the rest zero-filled, and say so. */
		memset((char *) buf + have, 0, (size_t) amount - have);
		return SQLITE_IOERR_SHORT_READ;
	}
	return SQLITE_OK;
}

static int vfs_write_file(sqlite3_file *file, const void *buf, int amount, sqlite3_int64 offset)
{
	struct vfs_file *f = (struct vfs_file *) file;
	uint64_t end;
	int rc;

	if (offset < 0 || amount < 0)
		return SQLITE_IOERR_WRITE;
	end = (uint64_t) offset + (uint64_t) amount;
	if (end > capacity_of(f)) {
		rollback(f);
		return report(SQLITE_FULL, "%s: the pool is full (%llu bytes for the database; it "
			      "would need %llu): the transaction was refused whole. A pool keeps "
			      "the size it was made with (pool_size)", f->pool->path,
			      (unsigned long long) capacity_of(f), (unsigned long long) end);
	}
	/* Bytes the pool already holds, to blocks this transaction has not written, are not
	 * written again: SQLite rolling a transaction back from its journal writes back every
	 * page it journaled, most of them (all, after a refusal, which dropped the rest) the
	 * same as the last commit left them, and logging those too could make the rollback
	 * larger than the library takes, a hot journal nobody could roll back. */
	if (end <= file_bytes(f) && !written_any(&f->written, (uint64_t) offset, end) &&
	    !memcmp(data_of(f) + offset, buf, (size_t) amount))
		return SQLITE_OK;
	rc = begin(f);
	if (rc)
		return rc;
	rc = nv_write(f->tid, data_of(f) + offset, buf, (size_t) amount);
	if (rc != NV_OK)
		return fail(f, rc, SQLITE_IOERR_WRITE);
	if (written_mark(&f->written, capacity_of(f), (uint64_t) offset, end) != 0)
		return fail(f, NV_ERROR, SQLITE_IOERR_NOMEM);
	if (end > f->file_bytes)
		f->file_bytes = end;
	return SQLITE_OK;
}

static int vfs_truncate(sqlite3_file *file, sqlite3_int64 size)
{
	struct vfs_file *f = (struct vfs_file *) file;
	int rc;

	if (size < 0)
		return SQLITE_IOERR_TRUNCATE;
	if (!f->tid && (uint64_t) size == file_bytes(f))
		return SQLITE_OK;
	rc = begin(f);
	if (rc)
		return rc;
	/* The bytes past the end stay in the pool; the size in the header is what counts. */
	f->file_bytes = (uint64_t) size;
	return SQLITE_OK;
}

static int vfs_sync(sqlite3_file *file, int flags)
{
	struct vfs_file *f = (struct vfs_file *) file;

	(void) flags;
	if (f->in_batch)
		return SQLITE_OK;
	return commit(f);
}

static int vfs_file_size(sqlite3_file *file, sqlite3_int64 *size)
{
	*size = (sqlite3_int64) file_bytes((struct vfs_file *) file);
	return SQLITE_OK;
}

static int vfs_file_control(sqlite3_file *file, int op, void *arg)
{
	struct vfs_file *f = (struct vfs_file *) file;
	int rc;

	(void) arg;
	switch (op) {
	case SQLITE_FCNTL_BEGIN_ATOMIC_WRITE:
		/* Whatever came before is SQLite's earlier state: commit it first. */
		rc = commit(f);
		if (rc)
			return rc;
		f->in_batch = 1;
		return begin(f);
	case SQLITE_FCNTL_COMMIT_ATOMIC_WRITE:
		f->in_batch = 0;
		return commit(f);
	case SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE:
		f->in_batch = 0;
		rollback(f);
		return SQLITE_OK;
	case SQLITE_FCNTL_SYNC:
	case SQLITE_FCNTL_COMMIT_PHASETWO:
		/* SQLite's commit points besides xSync: SYNC comes before the database is synced
		 * (and in its place with synchronous=OFF), COMMIT_PHASETWO once the transaction
		 * is committed, before the unlock (and with locking_mode=EXCLUSIVE, which never
		 * unlocks). */
		if (f->in_batch)
			return SQLITE_OK;
		return commit(f);
	case SQLITE_FCNTL_VFSNAME:
		*(char **) arg = sqlite3_mprintf("%s", VFS_NAME);
		return SQLITE_OK;
	}
	return SQLITE_NOTFOUND;
}

static int vfs_sector_size(sqlite3_file *file)
{
	(void) file;
	return PAGE_BYTES;
}

static int vfs_device_characteristics(sqlite3_file *file)
{
	(void) file;
	/* Writes between syncs land together or not at all; nothing survives a crash half
	 * written; a process sees its own writes at once. */
	return SQLITE_IOCAP_BATCH_ATOMIC | SQLITE_IOCAP_SAFE_APPEND | SQLITE_IOCAP_SEQUENTIAL |
	       SQLITE_IOCAP_POWERSAFE_OVERWRITE | SQLITE_IOCAP_UNDELETABLE_WHEN_OPEN;
}

static const sqlite3_io_methods vfs_methods = {
	.iVersion = 1,
	.xClose = vfs_close,
	.xRead = vfs_read,
	.xWrite = vfs_write_file,
	.xTruncate = vfs_truncate,
	.xSync = vfs_sync,
	.xFileSize = vfs_file_size,
	.xLock = vfs_lock,
	.xUnlock = vfs_unlock,
	.xCheckReservedLock = vfs_check_reserved,
	.xFileControl = vfs_file_control,
	.xSectorSize = vfs_sector_size,
	.xDeviceCharacteristics = vfs_device_characteristics,
};

/* ---- the VFS --------------------------------------------------------------------------- */

static int vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
		   int *out_flags)
{
	struct vfs_file *f = (struct vfs_file *) file;
	sqlite3_int64 bytes;
	const char *env;

	(void) vfs;
	if (!name || !(flags & SQLITE_OPEN_MAIN_DB))
		return base_vfs->xOpen(base_vfs, name, file, flags, out_flags);
	memset(f, 0, sizeof(*f));
	f->lock_fd = -1;
	env = getenv("NVARRAY_SQLITE_POOL_SIZE");
	bytes = env && *env ? strtoll(env, NULL, 10) : (sqlite3_int64) POOL_BYTES_DEFAULT;
	bytes = sqlite3_uri_int64(name, "pool_size", bytes);
	if (bytes < 2 * PAGE_BYTES)
		return report(SQLITE_CANTOPEN, "%s: pool_size %lld (or NVARRAY_SQLITE_POOL_SIZE) is "
			      "too small: a pool holds a %d-byte header and then the database, so it "
			      "needs at least %d bytes", name, (long long) bytes, PAGE_BYTES,
			      2 * PAGE_BYTES);
	f->pool = pool_open(name, (uint64_t) bytes, (flags & SQLITE_OPEN_CREATE) != 0,
			    (flags & SQLITE_OPEN_READONLY) != 0);
	if (!f->pool)
		return SQLITE_CANTOPEN;
	f->lock_fd = open(name, ((flags & SQLITE_OPEN_READONLY) ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (f->lock_fd < 0) {
		report(SQLITE_CANTOPEN, "%s: %s", name, strerror(errno));
		pool_close(f->pool);
		return SQLITE_CANTOPEN;
	}
	f->base.pMethods = &vfs_methods;
	if (out_flags)
		*out_flags = flags;
	return SQLITE_OK;
}

/* Deletes journals and the like through the default VFS; a pool is removed as a file too,
 * which nvarray-pm refuses to reuse only if a crash left commits for it. */
static int vfs_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
	(void) vfs;
	return base_vfs->xDelete(base_vfs, name, sync_dir);
}

static int vfs_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
	(void) vfs;
	return base_vfs->xAccess(base_vfs, name, flags, out);
}

static int vfs_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
	(void) vfs;
	return base_vfs->xFullPathname(base_vfs, name, n, out);
}

static void *vfs_dlopen(sqlite3_vfs *vfs, const char *name)
{
	(void) vfs;
	return base_vfs->xDlOpen(base_vfs, name);
}

static void vfs_dlerror(sqlite3_vfs *vfs, int n, char *out)
{
	(void) vfs;
	base_vfs->xDlError(base_vfs, n, out);
}

static void (*vfs_dlsym(sqlite3_vfs *vfs, void *handle, const char *sym))(void)
{
	(void) vfs;
	return base_vfs->xDlSym(base_vfs, handle, sym);
}

static void vfs_dlclose(sqlite3_vfs *vfs, void *handle)
{
	(void) vfs;
	base_vfs->xDlClose(base_vfs, handle);
}

static int vfs_randomness(sqlite3_vfs *vfs, int n, char *out)
{
	(void) vfs;
	return base_vfs->xRandomness(base_vfs, n, out);
}

static int vfs_sleep(sqlite3_vfs *vfs, int us)
{
	(void) vfs;
	return base_vfs->xSleep(base_vfs, us);
}

static int vfs_current_time(sqlite3_vfs *vfs, double *out)
{
	(void) vfs;
	return base_vfs->xCurrentTime(base_vfs, out);
}

static int vfs_last_error(sqlite3_vfs *vfs, int n, char *out)
{
	(void) vfs;
	return base_vfs->xGetLastError ? base_vfs->xGetLastError(base_vfs, n, out) : 0;
}

static sqlite3_vfs vfs_vfs = {
	.iVersion = 1,
	.mxPathname = 1024,
	.zName = VFS_NAME,
	.xOpen = vfs_open,
	.xDelete = vfs_delete,
	.xAccess = vfs_access,
	.xFullPathname = vfs_full_pathname,
	.xDlOpen = vfs_dlopen,
	.xDlError = vfs_dlerror,
	.xDlSym = vfs_dlsym,
	.xDlClose = vfs_dlclose,
	.xRandomness = vfs_randomness,
	.xSleep = vfs_sleep,
	.xCurrentTime = vfs_current_time,
	.xGetLastError = vfs_last_error,
};

/* Registers the VFS "nvarray" with the process's SQLite (not as the default). Safe to call
 * more than once. Returns SQLITE_OK or an SQLite error code. */
int nvarray_sqlite_register(void)
{
	if (sqlite3_vfs_find(VFS_NAME))
		return SQLITE_OK;
	base_vfs = sqlite3_vfs_find(NULL);
	if (!base_vfs)
		return SQLITE_ERROR;
	vfs_vfs.szOsFile = base_vfs->szOsFile > (int) sizeof(struct vfs_file) ?
			  base_vfs->szOsFile : (int) sizeof(struct vfs_file);
	return sqlite3_vfs_register(&vfs_vfs, 0);
}

/* The entry point `.load target/native/nvarray-sqlite` finds (SQLite names it from the file:
 * sqlite3_ + "nvarraysqlite" + _init). This library calls the SQLite the process already
 * has (the shell's and Python's libsqlite3.so.0), so it needs no sqlite3_api table. */
int sqlite3_nvarraysqlite_init(sqlite3 *db, char **err, const void *api)
{
	int rc;

	(void) db;
	(void) api;
	rc = nvarray_sqlite_register();
	if (rc != SQLITE_OK) {
		if (err)
			*err = sqlite3_mprintf("nvarray: cannot register the VFS (%d)", rc);
		return rc;
	}
	/* Keep the library (and so the VFS) loaded after this connection closes. */
	return SQLITE_OK_LOAD_PERMANENTLY;
}
