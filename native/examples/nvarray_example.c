/*
 * nvarray_example.c: libnvarray's C API, start to end.
 *
 *   nvarray serve --channels unix:/tmp/nvarray.sock &
 *   nvarray-example /tmp/nvarray.sock [OFFSET]
 *
 * Opens a channel to the daemon, prints what the channel was given, writes 64 KiB of a
 * recognisable pattern at OFFSET (default 0) as several asynchronous commands in flight at
 * once, reads it back with the synchronous API and compares, flushes, checks that a read past
 * the end of the device fails with -ERANGE, and closes. Exits 0 when everything checked out,
 * 1 with a message otherwise.
 *
 * Built by scripts/build_native.sh (target/native/nvarray-example):
 *   gcc -O2 -Wall -I native/include nvarray_example.c -L target/release -lnvarray \
 *       -Wl,-rpath,$PWD/target/release
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvarray.h"

#define TOTAL_BYTES (64 * 1024)	/* what the example writes */
#define CHUNK_BYTES 4096	/* one asynchronous command's share */
#define MAX_COMMANDS (TOTAL_BYTES / CHUNK_BYTES)

/* The pattern: each 8-byte word holds its own device offset, tagged, so a word read back
 * from the wrong place (or not written at all) shows. */
static uint64_t pattern_word(uint64_t device_offset)
{
	return device_offset ^ 0x6e76617272617900ULL; /* "nvarray\0" */
}

static void fill_pattern(unsigned char *buf, uint64_t len, uint64_t device_offset)
{
	for (uint64_t i = 0; i < len; i += 8) {
		uint64_t w = pattern_word(device_offset + i);
		memcpy(buf + i, &w, sizeof(w));
	}
}

/* Every libnvarray function returns 0 (or a count) or a negative errno. */
static int check(int result, const char *what)
{
	if (result < 0) {
		fprintf(stderr, "nvarray-example: %s failed: %s (%s)\n", what,
			nvarray_strerror(result), strerror(-result));
	}
	return result;
}

int main(int argc, char **argv)
{
	nvarray_channel *ch = NULL;
	struct nvarray_info info;
	struct nvarray_completion done[MAX_COMMANDS];
	unsigned char *region, *readback = NULL;
	uint64_t offset = 0;
	uint32_t chunk;
	unsigned commands, submitted, completed;
	int r, status = 1;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s SOCKET [OFFSET]\n", argv[0]);
		return 1;
	}
	if (argc == 3) {
		char *end;

		errno = 0;
		offset = strtoull(argv[2], &end, 0);
		if (errno || *end || end == argv[2]) {
			fprintf(stderr, "nvarray-example: bad OFFSET %s\n", argv[2]);
			return 1;
		}
	}

	/* 1. Open a channel: the daemon maps this process its own rings and DMA region. */
	r = nvarray_open(argv[1], &ch);
	if (r < 0) {
		fprintf(stderr, "nvarray-example: cannot open a channel to %s: %s (%s)\n", argv[1],
			nvarray_strerror(r), strerror(-r));
		return 1;
	}

	/* 2. What the channel was given. Offsets and lengths must be multiples of
	 * block_bytes; one command moves at most command_bytes_max bytes. */
	nvarray_get_info(ch, &info);
	printf("device: %" PRIu64 " bytes, block %" PRIu32 " bytes, largest command %" PRIu32
	       " bytes\n", info.size_bytes, info.block_bytes, info.command_bytes_max);
	printf("channel: queue depth %" PRIu32 ", DMA region %" PRIu64 " bytes\n",
	       info.queue_depth, info.buffer_bytes);

	chunk = CHUNK_BYTES;
	if (!info.block_bytes || chunk % info.block_bytes || chunk > info.command_bytes_max) {
		fprintf(stderr, "nvarray-example: the example's %u-byte commands do not suit this "
			"device\n", chunk);
		goto out;
	}
	if (offset % info.block_bytes || offset > info.size_bytes ||
	    info.size_bytes - offset < TOTAL_BYTES) {
		fprintf(stderr, "nvarray-example: OFFSET %" PRIu64 " must be a multiple of %" PRIu32
			" with %d bytes of device after it\n", offset, info.block_bytes,
			TOTAL_BYTES);
		goto out;
	}
	if (info.buffer_bytes < TOTAL_BYTES) {
		fprintf(stderr, "nvarray-example: the DMA region is smaller than %d bytes\n",
			TOTAL_BYTES);
		goto out;
	}

	/* 3. Asynchronous writes. Their data must lie in the DMA region: fill it there, then
	 * submit one command per chunk, each tagged with user_data (here its index). The
	 * commands are visible to the device at once; as many are in flight as the queue
	 * depth allows, and when it is full (-EAGAIN) we wait for some to finish. */
	region = nvarray_buffer(ch);
	fill_pattern(region, TOTAL_BYTES, offset);
	commands = TOTAL_BYTES / chunk;
	submitted = completed = 0;
	while (completed < commands) {
		while (submitted < commands) {
			r = nvarray_submit(ch, NVARRAY_OP_WRITE, offset + (uint64_t) submitted * chunk,
					   chunk, region + (size_t) submitted * chunk, submitted);
			if (r == -EAGAIN)
				break; /* queue full: collect completions first */
			if (check(r, "nvarray_submit") < 0)
				goto out;
			submitted++;
		}
		printf("write: %u commands in flight\n", nvarray_in_flight(ch));

		/* Wait for at least one (here: every one in flight) to finish. */
		r = nvarray_wait(ch, done, submitted - completed, MAX_COMMANDS);
		if (check(r, "nvarray_wait") < 0)
			goto out;
		for (int i = 0; i < r; i++) {
			if (done[i].result < 0) {
				fprintf(stderr, "nvarray-example: write command %" PRIu64 " failed: %s\n",
					done[i].user_data, nvarray_strerror(done[i].result));
				goto out;
			}
		}
		completed += r;
	}
	printf("write: %u commands of %u bytes at offset %" PRIu64 " completed\n", commands,
	       chunk, offset);

	/* 4. Synchronous read into ordinary memory: libnvarray stages it through the DMA
	 * region and splits it into commands itself. */
	readback = malloc(TOTAL_BYTES);
	if (!readback) {
		fprintf(stderr, "nvarray-example: out of memory\n");
		goto out;
	}
	if (check(nvarray_read(ch, readback, TOTAL_BYTES, offset), "nvarray_read") < 0)
		goto out;
	for (uint64_t i = 0; i < TOTAL_BYTES; i += 8) {
		uint64_t got, want = pattern_word(offset + i);

		memcpy(&got, readback + i, sizeof(got));
		if (got != want) {
			fprintf(stderr, "nvarray-example: mismatch at device offset %" PRIu64
				": read %#" PRIx64 ", wrote %#" PRIx64 "\n", offset + i, got, want);
			goto out;
		}
	}
	printf("read: %d bytes read back match\n", TOTAL_BYTES);

	/* 5. Flush: every acknowledged write is durable (with a durable file backing). */
	if (check(nvarray_flush(ch), "nvarray_flush") < 0)
		goto out;
	printf("flush: ok\n");

	/* 6. Errors are negative errnos: a read at the end of the device is out of range. */
	r = nvarray_read(ch, readback, info.block_bytes, info.size_bytes);
	printf("read past the end: %d (%s)\n", r, nvarray_strerror(r));
	if (r != -ERANGE) {
		fprintf(stderr, "nvarray-example: a read past the end gave %d, not -ERANGE (%d)\n",
			r, -ERANGE);
		goto out;
	}

	status = 0;
	printf("ok\n");
out:
	free(readback);
	/* 7. Close: waits for anything still in flight, then unmaps the channel. */
	nvarray_close(ch);
	return status;
}
