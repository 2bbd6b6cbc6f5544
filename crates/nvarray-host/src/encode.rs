//! Command encoding, the driver's half of `nvarray_emu::protocol` (whose decoding the device
//! does): the Moneta / DC Express command word and the NVMe SQE with its PRP list.

use nvarray_emu::protocol::{moneta, nvme};
use nvarray_emu::{DmaMemory, Opcode};

use crate::command::Prepared;

// Every tag the pool hands out fits the command word's tag field (`CommandWord::encode`
// asserts it of each command).
const _: () = assert!(nvarray_emu::tag_pool::TAGS_MAX <= 1 << moneta::TAG_BITS);

/// The Moneta / DC Express command word for `p` (`p.raw_opcode`, when set, in place of the
/// command's own opcode).
pub(crate) fn command_word(p: &Prepared, block_bytes: u64) -> u64 {
    let opcode = match p.op {
        Opcode::Read => moneta::OPCODE_READ,
        Opcode::Write => moneta::OPCODE_WRITE,
        Opcode::Flush => moneta::OPCODE_FLUSH,
        Opcode::Deallocate => moneta::OPCODE_DEALLOCATE,
        Opcode::ZoneAppend => moneta::OPCODE_ZONE_APPEND,
        Opcode::ZoneManage { .. } => moneta::OPCODE_ZONE_MANAGE,
        Opcode::ZoneReport { .. } => moneta::OPCODE_ZONE_REPORT,
    };
    let opcode = p.raw_opcode.map_or(opcode, |raw| u64::from(raw & 0x7));
    let len_blocks = match p.op {
        Opcode::ZoneManage { action, all } => moneta::zone_manage_blocks(action, all),
        _ => (u64::from(p.len_bytes) / block_bytes).clamp(1, moneta::LEN_BLOCKS_MAX),
    };
    moneta::CommandWord {
        opcode,
        tag: p.tag.index() as u16,
        offset_blocks: (p.offset_bytes / block_bytes).min(moneta::OFFSET_BLOCKS_MAX),
        len_blocks,
    }
    .encode()
}

/// The SQE for `p`, writing its PRP list into the tag's list pages when it spans more
/// than two pages.
pub(crate) fn nvme_sqe(dma: &DmaMemory, block_bytes: u64, p: &Prepared) -> nvme::Sqe {
    let tag = p.tag.index();
    debug_assert!(tag < dma.tags(), "tag {tag} of {} tag buffers", dma.tags());
    let mut sqe = nvme::Sqe {
        opcode: match p.op {
            Opcode::Read => nvme::OPCODE_READ,
            Opcode::Write => nvme::OPCODE_WRITE,
            Opcode::Flush => nvme::OPCODE_FLUSH,
            Opcode::Deallocate => nvme::OPCODE_DATASET_MANAGEMENT,
            Opcode::ZoneAppend => nvme::OPCODE_ZONE_APPEND,
            Opcode::ZoneManage { .. } => nvme::OPCODE_ZONE_MANAGEMENT_SEND,
            Opcode::ZoneReport { .. } => nvme::OPCODE_ZONE_MANAGEMENT_RECEIVE,
        },
        cid: tag as u16,
        nsid: 1,
        ..nvme::Sqe::default()
    };
    if let Some(raw) = p.raw_opcode {
        sqe.opcode = raw;
    }
    if p.op == Opcode::Flush {
        return sqe;
    }
    sqe.slba = p.offset_bytes / block_bytes;
    sqe.cdw12 = ((u64::from(p.len_bytes) / block_bytes).max(1) - 1)
        .min(nvme::BLOCKS_PER_COMMAND_MAX - 1) as u32;
    if let Some(handle) = p.placement {
        nvme::set_placement(&mut sqe, handle);
    }
    match p.op {
        // Its one range is in the entry (`nvme::OPCODE_DATASET_MANAGEMENT`): no data pages.
        Opcode::Deallocate => return sqe,
        Opcode::ZoneManage { action, all } => {
            sqe.cdw12 = 0;
            sqe.cdw13 = u32::from(nvme::zone_action_code(action))
                | if all { nvme::ZSA_SELECT_ALL } else { 0 };
            return sqe;
        }
        Opcode::ZoneReport { partial } => {
            // Dword 12 counts the buffer's dwords, zero-based.
            sqe.cdw12 = (p.len_bytes / 4).max(1) - 1;
            sqe.cdw13 =
                u32::from(nvme::ZRA_REPORT_ZONES) | if partial { nvme::ZRA_PARTIAL } else { 0 };
        }
        _ => {}
    }
    set_prps(&mut sqe, dma, tag, p.len_bytes);
    sqe
}

/// Points the entry's PRPs at tag `tag`'s buffer for `len_bytes` of data: PRP1 at its first
/// page, PRP2 at the second, or at a PRP list written into the tag's list pages when the data
/// spans more than two pages.
#[inline]
fn set_prps(sqe: &mut nvme::Sqe, dma: &DmaMemory, tag: usize, len_bytes: u32) {
    let page = dma.page_bytes as u64;
    let base = nvme::DATA_IOVA + (tag * dma.buffer_bytes()) as u64;
    sqe.prp1 = base;
    let pages = (len_bytes as usize).div_ceil(dma.page_bytes);
    if pages == 2 {
        sqe.prp2 = base + page;
    } else if pages > 2 {
        let lists = dma.lists.as_ref().expect("NVMe devices have PRP lists");
        let list_base = nvme::LIST_IOVA + (tag * lists.buffer_bytes()) as u64;
        // SAFETY: we hold the tag, so its list pages are ours until the command is issued.
        let list = unsafe { lists.buffer(tag) };
        let per_page = dma.page_bytes / 8;
        let mut at = 0usize;
        for i in 1..pages {
            if at % per_page == per_page - 1 && i < pages - 1 {
                // Chain to the next list page (NVMe §4.3).
                let next = list_base + ((at + 1) * 8) as u64;
                list[at * 8..at * 8 + 8].copy_from_slice(&next.to_le_bytes());
                at += 1;
            }
            let entry = base + i as u64 * page;
            list[at * 8..at * 8 + 8].copy_from_slice(&entry.to_le_bytes());
            at += 1;
        }
        sqe.prp2 = list_base;
    }
}
