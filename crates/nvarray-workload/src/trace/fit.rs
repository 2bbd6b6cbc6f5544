//! Fitting a trace's requests to the device: block alignment, splitting at the device's
//! largest transfer, and bringing offsets inside the capacity by wrapping or scaling. Every
//! change is counted, so the report says how far the replay is from the trace.

use crate::spec::Direction;
use crate::trace::by_name;
use crate::trace::formats::RawRequest;

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

/// Fits raw requests to a device, one at a time, into at most `pieces` requests each.
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

    /// Fits `r` and hands each resulting request to `out`, in address order.
    pub(crate) fn fit(&mut self, r: &RawRequest, mut out: impl FnMut(FittedRequest)) {
        let g = self.geometry;
        let block = u64::from(g.block_bytes);
        let mut offset = r.offset_bytes;
        let mut len = r.len_bytes;
        if self.mode == AddressMode::Scale && self.span_bytes > g.capacity_bytes {
            // Whole request scaled, so its pieces stay together.
            offset = (u128::from(offset) * u128::from(g.capacity_bytes)
                / u128::from(self.span_bytes)) as u64;
            self.counts.moved += 1;
        }
        let start = offset / block * block;
        let end = (offset.saturating_add(len)).div_ceil(block) * block;
        if start != offset || end - start != len {
            self.counts.aligned += 1;
        }
        offset = start;
        len = (end - start).max(block);
        let max = u64::from(g.max_transfer_bytes) / block * block;
        if len > max {
            self.counts.split += 1;
            self.counts.split_added += len.div_ceil(max) - 1;
        }
        while len > 0 {
            let piece = len.min(max);
            let mut at = offset;
            if at.saturating_add(piece) > g.capacity_bytes {
                if self.mode == AddressMode::Wrap && at >= g.capacity_bytes {
                    at %= g.capacity_bytes;
                    at = at / block * block;
                    self.counts.moved += 1;
                }
                if at + piece > g.capacity_bytes {
                    at = g.capacity_bytes - piece;
                    self.counts.clamped += 1;
                }
            }
            out(FittedRequest {
                op: r.op,
                offset_bytes: at,
                len_bytes: piece as u32,
            });
            offset = offset.saturating_add(piece);
            len -= piece;
        }
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
        f.fit(&r, |p| v.push((p.offset_bytes, p.len_bytes)));
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
}
