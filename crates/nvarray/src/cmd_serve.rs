//! `nvarray serve`: the emulated device as an NBD export (`nvarray-nbd`), so fio, qemu-io,
//! nbdcopy or the kernel's nbd-client use it unmodified. Prints how to connect, the device
//! report on SIGUSR1 and at exit; SIGINT or SIGTERM stop it gracefully.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use nvarray_host::options::BackingKind;
use nvarray_nbd::server::{check_options, CONNECTIONS_DEFAULT, LISTEN_DEFAULT};
use nvarray_nbd::{Bound, Listen, NbdError, Server, ServerOptions};
use nvarray_present::table;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

use crate::emu_args::{open_device, EmuDeviceArgs};
use crate::input::input_error;

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    device: EmuDeviceArgs,
    /// Where to listen: `unix:PATH`, or `tcp:HOST:PORT`. Loopback by default; any other
    /// address (e.g. `tcp:0.0.0.0:10809`) must be given explicitly, and there is no
    /// authentication or TLS.
    #[arg(long, value_name = "ADDR", default_value = LISTEN_DEFAULT)]
    listen: Listen,
    /// Name of the export (clients asking for the default export, "", get it too).
    #[arg(long, value_name = "NAME", default_value = "nvarray")]
    export_name: String,
    /// Refuse writes, trims and write-zeroes (EPERM); the export is advertised read-only.
    #[arg(long)]
    read_only: bool,
    /// Most connections served at once; more are refused with a message during the handshake.
    #[arg(long, value_name = "N", default_value_t = CONNECTIONS_DEFAULT)]
    connections: usize,
    /// Print the report at exit (and on SIGUSR1) as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ServeArgs) -> Result<()> {
    // The server's threads and one client's share the machine: `auto` gives the device a
    // thread of its own only if a core is left after those two.
    let (config, options) = args.device.load(2)?;
    let backing = match &options.backing {
        BackingKind::Ram => "RAM (lost at exit)".to_string(),
        BackingKind::File { path, durable } => format!(
            "file {}{}",
            path.display(),
            if *durable { ", durable flushes" } else { "" }
        ),
    };
    let server_options = ServerOptions {
        listen: args.listen.clone(),
        export_name: args.export_name.clone(),
        read_only: args.read_only,
        connections_max: args.connections,
    };
    let nbd_error = |e| match e {
        e @ (NbdError::Config(_) | NbdError::Bind { .. }) => input_error(e),
        e => anyhow::Error::new(e),
    };
    // Listen before the device is prepared (seconds for a large one): a client that connects
    // meanwhile waits in the backlog instead of being refused.
    check_options(&server_options).map_err(nbd_error)?;
    if let Listen::Unix(path) = &args.listen {
        crate::emu_args::refuse_dead_mount(path, "--listen unix:")?;
    }
    let bound = Bound::listen(&args.listen).map_err(nbd_error)?;
    let device = open_device(&config, &options)?;
    let log: Arc<dyn Fn(&str) + Send + Sync> = Arc::new(|m: &str| eprintln!("nvarray serve: {m}"));
    let server =
        Arc::new(Server::over(Arc::clone(&device), bound, server_options, log).map_err(nbd_error)?);
    let uri = server.uri();
    let export = server.export();
    let mut out = std::io::stdout().lock();
    writeln!(out, "device   {}", table::device_line(&config))?;
    writeln!(
        out,
        "export   {:?}: {} bytes, block {} B (preferred {} B), {}, {}",
        export.name,
        export.limits.size_bytes,
        export.limits.block_bytes,
        export.preferred_block_bytes,
        if args.read_only {
            "read-only"
        } else {
            "read-write"
        },
        backing
    )?;
    writeln!(
        out,
        "listening on {} (at most {} connections)",
        server.address(),
        args.connections
    )?;
    writeln!(out, "connect:")?;
    writeln!(out, "  nbdinfo '{uri}'")?;
    writeln!(
        out,
        "  qemu-io -f raw '{uri}' -c 'write -P 0xab 0 64k' -c 'read -P 0xab 0 64k'"
    )?;
    writeln!(
        out,
        "  fio --name=nvarray --ioengine=nbd --uri='{uri}' --rw=randread --bs=4k --iodepth=16 \
         --runtime=10s --time_based"
    )?;
    writeln!(out, "  nbdcopy disk.img '{uri}'")?;
    writeln!(
        out,
        "SIGUSR1 (kill -USR1 {}) prints the device report; SIGINT or SIGTERM stops the server.",
        std::process::id()
    )?;
    out.flush()?;
    drop(out);

    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGUSR1]).context("cannot install signal handlers")?;
    let signals_handle = signals.handle();
    let (shutdown, reporter, json) = (server.shutdown_handle(), Arc::clone(&server), args.json);
    let config_for_signals = config.clone();
    let signal_thread = std::thread::spawn(move || {
        for signal in signals.forever() {
            match signal {
                SIGUSR1 => print_report(&config_for_signals, &reporter, json),
                _ => {
                    eprintln!("nvarray serve: stopping (in-flight requests finish, then flush)");
                    shutdown.shutdown();
                }
            }
        }
    });
    let result = server.run();
    signals_handle.close();
    let _ = signal_thread.join();
    result.context("NBD server failed")?;
    print_report(&config, &server, args.json);
    Ok(())
}

fn print_report(config: &nvarray_model::DeviceConfig, server: &Server, json: bool) {
    let report = server.report();
    let text = if json {
        serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
            + "\n"
    } else {
        table::served_report(
            config,
            &format!("NBD clients at {}", server.address()),
            nvarray_nbd::server::ACTIVE_TIME,
            &report,
        )
    };
    let mut out = std::io::stdout().lock();
    // Nobody reading stdout any more is no reason to fail the server.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}
