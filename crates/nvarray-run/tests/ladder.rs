//! Every step of the software-stack ladder and every completion mode runs a multi-thread,
//! multi-queue-depth workload to the end: each command completes exactly once (no lost
//! wake-up hangs the run, no completion is delivered to the wrong thread or twice).

use nvarray_host::{CompletionMode, Device, Options, Stack};
use nvarray_model::presets::preset;
use nvarray_run::emu;
use nvarray_workload::{JobSpec, Workload};

fn workload(ios: u64) -> Workload {
    let mut job = JobSpec::default();
    for (k, v) in [
        ("rw", "randrw"),
        ("bs", "4k"),
        ("iodepth", "3"),
        ("numjobs", "3"),
        ("number_ios", &ios.to_string()),
    ] {
        job.set(k, v).unwrap();
    }
    Workload {
        jobs: vec![job],
        trace: None,
    }
}

#[test]
fn every_stack_and_completion_mode_completes_every_command() {
    let ios = 300;
    for (preset_name, protocol) in [
        ("moneta", "moneta"),
        ("dram", "nvme"),
        ("dram", "dc-express"),
    ] {
        let config = preset(preset_name)
            .unwrap()
            .load(&[
                ("memory.capacity_bytes".into(), (16u64 << 20).to_string()),
                ("interface.protocol".into(), protocol.into()),
            ])
            .unwrap();
        for device_threads in [1, 0] {
            for stack in Stack::ALL {
                for completion in CompletionMode::ALL {
                    if stack != Stack::Spin && completion != CompletionMode::Adaptive {
                        // Below `spin` the stack decides how threads wait.
                        continue;
                    }
                    if (completion == CompletionMode::InData) != (protocol == "dc-express")
                        || (protocol == "dc-express" && stack != Stack::Spin)
                    {
                        // In-data is DC Express's only completion mode, and needs spinning.
                        continue;
                    }
                    let options = Options {
                        device_threads,
                        stack,
                        completion: Some(completion),
                        buffer_bytes: Some(64 * 1024),
                        ..Options::default()
                    };
                    let device = Device::open(&config, &options).unwrap();
                    let report = emu::run_on(&device, &workload(ios), &mut |_| {}).unwrap();
                    let what = format!(
                        "{preset_name} ({protocol}) threads={device_threads} {stack} {completion}"
                    );
                    assert_eq!(report.totals.requests, 3 * ios, "{what}");
                    assert_eq!(
                        report.totals.read_bytes + report.totals.write_bytes,
                        3 * ios * 4096,
                        "{what}"
                    );
                    assert_eq!(device.commands_taken(), 3 * ios, "{what}");
                }
            }
        }
    }
}
