//! What a reproduced figure is made of: rows (a published number, the experiments that
//! measure it, and the rule that says whether nvarray agrees) and an optional plot.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// The seed papers, in `../shared/reference/seeds/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Seed {
    /// Moneta (Caulfield et al., MICRO'10; slides and Swanson's 2011 talk).
    Moneta,
    /// OpenExpress (Jung, USENIX ATC'20 slides).
    OpenExpress,
    /// DC Express (Vucinic, HGST, SNIA 2016 slides).
    DcExpress,
    /// vNVML (2019 slides).
    Vnvml,
    /// The "Future of Storage" table of the Moneta slides.
    StorageFuture,
}

impl Seed {
    pub const ALL: [Seed; 5] = [
        Seed::Moneta,
        Seed::OpenExpress,
        Seed::DcExpress,
        Seed::Vnvml,
        Seed::StorageFuture,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Seed::Moneta => "moneta",
            Seed::OpenExpress => "openexpress",
            Seed::DcExpress => "dc-express",
            Seed::Vnvml => "vnvml",
            Seed::StorageFuture => "storage-future",
        }
    }

    pub fn from_name(name: &str) -> Option<Seed> {
        Seed::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A simulator run: a preset, `--set` overrides, and one or more jobs of fio keys. With more
/// than one job it needs a job file, written as `jobs/<job_file>.fio` beside the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimRun {
    pub preset: String,
    pub sets: Vec<(String, String)>,
    /// Each job: (section name, fio keys in order).
    pub jobs: Vec<(String, Vec<(String, String)>)>,
    pub job_file: Option<String>,
}

impl SimRun {
    /// The job file of a multi-job run (`[section]` then `key=value` lines).
    pub fn job_file_text(&self) -> String {
        let mut text = String::from("; written by nvarray repro\n");
        for (name, keys) in &self.jobs {
            // The catalogue's section names and keys are plain words: a `]` or a line break in
            // one would end the section header early, an `=` would move the key's value.
            assert!(
                !name.contains([']', '\n']),
                "job section name {name:?} would break the job file"
            );
            text.push_str(&format!("\n[{name}]\n"));
            for (k, v) in keys {
                assert!(!k.contains('='), "fio key {k:?} of job {name} holds an '='");
                text.push_str(&format!("{k}={v}\n"));
            }
        }
        text
    }
}

/// A seed document, one file of `../shared/reference/seeds/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Doc {
    /// The MICRO'10 slides, one `#` heading per slide.
    MonetaSlides,
    /// Swanson's Google Tech Talk, an automatic transcript with no slide marks.
    MonetaTalk,
    /// The ATC'20 slides, `slide-N` before each slide.
    OpenExpressSlides,
    /// The SNIA 2016 slides, one heading per slide.
    DcExpressSlides,
    /// The 2019 slides, `slide-N` before each slide.
    VnvmlSlides,
}

impl Doc {
    pub const ALL: [Doc; 5] = [
        Doc::MonetaSlides,
        Doc::MonetaTalk,
        Doc::OpenExpressSlides,
        Doc::DcExpressSlides,
        Doc::VnvmlSlides,
    ];

    pub fn file_name(self) -> &'static str {
        match self {
            Doc::MonetaSlides => "moneta-micro10-slides.md",
            Doc::MonetaTalk => "moneta-talk-transcript.txt",
            Doc::OpenExpressSlides => "openexpress-atc20-slides.txt",
            Doc::DcExpressSlides => "hgst-dcexpress-2016-slides.md",
            Doc::VnvmlSlides => "vnvml-2019-slides.txt",
        }
    }
}

impl Seed {
    /// The documents a seed's figures are quoted from.
    pub fn docs(self) -> &'static [Doc] {
        match self {
            Seed::Moneta => &[Doc::MonetaSlides, Doc::MonetaTalk],
            Seed::OpenExpress => &[Doc::OpenExpressSlides],
            Seed::DcExpress => &[Doc::DcExpressSlides],
            Seed::Vnvml => &[Doc::VnvmlSlides],
            Seed::StorageFuture => &[Doc::MonetaSlides],
        }
    }
}

/// Where in a seed document a quote is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Place {
    /// The slide numbered N (`slide-N` in the text).
    Slide(u32),
    /// The slide with this title (a heading of a markdown document).
    Titled(&'static str),
    /// A passage of a transcript, described in words (a transcript has no marks to point at).
    Passage(&'static str),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Slide(n) => write!(f, "slide {n}"),
            Place::Titled(title) => write!(f, "slide \"{title}\""),
            Place::Passage(passage) => f.write_str(passage),
        }
    }
}

/// Where a published value is stated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Source {
    /// Words of a seed document: `quote` occurs in `doc` at `place` as written, except that
    /// any run of whitespace stands for any other (line breaks differ) and `...` for words
    /// left out. `tests/quotes.rs` checks every one against the file.
    Seed {
        doc: Doc,
        place: Place,
        quote: &'static str,
    },
    /// A document that is not among the seeds (a paper's abstract, a datasheet), which no test
    /// here can read: the report says so beside the value.
    Outside { reference: &'static str },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Seed { doc, place, quote } => {
                write!(f, "{}, {place}: \"{quote}\"", doc.file_name())
            }
            Source::Outside { reference } => write!(f, "{reference} (not among the seeds)"),
        }
    }
}

/// Words of the MICRO'10 slides on the slide titled `title`.
pub fn moneta_slide(title: &'static str, quote: &'static str) -> Source {
    Source::Seed {
        doc: Doc::MonetaSlides,
        place: Place::Titled(title),
        quote,
    }
}

/// Words of Swanson's talk, in the passage described by `passage`.
pub fn moneta_talk(passage: &'static str, quote: &'static str) -> Source {
    Source::Seed {
        doc: Doc::MonetaTalk,
        place: Place::Passage(passage),
        quote,
    }
}

/// Words of the OpenExpress slides on slide `n`.
pub fn openexpress_slide(n: u32, quote: &'static str) -> Source {
    Source::Seed {
        doc: Doc::OpenExpressSlides,
        place: Place::Slide(n),
        quote,
    }
}

/// Words of the DC Express slides on the slide titled `title`.
pub fn dcexpress_slide(title: &'static str, quote: &'static str) -> Source {
    Source::Seed {
        doc: Doc::DcExpressSlides,
        place: Place::Titled(title),
        quote,
    }
}

/// Words of the vNVML slides on slide `n`.
pub fn vnvml_slide(n: u32, quote: &'static str) -> Source {
    Source::Seed {
        doc: Doc::VnvmlSlides,
        place: Place::Slide(n),
        quote,
    }
}

/// One measurement to run. Only `Sim` and `ProtocolCost` run in this crate; the others are
/// commands the caller runs (`Runner`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Experiment {
    /// The discrete-event simulator, in process; the outcome is the `--json` report.
    Sim(SimRun),
    /// The link traffic of one command under every protocol on a preset's link
    /// (`nvarray presets show NAME --protocol-cost --json`), in process.
    ProtocolCost { preset: String },
    /// `nvarray ARGS`, whose standard output is JSON (one object, or one per line: the
    /// outcome is an array of them then). With `cpu`, the caller also measures the whole
    /// machine's busy CPU time while it runs and adds `"busy_cores"` to the outcome.
    Nvarray { args: Vec<String>, cpu: bool },
    /// fio on a kernel loop device over a RAM-backed file of `device_bytes` (needs root,
    /// losetup and fio). The outcome is fio's JSON plus `"busy_cores"` as for `Nvarray`.
    KernelFio {
        device_bytes: u64,
        fio_args: Vec<String>,
    },
    /// PMDK's side of the NVM library benchmarks (`crates/nvarray-pm/peer/pmdk_peer.c`,
    /// built with gcc against libpmemobj); its standard output is one JSON line.
    PmdkPeer { args: Vec<String> },
    /// `scripts/channel_ladder.py --presets PRESETS --json`: real fio against the device
    /// through NBD, FUSE + a loop device and a user-space channel (needs root, fio, and the
    /// engine `scripts/build_native.sh` builds). The outcome is the script's JSON object.
    ChannelLadder { presets: String },
    /// `scripts/sqlite_ycsb.py ARGS --json -`: YCSB on SQLite from several processes through
    /// the VFS `nvarray` (a database in an nvarray-pm pool) and on the vNVML seed's baseline
    /// (needs the VFS `scripts/build_native.sh` builds; root for `--containers`). The outcome
    /// is the script's JSON object.
    SqliteYcsb { args: Vec<String> },
}

impl Experiment {
    /// The command a user types to run this experiment by hand (job files are relative to
    /// the report's directory).
    pub fn command(&self) -> String {
        match self {
            Experiment::Sim(run) => sim_command(run),
            Experiment::ProtocolCost { preset } => {
                format!("nvarray presets show {preset} --protocol-cost --json")
            }
            Experiment::Nvarray { args, .. } => {
                let mut words = vec!["nvarray".to_string()];
                words.extend(args.iter().cloned());
                shell_words(&words)
            }
            Experiment::KernelFio {
                device_bytes,
                fio_args,
            } => {
                let mut words = vec!["fio".to_string(), "--filename=$LOOP".to_string()];
                words.extend(fio_args.iter().cloned());
                words.push("--output-format=json".into());
                format!(
                    "LOOP=$(losetup --find --show /dev/shm/nvarray-repro.img)  # a {} MiB file; then {}",
                    {
                        // The printed command names the file's size in MiB: it must be exact.
                        assert!(
                            device_bytes % (1 << 20) == 0,
                            "a loop device of {device_bytes} bytes is not a whole number of MiB"
                        );
                        device_bytes >> 20
                    },
                    shell_words(&words)
                )
            }
            Experiment::PmdkPeer { args } => {
                let mut words = vec!["pmdk_peer".to_string()];
                words.extend(args.iter().cloned());
                shell_words(&words)
            }
            Experiment::ChannelLadder { presets } => {
                format!("scripts/channel_ladder.py --presets {presets} --json")
            }
            Experiment::SqliteYcsb { args } => {
                let mut words = vec!["scripts/sqlite_ycsb.py".to_string()];
                words.extend(args.iter().cloned());
                words.extend(["--json".to_string(), "-".to_string()]);
                shell_words(&words)
            }
        }
    }
}

/// The `nvarray sim` command of a simulator run: its preset, its `--set`s, then its one job's
/// keys or its job file.
fn sim_command(run: &SimRun) -> String {
    let mut words = vec![
        "nvarray".to_string(),
        "sim".into(),
        "--preset".into(),
        run.preset.clone(),
    ];
    for (k, v) in &run.sets {
        words.push("--set".into());
        words.push(format!("{k}={v}"));
    }
    match (&run.job_file, run.jobs.as_slice()) {
        (Some(file), _) => words.push(format!("jobs/{file}.fio")),
        (None, [(_, keys)]) => {
            for (k, v) in keys {
                words.push(format!("--{k}"));
                words.push(v.clone());
            }
        }
        (None, _) => unreachable!("several jobs need a job file (spec::sim_jobs)"),
    }
    words.push("--json".into());
    shell_words(&words)
}

/// Words joined by spaces, each quoted when the shell would split or expand it
/// (`nvarray_sys::shell`), but for a `--filename=$VAR` the reader's shell must expand.
fn shell_words(words: &[String]) -> String {
    assert!(!words.is_empty(), "a command needs at least its program");
    words
        .iter()
        .map(|w| {
            if w.starts_with("--filename=$") {
                w.clone()
            } else {
                nvarray_sys::shell::quote(w)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads one number off the outcomes of a row's experiments (in the row's order); `None`
/// when the outcome lacks it.
pub type Measure = Box<dyn Fn(&[&Value]) -> Option<f64> + Send + Sync>;

/// What agreement with the published value means for a row.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// Within this fraction of the published value (0.10 for ±10 %).
    Within(f64),
    /// The paper states a bound (a claim such as "over 20 MIOPS"): nvarray's value must be
    /// at least this.
    AtLeast(f64),
    /// nvarray's value must be at most this.
    AtMost(f64),
    /// No honest calibration meets the published value: nvarray gives `nvarray` (the tests
    /// assert it to ±2 %, so a change that moves it is seen), for the reason given.
    Differs { nvarray: f64, reason: &'static str },
    /// A measurement of this machine (emulator, NVM library, kernel): reported beside the
    /// published value, not judged; the note says how to read it.
    Measured,
}

/// One line of a figure's table.
pub struct Row {
    /// Stable identifier, `<figure>.<row>`, for scripts and tests.
    pub id: String,
    pub what: String,
    pub unit: &'static str,
    /// The published value nvarray is compared with (the middle of a published range).
    /// `None` when the seed states no number, only words ("falls first", "fewer"): the row's
    /// rule is then a bound that reads those words, and there is no ratio to print.
    pub published: Option<f64>,
    /// The published value as the paper states it, e.g. "72~77 us".
    pub published_text: &'static str,
    /// Where it is stated: the words that state it, and where they are.
    pub source: Source,
    pub experiments: Vec<Experiment>,
    pub measure: Measure,
    pub expect: Expect,
    /// Said beside the row in the report (how to read it, what differs and why).
    pub note: Option<&'static str>,
}

/// A published value: (the value compared with, as the paper states it, where it is quoted).
pub type Quote = (Option<f64>, &'static str, Source);

impl Row {
    /// A row measured by one experiment.
    pub fn one(
        id: String,
        what: &str,
        unit: &'static str,
        (published, published_text, source): Quote,
        experiment: Experiment,
        measure: Measure,
        expect: Expect,
    ) -> Row {
        assert!(
            id.contains('.'),
            "row id {id} is not of the form <figure>.<row>"
        );
        // A tolerance is a fraction of a number: around words it has nothing to be within.
        assert!(
            published.is_some() || !matches!(expect, Expect::Within(_)),
            "row {id}: a tolerance needs a published number"
        );
        Row {
            id,
            what: what.to_string(),
            unit,
            published,
            published_text,
            source,
            experiments: vec![experiment],
            measure,
            expect,
            note: None,
        }
    }
}

/// A point of a plotted curve: its x, and the experiment and measure of its y.
pub struct PlotPoint {
    pub x: f64,
    pub experiment: Experiment,
    pub measure: Measure,
}

pub struct LineSeries {
    pub label: String,
    pub points: Vec<PlotPoint>,
}

/// Splits one outcome into named parts (a stacked bar).
pub type Parts = Box<dyn Fn(&Value) -> Vec<(String, f64)> + Send + Sync>;

/// One stacked bar: the parts of one experiment's outcome (name, value).
pub struct Bar {
    pub label: String,
    pub experiment: Experiment,
    pub parts: Parts,
}

/// How a figure is drawn.
pub enum Plot {
    /// Curves, with the published points as reference markers.
    Lines {
        x_label: &'static str,
        y_label: &'static str,
        log_x: bool,
        log_y: bool,
        series: Vec<LineSeries>,
        /// Published (x, y) points.
        published: Vec<(f64, f64)>,
    },
    /// Stacked bars of fractions (a latency decomposition).
    StackedBars {
        y_label: &'static str,
        bars: Vec<Bar>,
    },
    /// The figure's rows as pairs of bars: published and nvarray.
    RowBars { y_label: &'static str, log_y: bool },
}

/// One reproduced figure or table of a seed.
pub struct Figure {
    pub id: &'static str,
    pub seed: Seed,
    pub title: &'static str,
    /// Where in the seed the figure is.
    pub source: &'static str,
    pub rows: Vec<Row>,
    pub plot: Option<Plot>,
}

// Helpers the catalogue is written with.

fn pairs(keys: &[(&str, &str)]) -> Vec<(String, String)> {
    keys.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A one-job simulator run.
pub fn sim(preset: &str, sets: &[(&str, &str)], job: &[(&str, &str)]) -> Experiment {
    Experiment::Sim(SimRun {
        preset: preset.to_string(),
        sets: pairs(sets),
        jobs: vec![("job0".to_string(), pairs(job))],
        job_file: None,
    })
}

/// A simulator run of several concurrent jobs, through a job file `jobs/<file>.fio`.
pub fn sim_jobs(
    preset: &str,
    sets: &[(&str, &str)],
    file: &str,
    jobs: &[(&str, &[(&str, &str)])],
) -> Experiment {
    assert!(
        !jobs.is_empty(),
        "job file {file}: a run needs at least one job"
    );
    Experiment::Sim(SimRun {
        preset: preset.to_string(),
        sets: pairs(sets),
        jobs: jobs
            .iter()
            .map(|(name, keys)| (name.to_string(), pairs(keys)))
            .collect(),
        job_file: Some(file.to_string()),
    })
}

/// `nvarray ARGS`.
pub fn nvarray(args: &[&str]) -> Experiment {
    Experiment::Nvarray {
        args: args.iter().map(|s| s.to_string()).collect(),
        cpu: false,
    }
}

/// Reads a number at a JSON path (`"breakdown_ns.host"`).
pub fn at(v: &Value, path: &str) -> Option<f64> {
    // Paths are the catalogue's own: an empty key ("a..b", a trailing dot) is a typo that
    // would read as "missing" for ever.
    assert!(
        !path.split('.').any(str::is_empty),
        "JSON path {path:?} has an empty key"
    );
    let mut v = v;
    for key in path.split('.') {
        v = match key.parse::<usize>() {
            Ok(i) => v.get(i)?,
            Err(_) => v.get(key)?,
        };
    }
    v.as_f64()
}

/// A measure of the first outcome.
pub fn of(f: impl Fn(&Value) -> Option<f64> + Send + Sync + 'static) -> Measure {
    Box::new(move |o: &[&Value]| o.first().and_then(|v| f(v)))
}

/// Read plus write bandwidth, GB/s.
pub fn gb_per_s(v: &Value) -> Option<f64> {
    Some((at(v, "read_bandwidth_bytes_per_s")? + at(v, "write_bandwidth_bytes_per_s")?) / 1e9)
}

/// Mean latency, µs (from the host's issue: what fio reports as `lat`).
pub fn mean_us(v: &Value) -> Option<f64> {
    Some(at(v, "latency_ns.mean")? / 1e3)
}

/// Mean latency without the host's share, µs: the device's.
pub fn device_us(v: &Value) -> Option<f64> {
    Some((at(v, "latency_ns.mean")? - at(v, "breakdown_ns.host")?) / 1e3)
}

pub fn iops(v: &Value) -> Option<f64> {
    at(v, "iops")
}

/// The ratio of the first outcome's `f` to the second's.
pub fn ratio(f: fn(&Value) -> Option<f64>) -> Measure {
    Box::new(move |o: &[&Value]| {
        let (a, b) = (f(o.first()?)?, f(o.get(1)?)?);
        (b != 0.0).then(|| a / b)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_what_a_user_types() {
        let e = sim(
            "moneta",
            &[("controller.policy", "split-rw")],
            &[("rw", "randread"), ("bs", "4k")],
        );
        assert_eq!(
            e.command(),
            "nvarray sim --preset moneta --set controller.policy=split-rw --rw randread --bs 4k --json"
        );
        let j = sim_jobs("moneta", &[], "fair", &[("a", &[("bs", "4k")]), ("b", &[])]);
        assert_eq!(
            j.command(),
            "nvarray sim --preset moneta jobs/fair.fio --json"
        );
        let Experiment::Sim(run) = j else {
            unreachable!()
        };
        assert_eq!(
            run.job_file_text(),
            "; written by nvarray repro\n\n[a]\nbs=4k\n\n[b]\n"
        );
        assert_eq!(
            nvarray(&["pm-bench", "ycsb", "--values", "1m 2m"]).command(),
            "nvarray pm-bench ycsb --values '1m 2m'"
        );
    }

    #[test]
    fn json_paths_read_numbers() {
        let v: Value = serde_json::json!({"a": {"b": [1.5, 2]}, "s": "x"});
        assert_eq!(at(&v, "a.b.0"), Some(1.5));
        assert_eq!(at(&v, "a.b.1"), Some(2.0));
        assert_eq!(at(&v, "a.c"), None);
        assert_eq!(at(&v, "s"), None);
    }
}
