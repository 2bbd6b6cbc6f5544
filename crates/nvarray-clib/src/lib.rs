//! `libnvarray`: the C ABI of a user-space channel, as `native/include/nvarray.h` declares
//! it, over the Rust client (`nvarray_channel::Channel`). Every function checks its pointers
//! for null and its arguments before use and returns a negative errno rather than panic; the
//! header documents each result.
//!
//! The ABI is the header's: `NVARRAY_ABI_VERSION` is `nvarray_channel::layout::VERSION`, and
//! `struct nvarray_info` / `struct nvarray_completion` are `Info` / `CompletionC` here
//! (`#[repr(C)]`, field for field; their sizes are asserted here and, with
//! `_Static_assert`, in the header, so the C side fails to compile if they part).

#![allow(non_camel_case_types)]

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ::nvarray_channel::{
    Channel, ChannelError, ChannelStatus, Completion, Op, SubmitError, ZONE_COMMAND,
};

/// `struct nvarray_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Info {
    pub size_bytes: u64,
    pub block_bytes: u32,
    pub command_bytes_max: u32,
    pub queue_depth: u32,
    pub reserved: u32,
    pub buffer_bytes: u64,
    pub zone_bytes: u64,
    pub zone_capacity_bytes: u64,
    pub max_open_zones: u32,
    pub max_active_zones: u32,
}

/// `struct nvarray_zone`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZoneC {
    pub start: u64,
    pub write_pointer: u64,
    pub capacity_bytes: u64,
    pub state: u32,
    pub reserved: u32,
}

/// `struct nvarray_completion`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CompletionC {
    pub user_data: u64,
    pub result: i32,
    pub reserved: u32,
}

/// `nvarray_channel`, opaque to C: the channel and the completions collected from its ring
/// but not yet handed out (a poll of `max` takes what the ring has, hands out `max`).
pub struct nvarray_channel {
    channel: Channel,
    collected: VecDeque<CompletionC>,
}

fn result_of(c: Completion) -> CompletionC {
    // The header's promise: 0 on success, a negative errno otherwise
    // (`every_status_but_ok_is_a_negative_errno`).
    let result = -c.status.errno();
    CompletionC {
        user_data: c.user_data,
        result,
        reserved: 0,
    }
}

fn errno_of(r: Result<(), ChannelError>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => -e.errno(),
    }
}

/// # Safety
/// `path` must be null or a NUL-terminated string; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn nvarray_open(
    path: *const c_char,
    out: *mut *mut nvarray_channel,
) -> c_int {
    // SAFETY: the caller's contract is this function's.
    unsafe { nvarray_open_with(path, 0, 0, out) }
}

/// # Safety
/// As `nvarray_open`.
#[no_mangle]
pub unsafe extern "C" fn nvarray_open_with(
    path: *const c_char,
    queue_depth: u32,
    buffer_bytes: u64,
    out: *mut *mut nvarray_channel,
) -> c_int {
    if path.is_null() || out.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let path = Path::new(std::ffi::OsStr::from_bytes(
        unsafe { CStr::from_ptr(path) }.to_bytes(),
    ));
    match Channel::open_with(path, queue_depth, buffer_bytes) {
        Ok(channel) => {
            let ch = Box::new(nvarray_channel {
                channel,
                collected: VecDeque::new(),
            });
            // SAFETY: `out` is non-null and writable by the caller's contract.
            unsafe { *out = Box::into_raw(ch) };
            0
        }
        Err(e) => -e.errno(),
    }
}

/// # Safety
/// `ch` must be null or a channel from `nvarray_open`, not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn nvarray_close(ch: *mut nvarray_channel) {
    if ch.is_null() {
        return;
    }
    // SAFETY: a pointer `nvarray_open` made with Box::into_raw, given back once.
    let mut ch = unsafe { Box::from_raw(ch) };
    let n = ch.channel.in_flight() as usize;
    // The daemon finishes them anyway; waiting keeps a write the caller forgot to collect
    // acknowledged before the channel goes. A dead daemon ends the wait.
    let _ = ch.channel.wait(n, |_| {});
}

/// Borrows the channel behind a C pointer.
///
/// # Safety
/// `ch` must be null or a live channel from `nvarray_open`, used by this thread only.
unsafe fn channel<'a>(ch: *mut nvarray_channel) -> Option<&'a mut nvarray_channel> {
    // SAFETY: the caller's contract.
    unsafe { ch.as_mut() }
}

/// # Safety
/// `ch` a live channel (or null); `info` writable (or null).
#[no_mangle]
pub unsafe extern "C" fn nvarray_get_info(ch: *const nvarray_channel, info: *mut Info) {
    // SAFETY: the caller's contract; only read.
    let (Some(ch), false) = (unsafe { ch.as_ref() }, info.is_null()) else {
        return;
    };
    let g = ch.channel.geometry();
    // SAFETY: non-null and writable by the caller's contract.
    unsafe {
        *info = Info {
            size_bytes: g.size_bytes,
            block_bytes: g.block_bytes,
            command_bytes_max: g.command_bytes_max,
            queue_depth: g.queue_depth,
            reserved: 0,
            buffer_bytes: g.buffer_bytes,
            zone_bytes: g.zone_bytes,
            zone_capacity_bytes: g.zone_capacity_bytes,
            max_open_zones: g.max_open_zones,
            max_active_zones: g.max_active_zones,
        }
    };
}

/// # Safety
/// `ch` a live channel (or null).
#[no_mangle]
pub unsafe extern "C" fn nvarray_buffer(ch: *mut nvarray_channel) -> *mut c_void {
    // SAFETY: the caller's contract.
    match unsafe { channel(ch) } {
        Some(ch) => ch.channel.buffer().cast(),
        None => std::ptr::null_mut(),
    }
}

/// The channel of a synchronous call with its buffer: a live channel with nothing collected
/// and waiting to be handed out, and a buffer of at least one byte.
///
/// # Safety
/// As `channel`.
unsafe fn for_sync_io<'a>(
    ch: *mut nvarray_channel,
    buf_is_null: bool,
    len: u64,
) -> Result<&'a mut nvarray_channel, c_int> {
    // SAFETY: the caller's contract.
    let ch = unsafe { channel(ch) }.ok_or(-libc::EINVAL)?;
    if !ch.collected.is_empty() {
        return Err(-libc::EBUSY);
    }
    if buf_is_null || len == 0 {
        return Err(-libc::EINVAL);
    }
    Ok(ch)
}

/// # Safety
/// `ch` a live channel; `buf` `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn nvarray_read(
    ch: *mut nvarray_channel,
    buf: *mut c_void,
    len: u64,
    offset: u64,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { for_sync_io(ch, buf.is_null(), len) } {
        Ok(ch) => {
            // SAFETY: `buf` holds `len` writable bytes by the caller's contract.
            let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len as usize) };
            errno_of(ch.channel.read(buf, offset))
        }
        Err(e) => e,
    }
}

/// # Safety
/// `ch` a live channel; `buf` `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn nvarray_write(
    ch: *mut nvarray_channel,
    buf: *const c_void,
    len: u64,
    offset: u64,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { for_sync_io(ch, buf.is_null(), len) } {
        Ok(ch) => {
            // SAFETY: `buf` holds `len` readable bytes by the caller's contract.
            let buf = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len as usize) };
            errno_of(ch.channel.write(buf, offset))
        }
        Err(e) => e,
    }
}

/// # Safety
/// `ch` a live channel.
#[no_mangle]
pub unsafe extern "C" fn nvarray_flush(ch: *mut nvarray_channel) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { channel(ch) } {
        Some(ch) if ch.collected.is_empty() => errno_of(ch.channel.flush()),
        Some(_) => -libc::EBUSY,
        None => -libc::EINVAL,
    }
}

/// # Safety
/// `ch` a live channel; `buf` any pointer (checked against the DMA region, never followed).
#[no_mangle]
pub unsafe extern "C" fn nvarray_submit(
    ch: *mut nvarray_channel,
    op: c_int,
    offset: u64,
    len: u32,
    buf: *mut c_void,
    user_data: u64,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(ch) = (unsafe { channel(ch) }) else {
        return -libc::EINVAL;
    };
    let op = match op {
        0 => Op::Read,
        1 => Op::Write,
        2 => Op::Flush,
        3 => Op::Trim,
        4 => Op::ZoneReport,
        5 => Op::ZoneReset,
        6 => Op::ZoneFinish,
        7 => Op::ZoneOpen,
        8 => Op::ZoneClose,
        _ => return -libc::EINVAL,
    };
    // Reserved for `nvarray_zone_manage`'s own command, which may run while this one is in
    // flight.
    if user_data == ZONE_COMMAND {
        return -libc::EINVAL;
    }
    let base = ch.channel.buffer() as usize;
    let moves_data = matches!(op, Op::Read | Op::Write | Op::ZoneReport);
    let at = match (buf as usize).checked_sub(base) {
        Some(at) => at as u64,
        None if !moves_data => 0,
        None => return -libc::EINVAL,
    };
    match ch.channel.submit(op, offset, len, at, user_data) {
        Ok(()) => 0,
        Err(SubmitError::Full) => -libc::EAGAIN,
        Err(SubmitError::OutsideRegion) => -libc::EINVAL,
    }
}

/// # Safety
/// `ch` a live channel; `zones` room for `max` zones.
#[no_mangle]
pub unsafe extern "C" fn nvarray_report_zones(
    ch: *mut nvarray_channel,
    offset: u64,
    zones: *mut ZoneC,
    max: c_uint,
) -> c_int {
    // SAFETY: the caller's contract.
    let ch = match unsafe { for_sync_io(ch, zones.is_null(), u64::from(max)) } {
        Ok(ch) => ch,
        Err(e) => return e,
    };
    let block = u64::from(ch.channel.geometry().block_bytes);
    match ch.channel.report_zones(offset, max as usize) {
        Ok(found) => {
            for (i, z) in found.iter().enumerate() {
                let zone = ZoneC {
                    start: z.start_block * block,
                    write_pointer: z.write_pointer * block,
                    capacity_bytes: z.capacity_blocks * block,
                    state: u32::from(z.state.code()),
                    reserved: 0,
                };
                // SAFETY: `zones` has room for `max` by the caller's contract; i < max.
                unsafe { zones.add(i).write(zone) };
            }
            found.len() as c_int
        }
        Err(e) => -e.errno(),
    }
}

/// # Safety
/// `ch` a live channel.
#[no_mangle]
pub unsafe extern "C" fn nvarray_zone_manage(
    ch: *mut nvarray_channel,
    op: c_int,
    zone_offset: u64,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(ch) = (unsafe { channel(ch) }) else {
        return -libc::EINVAL;
    };
    let op = match op {
        5 => Op::ZoneReset,
        6 => Op::ZoneFinish,
        7 => Op::ZoneOpen,
        8 => Op::ZoneClose,
        _ => return -libc::EINVAL,
    };
    let collected = &mut ch.collected;
    errno_of(
        ch.channel
            .zone_manage(op, zone_offset, |c| collected.push_back(result_of(c))),
    )
}

/// Hands out up to `max` collected completions into `out`.
fn hand_out(ch: &mut nvarray_channel, out: *mut CompletionC, max: usize) -> usize {
    let n = ch.collected.len().min(max);
    for (i, c) in ch.collected.drain(..n).enumerate() {
        // SAFETY: `out` has room for `max` completions by the caller's contract, i < max.
        unsafe { out.add(i).write(c) };
    }
    n
}

/// # Safety
/// `ch` a live channel; `out` room for `max` completions.
#[no_mangle]
pub unsafe extern "C" fn nvarray_poll(
    ch: *mut nvarray_channel,
    out: *mut CompletionC,
    max: c_uint,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(ch) = (unsafe { channel(ch) }) else {
        return -libc::EINVAL;
    };
    if out.is_null() && max > 0 {
        return -libc::EINVAL;
    }
    let collected = &mut ch.collected;
    ch.channel.poll(|c| collected.push_back(result_of(c)));
    if ch.collected.is_empty() && ch.channel.closed() {
        return -libc::EPIPE;
    }
    hand_out(ch, out, max as usize) as c_int
}

/// # Safety
/// As `nvarray_poll`.
#[no_mangle]
pub unsafe extern "C" fn nvarray_wait(
    ch: *mut nvarray_channel,
    out: *mut CompletionC,
    min: c_uint,
    max: c_uint,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(ch) = (unsafe { channel(ch) }) else {
        return -libc::EINVAL;
    };
    if out.is_null() && max > 0 {
        return -libc::EINVAL;
    }
    let min = (min.min(max) as usize).min(ch.collected.len() + ch.channel.in_flight() as usize);
    let need = min.saturating_sub(ch.collected.len());
    let collected = &mut ch.collected;
    if let Err(e) = ch.channel.wait(need, |c| collected.push_back(result_of(c))) {
        return -e.errno();
    }
    hand_out(ch, out, max as usize) as c_int
}

/// # Safety
/// `ch` a live channel (or null: 0).
#[no_mangle]
pub unsafe extern "C" fn nvarray_in_flight(ch: *const nvarray_channel) -> c_uint {
    // SAFETY: the caller's contract; only read.
    unsafe { ch.as_ref() }.map_or(0, |ch| ch.channel.in_flight() + ch.collected.len() as u32)
}

/// A description of a result; never null.
#[no_mangle]
pub extern "C" fn nvarray_strerror(result: c_int) -> *const c_char {
    let errno = result.saturating_neg();
    let text: &'static CStr = match errno {
        0 => c"ok",
        e if e == libc::EACCES => c"permission denied: no grant covers the range",
        e if e == libc::ERANGE => c"past the end of the device",
        e if e == libc::EINVAL => {
            c"invalid argument: alignment, length, or a buffer outside the DMA region"
        }
        e if e == libc::EIO => {
            c"the device's backing store failed, or a zoned namespace refused the write"
        }
        e if e == libc::EAGAIN => c"the channel's queue is full: poll first",
        e if e == libc::EPIPE => c"the daemon went away; the channel is dead",
        e if e == libc::EFAULT => c"the device found a malformed field in the channel's rings",
        e if e == libc::EBUSY => c"completions are waiting to be collected first",
        e if e == libc::EOPNOTSUPP => c"operation not supported",
        e if e == libc::ECONNREFUSED || e == libc::ENOENT => c"no daemon listens on that socket",
        e if e == libc::EPROTO => c"the daemon speaks another version of the channel protocol",
        _ => c"unknown error",
    };
    text.as_ptr()
}

/// The C ABI's version, `NVARRAY_ABI_VERSION` in the header.
pub const ABI_VERSION: u32 = ::nvarray_channel::layout::VERSION;

const _: () = assert!(std::mem::size_of::<Info>() == 56);
const _: () = assert!(std::mem::size_of::<ZoneC>() == 32);
const _: () = assert!(std::mem::size_of::<CompletionC>() == 16);
// The sizes do not see two fields swapped; these offsets are the header's too.
const _: () = assert!(std::mem::offset_of!(Info, buffer_bytes) == 24);
const _: () = assert!(std::mem::offset_of!(ZoneC, state) == 24);
const _: () = assert!(std::mem::offset_of!(CompletionC, result) == 8);
// Unused in Rust, named so the statuses' errnos stay the header's list.
const _: [ChannelStatus; 10] = ChannelStatus::ALL;

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed command whose result read as 0 would pass for a success in C.
    #[test]
    fn every_status_but_ok_is_a_negative_errno() {
        for status in ChannelStatus::ALL {
            let result = -status.errno();
            assert_eq!(result == 0, status == ChannelStatus::Ok, "{status:?}");
            assert!(result <= 0, "{status:?}");
        }
    }
}
