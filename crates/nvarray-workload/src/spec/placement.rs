//! fio's Flexible Data Placement options and the handle each write carries: `fdp=1` (newer
//! fio: `dataplacement=fdp`), `fdp_pli=` (`plids=`), the placement ID indices a job may use,
//! and `fdp_pli_select=` (`plid_select=`), `roundrobin` (fio's default) or `random`. As in
//! fio's `dataplacement.c`, without `fdp_pli` a job cycles through every reclaim unit handle
//! the device has; here the device's handles are `ftl.placement_handles`, and a placement ID
//! index is the handle itself.

use serde::Serialize;

/// Most placement IDs one job may list (fio's `FIO_MAX_DP_IDS`).
pub const PLACEMENT_IDS_MAX: usize = 16;

/// How a job picks the next write's placement ID from its list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementSelect {
    /// Each write the next ID of the list, in turn (fio's default).
    #[default]
    RoundRobin,
    /// Each write an ID drawn uniformly from the list.
    Random,
}

impl std::str::FromStr for PlacementSelect {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "roundrobin" => Ok(PlacementSelect::RoundRobin),
            "random" => Ok(PlacementSelect::Random),
            _ => Err("is not a placement ID selection: use roundrobin or random".to_string()),
        }
    }
}

impl std::fmt::Display for PlacementSelect {
    /// Writes the selection back as `fdp_pli_select=` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PlacementSelect::RoundRobin => "roundrobin",
            PlacementSelect::Random => "random",
        })
    }
}

/// A job's data placement settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DataPlacement {
    /// Writes carry a placement handle (`fdp=1`).
    pub enabled: bool,
    /// The placement IDs the job may use (`fdp_pli`); `None`: every handle the device has.
    pub ids: Option<Vec<u16>>,
    /// How the next write's ID is picked from `ids` (`fdp_pli_select`).
    pub select: PlacementSelect,
}

/// Parses `fdp_pli`'s comma-separated list (fio also takes ranges `A-B`).
pub(super) fn parse_ids(value: &str) -> Result<Vec<u16>, String> {
    let mut ids = Vec::new();
    for part in value.split(',').map(str::trim) {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.trim(), hi.trim()),
            None => (part, part),
        };
        let parse = |s: &str| {
            s.parse::<u16>()
                .map_err(|_| format!("`{part}` is not a placement ID (0 to 65535)"))
        };
        let (lo, hi) = (parse(lo)?, parse(hi)?);
        if lo > hi {
            return Err(format!("`{part}` is an empty range"));
        }
        ids.extend(lo..=hi);
        if ids.len() > PLACEMENT_IDS_MAX {
            return Err(format!(
                "lists more than fio's {PLACEMENT_IDS_MAX} placement IDs"
            ));
        }
    }
    assert!(
        (1..=PLACEMENT_IDS_MAX).contains(&ids.len()),
        "{} placement IDs parsed",
        ids.len()
    );
    Ok(ids)
}

/// The placement handle of each write of one thread.
#[derive(Clone, Debug)]
pub struct PlacementPicker {
    ids: Vec<u16>,
    select: PlacementSelect,
    next: usize,
    state: u64,
}

impl PlacementPicker {
    /// The picker for a job's settings on a device with `handles` reclaim unit handles (0: it
    /// has no FTL, or no command to carry one); `seed` draws `random`. `None` when the job places nothing; an error
    /// (what to change) when it names a handle the device does not have.
    pub fn new(dp: &DataPlacement, handles: u32, seed: u64) -> Result<Option<Self>, String> {
        if !dp.enabled {
            return Ok(None);
        }
        if handles == 0 {
            return Err(
                "fdp=1 needs an NVMe device (the command that carries a placement handle) with \
                 flash behind an FTL (--precondition, or --set ftl.enabled=true) and its \
                 placement handles (ftl.placement_handles)"
                    .to_string(),
            );
        }
        let ids = match &dp.ids {
            Some(ids) => ids.clone(),
            None => (0..handles.min(u32::from(u16::MAX) + 1))
                .map(|h| h as u16)
                .collect(),
        };
        if let Some(bad) = ids.iter().find(|&&id| u32::from(id) >= handles) {
            return Err(format!(
                "fdp_pli lists placement ID {bad}, but the device has {handles} placement \
                 handles (ftl.placement_handles)"
            ));
        }
        // Round robin takes the next ID modulo the list's length.
        assert!(!ids.is_empty(), "a placement picker with no IDs");
        Ok(Some(PlacementPicker {
            ids,
            select: dp.select,
            next: 0,
            state: seed,
        }))
    }

    /// The next write's handle.
    pub fn next_handle(&mut self) -> u16 {
        let i = match self.select {
            PlacementSelect::RoundRobin => {
                let i = self.next;
                self.next = (i + 1) % self.ids.len();
                i
            }
            PlacementSelect::Random => {
                // SplitMix64's step: a fresh 64-bit draw, mapped to the list by
                // multiply-shift.
                self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = self.state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                ((u128::from(z) * self.ids.len() as u128) >> 64) as usize
            }
        };
        self.ids[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dp(ids: Option<Vec<u16>>, select: PlacementSelect) -> DataPlacement {
        DataPlacement {
            enabled: true,
            ids,
            select,
        }
    }

    #[test]
    fn lists_parse_with_ranges_and_refuse_nonsense() {
        assert_eq!(parse_ids("0,2-4, 7"), Ok(vec![0, 2, 3, 4, 7]));
        assert!(parse_ids("3-1").is_err());
        assert!(parse_ids("x").is_err());
        assert!(parse_ids("0-16").is_err(), "17 IDs, over fio's 16");
    }

    #[test]
    fn round_robin_cycles_the_list_and_random_draws_from_it() {
        let mut rr = PlacementPicker::new(&dp(None, PlacementSelect::RoundRobin), 3, 1)
            .unwrap()
            .unwrap();
        let got: Vec<u16> = (0..7).map(|_| rr.next_handle()).collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2, 0]);
        let mut random = PlacementPicker::new(&dp(Some(vec![1, 3]), PlacementSelect::Random), 4, 9)
            .unwrap()
            .unwrap();
        let mut seen = [0u32; 4];
        for _ in 0..10_000 {
            seen[usize::from(random.next_handle())] += 1;
        }
        assert_eq!((seen[0], seen[2]), (0, 0), "only listed IDs: {seen:?}");
        assert!(seen[1].abs_diff(seen[3]) < 500, "about even: {seen:?}");
    }

    #[test]
    fn a_handle_the_device_lacks_is_refused() {
        let err = PlacementPicker::new(&dp(Some(vec![2]), PlacementSelect::RoundRobin), 2, 1)
            .unwrap_err();
        assert!(err.contains("ftl.placement_handles"), "{err}");
        assert!(PlacementPicker::new(&dp(None, PlacementSelect::RoundRobin), 0, 1).is_err());
        let off = DataPlacement::default();
        assert!(PlacementPicker::new(&off, 0, 1).unwrap().is_none());
    }
}
