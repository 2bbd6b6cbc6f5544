//! A run's report from its streams and the model it ran over: `RunReport::from_model` and
//! `from_model_over`, where both engines build their report; the whole's and each group's
//! time come from the streams' phases and groups.

use nvarray_model::Verdict;

use crate::run_report::{GroupReport, RunReport, StreamReport, Utilisation, WearReport};
use crate::stream_stats::StreamStats;

impl RunReport {
    /// The report of a run over `model`: totals from `streams` (one per job), utilisation and
    /// wear from the model. Both engines build their report here; the fields only they know
    /// (CPU cost, lateness, faithfulness) are set by the caller.
    pub fn from_model(
        engine: &'static str,
        model: &nvarray_model::DeviceModel,
        streams: &[StreamStats],
        elapsed_ns: u64,
    ) -> RunReport {
        Self::from_model_over(engine, model, model.resource_busy(), streams, elapsed_ns)
    }

    /// [`RunReport::from_model`] over a measured window: `busy` is what the window kept the
    /// model's resources busy (a run with `ramp_time` or several phases leaves out the ramps)
    /// and `elapsed_ns` its length.
    pub fn from_model_over(
        engine: &'static str,
        model: &nvarray_model::DeviceModel,
        busy: nvarray_model::ResourceBusy,
        streams: &[StreamStats],
        elapsed_ns: u64,
    ) -> RunReport {
        let all_ns = whole_ns(streams, elapsed_ns);
        let e = elapsed_ns.max(1) as f64;
        let frac = |ns: u64, n: u32| (ns as f64 / (e * f64::from(n.max(1)))).min(1.0);
        let remote = model.config().fabric.kind != nvarray_model::FabricKind::None;
        let report = RunReport {
            engine,
            device: model.config().name.clone(),
            elapsed_ns,
            utilisation: Utilisation {
                link_to_device: frac(busy.link_to_device_ns, 1),
                link_to_host: frac(busy.link_to_host_ns, 1),
                controller: frac(busy.controller_ns, busy.controller_engines),
                ring: frac(busy.ring_ns, 1),
                banks: frac(busy.banks_ns, busy.banks),
                buffers: frac(busy.buffers_ns, busy.buffers),
                tags: frac(busy.tags_ns, busy.tags),
                fabric_to_device: remote.then(|| frac(busy.fabric_to_device_ns, 1)),
                fabric_to_host: remote.then(|| frac(busy.fabric_to_host_ns, 1)),
                remote_cpu: (busy.remote_cpu_cores > 0)
                    .then(|| frac(busy.remote_cpu_ns, busy.remote_cpu_cores)),
            },
            wear: model.wear_stats().map(|w| WearReport {
                line_writes_max: w.line_writes_max,
                line_writes_mean: w.line_writes_mean,
                gap_moves: w.gap_moves,
            }),
            erases: model.erases(),
            ftl: model.ftl_stats(),
            totals: merged("all", streams.iter()).totals(all_ns),
            streams: streams
                .iter()
                .map(|s| StreamReport {
                    name: s.name.clone(),
                    group: s.group,
                    totals: s.totals(s.active_or(elapsed_ns)),
                    control: s.control.clone(),
                })
                .collect(),
            groups: group_reports(streams, elapsed_ns),
            verdict: Verdict::Faithful,
            faithful: true,
            ..RunReport::default()
        };
        // The whole is its streams merged, and each stream is in exactly one group.
        let streams_requests: u64 = report.streams.iter().map(|s| s.totals.requests).sum();
        assert_eq!(
            report.totals.requests, streams_requests,
            "the whole counts {} requests, its streams {streams_requests}",
            report.totals.requests
        );
        if !report.groups.is_empty() {
            let groups_requests: u64 = report.groups.iter().map(|g| g.totals.requests).sum();
            assert_eq!(
                report.totals.requests, groups_requests,
                "the whole counts {} requests, its groups {groups_requests}",
                report.totals.requests
            );
        }
        report
    }
}

/// The streams' requests together.
fn merged<'a>(name: &str, streams: impl Iterator<Item = &'a StreamStats>) -> StreamStats {
    let mut all = StreamStats::new(name);
    for s in streams {
        all.merge(s);
    }
    all
}

/// The time the whole's rates are over. Phases ran one after another: their times add up.
/// Within a phase, streams ran side by side: when each stopped on its own (a request count or
/// byte limit), the longest of their own times, since the run's elapsed time also holds
/// starting and joining threads, which is nobody's I/O; any stream that ran to the end makes
/// it the run's time.
fn whole_ns(streams: &[StreamStats], elapsed_ns: u64) -> u64 {
    let phases = streams.iter().map(|s| s.phase).max().map_or(0, |p| p + 1);
    if phases <= 1 {
        return streams
            .iter()
            .map(|s| s.active_ns)
            .collect::<Option<Vec<u64>>>()
            .and_then(|ns| ns.into_iter().max())
            .unwrap_or(elapsed_ns);
    }
    (0..phases)
        .map(|phase| {
            streams
                .iter()
                .filter(|s| s.phase == phase)
                .map(|s| s.active_or(elapsed_ns))
                .max()
                .unwrap_or(0)
        })
        .sum::<u64>()
}

/// Each reporting group's totals, when there is more than one group: its streams together,
/// over the longest of their times.
fn group_reports(streams: &[StreamStats], elapsed_ns: u64) -> Vec<GroupReport> {
    let groups = streams.iter().map(|s| s.group).max().map_or(0, |g| g + 1);
    if groups <= 1 {
        return Vec::new();
    }
    (0..groups)
        .map(|group| {
            let members = || streams.iter().filter(move |s| s.group == group);
            let ns = members()
                .map(|s| s.active_or(elapsed_ns))
                .max()
                .unwrap_or(elapsed_ns);
            GroupReport {
                group,
                jobs: members().map(|s| s.name.clone()).collect(),
                totals: merged(&format!("group {group}"), members()).totals(ns),
            }
        })
        .collect()
}
