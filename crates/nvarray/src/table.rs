//! Human-readable reports.

use std::fmt::Write;

use nvarray_model::DeviceConfig;
use nvarray_sim::{RunReport, Totals};
use nvarray_workload::{JobSpec, Workload};

/// One line describing the device.
pub fn device_line(d: &DeviceConfig) -> String {
    format!(
        "{} — {} media, PCIe gen{} x{}, {} interface, {} controller, policy {}, {} memory controllers x {} banks",
        d.name,
        d.memory.technology,
        d.link.generation,
        d.link.lanes,
        match d.interface.protocol {
            nvarray_model::Protocol::Moneta => "moneta",
            nvarray_model::Protocol::Nvme => "nvme",
        },
        match d.controller.mode {
            nvarray_model::ControllerMode::Hardware => "hardware",
            nvarray_model::ControllerMode::Firmware => "firmware",
        },
        d.controller.policy.name(),
        d.memory.controllers,
        d.memory.banks_per_controller,
    )
}

/// One line describing a job in fio's terms.
pub fn job_line(j: &JobSpec) -> String {
    let mut s = format!(
        "{}: rw={} bs={} iodepth={} numjobs={}",
        j.name, j.rw, j.bs, j.iodepth, j.numjobs
    );
    if j.rw.is_mixed() {
        s += &format!(" rwmixread={}", j.rwmixread);
    }
    if j.rw.is_random() {
        s += &format!(" random_distribution={}", j.random_distribution);
    }
    if let Some(n) = j.number_ios {
        s += &format!(" number_ios={n}");
    }
    if let Some(r) = j.runtime_ns {
        s += &format!(" runtime={}", fmt_ns(r));
    }
    s += &format!(" randseed={}", j.randseed);
    s
}

fn fmt_ns(ns: u64) -> String {
    match ns {
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1000.0)
}

fn totals_row(name: &str, t: &Totals) -> String {
    let l = &t.latency_ns;
    format!(
        "{:<12} {:>11.0} {:>10.1} {:>10.1} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        name,
        t.iops,
        t.read_bandwidth_bytes_per_s / 1e6,
        t.write_bandwidth_bytes_per_s / 1e6,
        us(l.mean),
        us(l.p50 as f64),
        us(l.p99 as f64),
        us(l.p999 as f64),
        us(l.p9999 as f64),
        us(l.p99999 as f64),
        us(l.max as f64),
    )
}

/// The full report of one run.
pub fn run_report(device: &DeviceConfig, workload: &Workload, r: &RunReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "device   {}", device_line(device));
    for j in &workload.jobs {
        let _ = writeln!(s, "job      {}", job_line(j));
    }
    let _ = writeln!(
        s,
        "engine   {} ({:.3} ms of device time)\n",
        r.engine,
        r.elapsed_ns as f64 / 1e6
    );
    let _ = writeln!(
        s,
        "{:<12} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "stream",
        "IOPS",
        "read MB/s",
        "write MB/s",
        "mean µs",
        "p50",
        "p99",
        "p99.9",
        "p99.99",
        "p99.999",
        "max"
    );
    s.push_str(&totals_row("all", &r.totals));
    if r.streams.len() > 1 {
        for st in &r.streams {
            s.push_str(&totals_row(&st.name, &st.totals));
        }
    }
    let _ = writeln!(
        s,
        "\nlatency breakdown, mean µs per request (adds up to the mean latency):"
    );
    let parts: Vec<String> = r
        .totals
        .breakdown_ns
        .0
        .iter()
        .map(|(k, v)| format!("{k} {}", us(*v)))
        .collect();
    let _ = writeln!(s, "  {}", parts.join(" | "));
    let u = &r.utilisation;
    let _ = writeln!(
        s,
        "utilisation: link to device {:.0}% | link to host {:.0}% | controller {:.0}% | ring {:.0}% | banks {:.0}% | buffers {:.0}% | tags {:.0}%",
        u.link_to_device * 100.0,
        u.link_to_host * 100.0,
        u.controller * 100.0,
        u.ring * 100.0,
        u.banks * 100.0,
        u.buffers * 100.0,
        u.tags * 100.0
    );
    if let Some(w) = &r.wear {
        let _ = writeln!(
            s,
            "wear (start-gap): max writes to one line {} | mean {:.4} | gap moves {}",
            w.line_writes_max, w.line_writes_mean, w.gap_moves
        );
    }
    if r.erases > 0 {
        let _ = writeln!(s, "flash erases: {}", r.erases);
    }
    s
}
