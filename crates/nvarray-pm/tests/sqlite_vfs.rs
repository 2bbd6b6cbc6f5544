//! SQLite on nvarray-pm through the VFS `nvarray` (native/sqlite-vfs, built by
//! scripts/build_native.sh): the sqlite3 shell and Python's sqlite3 module on one database,
//! several processes writing at once under SQLite's locking, and writers killed with SIGKILL
//! mid-transaction or cut off by a simulated power cut losing no committed transaction and
//! leaving no uncommitted one.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn vfs_library() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/native/nvarray-sqlite.so");
    assert!(
        path.exists(),
        "{} is missing: run scripts/build_native.sh (scripts/setup.sh does)",
        path.display()
    );
    path
}

/// A scratch directory: the database's pool and nvarray-pm's NVM tier both live in it.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// `script` as python3 runs it: with the VFS registered, `DB` the database's URI and `KEEP`
/// the rows the kill test keeps; the NVM tier in `dir`.
fn python_command(dir: &Path, script: &str) -> Command {
    let prelude = format!(
        "import ctypes, sqlite3, sys\n\
         assert ctypes.CDLL({lib:?}).nvarray_sqlite_register() == 0\n\
         DB = 'file:{db}?vfs=nvarray&pool_size=67108864'\n\
         KEEP = 64\n",
        lib = vfs_library().display().to_string(),
        db = dir.join("app.db").display(),
    );
    let mut command = Command::new("python3");
    command
        .arg("-c")
        .arg(format!("{prelude}{script}"))
        .env("NVARRAY_PM_NVM_DIR", dir);
    command
}

/// Runs `script` (`python_command`) to its end.
fn python(dir: &Path, script: &str) -> Output {
    python_command(dir, script).output().expect("python3 runs")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_shell_and_python_share_a_database_kept_in_a_pool() {
    let dir = scratch();
    let db = dir.path().join("app.db");
    let lib = vfs_library();
    let lib = lib.with_extension("");
    let mut shell = Command::new("sqlite3")
        .env("NVARRAY_PM_NVM_DIR", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sqlite3 runs");
    let commands = format!(
        ".bail on\n.load {}\n.open file:{}?vfs=nvarray&pool_size=67108864\n\
         create table t(k integer primary key, v text);\n\
         with recursive n(i) as (select 1 union all select i + 1 from n where i < 500)\n\
         insert into t(v) select hex(randomblob(64)) from n;\n\
         select count(*), sum(length(v)) from t;\n",
        lib.display(),
        db.display()
    );
    std::io::Write::write_all(shell.stdin.as_mut().unwrap(), commands.as_bytes()).unwrap();
    let out = shell.wait_with_output().unwrap();
    assert_eq!(ok(&out), "500|64000");
    // The file is a pool (nvarray-pm's, 64 MiB), with the database after the VFS's header:
    // not a file SQLite's own VFS can read.
    let bytes = std::fs::read(&db).unwrap();
    assert_eq!(bytes.len(), 64 << 20);
    assert_eq!(&bytes[..8], b"NVSQLDB1");
    assert_eq!(&bytes[4096..4096 + 15], b"SQLite format 3");
    let out = python(
        dir.path(),
        "c = sqlite3.connect(DB, uri=True)\n\
         c.execute(\"insert into t(v) values ('python')\"); c.commit()\n\
         print(c.execute('select count(*) from t').fetchone()[0],\n\
               c.execute('pragma integrity_check').fetchone()[0])\n",
    );
    assert_eq!(ok(&out), "501 ok");
}

/// Runs `script(p)` for `p` in `0..n` as `n` python3 processes at once (`python`), and
/// returns their outputs in order.
fn python_at_once(dir: &Path, n: usize, script: impl Fn(usize) -> String) -> Vec<Output> {
    let running: Vec<_> = (0..n)
        .map(|p| {
            let (dir, script) = (dir.to_path_buf(), script(p));
            std::thread::spawn(move || python(&dir, &script))
        })
        .collect();
    running.into_iter().map(|t| t.join().unwrap()).collect()
}

/// The table of (process, row) pairs the writers of the multi-process tests insert into.
fn create_rows_table(dir: &Path) {
    ok(&python(
        dir,
        "c = sqlite3.connect(DB, uri=True)\n\
         c.execute('create table t(p integer, i integer, primary key (p, i))'); c.commit()\n",
    ));
}

/// Four processes insert at once, each row its own transaction: SQLite's locks (taken by the
/// VFS as open file description locks) let one write at a time, and every row is there.
#[test]
fn four_processes_writing_at_once_lose_no_row() {
    let dir = scratch();
    create_rows_table(dir.path());
    for out in python_at_once(dir.path(), 4, |p| {
        format!(
            "c = sqlite3.connect(DB, uri=True, timeout=60)\n\
             for i in range(150):\n\
             \x20   c.execute('insert into t values (?, ?)', ({p}, i)); c.commit()\n"
        )
    }) {
        ok(&out);
    }
    let out = python(
        dir.path(),
        "c = sqlite3.connect(DB, uri=True)\n\
         print(c.execute('select count(*), count(distinct p) from t').fetchone(),\n\
               c.execute('pragma integrity_check').fetchone()[0])\n",
    );
    assert_eq!(ok(&out), "(600, 4) ok");
}

/// Three processes, each in a mount namespace of its own that reaches the database through a
/// bind mount at another path (a container with a bind-mounted volume, as the vNVML seed
/// ran), share one NVM-tier state while all are attached (`state_key.rs`; before it, each had
/// its own log, cache and locks for the one file), and every row is there.
#[test]
fn processes_in_containers_share_one_pool_state() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "mount namespaces need root (the test command runs as root)"
    );
    let dir = scratch();
    create_rows_table(dir.path());
    let dir_text = dir.path().display().to_string();
    let outs = python_at_once(dir.path(), 3, |p| {
        format!(
            "import os, tempfile\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             assert libc.unshare(0x00020000) == 0  # CLONE_NEWNS\n\
             assert libc.mount(b'none', b'/', None, 0x4000 | 0x40000, None) == 0\n\
             inside = tempfile.mkdtemp(prefix='container-')\n\
             assert libc.mount({dir:?}.encode(), inside.encode(), None, 0x1000, None) == 0\n\
             c = sqlite3.connect(DB.replace({dir:?}, inside), uri=True, timeout=60)\n\
             c.execute('select count(*) from t').fetchone()\n\
             open(os.path.join(inside, 'ready-{p}'), 'w').close()\n\
             # Wait until all three are attached (polling a condition).\n\
             while sum(n.startswith('ready-') for n in os.listdir(inside)) < 3:\n\
             \x20   os.sched_yield()\n\
             states = sum(n.endswith('.nvm') for n in os.listdir(inside))\n\
             for i in range(100):\n\
             \x20   c.execute('insert into t values (?, ?)', ({p}, i)); c.commit()\n\
             print(states)\n",
            dir = dir_text,
        )
    });
    for out in outs {
        assert_eq!(
            ok(&out),
            "1",
            "NVM-tier states while all three were attached"
        );
    }
    let out = python(
        dir.path(),
        "c = sqlite3.connect(DB, uri=True)\n\
         print(c.execute('select count(*) from t').fetchone()[0],\n\
               c.execute('pragma integrity_check').fetchone()[0])\n",
    );
    assert_eq!(ok(&out), "300 ok");
}

/// A writer commits numbered rows, each with a counter on another page and the row 64 back
/// deleted in the same transaction (journal off: the VFS's transactions are the only
/// atomicity), and prints each number once its commit returned; it is killed with SIGKILL after a different number of
/// commits each round. Reopened, the database passes `integrity_check`, holds the last 64
/// printed rows without a gap, and at most the one row whose commit was in flight besides.
///
/// The test command runs 12 rounds; `scripts/campaign.sh pm-sqlite-kill` runs 1,000
/// (`NVARRAY_SQLITE_KILL_TRIALS`, `NVARRAY_SQLITE_KILL_SEED`).
#[test]
fn a_writer_killed_mid_transaction_loses_no_commit_and_tears_nothing() {
    let trials = common::campaign_env("NVARRAY_SQLITE_KILL_TRIALS", 12);
    let seed = common::campaign_env("NVARRAY_SQLITE_KILL_SEED", 0x5175_6c69);
    let mut rng = SmallRng::seed_from_u64(seed);
    eprintln!(
        "sqlite kill campaign: a failure at trial T replays with NVARRAY_SQLITE_KILL_SEED={seed} \
         NVARRAY_SQLITE_KILL_TRIALS=T cargo test --release -p nvarray-pm --test sqlite_vfs -- killed"
    );
    let started = std::time::Instant::now();
    let dir = scratch();
    ok(&python(
        dir.path(),
        "c = sqlite3.connect(DB, uri=True)\n\
         c.execute('create table t(i integer primary key, pad blob)')\n\
         c.execute('create table meta(k integer primary key, last integer)')\n\
         c.execute('insert into meta values (0, 0)'); c.commit()\n",
    ));
    let writer_err = dir.path().join("writer.err");
    let mut printed_total = 0;
    for round in 0..trials {
        let script = format!(
            "import os\n\
             c = sqlite3.connect(DB, uri=True, isolation_level=None)\n\
             c.execute('pragma journal_mode=off')\n\
             n = c.execute('select coalesce(max(i), 0) from t').fetchone()[0]\n\
             while True:\n\
             \x20   n += 1\n\
             \x20   c.execute('begin')\n\
             \x20   c.execute('insert into t values (?, randomblob(3000))', (n,))\n\
             \x20   c.execute('update t set pad = randomblob(3000) where i = ?', (max(1, n - 7),))\n\
             \x20   c.execute('delete from t where i = ?', (n - KEEP,))\n\
             \x20   c.execute('update meta set last = ? where k = 0', (n,))\n\
             \x20   c.execute('commit')\n\
             \x20   print(n, flush=True)\n\
             # round {round}\n"
        );
        let mut child = python_command(dir.path(), &script)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&writer_err).unwrap())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Killed after 1 to 40 acknowledged commits, a different number each round.
        let wanted: u64 = rng.gen_range(1..=40);
        let mut last = 0u64;
        for _ in 0..wanted {
            let Some(Ok(line)) = lines.next() else {
                panic!(
                    "round {round}: the writer stopped before its commit {wanted}: {}",
                    std::fs::read_to_string(&writer_err).unwrap_or_default()
                );
            };
            last = line.parse().unwrap();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // What it printed after the ones read (already committed too).
        for line in lines.map_while(Result::ok) {
            last = line.parse().unwrap();
        }
        printed_total += wanted;
        let out = python(
            dir.path(),
            "c = sqlite3.connect(DB, uri=True)\n\
             ids = [r[0] for r in c.execute('select i from t order by i')]\n\
             first = max(1, ids[-1] - KEEP + 1)\n\
             last = c.execute('select last from meta').fetchone()[0]\n\
             print(c.execute('pragma integrity_check').fetchone()[0], len(ids), ids[-1],\n\
                   ids == list(range(first, ids[-1] + 1)), last == ids[-1])\n",
        );
        let report = ok(&out);
        let fields: Vec<&str> = report.split_whitespace().collect();
        assert_eq!(fields[0], "ok", "round {round}: {report}");
        assert_eq!(fields[3], "True", "round {round}: rows missing: {report}");
        // The row and the counter were written in one transaction, on different pages.
        assert_eq!(
            fields[4], "True",
            "round {round}: a torn transaction: {report}"
        );
        let max: u64 = fields[2].parse().unwrap();
        assert!(
            max == last || max == last + 1,
            "round {round}: last acknowledged {last}, the database ends at {max}"
        );
    }
    assert!(printed_total >= trials);
    println!(
        "sqlite kill campaign: seed {seed:#x}, {trials} trials, {printed_total} acknowledged \
         SQLite transactions (journal off), integrity ok, 0 lost, 0 torn, {} s",
        started.elapsed().as_secs()
    );
}

/// Power cut under a running SQLite workload (`tests/sqlite_power_cuts.py`, over the C ABI's
/// simulated pools, `nv_sim_*`): at 8 seeded points of each seeded workload, journal off;
/// after each cut the reopened database passes `integrity_check` and holds exactly the state
/// of the last acknowledged transaction or of the one in flight, every row and payload
/// checked, and takes another transaction. With the VFS changed to commit per page write, the
/// first cut that lands between two of a transaction's pages fails it.
///
/// The test command cuts power 400 times (50 workloads); `scripts/campaign.sh
/// pm-sqlite-power` 10,000 (`NVARRAY_SQLITE_POWER_SEEDS`, `_FIRST_SEED`, and
/// `NVARRAY_PM_TORN_LINES` as the library's own power-cut test).
#[test]
fn power_cuts_under_sqlite_lose_no_commit_and_tear_nothing() {
    let seeds = common::campaign_env("NVARRAY_SQLITE_POWER_SEEDS", 50);
    let first = common::campaign_env("NVARRAY_SQLITE_POWER_FIRST_SEED", 0);
    let tear = common::campaign_env("NVARRAY_PM_TORN_LINES", 1);
    let started = std::time::Instant::now();
    let dir = scratch();
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pm_library = here.join("../../target/release/libnvarray_pm.so");
    let out = Command::new("python3")
        .arg(here.join("tests/sqlite_power_cuts.py"))
        .arg(vfs_library())
        .arg(&pm_library)
        .arg(dir.path())
        .args([first, seeds, tear].map(|n| n.to_string()))
        // Small tiers keep a simulated pool cheap to make 10,000 times; a 128 KiB cache
        // still lets a SQLite transaction log 64 KiB (half the cache).
        .env("NVARRAY_PM_LOG_SIZE", "512k")
        .env("NVARRAY_PM_CACHE_SIZE", "128k")
        .output()
        .expect("python3 runs");
    let report = ok(&out);
    let counts: serde_json::Value = serde_json::from_str(&report).unwrap();
    let cuts = counts["cuts"].as_u64().unwrap();
    assert!(
        cuts >= seeds * 5,
        "only {cuts} of {} cuts landed inside the workload",
        seeds * 8
    );
    println!(
        "sqlite power-cut campaign: seeds {first}..{}, {cuts} power cuts (unfenced lines kept or \
         dropped at random{}), {} acknowledged SQLite transactions before them (journal off), \
         integrity ok, 0 lost, 0 torn, {} s",
        first + seeds,
        if tear == 1 {
            ", and torn at 8-byte words"
        } else {
            ""
        },
        counts["transactions"],
        started.elapsed().as_secs()
    );
}

/// The study's script (`scripts/sqlite_ycsb.py`) runs, briefly: one mix, both engines, and a
/// JSON result whose figures are positive (a smoke run; nothing about speed is asserted).
#[test]
fn the_ycsb_study_script_runs() {
    let dir = scratch();
    let json = dir.path().join("ycsb.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/sqlite_ycsb.py");
    vfs_library();
    let out = Command::new("python3")
        .arg(script)
        .args([
            "--workloads",
            "b",
            "--record-bytes",
            "4k",
            "--records",
            "32",
            "--distributions",
            "zipf",
            "--processes",
            "2",
            "--seconds",
            "0.3",
            "--runs",
            "1",
            "--json",
        ])
        .arg(&json)
        .env("NVARRAY_PM_NVM_DIR", dir.path())
        .env("TMPDIR", dir.path())
        .output()
        .expect("python3 runs");
    ok(&out);
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let r = &results["results"][0];
    assert_eq!(r["workload"], "b");
    assert!(r["vfs_median"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["baseline_median"].as_f64().unwrap() > 0.0, "{r}");
}
