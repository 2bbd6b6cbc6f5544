//! fio job files: an INI dialect with a `[global]` section and one section per job.

use serde::Serialize;

use crate::error::WorkloadError;
use crate::spec::JobSpec;

/// Largest job file accepted, 1 MiB; real job files are a few hundred bytes.
pub const JOB_FILE_BYTES_MAX: usize = 1 << 20;
/// Most jobs (sections other than `[global]`) in one workload.
pub const JOBS_MAX: usize = 1024;

/// Everything a simulation runs: jobs in the order their sections appear, all running
/// concurrently from time zero.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Workload {
    /// The jobs; names are unique in workloads from [`parse_job_file`].
    pub jobs: Vec<JobSpec>,
    /// A trace to replay instead of the jobs' generated requests: the workload then has one
    /// job, whose name, queue depth and bounds (`runtime`, `number_ios`) the replay takes;
    /// the trace gives every request's direction, offset, length and time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace::TraceSpec>,
}

impl Workload {
    /// Each job's phase: jobs of one phase run side by side, and a phase starts once the one
    /// before it has finished. A job with `stonewall` or `wait_for` starts a new phase (so
    /// `wait_for` waits for every earlier job, not only the one it names: the same order
    /// whenever the named job is the last to finish).
    pub fn phases(&self) -> Vec<usize> {
        self.numbered(JobSpec::waits)
    }

    /// Whether a job ending ends others (fio's `exitall`, given in any job: fio holds it for
    /// every job of the file).
    pub fn exits(&self) -> bool {
        self.jobs.iter().any(|j| j.exitall)
    }

    /// Each job's reporting group (fio's `groupid`): a new group at each new phase and at
    /// each `new_group`.
    pub fn groups(&self) -> Vec<usize> {
        self.numbered(|job| job.waits() || job.new_group)
    }

    /// Numbers the jobs from 0, one more at each job after the first for which `starts`.
    fn numbered(&self, starts: impl Fn(&JobSpec) -> bool) -> Vec<usize> {
        let mut number = 0;
        self.jobs
            .iter()
            .enumerate()
            .map(|(index, job)| {
                number += usize::from(index > 0 && starts(job));
                number
            })
            .collect()
    }

    /// The end of the furthest job region on the device, in bytes: each job's `offset` plus
    /// its last thread's `offset_increment` steps plus its `size` (or, without one, its
    /// `io_size`: a region of the bytes it moves, as examples/cross-stripe-verify.fio's
    /// stripes). `None` when no job gives either (every region then runs to the device's
    /// end, whatever its size).
    pub fn span_bytes(&self) -> Option<u64> {
        self.jobs
            .iter()
            .filter_map(|job| {
                let steps = job
                    .offset_increment_bytes
                    .saturating_mul(u64::from(job.numjobs.saturating_sub(1)));
                job.size_bytes
                    .or(job.io_size_bytes)
                    .map(|size| job.offset_bytes.saturating_add(steps).saturating_add(size))
            })
            .max()
    }

    /// Checks the workload as a whole and every job against the device (see
    /// [`JobSpec::validate`]): at least one job, at most [`JOBS_MAX`], unique names.
    pub fn validate(
        &self,
        device_size_bytes: u64,
        block_size_bytes: u32,
        max_transfer_bytes: u32,
    ) -> Result<(), WorkloadError> {
        if self.jobs.is_empty() {
            return Err(WorkloadError::NoJobs);
        }
        if self.jobs.len() > JOBS_MAX {
            return Err(WorkloadError::TooManyJobs { jobs_max: JOBS_MAX });
        }
        for (index, job) in self.jobs.iter().enumerate() {
            if self.jobs[..index]
                .iter()
                .any(|other| other.name == job.name)
            {
                return Err(WorkloadError::DuplicateJob {
                    name: job.name.clone(),
                });
            }
            if let Some(earlier) = &job.wait_for {
                if !self.jobs[..index]
                    .iter()
                    .any(|other| &other.name == earlier)
                {
                    return Err(WorkloadError::Job {
                        name: job.name.clone(),
                        inner: Box::new(WorkloadError::Invalid {
                            key: "wait_for",
                            reason: format!("names no job before this one: '{earlier}'"),
                        }),
                    });
                }
            }
            job.validate(device_size_bytes, block_size_bytes, max_transfer_bytes)
                .map_err(|e| WorkloadError::Job {
                    name: job.name.clone(),
                    inner: Box::new(e),
                })?;
        }
        Ok(())
    }
}

/// Parses a fio job file into a [`Workload`].
///
/// The dialect:
/// - `[name]` starts a job named `name`; the job starts as a copy of the `[global]` settings
///   seen so far. `[global]` may appear more than once; each one adds to the settings of the
///   jobs after it, never before.
/// - `key=value` (whitespace around `=` is ignored) or a bare `key` applies to the current
///   section through [`JobSpec::set`], so the keys and their values are exactly those of the
///   command line. A bare key is a switch (`stonewall`, `new_group`, or an ignored flag such
///   as `group_reporting`); any other bare key is an error asking for a value. A `name=` inside a job section
///   renames that job.
/// - `;` and `#` start a comment that runs to the end of the line, as in fio. Blank lines
///   are skipped.
/// - `$NAME` and `${NAME}` are replaced by what [`JobFileEnv::var`] says (the front end's:
///   environment variables and fio's `$ncpus`, `$pagesize`, `$mb_memory`); one it does not
///   know is an error. `include FILE` reads another job file in its place
///   ([`JobFileEnv::include`]), at most 8 deep.
/// - Keys before the first section, unknown keys, empty section names and duplicate job
///   names are errors. Every error on a line says which line (1-based).
///
/// Not supported: fio's arithmetic in values (`$(...)`), and `percentile_list` in a job
/// file (it is a flag, `--percentile_list`; in a job file it fails as an unknown key).
pub fn parse_job_file(text: &str) -> Result<Workload, WorkloadError> {
    parse_job_file_noting(text, &mut Vec::new())
}

/// [`parse_job_file`], adding to `notes` one line for each accepted and ignored key ("line 3:
/// ioengine ignored: nvarray is the engine..."), so a front end can say so instead of
/// ignoring it silently. No variables, no includes.
pub fn parse_job_file_noting(
    text: &str,
    notes: &mut Vec<String>,
) -> Result<Workload, WorkloadError> {
    parse_job_file_with(text, &NoEnv, notes)
}

/// What a job file may reach outside itself: variables and included files.
pub trait JobFileEnv {
    /// The value of `$name` or `${name}`, if it has one.
    fn var(&self, name: &str) -> Option<String>;
    /// The text of the job file `include` names, or why it cannot be read.
    fn include(&self, path: &str) -> Result<String, String>;
}

/// No variables and no includes (a job file from a string alone).
pub struct NoEnv;

impl JobFileEnv for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }

    fn include(&self, path: &str) -> Result<String, String> {
        Err(format!(
            "cannot include {path}: this job file was given as text, with no files beside it"
        ))
    }
}

/// Deepest `include` chain.
const INCLUDE_DEPTH_MAX: usize = 8;

/// [`parse_job_file_noting`] with variables and includes from `env`.
pub fn parse_job_file_with(
    text: &str,
    env: &dyn JobFileEnv,
    notes: &mut Vec<String>,
) -> Result<Workload, WorkloadError> {
    parse_job_file_from(text, JobSpec::default(), env, notes)
}

/// [`parse_job_file_with`], the global settings starting from `global` instead of the
/// defaults: fio's job keys given on its command line before the job file, which fio keeps
/// as globals that the file's `[global]` and job sections may set again.
pub fn parse_job_file_from(
    text: &str,
    global: JobSpec,
    env: &dyn JobFileEnv,
    notes: &mut Vec<String>,
) -> Result<Workload, WorkloadError> {
    let mut parser = Parser {
        global,
        jobs: Vec::new(),
        in_global: false,
        env,
        notes,
    };
    parser.feed(text, 0)?;
    let jobs = parser.jobs;
    assert!(jobs.len() <= JOBS_MAX, "{} jobs parsed", jobs.len());
    if jobs.is_empty() {
        return Err(WorkloadError::NoJobs);
    }
    for (index, (job, line)) in jobs.iter().enumerate() {
        if jobs[..index]
            .iter()
            .any(|(other, _)| other.name == job.name)
        {
            return Err(WorkloadError::DuplicateJob {
                name: job.name.clone(),
            }
            .at_line(*line));
        }
    }
    // fio numbers threads from 1 over the whole file, each clone counted; `pareto` and
    // `normal` are seeded with the number.
    let mut thread_number = 1u32;
    let jobs = jobs
        .into_iter()
        .map(|(mut job, _)| {
            job.fio_thread_number = thread_number;
            thread_number = thread_number.saturating_add(job.numjobs);
            job
        })
        .collect();
    Ok(Workload { jobs, trace: None })
}

struct Parser<'a> {
    global: JobSpec,
    /// Each job with the line of its section header, for duplicate-name errors.
    jobs: Vec<(JobSpec, usize)>,
    in_global: bool,
    env: &'a dyn JobFileEnv,
    notes: &'a mut Vec<String>,
}

impl Parser<'_> {
    /// Reads one file's lines into the jobs (an included file at `depth` > 0).
    fn feed(&mut self, text: &str, depth: usize) -> Result<(), WorkloadError> {
        assert!(depth <= INCLUDE_DEPTH_MAX, "includes {depth} deep");
        if text.len() > JOB_FILE_BYTES_MAX {
            return Err(WorkloadError::InputTooLarge {
                len_bytes: text.len(),
                len_bytes_max: JOB_FILE_BYTES_MAX,
            });
        }
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split([';', '#']).next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let (expanded, keyword) =
                expand_vars(content, self.env).map_err(|reason| syntax(line, reason))?;
            let content = expanded.trim();
            if let Some(path) = content.strip_prefix("include ").map(str::trim) {
                self.include(path, line, depth)?;
            } else if let Some(header) = content.strip_prefix('[') {
                self.section(header, content, line)?;
            } else {
                self.key_line(content, keyword, line)?;
            }
        }
        Ok(())
    }

    /// `include PATH` on `line`: the included file's lines, one level deeper.
    fn include(&mut self, path: &str, line: usize, depth: usize) -> Result<(), WorkloadError> {
        if depth + 1 > INCLUDE_DEPTH_MAX {
            return Err(syntax(
                line,
                format!(
                    "include {path}: more than {INCLUDE_DEPTH_MAX} levels deep (an include loop?)"
                ),
            ));
        }
        let included = self
            .env
            .include(path)
            .map_err(|reason| syntax(line, reason))?;
        self.feed(&included, depth + 1)
            .map_err(|e| syntax(line, format!("in {path}: {e}")))
    }

    /// A section header (`header` is `content` after its `[`): `[global]`, or a new job
    /// that starts from the globals read so far.
    fn section(&mut self, header: &str, content: &str, line: usize) -> Result<(), WorkloadError> {
        let Some(name) = header.strip_suffix(']') else {
            return Err(syntax(
                line,
                format!("section header '{content}' must look like [name]"),
            ));
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(syntax(line, "section name is empty".to_string()));
        }
        if name == "global" {
            self.in_global = true;
            return Ok(());
        }
        if self.jobs.len() == JOBS_MAX {
            return Err(WorkloadError::TooManyJobs { jobs_max: JOBS_MAX }.at_line(line));
        }
        let mut job = self.global.clone();
        job.set("name", name).map_err(|e| e.at_line(line))?;
        self.jobs.push((job, line));
        self.in_global = false;
        Ok(())
    }

    /// A `key=value` line (or a bare key) for the section it is in; `keyword` says a fio
    /// keyword was expanded in it, so its value is evaluated.
    fn key_line(&mut self, content: &str, keyword: bool, line: usize) -> Result<(), WorkloadError> {
        let (key, value) = match content.split_once('=') {
            Some((key, value)) => (key.trim(), value.trim()),
            None => (content, ""),
        };
        if key.is_empty() {
            return Err(syntax(line, format!("'{content}' has no key before '='")));
        }
        let value = if crate::spec::key_names::ignored_reason(key).is_some() {
            value.to_string()
        } else {
            evaluated(key, value, keyword).map_err(|reason| syntax(line, reason))?
        };
        let target = match self.jobs.last_mut() {
            _ if self.in_global => &mut self.global,
            Some((job, _)) => job,
            None => {
                return Err(syntax(
                    line,
                    format!(
                        "'{key}' appears before any section; put it under [global] or [jobname]"
                    ),
                ))
            }
        };
        target.set(key, &value).map_err(|e| e.at_line(line))?;
        if let Some(why) = crate::spec::key_names::ignored_reason(key) {
            self.notes
                .push(format!("line {line}: {key} ignored: {why}"));
        }
        Ok(())
    }
}

/// A syntax error on `line`.
fn syntax(line: usize, reason: String) -> WorkloadError {
    WorkloadError::Syntax { reason }.at_line(line)
}

/// Replaces `$NAME` and `${NAME}` in `line` by their values in `env`; `$$` is a `$`.
/// Also says whether one of fio's keywords (`FIO_KEYWORDS`) was replaced, after which fio
/// evaluates the value's arithmetic (`arith.rs`).
fn expand_vars(line: &str, env: &dyn JobFileEnv) -> Result<(String, bool), String> {
    if !line.contains('$') {
        return Ok((line.to_string(), false));
    }
    let mut keyword = false;
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced
                .find('}')
                .ok_or_else(|| format!("'${{' without a closing '}}' in '{line}'"))?;
            (&braced[..end], &braced[end + 1..])
        } else if after.starts_with('(') {
            return Err(format!(
                "fio's arithmetic '$(...)' is not supported in '{line}': write the value"
            ));
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() {
            return Err(format!(
                "'$' without a variable name in '{line}' (write $$ for a '$')"
            ));
        }
        let value = env.var(name).ok_or_else(|| {
            format!(
                "${name} is not set (an environment variable, or $ncpus, $pagesize, $mb_memory)"
            )
        })?;
        out.push_str(&value);
        keyword |= FIO_KEYWORDS.contains(&name);
        rest = tail;
    }
    out.push_str(rest);
    Ok((out, keyword))
}

/// fio's reserved keywords: replaced in a job file's values, which fio then evaluates.
const FIO_KEYWORDS: [&str; 3] = ["pagesize", "mb_memory", "ncpus"];

/// A value with fio's arithmetic done: a parenthesised expression (with units), or, after a
/// keyword was replaced, `bc`'s integer arithmetic (see `arith.rs`). Other values as given.
fn evaluated(key: &str, value: &str, keyword: bool) -> Result<String, String> {
    let arith = |e: String| format!("{key}={value}: {e}");
    if value.starts_with('(') {
        return crate::arith::evaluate_value(value)
            .map(|n| n.to_string())
            .map_err(arith);
    }
    if keyword && value.contains(['+', '-', '*', '/']) {
        return crate::arith::evaluate(value, false)
            .map(|n| n.to_string())
            .map_err(arith);
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{BlockSize, Distribution, RwMode};
    use crate::units::NS_PER_S;

    fn d(name: &str) -> JobSpec {
        JobSpec {
            name: name.to_string(),
            ..JobSpec::default()
        }
    }

    /// Parses `text` and compares its jobs with `expected`, whose fio thread numbers are
    /// filled in here (`fio_threads_are_numbered_over_the_file` checks those).
    fn check(text: &str, expected: Result<Vec<JobSpec>, &str>) {
        let actual = parse_job_file(text)
            .map(|workload| workload.jobs)
            .map_err(|e| e.to_string());
        let mut next = 1;
        let expected = expected.map(|jobs| {
            jobs.into_iter()
                .map(|mut job| {
                    job.fio_thread_number = next;
                    next += job.numjobs;
                    job
                })
                .collect::<Vec<_>>()
        });
        assert_eq!(
            actual,
            expected.map_err(str::to_string),
            "job file:\n{text}"
        );
    }

    #[test]
    fn the_span_is_the_furthest_region_end() {
        let w = parse_job_file(
            "[a]\nsize=1g\noffset=1g\n[b]\nsize=64m\nnumjobs=4\noffset_increment=1g\n[c]\n",
        )
        .unwrap();
        assert_eq!(w.span_bytes(), Some((3 << 30) + (64 << 20)));
        assert_eq!(parse_job_file("[c]\n").unwrap().span_bytes(), None);
        // Without a size, the bytes a thread moves: examples/cross-stripe-verify.fio's 30
        // stripes of 124 GiB, each moving 120 GiB from 120 KiB into its stripe.
        let stripes =
            parse_job_file("[s]\noffset=120k\noffset_increment=124g\nio_size=120g\nnumjobs=30\n")
                .unwrap();
        assert_eq!(
            stripes.span_bytes(),
            Some((120 << 10) + 29 * (124 << 30) + (120 << 30))
        );
    }

    #[test]
    fn fio_threads_are_numbered_over_the_file() {
        let w = parse_job_file("[a]\nnumjobs=3\n[b]\n[c]\nnumjobs=2\n[d]\n").unwrap();
        let numbers: Vec<u32> = w.jobs.iter().map(|j| j.fio_thread_number).collect();
        assert_eq!(numbers, [1, 4, 5, 7]);
    }

    #[test]
    fn one_job_with_every_kind_of_line() {
        check(
            "; a comment\n\
             # another comment\n\
             \n\
             [random-reads]\n\
             rw = randread   ; trailing comment\n\
             bs=4k#no space before the comment\n\
             \tiodepth\t=\t32\n\
             ioengine=io_uring\n\
             direct=1\n\
             group_reporting\n\
             time_based\n\
             runtime=10\n\
             random_distribution=zipf:1.1\n",
            Ok(vec![JobSpec {
                rw: RwMode::RandRead,
                iodepth: 32,
                runtime_ns: Some(10 * NS_PER_S),
                random_distribution: Distribution::Zipf {
                    theta: 1.1,
                    center: None,
                },
                time_based: true,
                ..d("random-reads")
            }]),
        );
    }

    #[test]
    fn global_applies_to_following_jobs_in_order() {
        check(
            "[global]\n\
             bs=64k\n\
             iodepth=8\n\
             [a]\n\
             rw=write\n\
             [b]\n\
             iodepth=1\n\
             [global]\n\
             numjobs=4\n\
             [c]\n",
            Ok(vec![
                JobSpec {
                    rw: RwMode::Write,
                    bs: BlockSize::Fixed(65536),
                    iodepth: 8,
                    ..d("a")
                },
                JobSpec {
                    bs: BlockSize::Fixed(65536),
                    iodepth: 1,
                    ..d("b")
                },
                JobSpec {
                    bs: BlockSize::Fixed(65536),
                    iodepth: 8,
                    numjobs: 4,
                    ..d("c")
                },
            ]),
        );
    }

    #[test]
    fn a_given_global_is_the_start_the_file_may_override() {
        let mut global = JobSpec::default();
        global.set("latency_window", "50ms").unwrap();
        global.set("bs", "8k").unwrap();
        let w = parse_job_file_from(
            "[a]\n[global]\nbs=16k\n[b]\n[c]\nlatency_window=1s\n",
            global,
            &NoEnv,
            &mut Vec::new(),
        )
        .unwrap();
        let bs: Vec<u32> = w.jobs.iter().map(|j| j.bs.len_bytes_max()).collect();
        assert_eq!(bs, [8192, 16384, 16384]);
        let window = |i: usize| {
            w.jobs[i]
                .fio_options()
                .into_iter()
                .find(|(k, _)| *k == "latency_window")
        };
        assert_eq!(window(0), window(1));
        assert_ne!(window(0), None);
        assert_ne!(window(2), window(0));
    }

    #[test]
    fn global_after_a_job_does_not_change_it() {
        check(
            "[a]\n[global]\nrw=randwrite\n[b]\n",
            Ok(vec![
                d("a"),
                JobSpec {
                    rw: RwMode::RandWrite,
                    ..d("b")
                },
            ]),
        );
    }

    #[test]
    fn name_key_renames_and_crlf_is_fine() {
        check(
            "[a]\r\nname=renamed\r\n[ spaced name ]\r\n",
            Ok(vec![d("renamed"), d("spaced name")]),
        );
    }

    #[test]
    fn errors_name_the_line() {
        check(
            "",
            Err("workload: defines no jobs; add a section such as [job1] after [global]"),
        );
        check(
            "[global]\nbs=4k\n",
            Err("workload: defines no jobs; add a section such as [job1] after [global]"),
        );
        check(
            "bs=4k\n[a]\n",
            Err("line 1: 'bs' appears before any section; put it under [global] or [jobname]"),
        );
        check(
            "[a]\n\n[b\n",
            Err("line 3: section header '[b' must look like [name]"),
        );
        check("[ ]\n", Err("line 1: section name is empty"));
        check("[a]\n=4k\n", Err("line 2: '=4k' has no key before '='"));
        check(
            "[a]\n; comment\niodepth=0\n",
            Err("line 3: iodepth: must be an integer in 1..=4096, got '0'"),
        );
        check(
            "[a]\niodepth\n",
            Err("line 2: iodepth: needs a value, write iodepth=VALUE"),
        );
        check(
            "[global]\nrw=randrw\n[a]\nrandom_distribution=zipf:0\n",
            Err("line 4: random_distribution: zipf theta must be in (0, 100], got 'zipf:0'"),
        );
        check(
            "[a]\n[b]\n[a]\n",
            Err("line 3: workload: job name 'a' is used twice; give each job section its own name"),
        );
        check(
            "[a]\nname=b\n[b]\n",
            Err("line 3: workload: job name 'b' is used twice; give each job section its own name"),
        );
        let unknown = parse_job_file("[a]\n\nnrfiles=2\n")
            .unwrap_err()
            .to_string();
        assert!(
            unknown.starts_with("line 3: unknown key 'nrfiles'; supported keys: name, rw,"),
            "{unknown}"
        );
        let too_many: String = (0..=JOBS_MAX).map(|i| format!("[j{i}]\n")).collect();
        check(&too_many, Err("line 1025: workload: more than 1024 jobs"));
        let huge = " ".repeat(JOB_FILE_BYTES_MAX + 1);
        check(
            &huge,
            Err("job file: 1048577 bytes is larger than the limit of 1048576 bytes"),
        );
    }

    #[test]
    fn workload_validate() {
        let workload = |jobs: Vec<JobSpec>| Workload { jobs, trace: None };
        let gib = 1u64 << 30;
        assert_eq!(
            workload(vec![d("a"), d("b")]).validate(gib, 4096, 1 << 20),
            Ok(())
        );
        let errors = [
            (
                workload(vec![]),
                "workload: defines no jobs; add a section such as [job1] after [global]",
            ),
            (
                workload(vec![d("a"), d("a")]),
                "workload: job name 'a' is used twice; give each job section its own name",
            ),
            (
                workload(vec![
                    d("a"),
                    JobSpec {
                        offset_bytes: 100,
                        ..d("b")
                    },
                ]),
                "job 'b': offset: 100 is not a multiple of the device block size 4096",
            ),
            (
                workload(vec![d("a"); JOBS_MAX + 1]),
                "workload: more than 1024 jobs",
            ),
        ];
        for (workload, expected) in errors {
            assert_eq!(
                workload
                    .validate(gib, 4096, 1 << 20)
                    .map_err(|e| e.to_string()),
                Err(expected.to_string())
            );
        }
    }

    /// Variables and includes from a test environment.
    struct Env;

    impl JobFileEnv for Env {
        fn var(&self, name: &str) -> Option<String> {
            match name {
                "ncpus" => Some("4".into()),
                "pagesize" => Some("4096".into()),
                "DEPTH" => Some("32".into()),
                _ => None,
            }
        }

        fn include(&self, path: &str) -> Result<String, String> {
            match path {
                "common.fio" => Ok("[global]\nbs=64k\niodepth=${DEPTH}\n".into()),
                "loop.fio" => Ok("include loop.fio\n".into()),
                "bad.fio" => Ok("[global]\nbs=zero\n".into()),
                _ => Err(format!("cannot read {path}: no such file")),
            }
        }
    }

    fn with_env(text: &str) -> Result<Workload, String> {
        parse_job_file_with(text, &Env, &mut Vec::new()).map_err(|e| e.to_string())
    }

    #[test]
    fn variables_are_expanded_and_unknown_ones_refused() {
        let w = with_env("[j]\nnumjobs=$ncpus\niodepth=${DEPTH}\nname=cost$$\n").unwrap();
        assert_eq!((w.jobs[0].numjobs, w.jobs[0].iodepth), (4, 32));
        assert_eq!(w.jobs[0].name, "cost$");
        let e = with_env("[j]\niodepth=$NOPE\n").unwrap_err();
        assert!(e.starts_with("line 2: $NOPE is not set"), "{e}");
        let e = with_env("[j]\niodepth=$(2*4)\n").unwrap_err();
        assert!(e.contains("arithmetic"), "{e}");
        let e = with_env("[j]\niodepth=${DEPTH\n").unwrap_err();
        assert!(e.contains("without a closing"), "{e}");
        // Without an environment, nothing is set.
        assert!(parse_job_file("[j]\nnumjobs=$ncpus\n").is_err());
    }

    #[test]
    fn fio_evaluates_arithmetic_after_its_keywords_and_in_parentheses() {
        // After a keyword, bc's integer arithmetic (fio 3.33 hands the value to bc).
        let w = with_env("[j]\nsize=5*1024*$pagesize\nnumjobs=$ncpus/2\n").unwrap();
        assert_eq!(w.jobs[0].size_bytes, Some(5 * 1024 * 4096));
        assert_eq!(w.jobs[0].numjobs, 2);
        // An environment variable is not a keyword: its value is taken as written.
        let e = with_env("[j]\niodepth=${DEPTH}*2\n").unwrap_err();
        assert!(e.contains("iodepth"), "{e}");
        // Parenthesised, with units (fio's HOWTO), with or without an environment.
        let w = parse_job_file("[j]\nsize=(2*512)m\noffset=(1g+512m)\nbs=(4*1024)\n").unwrap();
        assert_eq!(w.jobs[0].size_bytes, Some(1 << 30));
        assert_eq!(w.jobs[0].offset_bytes, 3 << 29);
        assert_eq!(w.jobs[0].bs, BlockSize::Fixed(4096));
        for (text, why) in [
            ("[j]\nsize=$pagesize/0\n", "division by zero"),
            ("[j]\nsize=(1+2\n", "unbalanced"),
            ("[j]\nsize=$pagesize*2k\n", "unexpected 'k"),
        ] {
            let e = with_env(text).unwrap_err();
            assert!(
                e.starts_with("line 2: size=") && e.contains(why),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn includes_read_other_files_in_place() {
        let w = with_env("include common.fio\n[j]\nrw=randread\n").unwrap();
        assert_eq!(w.jobs[0].bs, BlockSize::Fixed(64 << 10));
        assert_eq!(w.jobs[0].iodepth, 32);
        let e = with_env("include loop.fio\n[j]\n").unwrap_err();
        assert!(e.contains("levels deep"), "{e}");
        let e = with_env("[j]\ninclude missing.fio\n").unwrap_err();
        assert!(e.starts_with("line 2: cannot read missing.fio"), "{e}");
        let e = with_env("[j]\ninclude bad.fio\n").unwrap_err();
        assert!(e.starts_with("line 2: in bad.fio: line 2: bs"), "{e}");
        let e = parse_job_file("include common.fio\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("given as text"), "{e}");
    }
}
