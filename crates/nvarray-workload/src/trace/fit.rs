//! Fitting a trace's requests to the device: block alignment, splitting at the device's
//! largest transfer, and bringing offsets inside the capacity by wrapping or scaling. Every
//! change is counted, so the report says how far the replay is from the trace.

use crate::spec::Direction;
use crate::trace::formats::RawRequest;
use crate::trace::names::by_name;

/// How offsets past the device's capacity are brought inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AddressMode {
    /// Offsets modulo the capacity (default): a trace of a larger disk folds onto the device,
    /// its locality kept within each capacity-sized window.
    Wrap,
    /// Offsets multiplied by capacity / the trace's span (its largest end offset, found by
    /// reading the trace once first): the trace's layout shrunk onto the device.
    Scale,
}

impl AddressMode {
    /// `--trace-address` names.
    pub const ALL: [(&'static str, AddressMode); 2] =
        [("wrap", AddressMode::Wrap), ("scale", AddressMode::Scale)];

    /// The mode `--trace-address` names `name`.
    pub fn from_name(name: &str) -> Option<AddressMode> {
        by_name(&Self::ALL, name)
    }
}

/// What fitting did to the trace, in requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Fitted {
    /// Requests whose start or end was moved to a block boundary.
    pub aligned: u64,
    /// Requests longer than the device's largest transfer, and the extra requests their
    /// splitting added.
    pub split: u64,
    /// The requests splitting added.
    pub split_added: u64,
    /// Requests (or pieces) whose offset was wrapped or scaled into the device.
    pub moved: u64,
    /// Requests (or pieces) that still ran past the end and were moved back to end there.
    pub clamped: u64,
}

/// The device as fitting sees it.
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)] // Named for what they are.
pub struct Geometry {
    pub capacity_bytes: u64,
    /// A power of two.
    pub block_bytes: u32,
    pub max_transfer_bytes: u32,
}

/// Fits raw requests to a device, one at a time, each into pieces handed out one by one: a
/// request split into many pieces never holds them all in memory.
#[derive(Clone, Debug)]
pub(crate) struct Fitter {
    geometry: Geometry,
    mode: AddressMode,
    /// For `Scale`: the trace's largest end offset.
    span_bytes: u64,
    pub(crate) counts: Fitted,
}

/// One request fitted to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FittedRequest {
    pub(crate) op: Direction,
    pub(crate) offset_bytes: u64,
    pub(crate) len_bytes: u32,
}

/// The pieces of one request still to hand out: `[offset, end)` in the trace's addresses
/// (after scaling), block-aligned. `u128`, because a request's end rounded up to a block may
/// be 2^64 itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pieces {
    op: Direction,
    offset: u128,
    end: u128,
}

/// What fitting makes of one request of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// Its pieces, to hand out with [`Fitter::next_piece`].
    Pieces(Pieces),
    /// Longer than the whole device, once aligned: not replayed (counted as skipped).
    LongerThanDevice,
}

impl Fitter {
    /// `span_bytes` is the trace's largest end offset (only `Scale` reads it).
    pub(crate) fn new(geometry: Geometry, mode: AddressMode, span_bytes: u64) -> Fitter {
        debug_assert!(geometry.block_bytes.is_power_of_two());
        debug_assert!(u64::from(geometry.max_transfer_bytes) <= geometry.capacity_bytes);
        Fitter {
            geometry,
            mode,
            span_bytes,
            counts: Fitted::default(),
        }
    }

    /// Aligns and scales `r`, and counts what that changed; its pieces come from `next_piece`.
    pub(crate) fn fit(&mut self, r: &RawRequest) -> Fit {
        let g = self.geometry;
        let block = u128::from(g.block_bytes);
        let mut offset = u128::from(r.offset_bytes);
        let len = u128::from(r.len_bytes);
        if self.mode == AddressMode::Scale && self.span_bytes > g.capacity_bytes {
            // Whole request scaled, so its pieces stay together.
            offset = offset * u128::from(g.capacity_bytes) / u128::from(self.span_bytes);
        }
        // Masks, not divisions: the block is a power of two, and a u128 division is slow.
        let start = offset & !(block - 1);
        // Every request covers at least one block; the end may reach 2^64 itself.
        let end = ((offset + len + block - 1) & !(block - 1)).max(start + block);
        if end - start > u128::from(g.capacity_bytes) {
            return Fit::LongerThanDevice;
        }
        if offset != u128::from(r.offset_bytes) {
            self.counts.moved += 1;
        }
        if start != offset || end - start != len {
            self.counts.aligned += 1;
        }
        // Both at most the capacity, a u64.
        let (aligned_len, max) = ((end - start) as u64, self.max_piece());
        if aligned_len > max {
            self.counts.split += 1;
            self.counts.split_added += aligned_len.div_ceil(max) - 1;
        }
        Fit::Pieces(Pieces {
            op: r.op,
            offset: start,
            end,
        })
    }

    /// The largest piece: the device's largest transfer, in whole blocks.
    fn max_piece(&self) -> u64 {
        let block = u64::from(self.geometry.block_bytes);
        (u64::from(self.geometry.max_transfer_bytes) & !(block - 1)).max(block)
    }

    /// The next piece of `p` brought inside the device (`None` when it has none left),
    /// counting the pieces moved (wrapped) and clamped.
    pub(crate) fn next_piece(&mut self, p: &mut Pieces) -> Option<FittedRequest> {
        if p.offset >= p.end {
            return None;
        }
        let g = self.geometry;
        let capacity = u128::from(g.capacity_bytes);
        let block = u128::from(g.block_bytes);
        let piece = (p.end - p.offset).min(u128::from(self.max_piece()));
        let mut at = p.offset;
        if at + piece > capacity {
            if self.mode == AddressMode::Wrap && at >= capacity {
                at = at % capacity / block * block;
                self.counts.moved += 1;
            }
            if at + piece > capacity {
                at = capacity - piece;
                self.counts.clamped += 1;
            }
        }
        p.offset += piece;
        debug_assert!(at + piece <= capacity, "piece at {at} runs past the device");
        // `at + piece <= capacity <= u64::MAX` and `piece <= max_transfer_bytes`.
        Some(FittedRequest {
            op: p.op,
            offset_bytes: at as u64,
            len_bytes: piece as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Geometry = Geometry {
        capacity_bytes: 1 << 20,
        block_bytes: 512,
        max_transfer_bytes: 128 << 10,
    };

    fn fit(f: &mut Fitter, offset_bytes: u64, len_bytes: u64) -> Vec<(u64, u32)> {
        let mut v = Vec::new();
        let r = RawRequest {
            time_ns: 0,
            op: Direction::Read,
            offset_bytes,
            len_bytes,
        };
        let Fit::Pieces(mut pieces) = f.fit(&r) else {
            return v;
        };
        while let Some(p) = f.next_piece(&mut pieces) {
            v.push((p.offset_bytes, p.len_bytes));
        }
        v
    }

    #[test]
    fn requests_inside_the_device_pass_unchanged() {
        let mut f = Fitter::new(G, AddressMode::Wrap, 0);
        assert_eq!(fit(&mut f, 4096, 4096), [(4096, 4096)]);
        assert_eq!(f.counts, Fitted::default());
    }

    #[test]
    fn unaligned_requests_grow_to_block_boundaries() {
        let mut f = Fitter::new(G, AddressMode::Wrap, 0);
        assert_eq!(fit(&mut f, 100, 100), [(0, 512)]);
        assert_eq!(fit(&mut f, 500, 100), [(0, 1024)]);
        assert_eq!(f.counts.aligned, 2);
    }

    #[test]
    fn long_requests_split_at_the_largest_transfer() {
        let mut f = Fitter::new(G, AddressMode::Wrap, 0);
        let pieces = fit(&mut f, 0, 300 << 10);
        assert_eq!(
            pieces,
            [
                (0, 128 << 10),
                (128 << 10, 128 << 10),
                (256 << 10, 44 << 10)
            ]
        );
        assert_eq!((f.counts.split, f.counts.split_added), (1, 2));
    }

    #[test]
    fn offsets_past_the_end_wrap_and_a_request_across_the_end_is_clamped() {
        let mut f = Fitter::new(G, AddressMode::Wrap, 0);
        assert_eq!(fit(&mut f, (1 << 20) + 8192, 512), [(8192, 512)]);
        assert_eq!(f.counts.moved, 1);
        assert_eq!(
            fit(&mut f, (1 << 20) - 512, 1024),
            [((1 << 20) - 1024, 1024)]
        );
        assert_eq!(f.counts.clamped, 1);
    }

    #[test]
    fn scaling_maps_the_trace_span_onto_the_device() {
        let mut f = Fitter::new(G, AddressMode::Scale, 4 << 20);
        assert_eq!(fit(&mut f, 2 << 20, 4096), [(512 << 10, 4096)]);
        assert_eq!(
            fit(&mut f, (4 << 20) - 4096, 4096),
            [((1 << 20) - 4096, 4096)]
        );
        assert_eq!(f.counts.moved, 2);
        assert_eq!(
            f.counts.clamped, 1,
            "the last request's end scaled past the end"
        );
        // A trace no larger than the device is not scaled.
        let mut small = Fitter::new(G, AddressMode::Scale, 1 << 19);
        assert_eq!(fit(&mut small, 4096, 4096), [(4096, 4096)]);
        assert_eq!(small.counts.moved, 0);
    }

    #[test]
    fn ends_near_2_64_are_fitted_without_overflow_and_longer_than_the_device_is_refused() {
        // (offset, length) -> the pieces, or `None`: longer than the device, not replayed.
        type Case = (u64, u64, Option<Vec<(u64, u32)>>);
        let cases: [Case; 6] = [
            // The case: a length whose end rounds up to 2^64 once aligned.
            (0, u64::MAX - 616, None),
            (0, u64::MAX, None),
            (1, 1 << 20, None),
            (
                0,
                1 << 20,
                Some((0..8).map(|i| (i << 17, 128 << 10)).collect()),
            ),
            // Its end rounds up to 2^64 exactly; wrapped to the device's last block.
            (u64::MAX - 511, 511, Some(vec![((1 << 20) - 512, 512)])),
            (u64::MAX - 1, 1, Some(vec![((1 << 20) - 512, 512)])),
        ];
        for (offset, len, expected) in cases {
            let mut f = Fitter::new(G, AddressMode::Wrap, 0);
            let r = RawRequest {
                time_ns: 0,
                op: Direction::Write,
                offset_bytes: offset,
                len_bytes: len,
            };
            let got = match f.fit(&r) {
                Fit::LongerThanDevice => None,
                Fit::Pieces(mut p) => {
                    let mut v = Vec::new();
                    while let Some(piece) = f.next_piece(&mut p) {
                        v.push((piece.offset_bytes, piece.len_bytes));
                    }
                    Some(v)
                }
            };
            assert_eq!(got, expected, "offset {offset} length {len}");
        }
    }
}
