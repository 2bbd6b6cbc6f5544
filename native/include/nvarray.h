/*
 * nvarray.h: libnvarray, a process's own channel to an emulated nvarray device.
 *
 * A device daemon (`nvarray serve --channels unix:PATH`) hosts the emulated device. A client
 * connects to its Unix socket and receives a channel: its own submission and completion
 * rings and DMA region in shared memory. From then on reads and writes involve no system
 * call on either side: the library writes commands into the rings and polls for
 * completions, and the device checks every command against the extents the daemon granted
 * this process (Moneta-D, ASPLOS'12). See docs/channels.md.
 *
 * ABI: version NVARRAY_ABI_VERSION. Every function is thread-compatible, not thread-safe:
 * one channel is used by one thread at a time (open one channel per thread). Results are 0
 * (or a count) on success and a negative errno on failure:
 *   -EACCES   the command falls outside this process's grants
 *   -ERANGE   offset + length past the end of the device
 *   -EINVAL   offset or length not a multiple of the block size, length 0 or past the largest
 *             command, or a buffer outside the channel's DMA region
 *   -EIO      the device's backing store failed, or a zoned namespace refused a write
 *             (zone full, read only or offline, off its write pointer, past its capacity)
 *   -EAGAIN   (nvarray_submit) the channel's queue is full: poll first
 *   -EPIPE    the daemon went away; the channel is dead
 *   -EBUSY    (nvarray_read, nvarray_write, nvarray_flush) asynchronous commands are in
 *             flight, or finished and not yet collected: the synchronous calls stage data
 *             through the DMA region, so they need the channel to themselves
 *   -EFAULT   the device found a malformed field in the channel's rings
 *   -ECONNREFUSED, -ENOENT, -EPROTO: from nvarray_open (no daemon, wrong version)
 */
#ifndef NVARRAY_H
#define NVARRAY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NVARRAY_ABI_VERSION 2

enum nvarray_op {
    NVARRAY_OP_READ = 0,
    NVARRAY_OP_WRITE = 1,
    NVARRAY_OP_FLUSH = 2,
    NVARRAY_OP_TRIM = 3,        /* deallocate a range; carries no data (buf may be NULL) */
    /* A zoned namespace's (info.zone_bytes > 0; else -EOPNOTSUPP). Report zones: the zones
     * from the one holding `offset` into `buf` in the NVMe ZNS layout (64-byte header whose
     * first 8 bytes count the zones reported, then 64 bytes a zone); `len` a multiple of the
     * block size, at least 128. nvarray_report_zones does it for you. */
    NVARRAY_OP_ZONE_REPORT = 4,
    /* Zone management on the zone starting at `offset`; no data (buf may be NULL). */
    NVARRAY_OP_ZONE_RESET = 5,  /* write pointer back to the zone's start: empty */
    NVARRAY_OP_ZONE_FINISH = 6, /* full: the write pointer at the zone's capacity */
    NVARRAY_OP_ZONE_OPEN = 7,   /* opened explicitly (never closed by the device) */
    NVARRAY_OP_ZONE_CLOSE = 8,
};

/* A zone's state, as NVMe ZNS encodes it (nvarray_zone.state). */
enum nvarray_zone_state {
    NVARRAY_ZONE_EMPTY = 0x1,
    NVARRAY_ZONE_IMPLICITLY_OPENED = 0x2,
    NVARRAY_ZONE_EXPLICITLY_OPENED = 0x3,
    NVARRAY_ZONE_CLOSED = 0x4,
    NVARRAY_ZONE_READ_ONLY = 0xD,
    NVARRAY_ZONE_FULL = 0xE,
    NVARRAY_ZONE_OFFLINE = 0xF,
};

/* One zone, in bytes from the start of the device. */
struct nvarray_zone {
    uint64_t start;
    uint64_t write_pointer;
    uint64_t capacity_bytes;    /* writable bytes from start */
    uint32_t state;             /* enum nvarray_zone_state */
    uint32_t reserved;
};

/* What a channel was given. */
struct nvarray_info {
    uint64_t size_bytes;        /* the device's capacity */
    uint32_t block_bytes;       /* offsets and lengths are multiples of this */
    uint32_t command_bytes_max; /* the largest single command */
    uint32_t queue_depth;       /* most commands in flight on this channel */
    uint32_t reserved;
    uint64_t buffer_bytes;      /* length of the channel's DMA region (nvarray_buffer) */
    /* A zoned namespace (NVMe ZNS): zone size and writable bytes per zone, 0 when the
     * device is not zoned; zones open and open-or-closed at once (0: no limit). Writes must
     * land at their zone's write pointer (else -EIO). */
    uint64_t zone_bytes;
    uint64_t zone_capacity_bytes;
    uint32_t max_open_zones;
    uint32_t max_active_zones;
};

#ifndef __cplusplus
_Static_assert(sizeof(struct nvarray_info) == 56, "struct nvarray_info is libnvarray's Info");
_Static_assert(sizeof(struct nvarray_zone) == 32, "struct nvarray_zone is libnvarray's ZoneC");
#endif

/* One finished asynchronous command. */
struct nvarray_completion {
    uint64_t user_data; /* as given to nvarray_submit */
    int32_t result;     /* 0, or a negative errno as above */
    uint32_t reserved;
};

typedef struct nvarray_channel nvarray_channel;

/* Connects to the daemon at `socket_path` and maps a channel with the daemon's default queue
 * depth and DMA region. On success stores the channel in *out and returns 0. */
int nvarray_open(const char *socket_path, nvarray_channel **out);

/* As nvarray_open, asking for `queue_depth` commands in flight and a DMA region of
 * `buffer_bytes` (0 for the daemon's default of each; the daemon may give less). */
int nvarray_open_with(const char *socket_path, uint32_t queue_depth, uint64_t buffer_bytes,
                      nvarray_channel **out);

/* Waits for the channel's commands in flight, then unmaps and closes it. NULL is ignored. */
void nvarray_close(nvarray_channel *ch);

void nvarray_get_info(const nvarray_channel *ch, struct nvarray_info *info);

/* The channel's DMA region, info.buffer_bytes long: asynchronous commands move data from and
 * to buffers inside it. */
void *nvarray_buffer(nvarray_channel *ch);

/* Synchronous I/O from and to any memory: split into commands of at most command_bytes_max,
 * staged through the DMA region. Returns when every command has completed. */
int nvarray_read(nvarray_channel *ch, void *buf, uint64_t len, uint64_t offset);
int nvarray_write(nvarray_channel *ch, const void *buf, uint64_t len, uint64_t offset);
/* Makes every acknowledged write durable (with a durable file backing). */
int nvarray_flush(nvarray_channel *ch);

/* Queues one command and makes it visible to the device at once. `buf` (ignored for a flush)
 * must lie inside the DMA region, `len` bytes long. Returns 0, -EAGAIN when queue_depth
 * commands are in flight, or -EINVAL for arguments the library can refuse itself. */
int nvarray_submit(nvarray_channel *ch, int op, uint64_t offset, uint32_t len, void *buf,
                   uint64_t user_data);

/* A zoned namespace: every zone from the one holding `offset`, at most `max`, into `zones`.
 * Synchronous, staged through the DMA region: needs no command in flight (-EBUSY). Returns
 * how many zones it wrote, or a negative errno (-EOPNOTSUPP: the device is not zoned). */
int nvarray_report_zones(nvarray_channel *ch, uint64_t offset, struct nvarray_zone *zones,
                         unsigned max);

/* A zoned namespace: zone management `op` (NVARRAY_OP_ZONE_RESET, _FINISH, _OPEN, _CLOSE) on
 * the zone starting at `zone_offset`, waited for. Commands in flight stay in flight: any that
 * finish meanwhile are kept for nvarray_poll / nvarray_wait. user_data UINT64_MAX is this
 * call's own: nvarray_submit refuses it (-EINVAL). Returns 0 or a negative errno. */
int nvarray_zone_manage(nvarray_channel *ch, int op, uint64_t zone_offset);

/* Collects up to `max` finished commands into `out` without blocking; returns how many, or
 * -EPIPE once the daemon has dropped the channel and nothing is left to collect (one load of
 * shared memory: a daemon killed outright is noticed by nvarray_wait, which also asks the
 * socket now and then). */
int nvarray_poll(nvarray_channel *ch, struct nvarray_completion *out, unsigned max);

/* As nvarray_poll, but polls until at least `min` (at most the commands in flight) have
 * finished. Returns how many, or -EPIPE if the daemon went away. */
int nvarray_wait(nvarray_channel *ch, struct nvarray_completion *out, unsigned min,
                 unsigned max);

/* Commands submitted and not yet handed out by nvarray_poll / nvarray_wait (in flight, or
 * finished and collected from the ring but beyond a previous call's `max`). */
unsigned nvarray_in_flight(const nvarray_channel *ch);

/* A description of a result ("permission denied", ...); never NULL. */
const char *nvarray_strerror(int result);

#ifdef __cplusplus
}
#endif

#endif /* NVARRAY_H */
