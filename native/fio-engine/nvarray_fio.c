/*
 * nvarray_fio.c: fio's external ioengine "nvarray", over libnvarray's channels.
 *
 *   fio --name=job --ioengine=external:target/native/nvarray-fio.so \
 *       --filename=/run/nvarray.sock --rw=randread --bs=4k --iodepth=16
 *
 * Built by scripts/build_native.sh against the headers of the very fio that loads it (fio
 * 3.33 here): an external engine reads fio's own structures (thread_data, io_u, fio_file)
 * and fio checks only ioengine_ops.version (FIO_IOOPS_VERSION, 31 in fio 3.33) before
 * using it, so an engine built against another fio's headers must not be loaded.
 *
 * Each fio job thread or process opens its own channel to the daemon (nvarray serve
 * --channels unix:PATH) in ->init(): its own submission and completion rings and DMA region,
 * with room for iodepth commands. ->queue() submits asynchronously (nvarray_submit), and
 * ->getevents() polls the completion ring. Nothing in the I/O path makes a system call.
 *
 * The socket: the engine option socket=PATH, or else the job's filename (so
 * filename=/run/nvarray.sock works). Every file of a job is a view of the whole device.
 *
 * fio 3.33's call order (backend.c thread_main, filesetup.c setup_files, memory.c):
 *   1. ->setup(): from setup_files(), in fio's parent process before it forks the job
 *      (create_serialize=1, the default), or in the job's thread after ->init() and its
 *      io buffers (create_serialize=0). It sets each file's real_file_size to the device's
 *      size, so size= defaults to the whole device: the job's channel when it is already
 *      open, else a channel opened only to read the device's geometry and closed again (a
 *      channel is never shared across fork).
 *   2. ->init(): in the job's thread or process; opens the job's channel.
 *   3. ->iomem_alloc(): from init_io_u() -> init_io_u_buffers() -> allocate_io_mem(), after
 *      ->init(), so the channel exists: fio's io buffers (iodepth x max bs) ARE the DMA
 *      region.
 *   4. ->open_file() / ->close_file(): as fio starts and ends using each file (nothing to
 *      open: the channel is the job's).
 *   5. ->iomem_free() (cleanup_io_u), then ->cleanup() (close_ioengine), which closes the
 *      channel after the commands still in flight.
 *
 * Buffers: zero copy. Because ->iomem_alloc() comes after ->init(), fio's io_u buffers are
 * carved out of the channel's DMA region, so a command names fio's buffer itself and no byte
 * is copied. ->init() asks the daemon for a region that holds iodepth buffers of the largest
 * block size (plus fio's alignment slack); when the daemon gives less, ->iomem_alloc() fails
 * with a message saying so (a copying engine would need the same room for its staging
 * slots). As a consequence fio's mem=/iomem= options cannot be used with this engine (fio
 * says they conflict with the engine).
 *
 * An io_u longer than the device's largest command (command_bytes_max) is split into several
 * commands; it completes when all have, with the first error any of them had. Flushes carry
 * fio's sync, datasync and sync_file_range; a trim is the device's deallocate (NVARRAY_OP_TRIM,
 * no data), split the same way.
 *
 * Zones: on a zoned namespace (the daemon's device has [zns]) fio's zonemode=zbd works as on
 * a host-managed zoned block device: ->get_zoned_model(), ->report_zones(), ->reset_wp() and
 * ->get_max_open_zones() below, and the job's file is a block device to fio. Writes off a
 * zone's write pointer fail with EIO, as the kernel's zoned block devices fail them.
 *
 * Errors: a command's negative result becomes io_u->error = -result (a positive errno, with
 * resid = the whole length): an error never turns into a successful completion.
 */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fio.h"
#include "optgroup.h"

#include "nvarray.h"

/* Empty polls between two sched_yield()s: with more fio jobs than cores, the daemon's
 * thread and the other jobs still run. */
#define NV_POLLS_PER_YIELD 1000
/* Empty polls between two looks at the clock when getevents has a timeout. */
#define NV_POLLS_PER_CLOCK 64

/* The engine's options (fio --enghelp=PATH/nvarray-fio.so). fio stores the thread's pointer
 * in the struct's first word, hence the padding. */
struct nv_options {
	void *pad;
	char *socket;
};

static struct fio_option options[] = {
	{
		.name		= "socket",
		.lname		= "nvarray socket",
		.type		= FIO_OPT_STR_STORE,
		.off1		= offsetof(struct nv_options, socket),
		.help		= "Unix socket of the nvarray daemon (nvarray serve --channels unix:PATH); default: the job's filename",
		.category	= FIO_OPT_C_ENGINE,
		.group		= FIO_OPT_G_INVALID,
	},
	{
		.name		= NULL,
	},
};

/* What is pending for one io_u, by io_u->index (fio numbers its io_us 0..iodepth-1). */
struct nv_pending {
	unsigned int commands;	/* its commands still in flight */
	unsigned int error;	/* the first error of any of them (positive errno), or 0 */
};

/* One job thread's (or process's) engine state, td->io_ops_data. */
struct nv_data {
	nvarray_channel *ch;
	struct nvarray_info info;
	char *region;			/* the DMA region, info.buffer_bytes long */
	int dead;			/* set once the daemon went away: the errno */
	unsigned int warned_region;	/* io_u buffers seen outside the region */

	struct nv_pending *pending;	/* iodepth of them */
	unsigned int nr_pending;

	struct io_u **events;		/* io_us finished by the last ->getevents() */
	unsigned int nr_events;

	struct io_u **queued;		/* io_us submitted since the last ->commit() */
	unsigned int nr_queued;

	struct nvarray_completion *completions;	/* scratch for nvarray_poll */
	unsigned int nr_completions;
};

static int nv_socket_given(struct thread_data *td)
{
	struct nv_options *o = td->eo;

	return o && o->socket && o->socket[0];
}

/* The daemon's socket: socket=, else the job's (first) filename. */
static const char *nv_socket(struct thread_data *td)
{
	if (nv_socket_given(td))
		return ((struct nv_options *) td->eo)->socket;
	if (td->files_index && td->files[0])
		return td->files[0]->file_name;
	return NULL;
}

/* Opens a channel, explaining a failure. `queue_depth` and `buffer_bytes` 0 ask for the
 * daemon's defaults. Returns 0 or a negative errno. */
static int nv_open(struct thread_data *td, uint32_t queue_depth, uint64_t buffer_bytes,
		   nvarray_channel **out)
{
	const char *path = nv_socket(td);
	int r;

	if (!path) {
		log_err("nvarray: job %s names no daemon: give filename=PATH or socket=PATH (the "
			"Unix socket of `nvarray serve --channels unix:PATH`)\n", td->o.name);
		return -EINVAL;
	}
	if (!nv_socket_given(td) && td->o.nr_files > 1) {
		log_err("nvarray: job %s has %u files; with several, give the daemon's socket with "
			"socket=PATH (each file is then a view of the whole device)\n",
			td->o.name, td->o.nr_files);
		return -EINVAL;
	}

	r = nvarray_open_with(path, queue_depth, buffer_bytes, out);
	if (r == 0)
		return 0;

	switch (r) {
	case -ENOENT:
	case -ECONNREFUSED:
		log_err("nvarray: no daemon at %s (%s): start `nvarray serve --channels unix:%s`, "
			"or give the daemon's socket with filename= or socket=\n",
			path, nvarray_strerror(r), path);
		break;
	case -EPROTO:
		log_err("nvarray: the daemon at %s speaks another version of the channel protocol "
			"than this libnvarray (ABI %d): rebuild one of them\n",
			path, NVARRAY_ABI_VERSION);
		break;
	default:
		log_err("nvarray: the daemon at %s refused a channel: %s (%s)\n",
			path, nvarray_strerror(r), strerror(-r));
		break;
	}
	return r;
}

/* The device's geometry: from the job's channel when it is open, else from a channel opened
 * for the question alone. */
static int nv_query(struct thread_data *td, struct nvarray_info *info)
{
	struct nv_data *nd = td->io_ops_data;
	nvarray_channel *ch;
	int r;

	if (nd && nd->ch) {
		*info = nd->info;
		return 0;
	}
	r = nv_open(td, 0, 0, &ch);
	if (r)
		return r;
	nvarray_get_info(ch, info);
	nvarray_close(ch);
	return 0;
}

/* fio sizes the job's files from the device: size= defaults to the whole device. */
static int nv_setup(struct thread_data *td)
{
	struct nvarray_info info;
	struct fio_file *f;
	unsigned int i;
	int r;

	r = nv_query(td, &info);
	if (r) {
		td_verror(td, -r, "nvarray_open");
		return 1;
	}
	for_each_file(td, f, i) {
		f->real_file_size = info.size_bytes;
		fio_file_set_size_known(f);
		/* fio asks an engine for zones only of a block device's file (zbd.c
		 * zbd_get_zoned_model treats any regular file as unzoned), and ->setup() runs
		 * before it looks (filesetup.c setup_files: ->setup(), then zbd_init_files()). */
		if (info.zone_bytes)
			f->filetype = FIO_TYPE_BLOCK;
	}
	return 0;
}

/*
 * Zoned namespaces (zonemode=zbd on a device with [zns]): fio 3.33's four zoned-device
 * operations, as its libzbc engine provides them. fio's zbd.c then keeps every write at its
 * zone's write pointer, resets zones it needs again and honours the open-zone limit.
 */

/* The job's channel, or else one opened for this call (`*own` set: close it after). */
static int nv_channel(struct thread_data *td, nvarray_channel **ch, int *own)
{
	struct nv_data *nd = td->io_ops_data;

	*own = 0;
	if (nd && nd->ch) {
		*ch = nd->ch;
		return 0;
	}
	*own = 1;
	return nv_open(td, 0, 0, ch);
}

static int nv_get_zoned_model(struct thread_data *td, struct fio_file *f,
			      enum zbd_zoned_model *model)
{
	struct nvarray_info info;
	int r;

	r = nv_query(td, &info);
	if (r)
		return r;
	*model = info.zone_bytes ? ZBD_HOST_MANAGED : ZBD_NONE;
	return 0;
}

static int nv_report_zones(struct thread_data *td, struct fio_file *f, uint64_t offset,
			   struct zbd_zone *zones, unsigned int nr_zones)
{
	struct nvarray_info info;
	struct nvarray_zone *found;
	nvarray_channel *ch;
	int own, n, i, r;

	r = nv_channel(td, &ch, &own);
	if (r)
		return r;
	nvarray_get_info(ch, &info);
	found = calloc(nr_zones ? nr_zones : 1, sizeof(*found));
	n = found ? nvarray_report_zones(ch, offset, found, nr_zones) : -ENOMEM;
	for (i = 0; i < n; i++) {
		zones[i].start = found[i].start;
		zones[i].wp = found[i].write_pointer;
		zones[i].len = info.zone_bytes;
		zones[i].capacity = found[i].capacity_bytes;
		zones[i].type = ZBD_ZONE_TYPE_SWR;
		zones[i].cond = (enum zbd_zone_cond) found[i].state;
	}
	if (n < 0)
		log_err("nvarray: report zones at %llu: %s\n", (unsigned long long) offset,
			nvarray_strerror(n));
	free(found);
	if (own)
		nvarray_close(ch);
	return n;
}

/* Resets every zone that starts in [offset, offset + length). Commands in flight on the
 * job's channel stay so (nvarray_zone_manage keeps their completions for ->getevents()). */
static int nv_reset_wp(struct thread_data *td, struct fio_file *f, uint64_t offset,
		       uint64_t length)
{
	struct nvarray_info info;
	nvarray_channel *ch;
	uint64_t at;
	int own, r;

	r = nv_channel(td, &ch, &own);
	if (r)
		return r;
	nvarray_get_info(ch, &info);
	if (!info.zone_bytes) {
		r = -EOPNOTSUPP;
	} else {
		at = offset - offset % info.zone_bytes;
		if (at < offset)
			at += info.zone_bytes;
		for (; at < offset + length && !r; at += info.zone_bytes)
			r = nvarray_zone_manage(ch, NVARRAY_OP_ZONE_RESET, at);
	}
	if (r)
		log_err("nvarray: zone reset in [%llu, +%llu): %s\n", (unsigned long long) offset,
			(unsigned long long) length, nvarray_strerror(r));
	if (own)
		nvarray_close(ch);
	return r;
}

static int nv_get_max_open_zones(struct thread_data *td, struct fio_file *f,
				 unsigned int *max_open_zones)
{
	struct nvarray_info info;
	int r;

	r = nv_query(td, &info);
	if (r)
		return r;
	*max_open_zones = info.max_open_zones;
	return 0;
}

static int nv_get_file_size(struct thread_data *td, struct fio_file *f)
{
	struct nvarray_info info;
	int r;

	if (fio_file_size_known(f))
		return 0;
	r = nv_query(td, &info);
	if (r) {
		td_verror(td, -r, "nvarray_open");
		return 1;
	}
	f->real_file_size = info.size_bytes;
	fio_file_set_size_known(f);
	return 0;
}

static void nv_free(struct nv_data *nd)
{
	if (!nd)
		return;
	/* Waits for the commands still in flight (a dead daemon ends the wait): the device
	 * may still be writing into the region, which is fio's buffers. */
	nvarray_close(nd->ch);
	free(nd->pending);
	free(nd->events);
	free(nd->queued);
	free(nd->completions);
	free(nd);
}

/* Commands one io_u of `len` bytes takes. */
static unsigned long long nv_commands(const struct nv_data *nd, unsigned long long len)
{
	unsigned long long most = nd->info.command_bytes_max;

	return len ? (len + most - 1) / most : 1;
}

static int nv_check_bs(struct thread_data *td, const struct nv_data *nd)
{
	const uint32_t block = nd->info.block_bytes;
	enum fio_ddir ddir;

	for (ddir = DDIR_READ; ddir <= DDIR_TRIM; ddir++) {
		if (td->o.min_bs[ddir] % block || td->o.max_bs[ddir] % block) {
			log_err("nvarray: %s block sizes %llu..%llu are not multiples of the "
				"device's block size, %u bytes\n", io_ddir_name(ddir),
				td->o.min_bs[ddir], td->o.max_bs[ddir], block);
			return 1;
		}
	}
	return 0;
}

/* Opens the job's channel: room for iodepth commands (times the commands one io_u of the
 * largest block size takes), and a DMA region for fio's iodepth io buffers. */
static int nv_init(struct thread_data *td)
{
	const unsigned int iodepth = td->o.iodepth ? td->o.iodepth : 1;
	unsigned long long max_bs = td_max_bs(td);
	unsigned long long per_io_u, depth, buffer_bytes;
	struct nv_data *nd;
	int r;

	nd = calloc(1, sizeof(*nd));
	if (!nd) {
		td_verror(td, ENOMEM, "calloc");
		return 1;
	}
	td->io_ops_data = nd;

	/* As init_io_u_buffers() and allocate_io_mem() size them: iodepth buffers of the
	 * largest block size, and at most a page and mem_align of alignment twice over. */
	buffer_bytes = max_bs * iodepth + 2 * (page_size + td->o.mem_align);
	buffer_bytes = (buffer_bytes + page_size - 1) & ~(unsigned long long) page_mask;

	r = nv_open(td, iodepth, buffer_bytes, &nd->ch);
	if (r)
		goto fail;
	nvarray_get_info(nd->ch, &nd->info);
	if (!nd->info.block_bytes || !nd->info.command_bytes_max || !nd->info.queue_depth) {
		log_err("nvarray: the daemon gave a channel with block size %u, largest command %u, "
			"queue depth %u\n", nd->info.block_bytes, nd->info.command_bytes_max,
			nd->info.queue_depth);
		r = -EPROTO;
		goto fail;
	}

	/* An io_u longer than the largest command takes several: ask again for room for
	 * all of them. */
	per_io_u = nv_commands(nd, max_bs);
	depth = per_io_u * iodepth;
	if (per_io_u > 1 && nd->info.queue_depth < depth && depth <= UINT32_MAX) {
		nvarray_close(nd->ch);
		nd->ch = NULL;
		r = nv_open(td, depth, buffer_bytes, &nd->ch);
		if (r)
			goto fail;
		nvarray_get_info(nd->ch, &nd->info);
	}
	if (nd->info.queue_depth < per_io_u) {
		log_err("nvarray: bs=%llu takes %llu commands of at most %u bytes, more than the "
			"channel's queue depth %u\n", max_bs, per_io_u,
			nd->info.command_bytes_max, nd->info.queue_depth);
		r = -EINVAL;
		goto fail;
	}
	if (nv_check_bs(td, nd)) {
		r = -EINVAL;
		goto fail;
	}

	nd->region = nvarray_buffer(nd->ch);
	nd->nr_pending = iodepth;
	nd->pending = calloc(iodepth, sizeof(*nd->pending));
	nd->events = calloc(iodepth, sizeof(*nd->events));
	nd->queued = calloc(iodepth, sizeof(*nd->queued));
	nd->nr_completions = nd->info.queue_depth;
	nd->completions = calloc(nd->nr_completions, sizeof(*nd->completions));
	if (!nd->pending || !nd->events || !nd->queued || !nd->completions) {
		r = -ENOMEM;
		goto fail;
	}
	return 0;

fail:
	td_verror(td, -r, "nvarray init");
	nv_free(nd);
	td->io_ops_data = NULL;
	return 1;
}

static void nv_cleanup(struct thread_data *td)
{
	nv_free(td->io_ops_data);
	td->io_ops_data = NULL;
}

/* fio's io buffers are the channel's DMA region: commands name them directly (zero copy). */
static int nv_iomem_alloc(struct thread_data *td, size_t total_mem)
{
	struct nv_data *nd = td->io_ops_data;

	if (!nd || !nd->ch) {
		log_err("nvarray: io buffers asked for before the channel is open\n");
		return 1;
	}
	if (total_mem > nd->info.buffer_bytes) {
		log_err("nvarray: fio's io buffers take %zu bytes (iodepth x the largest bs), more "
			"than the %llu bytes of DMA region the daemon gave the channel: lower "
			"iodepth or bs\n", total_mem,
			(unsigned long long) nd->info.buffer_bytes);
		return 1;
	}
	td->orig_buffer = nd->region;
	return 0;
}

/* The region belongs to the channel, which ->cleanup() closes once nothing is in flight. */
static void nv_iomem_free(struct thread_data *td)
{
	td->orig_buffer = NULL;
}

/* The channel is the job's: there is nothing to open per file. */
static int nv_open_file(struct thread_data *td, struct fio_file *f)
{
	return 0;
}

static int nv_close_file(struct thread_data *td, struct fio_file *f)
{
	f->fd = -1;
	return 0;
}

/* Commands are visible to the device as soon as they are submitted: ->commit() only does
 * fio's accounting for the io_us submitted since the last one (submission latency and the
 * "submit" histogram), as an engine with a commit hook must. */
static int nv_commit(struct thread_data *td)
{
	struct nv_data *nd = td->io_ops_data;
	unsigned int i;

	if (!nd || !nd->nr_queued)
		return 0;
	for (i = 0; i < nd->nr_queued; i++)
		io_u_queued(td, nd->queued[i]);
	io_u_mark_submit(td, nd->nr_queued);
	nd->nr_queued = 0;
	return 0;
}

static enum fio_q_status nv_complete_now(struct io_u *io_u, int error)
{
	io_u->error = error;
	io_u->resid = ddir_rw(io_u->ddir) ? io_u->xfer_buflen : 0;
	return FIO_Q_COMPLETED;
}

static enum fio_q_status nv_queue(struct thread_data *td, struct io_u *io_u)
{
	struct nv_data *nd = td->io_ops_data;
	const uint64_t user_data = (uintptr_t) io_u;
	unsigned long long len = io_u->xfer_buflen, done;
	char *buf = io_u->xfer_buf;
	struct nv_pending *p;
	unsigned int free_slots, k, n;
	int op, r;

	fio_ro_check(td, io_u);

	if (nd->dead)
		return nv_complete_now(io_u, nd->dead);
	if (io_u->index >= nd->nr_pending) {
		log_err("nvarray: io_u index %u past iodepth %u\n", io_u->index, nd->nr_pending);
		return nv_complete_now(io_u, EINVAL);
	}
	p = &nd->pending[io_u->index];

	switch (io_u->ddir) {
	case DDIR_READ:
	case DDIR_WRITE:
		op = io_u->ddir == DDIR_READ ? NVARRAY_OP_READ : NVARRAY_OP_WRITE;
		if (!len)
			return nv_complete_now(io_u, EINVAL);
		/* The io buffers are the DMA region (->iomem_alloc): this holds unless fio
		 * was given buffers of its own. */
		if (buf < nd->region || len > nd->info.buffer_bytes ||
		    (uint64_t) (buf - nd->region) > nd->info.buffer_bytes - len) {
			if (!nd->warned_region++)
				log_err("nvarray: io_u buffer %p is outside the channel's DMA "
					"region\n", buf);
			return nv_complete_now(io_u, EFAULT);
		}
		n = nv_commands(nd, len);
		break;
	case DDIR_SYNC:
	case DDIR_DATASYNC:
	case DDIR_SYNC_FILE_RANGE:
		/* A flush makes every acknowledged write durable: at least what was asked. */
		op = NVARRAY_OP_FLUSH;
		n = 1;
		break;
	case DDIR_TRIM:
		/* The device's deallocate: flash behind an FTL unmaps the range's pages. */
		op = NVARRAY_OP_TRIM;
		if (!len)
			return nv_complete_now(io_u, EINVAL);
		n = nv_commands(nd, len);
		break;
	default:
		return nv_complete_now(io_u, EINVAL);
	}

	/* All of an io_u's commands or none: fio retries a busy one after reaping. */
	free_slots = nd->info.queue_depth - nvarray_in_flight(nd->ch);
	if (nvarray_in_flight(nd->ch) >= nd->info.queue_depth || n > free_slots)
		return FIO_Q_BUSY;

	p->commands = n;
	p->error = 0;
	for (k = 0, done = 0; k < n; k++) {
		uint32_t chunk = op == NVARRAY_OP_FLUSH ? 0 :
			(uint32_t) min(len - done, (unsigned long long) nd->info.command_bytes_max);

		r = nvarray_submit(nd->ch, op, io_u->offset + done, chunk,
				   op == NVARRAY_OP_FLUSH || op == NVARRAY_OP_TRIM ? NULL : buf + done,
				   user_data);
		if (r == 0) {
			done += chunk;
			continue;
		}
		if (k == 0) {
			p->commands = 0;
			if (r == -EAGAIN)
				return FIO_Q_BUSY;
			return nv_complete_now(io_u, -r);
		}
		/* Some commands are in flight already: the io_u completes, failed, once
		 * they have. (Not expected: there was room for all of them.) */
		p->commands = k;
		p->error = -r;
		break;
	}
	/* Issued now (FIO_ASYNCIO_SETS_ISSUE_TIME: fio would stamp it only after ->queue()
	 * returns, after it may have called ->commit()). */
	if (fio_fill_issue_time(td)) {
		fio_gettime(&io_u->issue_time, NULL);
		if (td->o.read_iolog_file)
			memcpy(&td->last_issue, &io_u->issue_time, sizeof(io_u->issue_time));
	}
	if (nd->nr_queued == nd->nr_pending)
		nv_commit(td);
	nd->queued[nd->nr_queued++] = io_u;
	return FIO_Q_QUEUED;
}

/* Accounts one finished command; returns 1 when it finished its io_u. */
static int nv_reap(struct nv_data *nd, const struct nvarray_completion *c)
{
	struct io_u *io_u = (struct io_u *) (uintptr_t) c->user_data;
	struct nv_pending *p;

	if (!io_u || io_u->index >= nd->nr_pending ||
	    !nd->pending[io_u->index].commands) {
		log_err("nvarray: a completion names no command in flight (user_data %#llx)\n",
			(unsigned long long) c->user_data);
		return -EFAULT;
	}
	p = &nd->pending[io_u->index];
	if (c->result != 0 && !p->error)
		p->error = c->result < 0 ? -c->result : EIO;
	if (--p->commands)
		return 0;

	io_u->error = p->error;
	io_u->resid = p->error && ddir_rw(io_u->ddir) ? io_u->xfer_buflen : 0;
	nd->events[nd->nr_events++] = io_u;
	return 1;
}

/* Reaps `n` completions; returns 0 or a negative errno. */
static int nv_reap_all(struct nv_data *nd, int n)
{
	int i, r;

	for (i = 0; i < n; i++) {
		r = nv_reap(nd, &nd->completions[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

static int nv_dead(struct thread_data *td, struct nv_data *nd, int r)
{
	if (!nd->dead)
		log_err("nvarray: the channel to %s failed: %s (%s)\n", nv_socket(td),
			nvarray_strerror(r), strerror(-r));
	nd->dead = -r;
	td_verror(td, -r, "nvarray_poll");
	return r;
}

static uint64_t nv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* Polls until at least `min_events` io_us have finished (at most `max_events`), or the
 * timeout `t` (if any) has passed. Returns how many, or a negative errno. */
static int nv_getevents(struct thread_data *td, unsigned int min_events, unsigned int max_events,
			const struct timespec *t)
{
	struct nv_data *nd = td->io_ops_data;
	uint64_t deadline = 0;
	unsigned long empty = 0;
	int n, r;

	nd->nr_events = 0;
	if (nd->dead)
		return -nd->dead;
	if (max_events > nd->nr_pending)
		max_events = nd->nr_pending;
	if (min_events > max_events)
		min_events = max_events;
	if (t)
		deadline = nv_now_ns() + (uint64_t) t->tv_sec * 1000000000ULL + t->tv_nsec;

	for (;;) {
		/* Each completion finishes at most one io_u: never more than max_events. */
		unsigned int want = min(max_events - nd->nr_events, nd->nr_completions);

		n = want ? nvarray_poll(nd->ch, nd->completions, want) : 0;
		if (n < 0)
			return nv_dead(td, nd, n);
		r = nv_reap_all(nd, n);
		if (r < 0)
			return nv_dead(td, nd, r);
		if (nd->nr_events >= min_events || nd->nr_events >= max_events)
			break;
		/* Nothing more can finish. */
		if (!nvarray_in_flight(nd->ch))
			break;
		if (n)
			continue;

		empty++;
		if (t && !(empty % NV_POLLS_PER_CLOCK) && nv_now_ns() >= deadline)
			break;
		if (empty % NV_POLLS_PER_YIELD)
			continue;
		if (t) {
			sched_yield();
			continue;
		}
		/* No timeout and still short after a while: wait for the next completion in
		 * libnvarray, which yields the CPU as it spins and notices a daemon that went
		 * away (-EPIPE), which a bare poll cannot. */
		n = nvarray_wait(nd->ch, nd->completions, 1, want);
		if (n < 0)
			return nv_dead(td, nd, n);
		r = nv_reap_all(nd, n);
		if (r < 0)
			return nv_dead(td, nd, r);
		if (nd->nr_events >= min_events)
			break;
	}
	return nd->nr_events;
}

static struct io_u *nv_event(struct thread_data *td, int event)
{
	struct nv_data *nd = td->io_ops_data;

	if (event < 0 || (unsigned int) event >= nd->nr_events)
		return NULL;
	return nd->events[event];
}

/*
 * fio finds this by dlsym(handle, "ioengine") for ioengine=external:PATH. FIO_DISKLESSIO:
 * the "file" is a socket, never created, stat'ed for size, extended or cache-invalidated;
 * FIO_NODISKUTIL: no block device's statistics to follow; FIO_NO_OFFLOAD: a channel is used
 * by one thread, so io_submit_mode=offload (another thread submitting) is refused;
 * FIO_ASYNCIO_SETS_ISSUE_TIME: ->queue() stamps the moment it submitted.
 */
struct ioengine_ops ioengine = {
	.name			= "nvarray",
	.version		= FIO_IOOPS_VERSION,
	.flags			= FIO_DISKLESSIO | FIO_NOEXTEND | FIO_NODISKUTIL |
				  FIO_NO_OFFLOAD | FIO_ASYNCIO_SETS_ISSUE_TIME,
	.setup			= nv_setup,
	.init			= nv_init,
	.cleanup		= nv_cleanup,
	.queue			= nv_queue,
	.commit			= nv_commit,
	.getevents		= nv_getevents,
	.event			= nv_event,
	.open_file		= nv_open_file,
	.close_file		= nv_close_file,
	.get_file_size		= nv_get_file_size,
	.iomem_alloc		= nv_iomem_alloc,
	.iomem_free		= nv_iomem_free,
	.get_zoned_model	= nv_get_zoned_model,
	.report_zones		= nv_report_zones,
	.reset_wp		= nv_reset_wp,
	.get_max_open_zones	= nv_get_max_open_zones,
	.options		= options,
	.option_struct_size	= sizeof(struct nv_options),
};
