//! `nvarray fio --KEY=VALUE ... JOBFILE`: fio takes any job key on its command line and keeps
//! it as a global, which every job of the job file starts from and may set again. `nvarray
//! fio` has flags of its own for the common keys (which apply to every job, over the file);
//! each other fio key is rewritten here, before clap reads the command line, into
//! `--fio-global KEY=VALUE` (`FIO_GLOBAL_FLAG`), which `FioArgs::workload` applies as fio
//! does.

use std::ffi::OsString;

use nvarray_workload::{ignored_keys, supported_keys};

/// The hidden flag the rewritten keys are handed over in.
pub const FIO_GLOBAL_FLAG: &str = "fio-global";

/// `args` (the whole command line) with every `--KEY[=VALUE]` after `nvarray fio` whose KEY is
/// a fio job key and not one of the command's own flags (`own_flags`) turned into
/// `--fio-global KEY=VALUE` (a bare `--KEY` is a switch: `KEY=`). Anything else, and all
/// after `--`, is left for clap (so an unknown key still gets clap's error).
pub fn rewrite(args: Vec<OsString>, own_flags: &[String]) -> Vec<OsString> {
    if args.get(1).and_then(|a| a.to_str()) != Some("fio") {
        return args;
    }
    let mut out = Vec::with_capacity(args.len());
    let mut options_ended = false;
    for (i, arg) in args.into_iter().enumerate() {
        let text = arg.to_str().filter(|_| i >= 2 && !options_ended);
        let key_value = text.and_then(|t| t.strip_prefix("--")).map(|rest| {
            rest.split_once('=')
                .map_or((rest, ""), |(key, value)| (key, value))
        });
        match key_value {
            Some(("", _)) => {
                options_ended = true;
                out.push(arg);
            }
            Some((key, value)) if is_job_key(key) && !own_flags.iter().any(|f| f == key) => {
                out.push(format!("--{FIO_GLOBAL_FLAG}").into());
                out.push(format!("{key}={value}").into());
            }
            _ => out.push(arg),
        }
    }
    out
}

fn is_job_key(key: &str) -> bool {
    supported_keys().chain(ignored_keys()).any(|k| k == key)
}

/// A `KEY=VALUE` of `--fio-global` as its pair.
pub fn pair(global: &str) -> (String, String) {
    let (key, value) = global.split_once('=').unwrap_or((global, ""));
    (key.to_string(), value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<OsString> {
        line.split(' ').map(OsString::from).collect()
    }

    #[test]
    fn only_fio_keys_the_command_lacks_are_handed_over() {
        let own = ["bs".to_string(), "preset".to_string()];
        let out = rewrite(
            words("nvarray fio --preset moneta --latency_window=50ms --bs=8k --exitall --nope=1 job.fio -- --stonewall"),
            &own,
        );
        assert_eq!(
            out,
            words("nvarray fio --preset moneta --fio-global latency_window=50ms --bs=8k --fio-global exitall= --nope=1 job.fio -- --stonewall")
        );
        // Other commands are not touched.
        let bench = words("nvarray bench --latency_window=50ms");
        assert_eq!(rewrite(bench.clone(), &own), bench);
        assert_eq!(
            pair("latency_window=50ms"),
            ("latency_window".into(), "50ms".into())
        );
        assert_eq!(pair("exitall="), ("exitall".into(), String::new()));
    }
}
