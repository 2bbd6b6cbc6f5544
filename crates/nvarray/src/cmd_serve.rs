//! `nvarray serve`: the emulated device as an NBD export (`nvarray-nbd`), so fio, qemu-io,
//! nbdcopy or the kernel's nbd-client use it unmodified, and/or to user-space channels
//! (`nvarray-channel`: libnvarray, fio's external engine), and/or as a vhost-user-blk disk
//! for a virtual machine (`nvarray-vhost`). Prints how to connect, the device report on
//! SIGUSR1 and at exit; SIGHUP re-reads the grants file; SIGINT or SIGTERM stop it
//! gracefully.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use nvarray_channel::{Daemon, DaemonOptions};
use nvarray_host::options::BackingKind;
use nvarray_model::config::CHANNEL_PERMISSION_CHECK_NS;
use nvarray_nbd::server::{check_options, CONNECTIONS_DEFAULT, LISTEN_DEFAULT};
use nvarray_nbd::{Bound, Listen, NbdError, Server, ServerOptions};
use nvarray_present::table;
use nvarray_vhost::{VhostOptions, VhostServer};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

use crate::channel_args::{read_grants_file, read_only_if, ChannelArgs};
use crate::emu_args::{open_device, EmuDeviceArgs};
use nvarray_sys::input::input_error;

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    device: EmuDeviceArgs,
    /// Where to listen for NBD: `unix:PATH`, or `tcp:HOST:PORT`. Loopback by default; any
    /// other address (e.g. `tcp:0.0.0.0:10809`) must be given explicitly, and there is no
    /// authentication or TLS [default: tcp:127.0.0.1:10809, or no NBD with --channels].
    #[arg(long, value_name = "ADDR")]
    listen: Option<Listen>,
    /// Name of the export (clients asking for the default export, "", get it too).
    #[arg(long, value_name = "NAME", default_value = "nvarray")]
    export_name: String,
    /// Refuse writes, trims and write-zeroes (EPERM); the export is advertised read-only.
    /// With --channels, every grant is read-only too (a write-only one grants nothing).
    #[arg(long)]
    read_only: bool,
    /// Most connections served at once; more are refused with a message during the handshake.
    #[arg(long, value_name = "N", default_value_t = CONNECTIONS_DEFAULT)]
    connections: usize,
    /// Print the report at exit (and on SIGUSR1) as JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    channels: ChannelArgs,
    /// Serve a virtual machine on this vhost-user socket (`unix:PATH`): QEMU's
    /// `-device vhost-user-blk-pci` (or any vhost-user VMM) attaches the device as a virtio
    /// disk, each virtqueue on its own queue pair. One VMM at a time; the next may connect
    /// when it leaves. Without --listen, NBD is not served
    #[arg(long, value_name = "unix:PATH")]
    vhost_user_blk: Option<String>,
    /// Virtqueues the vhost-user-blk disk offers (QEMU asks for one per vCPU unless given
    /// `num-queues`, and refuses a disk that offers fewer)
    #[arg(long, value_name = "N", default_value_t = nvarray_vhost::server::QUEUES_DEFAULT)]
    vhost_queues: u16,
}

/// What `serve` runs over one device: an NBD server, a channel daemon, a vhost-user-blk back
/// end, or several of them.
#[derive(Clone)]
struct Fronts {
    nbd: Option<Arc<Server>>,
    channels: Option<Arc<Daemon>>,
    vhost: Option<Arc<VhostServer>>,
}

pub fn run(args: ServeArgs) -> Result<()> {
    // The server's threads and one client's share the machine: `auto` gives the device a
    // thread of its own if a core is left after those two, or if the device is slow enough
    // that its thread mostly waits (`resolve_for_front_end`).
    let (mut config, mut options) = args.device.load(2)?;
    if args.read_only {
        // Nothing writes to a read-only export: its image may be on a read-only file system.
        options.backing = options.backing.read_only();
    }
    let channel_socket = args.channels.socket()?;
    let given = |key: &str| args.device.device.set.iter().any(|s| s.starts_with(key));
    if channel_socket.is_some() && !given("controller.permission_check_ns") {
        // A device serving channels checks every command (Moneta-D).
        config.controller.permission_check_ns = CHANNEL_PERMISSION_CHECK_NS;
    }
    let vhost_socket = args
        .vhost_user_blk
        .as_deref()
        .map(vhost_socket)
        .transpose()?;
    let listen = nbd_listen(
        args.listen.as_ref(),
        channel_socket.is_some() || vhost_socket.is_some(),
    )?;
    let server_options = listen.as_ref().map(|listen| ServerOptions {
        listen: listen.clone(),
        export_name: args.export_name.clone(),
        read_only: args.read_only,
        connections_max: args.connections,
    });
    // Listen before the device is prepared (seconds for a large one): a client that connects
    // meanwhile waits in the backlog instead of being refused.
    let bound = server_options.as_ref().map(bind_nbd).transpose()?;
    let grants = args
        .channels
        .grants(config.memory.capacity_bytes, args.read_only)?;
    let device = open_device(&config, &options)?;
    let log: Arc<dyn Fn(&str) + Send + Sync> = Arc::new(|m: &str| eprintln!("nvarray serve: {m}"));
    let nbd = match (bound, server_options) {
        (Some(bound), Some(o)) => Some(Arc::new(
            Server::over(Arc::clone(&device), bound, o, Arc::clone(&log)).map_err(nbd_error)?,
        )),
        _ => None,
    };
    assert_eq!(nbd.is_some(), listen.is_some(), "NBD without --listen");
    let channels = channel_socket
        .map(|socket| bind_channels(&args, &device, socket, grants))
        .transpose()?;
    let vhost = vhost_socket
        .map(|socket| bind_vhost(&args, &device, socket, &log))
        .transpose()?;
    let fronts = Fronts {
        nbd,
        channels,
        vhost,
    };
    print_how_to_connect(&args, &config, &options.backing, &fronts)?;
    serve_until_stopped(&args, &config, &fronts)?;
    print_reports(&config, &fronts, args.json);
    Ok(())
}

/// Where NBD listens: `--listen`, else its default address unless another front end
/// (`serves_other`) is served instead.
fn nbd_listen(given: Option<&Listen>, serves_other: bool) -> Result<Option<Listen>> {
    Ok(match (given, serves_other) {
        (Some(l), _) => Some(l.clone()),
        (None, false) => Some(
            LISTEN_DEFAULT
                .parse::<Listen>()
                .map_err(anyhow::Error::msg)?,
        ),
        (None, true) => None,
    })
}

/// An NBD error as the CLI reports it: a bad option or address is the user's (exit status 2).
fn nbd_error(e: NbdError) -> anyhow::Error {
    match e {
        e @ (NbdError::Config(_) | NbdError::Bind { .. }) => input_error(e),
        e => anyhow::Error::new(e),
    }
}

/// Checks the NBD server's options and listens on its address.
fn bind_nbd(o: &ServerOptions) -> Result<Bound> {
    check_options(o).map_err(nbd_error)?;
    if let Listen::Unix(path) = &o.listen {
        crate::emu_args::refuse_dead_mount(path, "--listen unix:")?;
    }
    Bound::listen(&o.listen).map_err(nbd_error)
}

/// The channel daemon on `socket`, giving `grants`; its mistakes the user's (exit status 2).
fn bind_channels(
    args: &ServeArgs,
    device: &Arc<nvarray_host::Device>,
    socket: std::path::PathBuf,
    grants: Vec<nvarray_channel::Grant>,
) -> Result<Arc<Daemon>> {
    let daemon = Daemon::bind(
        Arc::clone(device),
        DaemonOptions {
            socket,
            grants,
            channels_max: args.channels.channels_max,
        },
    )
    .map_err(input_error)?;
    Ok(Arc::new(daemon))
}

/// Runs the front ends until SIGINT or SIGTERM, answering SIGUSR1 (reports) and SIGHUP
/// (grants file) meanwhile.
fn serve_until_stopped(
    args: &ServeArgs,
    config: &nvarray_model::DeviceConfig,
    fronts: &Fronts,
) -> Result<()> {
    // Without --channels or --vhost-user-blk, NBD listens on its default address.
    assert!(
        fronts.nbd.is_some() || fronts.channels.is_some() || fronts.vhost.is_some(),
        "serving nothing"
    );
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGUSR1, SIGHUP])
        .context("cannot install signal handlers")?;
    let signals_handle = signals.handle();
    let reporter = fronts.clone();
    let (json, config_for_signals) = (args.json, config.clone());
    let grants_file = args.channels.grants_file.clone();
    let flag_grants = args.channels.grants.clone();
    let read_only = args.read_only;
    let signal_thread = std::thread::spawn(move || {
        for signal in signals.forever() {
            match signal {
                SIGUSR1 => print_reports(&config_for_signals, &reporter, json),
                SIGHUP => reload_grants(&reporter, &flag_grants, grants_file.as_deref(), read_only),
                _ => {
                    eprintln!("nvarray serve: stopping (in-flight requests finish, then flush)");
                    if let Some(s) = &reporter.nbd {
                        s.shutdown_handle().shutdown();
                    }
                    if let Some(d) = &reporter.channels {
                        d.shutdown_handle().shutdown();
                    }
                    if let Some(v) = &reporter.vhost {
                        v.shutdown_handle().shutdown();
                    }
                }
            }
        }
    });
    let daemon_thread = fronts
        .channels
        .clone()
        .map(|d| std::thread::spawn(move || d.run()));
    let vhost_thread = fronts
        .vhost
        .clone()
        .map(|v| std::thread::spawn(move || v.run()));
    let nbd_result = fronts.nbd.as_ref().map(|s| s.run());
    let channel_result = daemon_thread.map(|t| t.join().expect("the channel daemon panicked"));
    let vhost_result = vhost_thread.map(|t| t.join().expect("the vhost-user back end panicked"));
    signals_handle.close();
    let _ = signal_thread.join();
    if let Some(r) = nbd_result {
        r.context("NBD server failed")?;
    }
    if let Some(r) = channel_result {
        r.context("channel daemon failed")?;
    }
    if let Some(r) = vhost_result {
        r.context("vhost-user-blk back end failed")?;
    }
    Ok(())
}

/// SIGHUP: the grants are the flags' plus the file's as it reads now; a file that no longer
/// parses leaves the grants as they were.
fn reload_grants(
    fronts: &Fronts,
    flags: &[nvarray_channel::Grant],
    file: Option<&std::path::Path>,
    read_only: bool,
) {
    let (Some(daemon), Some(file)) = (&fronts.channels, file) else {
        return;
    };
    let result = read_grants_file(file).and_then(|from_file| {
        let grants = read_only_if(read_only, flags.iter().cloned().chain(from_file).collect());
        daemon.set_grants(grants.clone()).map_err(input_error)?;
        Ok(grants.len())
    });
    match result {
        Ok(n) => eprintln!(
            "nvarray serve: grants re-read from {}: {n} in force",
            file.display()
        ),
        Err(e) => eprintln!("nvarray serve: grants kept as they were: {e:#}"),
    }
}

fn print_how_to_connect(
    args: &ServeArgs,
    config: &nvarray_model::DeviceConfig,
    backing: &BackingKind,
    fronts: &Fronts,
) -> Result<()> {
    let backing = crate::emu_args::backing_line(backing);
    let mut out = std::io::stdout().lock();
    writeln!(out, "device   {}", table::device_line(config))?;
    if let Some(server) = &fronts.nbd {
        print_nbd_help(&mut out, server, args, &backing)?;
    }
    if let Some(daemon) = &fronts.channels {
        print_channels_help(&mut out, daemon, args, config, &backing)?;
    }
    if let Some(v) = &fronts.vhost {
        print_vhost_help(&mut out, v, &backing)?;
    }
    writeln!(
        out,
        "SIGUSR1 (kill -USR1 {}) prints the device report; SIGINT or SIGTERM stops the server.",
        std::process::id()
    )?;
    out.flush()?;
    Ok(())
}

/// How a client reaches the NBD export.
fn print_nbd_help(
    out: &mut impl Write,
    server: &Server,
    args: &ServeArgs,
    backing: &str,
) -> Result<()> {
    let (uri, export) = (server.uri(), server.export());
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
        "  fio --name=nvarray --ioengine=nbd --uri='{uri}' --rw=randread --bs=4k \
         --iodepth=16 --runtime=10s --time_based"
    )?;
    writeln!(out, "  nbdcopy disk.img '{uri}'")?;
    Ok(())
}

/// How a program reaches the channels, and the grants in force.
fn print_channels_help(
    out: &mut impl Write,
    daemon: &Daemon,
    args: &ServeArgs,
    config: &nvarray_model::DeviceConfig,
    backing: &str,
) -> Result<()> {
    let socket = daemon.socket().display();
    writeln!(
        out,
        "channels on unix:{socket} (at most {}; {backing}; permission check {} ns per command)",
        args.channels.channels_max, config.controller.permission_check_ns
    )?;
    for g in daemon.grants() {
        writeln!(out, "  grant {g}")?;
    }
    writeln!(
        out,
        "connect (build the engine and library: scripts/build_native.sh):"
    )?;
    writeln!(
        out,
        "  fio --name=nvarray --ioengine=external:target/native/nvarray-fio.so \
         --filename={socket} --rw=randread --bs=4k --iodepth=16 --runtime=10s --time_based"
    )?;
    writeln!(out, "  target/native/nvarray-example {socket}")?;
    Ok(())
}

fn print_reports(config: &nvarray_model::DeviceConfig, fronts: &Fronts, json: bool) {
    let mut text = String::new();
    if let Some(server) = &fronts.nbd {
        text += &render(
            config,
            &server.report(),
            &format!("NBD clients at {}", server.address()),
            nvarray_nbd::server::ACTIVE_TIME,
            json,
        );
    }
    if let Some(daemon) = &fronts.channels {
        text += &render(
            config,
            &daemon.report(),
            &format!("channels at unix:{}", daemon.socket().display()),
            nvarray_nbd::server::ACTIVE_TIME,
            json,
        );
    }
    if let Some(v) = &fronts.vhost {
        text += &render(
            config,
            &v.report(),
            &format!("vhost-user-blk guests at unix:{}", v.socket().display()),
            nvarray_vhost::server::ACTIVE_TIME,
            json,
        );
    }
    let mut out = std::io::stdout().lock();
    // Nobody reading stdout any more is no reason to fail the server.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn render(
    config: &nvarray_model::DeviceConfig,
    report: &nvarray_report::RunReport,
    source: &str,
    active_time: &str,
    json: bool,
) -> String {
    if json {
        serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
            + "\n"
    } else {
        table::served_report(config, source, active_time, report)
    }
}

/// `--vhost-user-blk unix:PATH`: the socket's path.
fn vhost_socket(given: &str) -> Result<std::path::PathBuf> {
    match given.strip_prefix("unix:") {
        Some(path) if !path.is_empty() => {
            let path = std::path::PathBuf::from(path);
            crate::emu_args::refuse_dead_mount(&path, "--vhost-user-blk unix:")?;
            Ok(path)
        }
        _ => Err(input_error(anyhow::anyhow!(
            "--vhost-user-blk {given:?}: expected unix:PATH, e.g. unix:/tmp/nvarray-vhost.sock"
        ))),
    }
}

/// The vhost-user-blk back end on `socket`, its mistakes the user's (exit status 2).
fn bind_vhost(
    args: &ServeArgs,
    device: &Arc<nvarray_host::Device>,
    socket: std::path::PathBuf,
    log: &Arc<dyn Fn(&str) + Send + Sync>,
) -> Result<Arc<VhostServer>> {
    let server = VhostServer::bind(
        Arc::clone(device),
        VhostOptions {
            socket,
            read_only: args.read_only,
            queues: args.vhost_queues,
            serial: nvarray_vhost::server::SERIAL_DEFAULT.to_string(),
        },
        Arc::clone(log),
    )
    .map_err(|e| match e {
        e @ (nvarray_vhost::VhostError::Config(_)
        | nvarray_vhost::VhostError::Bind { .. }
        | nvarray_vhost::VhostError::SocketInUse(_)) => input_error(e),
        e => anyhow::Error::new(e),
    })?;
    Ok(Arc::new(server))
}

/// How a virtual machine attaches the vhost-user-blk disk.
fn print_vhost_help(out: &mut impl Write, v: &VhostServer, backing: &str) -> Result<()> {
    let disk = v.disk();
    let socket = v.socket().display();
    writeln!(
        out,
        "vhost-user-blk on unix:{socket}: {} bytes, block {} B, {} virtqueues, {}, {backing}",
        disk.capacity_bytes,
        disk.block_bytes,
        disk.queues,
        if disk.read_only {
            "read-only"
        } else {
            "read-write"
        },
    )?;
    writeln!(
        out,
        "connect a VM (its memory must be shared with this process: memfd, share=on):"
    )?;
    for line in [
        "  qemu-system-x86_64 -machine q35,memory-backend=mem \\".to_string(),
        "    -object memory-backend-memfd,id=mem,size=1G,share=on \\".to_string(),
        format!("    -chardev socket,id=nvarray,path={socket} \\"),
        format!(
            "    -device vhost-user-blk-pci,chardev=nvarray,num-queues={} ...",
            disk.queues.min(4)
        ),
    ] {
        writeln!(out, "{line}")?;
    }
    Ok(())
}
