//! Who owns a file (`nvarray-owner`; issue 55): a device never opens a pool's file, a pool's
//! state, or a file another device or pool holds, and every refusal names the holder and
//! what it holds the file as; a device's backing must be a regular file; a device that only
//! reads opens its image read-only, so one on a read-only file system serves.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::serve::Serve;

fn nvarray(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(args)
        .output()
        .expect("run nvarray")
}

fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn native(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/build_native.sh (scripts/setup.sh does)",
        path.display()
    );
    path
}

/// Python with the SQLite VFS registered and the pool library loaded as `pm`; its NVM tier
/// in `dir`.
fn python(dir: &Path, script: &str) -> Command {
    let prelude = format!(
        "import ctypes, sqlite3, sys, os\n\
         assert ctypes.CDLL({vfs:?}).nvarray_sqlite_register() == 0\n\
         pm = ctypes.CDLL({pm:?})\n\
         pm.nv_allocate.restype = ctypes.c_void_p\n\
         pm.nv_last_error.restype = ctypes.c_char_p\n",
        vfs = native("native/nvarray-sqlite.so").display().to_string(),
        pm = native("release/libnvarray_pm.so").display().to_string(),
    );
    let mut command = Command::new("python3");
    command
        .arg("-c")
        .arg(format!("{prelude}{script}"))
        .env("NVARRAY_PM_NVM_DIR", dir)
        .env("NVARRAY_SQLITE_QUIET", "1");
    command
}

/// `nvarray serve` of the `dram` preset over `image` on a Unix socket in `dir`, with `extra`
/// flags; ready once it listens.
fn serve(dir: &Path, size: &str, image: &str, extra: &[&str]) -> Serve {
    let socket = dir.join("nbd.sock");
    let listen = format!("unix:{}", socket.display());
    let base = [
        "serve",
        "--preset",
        "dram",
        "--size",
        size,
        "--backing",
        image,
    ];
    let args: Vec<String> = [&base[..], extra, &["--listen", &listen]]
        .concat()
        .iter()
        .map(|s| s.to_string())
        .collect();
    Serve::start_with(&args, socket)
}

/// A Python process that opens `db` through the VFS, says `ready` and holds it open until its
/// stdin closes.
fn holder(dir: &Path, db: &Path) -> (Child, u32) {
    let mut child = python(
        dir,
        &format!(
            "c = sqlite3.connect('file:{}?vfs=nvarray&pool_size=16777216', uri=True)\n\
             c.execute('create table t(v)'); c.execute('insert into t values (1)'); c.commit()\n\
             print('ready', flush=True)\n\
             sys.stdin.read()\n\
             print(c.execute('select * from t').fetchall(), flush=True)\n",
            db.display()
        ),
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = child.id();
    (child, pid)
}

/// Issue 55's case: a device on a pool that a process holds open through the VFS is refused,
/// naming the process and what it holds the file as, and the pool is untouched (before, the
/// bench ran, exited 0, and the database could not be opened again); once the holder is
/// gone, the file's pool id still keeps devices off it.
#[test]
fn a_device_never_opens_a_pool_and_says_who_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let (mut child, pid) = holder(dir.path(), &db);
    let before = std::fs::read(&db).unwrap();
    let backing = format!("file:{}", db.display());
    let err = refused(&nvarray(&[
        "bench",
        "--size",
        "16m",
        "--backing",
        &backing,
        "--rw",
        "write",
        "--bs",
        "64k",
        "--runtime",
        "200ms",
    ]));
    assert!(
        err.contains(&format!("process {pid}")) && err.contains("as an nvarray-pm pool"),
        "{err}"
    );
    assert!(std::fs::read(&db).unwrap() == before, "the pool changed");
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[(1,)]");
    let err = refused(&nvarray(&[
        "bench",
        "--size",
        "16m",
        "--backing",
        &backing,
        "--runtime",
        "100ms",
    ]));
    assert!(err.contains("nvarray-pm pool's file"), "{err}");
}

/// The other order: a pool (through the VFS, or the library's own `nv_allocate`) is never
/// opened over a device's backing, and the refusal names the server.
#[test]
fn a_pool_never_opens_a_devices_backing_and_says_who_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("img");
    let serve = serve(dir.path(), "16m", &format!("file:{}", image.display()), &[]);
    let server = serve.child.id();
    let out = python(
        dir.path(),
        &format!(
            "p = pm.nv_allocate({path:?}.encode(), 0, 0)\n\
             print('allocate', p is None, pm.nv_last_error().decode())\n\
             os.environ.pop('NVARRAY_SQLITE_QUIET')\n\
             try:\n\
             \x20   sqlite3.connect('file:{path}?vfs=nvarray', uri=True).execute('select 1')\n\
             except sqlite3.Error as e:\n\
             \x20   print('vfs', e)\n",
            path = image.display().to_string()
        ),
    )
    .output()
    .unwrap();
    serve.stop("-INT");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let named = format!("process {server}");
    assert!(
        stdout.contains("allocate True")
            && stdout.contains(&named)
            && stdout.contains("as the backing of a device"),
        "{stdout}"
    );
    assert!(
        stdout.contains("vfs unable to open database file"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&named) && stderr.contains("as the backing of a device"),
        "{stderr}"
    );
}

/// A pool's NVM-tier state is refused as a device's backing, and so are files that are not
/// regular files (before: "Invalid argument (os error 22)", or /dev/zero mapped as an image).
#[test]
fn states_and_special_files_are_refused_as_backings_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut child, _) = holder(dir.path(), &db);
    let state = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "nvm"))
        .expect("the pool's state");
    let err = refused(&nvarray(&[
        "bench",
        "--size",
        "16m",
        "--backing",
        &format!("file:{}", state.display()),
    ]));
    assert!(
        err.contains("NVM-tier state of an nvarray-pm pool"),
        "{err}"
    );
    drop(child.stdin.take());
    child.wait().unwrap();
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    for (path, kind) in [
        (fifo.as_path(), "a FIFO"),
        (Path::new("/dev/zero"), "a character device"),
        (Path::new("/dev/null"), "a character device"),
        (dir.path(), "a directory"),
    ] {
        let err = refused(&nvarray(&[
            "bench",
            "--size",
            "16m",
            "--backing",
            &format!("file:{}", path.display()),
            "--runtime",
            "100ms",
        ]));
        assert!(
            err.contains(&format!(
                "is {kind}: a device's backing must be a regular file"
            )),
            "{}: {err}",
            path.display()
        );
    }
}

/// An image on a read-only file system (a read-only bind mount) serves a job that only reads
/// and a read-only export (before, both failed: the image was always opened to write); a job
/// that writes is refused with the file system's reason.
#[test]
fn an_image_on_a_read_only_file_system_serves_readers() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    assert_eq!(unsafe { libc::geteuid() }, 0, "bind mounts need root");
    let dir = tempfile::tempdir().unwrap();
    let (rw, ro) = (dir.path().join("rw"), dir.path().join("ro"));
    std::fs::create_dir_all(&rw).unwrap();
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::write(rw.join("img"), vec![0u8; 1 << 20]).unwrap();
    let mount = |args: &[&str]| {
        let ok = Command::new("mount").args(args).status().unwrap();
        assert!(ok.success(), "mount {args:?}");
    };
    let (rw_s, ro_s) = (rw.display().to_string(), ro.display().to_string());
    mount(&["--bind", &rw_s, &ro_s]);
    mount(&["-o", "remount,bind,ro", &ro_s]);
    let image = format!("file:{}/img", ro_s);
    let bench = |rw: &str| {
        let args = ["bench", "--preset", "dram", "--size", "1m", "--backing"];
        nvarray(&[&args[..], &[&image, "--rw", rw, "--runtime", "100ms"]].concat())
    };
    let (read, write) = (bench("randread"), bench("randwrite"));
    let serve = serve(dir.path(), "1m", &image, &["--read-only"]);
    let served = serve.output();
    serve.stop("-INT");
    let unmounted = Command::new("umount").arg(&ro).status().unwrap();
    assert!(unmounted.success());
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    assert!(served.contains("read-only"), "{served}");
    let err = String::from_utf8_lossy(&write.stderr);
    assert!(
        !write.status.success() && err.contains("Read-only file system"),
        "{err}"
    );
}
