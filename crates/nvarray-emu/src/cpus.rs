//! Pinning the emulator's threads to CPUs (`--cpus`).
//!
//! A spinning thread that the scheduler moves between CPUs loses its caches and, on a busy
//! machine, shares a core with whatever else runs there. Pinned to CPUs the administrator set
//! aside (`isolcpus=`, `nohz_full=` on the kernel command line), a device thread and its host
//! threads see only the interruptions those CPUs still get, which is what tail measurements
//! need. The list is split in order: the device threads take its first CPUs, the host threads
//! the ones after, wrapping around when there are more threads than CPUs.

use std::fmt;
use std::io;

/// The largest CPU number a list may name (the kernel's `cpu_set_t` holds 1024).
pub const CPU_MAX: usize = libc::CPU_SETSIZE as usize - 1;

/// CPUs in the order given (`0-3,6` is 0, 1, 2, 3, 6), each once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// Parses the kernel's list syntax (as in `isolcpus=` and `taskset -c`): CPU numbers and
    /// ranges separated by commas.
    pub fn parse(text: &str) -> Result<CpuList, String> {
        let mut cpus = Vec::new();
        for part in text.split(',').map(str::trim) {
            let number = |s: &str| {
                s.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n <= CPU_MAX)
                    .ok_or_else(|| {
                        format!("{s:?} in {text:?} is not a CPU number from 0 to {CPU_MAX}")
                    })
            };
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(part)?, number(part)?),
            };
            if first > last {
                return Err(format!("the range {part:?} in {text:?} runs backwards"));
            }
            for cpu in first..=last {
                if cpus.contains(&cpu) {
                    return Err(format!("CPU {cpu} appears twice in {text:?}"));
                }
                cpus.push(cpu);
            }
        }
        Ok(CpuList(cpus))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn as_slice(&self) -> &[usize] {
        &self.0
    }

    /// The CPU of the `i`-th thread of `first` device threads followed by host threads: the
    /// list's `i`-th, wrapping around. `None` for an empty list (nothing is pinned).
    pub fn nth(&self, i: usize) -> Option<usize> {
        (!self.0.is_empty()).then(|| self.0[i % self.0.len()])
    }

    /// Checks that this process may run on every CPU of the list (its affinity mask, which
    /// `taskset` and cgroups' cpusets narrow), naming the first one it may not.
    pub fn check_allowed(&self) -> Result<(), String> {
        let allowed =
            allowed_cpus().map_err(|e| format!("cannot read this process's CPUs: {e}"))?;
        match self.0.iter().find(|c| !allowed.contains(c)) {
            None => Ok(()),
            Some(cpu) => Err(format!(
                "CPU {cpu} is not one this process may run on (allowed: {})",
                CpuList(allowed)
            )),
        }
    }
}

impl fmt::Display for CpuList {
    /// The list in the kernel's syntax, runs of consecutive CPUs as ranges.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        while i < self.0.len() {
            let mut j = i;
            while j + 1 < self.0.len() && self.0[j + 1] == self.0[j] + 1 {
                j += 1;
            }
            if i > 0 {
                f.write_str(",")?;
            }
            match j - i {
                0 => write!(f, "{}", self.0[i])?,
                _ => write!(f, "{}-{}", self.0[i], self.0[j])?,
            }
            i = j + 1;
        }
        Ok(())
    }
}

/// The CPUs this process may run on, in increasing order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t and its size is passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads a bit of a valid set, for CPU numbers below CPU_SETSIZE.
    Ok((0..=CPU_MAX)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins the calling thread to `cpu`.
pub fn pin_this_thread(cpu: usize) -> io::Result<()> {
    if cpu > CPU_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond the kernel's limit of {CPU_MAX}"),
        ));
    }
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above), so CPU_SET writes inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t and its size is passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_as_the_kernel_writes_them_and_print_back() {
        let l = CpuList::parse("0-3,6, 8-9").unwrap();
        assert_eq!(l.as_slice(), &[0, 1, 2, 3, 6, 8, 9]);
        assert_eq!(l.to_string(), "0-3,6,8-9");
        assert_eq!(CpuList::parse("5").unwrap().to_string(), "5");
        // Order is kept: the device threads take the first.
        let l = CpuList::parse("3,1").unwrap();
        assert_eq!((l.nth(0), l.nth(1), l.nth(2)), (Some(3), Some(1), Some(3)));
        assert_eq!(l.to_string(), "3,1");
        assert_eq!(CpuList::default().nth(0), None);
    }

    #[test]
    fn bad_lists_are_refused_with_the_culprit_named() {
        for (text, says) in [
            ("", "\"\""),
            ("a", "\"a\""),
            ("1-", "\"\""),
            ("3-1", "runs backwards"),
            ("1,1", "CPU 1 appears twice"),
            ("0-2,2", "CPU 2 appears twice"),
            ("5000", "from 0 to 1023"),
            ("-1", "\"\""),
        ] {
            let e = CpuList::parse(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn pinning_keeps_a_thread_on_its_cpu() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        let last = *allowed.last().unwrap();
        std::thread::spawn(move || {
            pin_this_thread(last).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![last]);
            // SAFETY: sched_getcpu takes no arguments.
            let on = unsafe { libc::sched_getcpu() };
            assert_eq!(on, last as i32);
        })
        .join()
        .unwrap();
        let not_allowed = (0..=CPU_MAX).find(|c| !allowed.contains(c)).unwrap();
        let e = CpuList(vec![not_allowed]).check_allowed().unwrap_err();
        assert!(e.contains(&format!("CPU {not_allowed} is not one")), "{e}");
        assert!(CpuList(allowed).check_allowed().is_ok());
    }
}
