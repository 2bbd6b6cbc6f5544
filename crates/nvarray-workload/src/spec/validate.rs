//! [`JobSpec::validate`], which checks a job against the device it is meant to run on (after
//! `check_fields`, the ranges of the table of keys), and the checks of a name and a block
//! size that the keys share.

use super::distribution::Distribution;
use super::limits::{BSSPLIT_ENTRIES_MAX, BS_BYTES_MAX, NAME_BYTES_MAX};
use super::vocabulary::{BlockSize, ZoneMode};
use super::JobSpec;
use crate::error::WorkloadError;

impl JobSpec {
    /// Checks the job against a device: the region lies inside the device, offsets and
    /// lengths are multiples of `block_size_bytes`, every request length is nonzero, at most
    /// `max_transfer_bytes` and fits the region; and every field is in the range `set`
    /// enforces (the fields are public, so they may have been written directly).
    pub fn validate(
        &self,
        device_size_bytes: u64,
        block_size_bytes: u32,
        max_transfer_bytes: u32,
    ) -> Result<(), WorkloadError> {
        self.check_fields()?;
        let (_, region_len_bytes) = self.region_bytes(device_size_bytes, block_size_bytes)?;
        let key = self.bs.key();
        for len_bytes in self.bs.lens_bytes() {
            if len_bytes > max_transfer_bytes {
                return Err(WorkloadError::TransferTooLarge {
                    key,
                    len_bytes,
                    max_bytes: max_transfer_bytes,
                });
            }
        }
        debug_assert!(region_len_bytes >= u64::from(self.bs.len_bytes_max()));
        self.check_zones(region_len_bytes)?;
        if let Distribution::Zoned(split) = &self.random_distribution {
            let align_bytes = self.align_bytes();
            crate::skew::ZoneTable::new(split, region_len_bytes / align_bytes, align_bytes)
                .map_err(|reason| WorkloadError::Invalid {
                    key: "random_distribution",
                    reason,
                })?;
        }
        Ok(())
    }

    /// With `zonemode=strided`, that a zone fits the region and holds the longest request.
    pub(crate) fn check_zones(&self, region_len_bytes: u64) -> Result<(), WorkloadError> {
        if self.zonemode != ZoneMode::Strided {
            return Ok(());
        }
        let range = self.zones.range();
        if range > region_len_bytes || u64::from(self.bs.len_bytes_max()) > range {
            return Err(WorkloadError::Invalid {
                key: "zonerange",
                reason: format!(
                    "a zone of {range} bytes must fit the job's region of {region_len_bytes} \
                     bytes and hold its longest request of {} bytes",
                    self.bs.len_bytes_max()
                ),
            });
        }
        Ok(())
    }

    /// The job's region as `(start, len)` in bytes, checked against the device: both are
    /// multiples of the block size, the region is inside the device and holds at least one
    /// request of every length. Without `size`, the region runs to the last whole block.
    pub(crate) fn region_bytes(
        &self,
        device_size_bytes: u64,
        block_size_bytes: u32,
    ) -> Result<(u64, u64), WorkloadError> {
        let block_bytes = u64::from(block_size_bytes);
        if block_bytes == 0 {
            return Err(WorkloadError::Device {
                reason: "block size must be > 0".to_string(),
            });
        }
        if device_size_bytes < block_bytes {
            return Err(WorkloadError::Device {
                reason: format!(
                    "size {device_size_bytes} bytes is smaller than one block of \
                     {block_bytes} bytes"
                ),
            });
        }
        let invalid = |key, reason: String| Err(WorkloadError::Invalid { key, reason });
        let offset_bytes = self.offset_bytes;
        if !offset_bytes.is_multiple_of(block_bytes) {
            return invalid(
                "offset",
                format!("{offset_bytes} is not a multiple of the device block size {block_bytes}"),
            );
        }
        if offset_bytes >= device_size_bytes {
            return invalid(
                "offset",
                format!("{offset_bytes} is not below the device size {device_size_bytes}"),
            );
        }
        let region_len_bytes = self.region_len_bytes(device_size_bytes, block_bytes)?;
        if region_len_bytes == 0 {
            return invalid(
                "offset",
                format!(
                    "{offset_bytes} leaves less than one block of the device \
                     ({device_size_bytes} bytes) for the job"
                ),
            );
        }
        assert!(
            region_len_bytes <= device_size_bytes - offset_bytes,
            "region of {region_len_bytes} bytes at {offset_bytes} runs past the device"
        );
        assert!(
            region_len_bytes.is_multiple_of(block_bytes),
            "region of {region_len_bytes} bytes is not whole blocks of {block_bytes}"
        );
        self.check_lengths(block_bytes, region_len_bytes)?;
        Ok((offset_bytes, region_len_bytes))
    }

    /// The region's length after a checked `offset`: `size`, which must be whole blocks that
    /// fit the device, or else the whole blocks to the device's end.
    fn region_len_bytes(
        &self,
        device_size_bytes: u64,
        block_bytes: u64,
    ) -> Result<u64, WorkloadError> {
        let offset_bytes = self.offset_bytes;
        let Some(size_bytes) = self.size_bytes else {
            return Ok((device_size_bytes - offset_bytes) / block_bytes * block_bytes);
        };
        let invalid = |reason: String| {
            Err(WorkloadError::Invalid {
                key: "size",
                reason,
            })
        };
        if size_bytes % block_bytes != 0 {
            return invalid(format!(
                "{size_bytes} is not a multiple of the device block size {block_bytes}"
            ));
        }
        if size_bytes > device_size_bytes - offset_bytes {
            return invalid(format!(
                "offset {offset_bytes} + size {size_bytes} runs past the end of the device at \
                 {device_size_bytes}"
            ));
        }
        Ok(size_bytes)
    }

    /// Every request length and `blockalign` against the device's block and the job's region
    /// of `region_len_bytes`: nonzero multiples of the block, none larger than the region.
    fn check_lengths(&self, block_bytes: u64, region_len_bytes: u64) -> Result<(), WorkloadError> {
        let invalid = |key, reason: String| Err(WorkloadError::Invalid { key, reason });
        let key = self.bs.key();
        for len_bytes in self.bs.lens_bytes() {
            if len_bytes == 0 || u64::from(len_bytes) % block_bytes != 0 {
                return invalid(
                    key,
                    format!(
                        "request length {len_bytes} is not a nonzero multiple of the device \
                         block size {block_bytes}"
                    ),
                );
            }
            if u64::from(len_bytes) > region_len_bytes {
                return invalid(
                    key,
                    format!(
                        "request length {len_bytes} is larger than the job's region of \
                         {region_len_bytes} bytes"
                    ),
                );
            }
        }
        if let Some(align) = self.blockalign_bytes {
            if align == 0 {
                return invalid(
                    "blockalign",
                    "0: give a multiple of the device block size".into(),
                );
            }
            if align % block_bytes != 0 {
                return invalid(
                    "blockalign",
                    format!("{align} is not a multiple of the device block size {block_bytes}"),
                );
            }
            if align > region_len_bytes {
                return invalid(
                    "blockalign",
                    format!("{align} is larger than the job's region of {region_len_bytes} bytes"),
                );
            }
        }
        Ok(())
    }
}

/// Checks a job name; the reason on error.
pub(super) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX || name.chars().any(char::is_control) {
        return Err(format!(
            "must be 1 to {NAME_BYTES_MAX} bytes without control characters"
        ));
    }
    Ok(())
}

/// Range checks on a block size that do not depend on the device.
pub(super) fn check_block_size(block_size: &BlockSize) -> Result<(), String> {
    match block_size {
        BlockSize::Fixed(len_bytes) => {
            if !(1..=BS_BYTES_MAX).contains(len_bytes) {
                return Err(format!(
                    "request length must be in 1..={BS_BYTES_MAX} bytes, got {len_bytes}"
                ));
            }
        }
        BlockSize::Range { min, max } => {
            if !(1..=BS_BYTES_MAX).contains(max) || *min == 0 || max % min != 0 || min >= max {
                return Err(format!(
                    "range must be MIN-MAX with MAX a multiple of MIN, at most {BS_BYTES_MAX} bytes, got {min}-{max}"
                ));
            }
        }
        BlockSize::Split(entries) => {
            if entries.is_empty() || entries.len() > BSSPLIT_ENTRIES_MAX {
                return Err(format!(
                    "must have 1 to {BSSPLIT_ENTRIES_MAX} entries, got {}",
                    entries.len()
                ));
            }
            let mut percent_sum: u64 = 0;
            for &(len_bytes, percent) in entries {
                if !(1..=BS_BYTES_MAX).contains(&len_bytes) {
                    return Err(format!(
                        "request length must be in 1..={BS_BYTES_MAX} bytes, got {len_bytes}"
                    ));
                }
                percent_sum += u64::from(percent);
            }
            if percent_sum != 100 {
                return Err(format!(
                    "percentages must sum to 100, they sum to {percent_sum}"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Distribution;

    fn d() -> JobSpec {
        JobSpec::default()
    }

    fn check_validate(job: JobSpec, device_size_bytes: u64, expected: Result<(), &str>) {
        assert_eq!(
            job.validate(device_size_bytes, 4096, 128 << 10)
                .map_err(|e| e.to_string()),
            expected.map_err(str::to_string),
            "{job:?} on a device of {device_size_bytes} bytes"
        );
    }

    #[test]
    fn validate() {
        let gib = 1u64 << 30;
        check_validate(d(), gib, Ok(()));
        // Parsing refuses `blockalign=0`; a spec written directly is refused here, before a
        // generator would divide by it.
        check_validate(
            JobSpec {
                blockalign_bytes: Some(0),
                ..d()
            },
            gib,
            Err("blockalign: 0: give a multiple of the device block size"),
        );
        // A device that is not a whole number of blocks loses its tail, not the job.
        check_validate(d(), gib + 100, Ok(()));
        check_validate(
            JobSpec {
                offset_bytes: gib - 4096,
                ..d()
            },
            gib,
            Ok(()),
        );
        check_validate(
            JobSpec {
                offset_bytes: gib / 2,
                size_bytes: Some(gib / 2),
                ..d()
            },
            gib,
            Ok(()),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Split(vec![(4096, 50), (128 << 10, 50)]),
                ..d()
            },
            gib,
            Ok(()),
        );
        check_validate(
            JobSpec {
                offset_bytes: 512,
                ..d()
            },
            gib,
            Err("offset: 512 is not a multiple of the device block size 4096"),
        );
        check_validate(
            JobSpec {
                offset_bytes: gib,
                ..d()
            },
            gib,
            Err("offset: 1073741824 is not below the device size 1073741824"),
        );
        check_validate(
            JobSpec {
                offset_bytes: gib,
                ..d()
            },
            gib + 100,
            Err(
                "offset: 1073741824 leaves less than one block of the device (1073741924 bytes) \
                 for the job",
            ),
        );
        check_validate(
            JobSpec {
                size_bytes: Some(6144),
                ..d()
            },
            gib,
            Err("size: 6144 is not a multiple of the device block size 4096"),
        );
        check_validate(
            JobSpec {
                offset_bytes: 4096,
                size_bytes: Some(gib),
                ..d()
            },
            gib,
            Err(
                "size: offset 4096 + size 1073741824 runs past the end of the device at \
                 1073741824",
            ),
        );
        check_validate(
            JobSpec {
                offset_bytes: u64::MAX - 4095,
                size_bytes: Some(8192),
                ..d()
            },
            u64::MAX,
            Err(
                "size: offset 18446744073709547520 + size 8192 runs past the end of the device \
                 at 18446744073709551615",
            ),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Fixed(512),
                ..d()
            },
            gib,
            Err("bs: request length 512 is not a nonzero multiple of the device block size 4096"),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Fixed(256 << 10),
                ..d()
            },
            gib,
            Err("bs: request length 262144 exceeds the device's maximum transfer of 131072 bytes"),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Split(vec![(4096, 50), (6144, 50)]),
                ..d()
            },
            gib,
            Err(
                "bssplit: request length 6144 is not a nonzero multiple of the device block \
                 size 4096",
            ),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Fixed(65536),
                size_bytes: Some(32768),
                ..d()
            },
            gib,
            Err("bs: request length 65536 is larger than the job's region of 32768 bytes"),
        );
        check_validate(
            d(),
            2048,
            Err("device: size 2048 bytes is smaller than one block of 4096 bytes"),
        );
        assert_eq!(
            d().validate(gib, 0, 4096).map_err(|e| e.to_string()),
            Err("device: block size must be > 0".to_string())
        );
        // Fields written directly are re-checked.
        check_validate(
            JobSpec { iodepth: 0, ..d() },
            gib,
            Err("iodepth: must be in 1..=4096, got 0"),
        );
        check_validate(
            JobSpec {
                numjobs: 2000,
                ..d()
            },
            gib,
            Err("numjobs: must be in 1..=1024, got 2000"),
        );
        check_validate(
            JobSpec {
                rwmixread: 101,
                ..d()
            },
            gib,
            Err("rwmixread: must be in 0..=100, got 101"),
        );
        check_validate(
            JobSpec {
                random_distribution: Distribution::Zipf {
                    theta: -1.0,
                    center: None,
                },
                ..d()
            },
            gib,
            Err("random_distribution: zipf theta must be in (0, 100], got zipf:-1"),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Split(vec![(4096, 60), (8192, 60)]),
                ..d()
            },
            gib,
            Err("bssplit: percentages must sum to 100, they sum to 120"),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Split(vec![]),
                ..d()
            },
            gib,
            Err("bssplit: must have 1 to 64 entries, got 0"),
        );
        check_validate(
            JobSpec {
                size_bytes: Some(0),
                ..d()
            },
            gib,
            Err("size: must be > 0 or None"),
        );
        check_validate(
            JobSpec {
                runtime_ns: Some(0),
                ..d()
            },
            gib,
            Err("runtime: must be in 1..=2592000000000000 ns or None, got 0"),
        );
        check_validate(
            JobSpec {
                name: String::new(),
                ..d()
            },
            gib,
            Err("name: must be 1 to 255 bytes without control characters, got ''"),
        );
    }
}
