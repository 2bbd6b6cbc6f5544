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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

static int begin(struct vfs_file *f)
{
	if (f->tid)
		return SQLITE_OK;
	f->file_bytes = file_bytes(f);
	f->tid = nv_txbegin();
	if (f->tid <= 0) {
		f->tid = 0;
		return SQLITE_IOERR_WRITE;
	}
	return SQLITE_OK;
}

/* Commits the open transaction, with the header if the size changed. */
static int commit(struct vfs_file *f)
{
	struct header *h = header_of(f);
	int rc;

	if (!f->tid)
		return SQLITE_OK;
	if (f->file_bytes != __atomic_load_n(&h->file_bytes, __ATOMIC_ACQUIRE) &&
	    nv_write(f->tid, &h->file_bytes, &f->file_bytes, sizeof f->file_bytes) != NV_OK) {
		nv_abort(f->tid);
		f->tid = 0;
		return SQLITE_IOERR_FSYNC;
	}
	rc = nv_commit(f->tid);
	f->tid = 0;
	return rc == NV_OK ? SQLITE_OK : SQLITE_IOERR_FSYNC;
}

static void rollback(struct vfs_file *f)
{
	if (f->tid)
		nv_abort(f->tid);
	f->tid = 0;
}

/* ---- pools ---------------------------------------------------------------------------- */

static struct pool *pool_open(const char *path, uint64_t bytes, int create)
{
	struct pool *p;
	struct header *h;
	int fresh;

	pthread_mutex_lock(&pools_lock);
	for (p = pools; p; p = p->next) {
		if (!strcmp(p->path, path)) {
			p->users++;
			pthread_mutex_unlock(&pools_lock);
			return p;
		}
	}
	fresh = access(path, F_OK) != 0;
	if (fresh && !create) {
		pthread_mutex_unlock(&pools_lock);
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p || !(p->path = strdup(path))) {
		free(p);
		pthread_mutex_unlock(&pools_lock);
		return NULL;
	}
	p->map = nv_allocate(path, fresh ? bytes : 0, create ? NV_CREATE : 0);
	if (!p->map) {
		free(p->path);
		free(p);
		pthread_mutex_unlock(&pools_lock);
		return NULL;
	}
	h = (struct header *) p->map;
	if (memcmp(h->magic, MAGIC, sizeof MAGIC)) {
		/* A new pool (all zeros): write its header. Anything else is not ours. */
		static const char zeros[sizeof MAGIC];
		struct header fresh_header = { .file_bytes = 0 };
		nv_tid_t t;

		if (memcmp(h->magic, zeros, sizeof zeros) || h->file_bytes) {
			nv_free(p->map);
			free(p->path);
			free(p);
			pthread_mutex_unlock(&pools_lock);
			errno = EINVAL;
			return NULL;
		}
		memcpy(fresh_header.magic, MAGIC, sizeof MAGIC);
		t = nv_txbegin();
		if (t <= 0 || nv_write(t, h, &fresh_header, sizeof fresh_header) != NV_OK ||
		    nv_commit(t) != NV_OK) {
			if (t > 0)
				nv_abort(t);
			nv_free(p->map);
			free(p->path);
			free(p);
			pthread_mutex_unlock(&pools_lock);
			return NULL;
		}
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
	/* Giving up the write lock ends SQLite's write transaction: what it wrote is committed
	 * now (it syncs first unless synchronous=OFF). */
	if (f->level >= SQLITE_LOCK_RESERVED && !f->in_batch)
		rc = commit(f);
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
	if (end > capacity_of(f))
		return SQLITE_FULL;
	rc = begin(f);
	if (rc)
		return rc;
	if (nv_write(f->tid, data_of(f) + offset, buf, (size_t) amount) != NV_OK)
		return SQLITE_IOERR_WRITE;
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
		return SQLITE_CANTOPEN;
	f->pool = pool_open(name, (uint64_t) bytes, (flags & SQLITE_OPEN_CREATE) != 0);
	if (!f->pool)
		return SQLITE_CANTOPEN;
	f->lock_fd = open(name, O_RDWR | O_CLOEXEC);
	if (f->lock_fd < 0) {
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
