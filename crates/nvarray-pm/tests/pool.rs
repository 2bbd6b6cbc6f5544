//! The pool through its Rust API: commits, aborts, isolation, reopening, bad input, and a
//! property test against a reference byte array.

mod common;

use common::{pattern, Scratch};
use nvarray_pm::{PmError, Pool, PoolOptions, StateStatus};
use proptest::prelude::*;

const SIZE: u64 = 1 << 20;

fn read_all(pool: &Pool) -> Vec<u8> {
    let mut buf = vec![0u8; pool.size() as usize];
    pool.read(0, &mut buf).unwrap();
    buf
}

#[test]
fn committed_writes_are_read_back_and_survive_reopen() {
    let s = Scratch::new();
    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    let mut tx = pool.begin().unwrap();
    tx.write(10, b"hello").unwrap();
    tx.write(4090, &pattern(1, 100)).unwrap(); // spans two pages
    let mut own = [0u8; 5];
    tx.read(10, &mut own).unwrap();
    assert_eq!(&own, b"hello", "a transaction reads its own writes");
    let mut other = [0u8; 5];
    pool.read(10, &mut other).unwrap();
    assert_eq!(
        other, [0; 5],
        "uncommitted writes are invisible through the mapping"
    );
    tx.commit().unwrap();
    let mut after = [0u8; 5];
    pool.read(10, &mut after).unwrap();
    assert_eq!(&after, b"hello");
    // SAFETY: no transaction is running; the pool is 1 MiB long.
    let via_ptr = unsafe { std::slice::from_raw_parts(pool.as_ptr().add(10), 5) };
    assert_eq!(via_ptr, b"hello", "the pointer reads the same mapping");
    pool.close().unwrap();

    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    assert!(pool.recovery().is_none(), "a clean close needs no recovery");
    let all = read_all(&pool);
    assert_eq!(&all[10..15], b"hello");
    assert_eq!(&all[4090..4190], &pattern(1, 100)[..]);
}

#[test]
fn aborted_and_dropped_transactions_leave_nothing() {
    let s = Scratch::new();
    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    let mut tx = pool.begin().unwrap();
    tx.write(0, &[7; 64]).unwrap();
    tx.abort();
    {
        let mut tx = pool.begin().unwrap();
        tx.write(100, &[8; 64]).unwrap();
    } // dropped
    assert!(read_all(&pool).iter().all(|&b| b == 0));
    assert_eq!(pool.stats().aborts, 2);
    assert_eq!(pool.stats().bytes_logged, 0, "aborts cost the log nothing");
    // The pages are free again.
    let mut tx = pool.begin().unwrap();
    tx.write(0, &[9; 64]).unwrap();
    tx.commit().unwrap();
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let s = Scratch::new();
    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    let mut tx = pool.begin().unwrap();
    tx.write(0, &[1; 8]).unwrap();
    assert!(matches!(
        tx.write(SIZE - 4, &[1; 8]),
        Err(PmError::OutOfRange { .. })
    ));
    assert!(matches!(
        tx.write(u64::MAX - 2, &[1; 8]),
        Err(PmError::OutOfRange { .. })
    ));
    assert!(matches!(tx.write(5, &[]), Err(PmError::ZeroLength(5))));
    let big = vec![0u8; 20 << 10]; // more than a quarter of the 64 KiB log
    assert!(matches!(tx.write(0, &big), Err(PmError::TooLarge { .. })));
    let mut buf = [0u8; 8];
    assert!(pool.read(SIZE - 4, &mut buf).is_err());
    tx.commit().unwrap();
    let all = read_all(&pool);
    assert_eq!(&all[..8], &[1; 8]);
    assert!(
        all[8..].iter().all(|&b| b == 0),
        "refused writes wrote nothing"
    );
}

/// The NVM-tier state of `pool` as a crash of its process would leave it (not closed
/// cleanly, commits perhaps not yet written back), to write back as the state file later.
fn crash_image(pool: &Pool) -> Vec<u8> {
    std::fs::read(pool.nvm_path()).unwrap()
}

#[test]
fn wrong_size_damaged_header_and_wrong_version_are_clear_errors() {
    let s = Scratch::new();
    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    let nvm = pool.nvm_path().to_path_buf();
    let original = crash_image(&pool);
    pool.close().unwrap();

    let e = Pool::open(s.backing(), SIZE * 2, &s.small()).unwrap_err();
    assert!(matches!(e, PmError::Mismatch { .. }), "{e}");
    assert!(e.to_string().contains("pool.data"), "names the file: {e}");

    let mut damaged = original.clone();
    damaged[20] ^= 0xff; // inside the pool-size field
    std::fs::write(&nvm, &damaged).unwrap();
    let e = Pool::open(s.backing(), SIZE, &s.small()).unwrap_err();
    assert!(matches!(e, PmError::Corrupt { .. }), "{e}");
    assert!(
        e.to_string().contains(&*nvm.to_string_lossy()),
        "names the file: {e}"
    );

    let mut versioned = original.clone();
    versioned[8] = 99;
    std::fs::write(&nvm, &versioned).unwrap();
    let e = Pool::open(s.backing(), SIZE, &s.small()).unwrap_err();
    assert!(matches!(e, PmError::WrongVersion { found: 99, .. }), "{e}");

    std::fs::write(&nvm, b"certainly not a pool").unwrap();
    let e = Pool::open(s.backing(), SIZE, &s.small()).unwrap_err();
    assert!(matches!(e, PmError::Corrupt { .. }), "{e}");

    std::fs::write(&nvm, &original).unwrap();
    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    assert!(pool.recovery().is_some(), "the crashed state was recovered");
}

/// Issue 44: the state was matched to a pool by its path and size only, so a pool removed
/// after its process died (or replaced by an unrelated file) had the dead pool's commits
/// replayed into the new file at its path. The state now records the file's identity; a file
/// that is not the pool is never written, and its refusal says how to discard the state.
#[test]
fn a_dead_pools_state_is_never_written_into_another_file_at_its_path() {
    let s = Scratch::new();
    // No background threads: the commits stay in the log, for recovery to replay.
    let opts = PoolOptions {
        background: false,
        ..s.small()
    };
    let open_crashed = |data: &[u8]| {
        let pool = Pool::open(s.backing(), SIZE, &opts).unwrap();
        let mut tx = pool.begin().unwrap();
        tx.write(0, data).unwrap();
        tx.commit().unwrap();
        let image = crash_image(&pool);
        let nvm = pool.nvm_path().to_path_buf();
        pool.close().unwrap();
        assert!(!nvm.exists(), "a clean close removes the state");
        (nvm, image)
    };
    let dead = pattern(1, 4096);

    // The same file: its commits are recovered into it.
    let (nvm, image) = open_crashed(&dead);
    std::fs::write(s.backing(), vec![0u8; SIZE as usize]).unwrap(); // written back: undo it
    std::fs::write(&nvm, &image).unwrap();
    let pool = Pool::open(s.backing(), SIZE, &opts).unwrap();
    assert_eq!(pool.recovery().map(|r| r.records), Some(1));
    assert_eq!(&read_all(&pool)[..4096], &dead[..]);
    pool.close().unwrap();

    // Replaced by an unrelated file of the same size: refused, and left as it was.
    let (nvm, image) = open_crashed(&dead);
    let unrelated = pattern(2, SIZE as usize);
    std::fs::remove_file(s.backing()).unwrap();
    std::fs::write(s.backing(), &unrelated).unwrap();
    std::fs::write(&nvm, &image).unwrap();
    let no_create = PoolOptions {
        create: false,
        ..opts.clone()
    };
    let e = Pool::open(s.backing(), 0, &no_create).unwrap_err();
    assert!(matches!(e, PmError::NotThisPool { .. }), "{e}");
    for needle in [
        &*nvm.to_string_lossy(),
        "nvarray pm clean --discard-commits",
    ] {
        assert!(e.to_string().contains(needle), "{needle:?} in {e}");
    }
    assert!(
        std::fs::read(s.backing()).unwrap() == unrelated,
        "the unrelated file was written"
    );

    // Removed, and a new pool made at the path: refused, and nothing left behind.
    std::fs::remove_file(s.backing()).unwrap();
    let e = Pool::open(s.backing(), SIZE, &opts).unwrap_err();
    assert!(matches!(e, PmError::NotThisPool { .. }), "{e}");
    assert!(!s.backing().exists(), "the refused create left its file");

    // The refusal's advice: the state is an orphan that may hold commits, removed only when
    // told to discard them.
    let state = nvarray_pm::state_file(&nvm).unwrap();
    assert!(
        matches!(
            state.status,
            StateStatus::Orphan {
                unapplied: true,
                ..
            }
        ),
        "{state:?}"
    );
    let e = nvarray_pm::remove_state_file(&nvm, false).unwrap_err();
    assert!(e.to_string().contains("--discard-commits"), "{e}");
    nvarray_pm::remove_state_file(&nvm, true).unwrap();

    // A copy of the pool (it carries the pool id, not the inode): refused as well.
    let (nvm, image) = open_crashed(&dead);
    let copy = s.dir.path().join("copy");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(s.backing())
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    std::fs::rename(&copy, s.backing()).unwrap();
    std::fs::write(&nvm, &image).unwrap();
    let e = Pool::open(s.backing(), SIZE, &opts).unwrap_err();
    assert!(matches!(e, PmError::NotThisPool { .. }), "{e}");

    // Once the dead pool's state is discarded, the file opens as a pool of its own.
    nvarray_pm::remove_state_file(&nvm, true).unwrap();
    let before = std::fs::read(s.backing()).unwrap();
    let pool = Pool::open(s.backing(), SIZE, &opts).unwrap();
    assert!(pool.recovery().is_none());
    assert!(read_all(&pool) == before, "opening changed the file");
}

/// Openers racing to make a new pool all attach to one state: the one that gives the file its
/// pool id and makes the state, and the others, which must see the file with that id (a
/// look taken before it was given one saw another file, and refused or replaced the state).
#[test]
fn openers_racing_to_make_a_new_pool_all_attach_to_one_state() {
    let s = Scratch::new();
    for round in 0..100 {
        let path = s.dir.path().join(format!("race-{round}"));
        let start = std::sync::Barrier::new(3);
        let pools: Vec<Pool> = std::thread::scope(|sc| {
            let openers: Vec<_> = (0..3)
                .map(|_| {
                    sc.spawn(|| {
                        start.wait();
                        Pool::open(&path, SIZE, &s.small())
                    })
                })
                .collect();
            openers
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap()
                        .unwrap_or_else(|e| panic!("round {round}: {e}"))
                })
                .collect()
        });
        let mut tx = pools[0].begin().unwrap();
        tx.write(0, b"one state").unwrap();
        tx.commit().unwrap();
        for p in &pools {
            let mut buf = [0u8; 9];
            p.read(0, &mut buf).unwrap();
            assert_eq!(&buf, b"one state", "round {round}");
            assert_eq!(p.nvm_path(), pools[0].nvm_path());
        }
        assert_eq!(common::state_files(s.dir.path()).len(), 1, "round {round}");
        for p in pools {
            p.close().unwrap();
        }
        assert!(
            common::state_files(s.dir.path()).is_empty(),
            "round {round}"
        );
    }
}

/// A state closed cleanly holds nothing its file lacks, so a state for another file (left
/// by a process killed while closing, or by an older version) is replaced, not refused; one
/// in use by a live process for the file that was there is refused, naming the process.
#[test]
fn a_clean_state_of_another_file_is_replaced_and_a_live_one_refused() {
    let s = Scratch::new();
    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    let nvm = pool.nvm_path().to_path_buf();
    let mut image = crash_image(&pool);
    image[128..136].copy_from_slice(&1u64.to_le_bytes()); // the clean flag (layout::H_CLEAN)

    // The file is replaced while the pool is open in this process.
    std::fs::remove_file(s.backing()).unwrap();
    std::fs::write(s.backing(), pattern(3, SIZE as usize)).unwrap();
    let e = Pool::open(s.backing(), SIZE, &s.small()).unwrap_err();
    assert!(matches!(e, PmError::InUseForAnotherFile { .. }), "{e}");
    assert!(
        e.to_string().contains(&std::process::id().to_string()),
        "names the process: {e}"
    );
    drop(pool);

    std::fs::write(&nvm, &image).unwrap();
    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    assert!(pool.recovery().is_none());
    assert!(read_all(&pool) == pattern(3, SIZE as usize));
}

/// Issue 44: the NVM tier was 322 MiB for any pool with the default options, even a 1 MiB
/// one, and stayed in /dev/shm after the pool was closed and deleted. It is sized to the pool
/// and removed by the last close.
#[test]
fn the_nvm_tier_is_sized_to_the_pool_and_gone_after_a_clean_close() {
    let s = Scratch::new();
    let options = PoolOptions {
        nvm_dir: s.dir.path().to_path_buf(),
        ..Default::default()
    };
    let pool = Pool::open(s.backing(), SIZE, &options).unwrap();
    let len = std::fs::metadata(pool.nvm_path()).unwrap().len();
    assert!(len < 16 << 20, "a 1 MiB pool's NVM tier is {len} bytes");
    let st = pool.stats();
    assert_eq!(st.log_size_bytes, 8 * SIZE, "{st:?}");
    // As many cache pages as never write back before the close, as the asked 256 MiB.
    let pool_pages = SIZE / 4096;
    let never_written_back = (pool_pages as f64 / options.writeback_threshold).ceil() as u64;
    assert_eq!(st.cache_pages, never_written_back, "{st:?}");
    // A transaction can still rewrite the whole pool.
    let mut tx = pool.begin().unwrap();
    tx.write(0, &pattern(4, SIZE as usize)).unwrap();
    tx.commit().unwrap();
    // A second handle keeps the state; the last close removes it.
    let other = Pool::open(s.backing(), SIZE, &options).unwrap();
    pool.close().unwrap();
    assert_eq!(common::state_files(s.dir.path()).len(), 1);
    other.close().unwrap();
    assert_eq!(
        common::state_files(s.dir.path()),
        Vec::<std::path::PathBuf>::new()
    );
    // A large pool keeps the asked sizes.
    let big = Pool::open(s.dir.path().join("big"), 1 << 30, &options).unwrap();
    assert_eq!(big.stats().log_size_bytes, options.log_size_bytes);
    assert_eq!(big.stats().cache_pages * 4096, options.cache_size_bytes);
}

/// `list_state_files` tells apart what each state is for, and `remove_state_file` removes
/// only what no pool can need.
#[test]
fn state_files_are_listed_and_only_unneeded_ones_removed() {
    let s = Scratch::new();
    let opts = PoolOptions {
        background: false,
        ..s.small()
    };
    let path = |name: &str| s.dir.path().join(name);
    let crashed = |name: &str| {
        let pool = Pool::open(path(name), SIZE, &opts).unwrap();
        let mut tx = pool.begin().unwrap();
        tx.write(0, b"commit").unwrap();
        tx.commit().unwrap();
        let image = crash_image(&pool);
        let nvm = pool.nvm_path().to_path_buf();
        pool.close().unwrap();
        std::fs::write(&nvm, image).unwrap();
        nvm
    };
    let in_use = Pool::open(path("open"), SIZE, &opts).unwrap();
    let recovering = crashed("recovering");
    let gone = crashed("gone");
    std::fs::remove_file(path("gone")).unwrap();
    let listed = nvarray_pm::list_state_files(s.dir.path()).unwrap();
    let status = |nvm: &std::path::Path| {
        listed
            .iter()
            .find(|f| f.path == nvm)
            .unwrap_or_else(|| panic!("{} not listed in {listed:?}", nvm.display()))
            .status
            .clone()
    };
    assert_eq!(
        status(in_use.nvm_path()),
        StateStatus::InUse(vec![std::process::id() as u64])
    );
    assert_eq!(status(&recovering), StateStatus::NeedsRecovery);
    assert!(
        matches!(status(&gone), StateStatus::Orphan { unapplied: true, ref why } if why.contains("no longer exists")),
        "{:?}",
        status(&gone)
    );
    assert_eq!(listed.len(), 3, "{listed:?}");
    for (nvm, discard) in [
        (in_use.nvm_path(), true),
        (&recovering, true),
        (&gone, false),
    ] {
        let e = nvarray_pm::remove_state_file(nvm, discard).unwrap_err();
        assert!(e.to_string().contains("kept"), "{e}");
        assert!(nvm.exists());
    }
    let removed = nvarray_pm::remove_state_file(&gone, true).unwrap();
    assert_eq!(removed.backing, Some(path("gone")));
    assert!(!gone.exists());
    let e = nvarray_pm::remove_state_file(&path("open"), true).unwrap_err();
    assert!(
        e.to_string().contains("not an nvarray-pm state file"),
        "{e}"
    );
    // The recovering one is recovered by its next open, and then closed away.
    Pool::open(path("recovering"), SIZE, &opts)
        .unwrap()
        .close()
        .unwrap();
    in_use.close().unwrap();
    assert_eq!(
        common::state_files(s.dir.path()),
        Vec::<std::path::PathBuf>::new()
    );
}

/// Issue 44: a pool's file was sized with `set_len` (all holes), so on a file system short of
/// room the first write-back into a hole killed the process with SIGBUS. Both tiers' blocks
/// are reserved at open; no room is an error naming the file, and nothing is left behind.
#[test]
fn a_file_system_without_room_is_an_error_at_open_not_a_sigbus() {
    let s = Scratch::new();
    let small = common::Tmpfs::mount("4m");
    let backing = small.path().join("pool");
    // The pool's file.
    let e = Pool::open(&backing, 16 << 20, &s.small()).unwrap_err();
    assert!(matches!(e, PmError::NoSpace { .. }), "{e}");
    assert!(e.to_string().contains("free"), "{e}");
    assert!(!backing.exists(), "the refused create left its file");
    assert_eq!(
        common::state_files(s.dir.path()),
        Vec::<std::path::PathBuf>::new()
    );
    // An existing sparse file larger than the room left: refused, and not changed.
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let e = Pool::open(&backing, 0, &s.small()).unwrap_err();
    assert!(matches!(e, PmError::NoSpace { .. }), "{e}");
    assert_eq!(std::fs::metadata(&backing).unwrap().len(), 16 << 20);
    std::fs::remove_file(&backing).unwrap();
    // The NVM tier.
    let options = PoolOptions {
        nvm_dir: small.path().to_path_buf(),
        log_size_bytes: 8 << 20,
        ..Default::default()
    };
    let e = Pool::open(s.backing(), 16 << 20, &options).unwrap_err();
    assert!(matches!(e, PmError::NoSpace { .. }), "{e}");
    assert!(e.to_string().contains("log or cache size"), "{e}");
    assert_eq!(
        common::state_files(small.path()),
        Vec::<std::path::PathBuf>::new()
    );
    // What fits opens.
    let pool = Pool::open(&backing, 1 << 20, &s.small()).unwrap();
    let mut tx = pool.begin().unwrap();
    tx.write(0, &pattern(5, 4096)).unwrap();
    tx.commit().unwrap();
    pool.close().unwrap();
}

#[test]
fn bad_options_name_the_field() {
    let s = Scratch::new();
    let mut o = s.small();
    o.writeback_threshold = 1.5;
    let e = Pool::open(s.backing(), SIZE, &o).unwrap_err();
    assert!(e.to_string().contains("writeback_threshold"), "{e}");
    let o = PoolOptions {
        tech: "unobtainium".into(),
        persist_ns: None,
        ..s.small()
    };
    let e = Pool::open(s.backing(), SIZE, &o).unwrap_err();
    assert!(e.to_string().contains("tech"), "{e}");
}

#[test]
fn the_pool_can_be_far_larger_than_its_nvm_tier() {
    let s = Scratch::new();
    // 4 GiB pool over 64 KiB of log and 64 KiB of cache.
    let size = 4u64 << 30;
    let pool = Pool::open(s.backing(), size, &s.small()).unwrap();
    for i in 0..64u64 {
        let mut tx = pool.begin().unwrap();
        tx.write(i * (size / 64) + 123, &pattern(i, 512)).unwrap();
        tx.commit().unwrap();
    }
    pool.maintain().unwrap();
    let st = pool.stats();
    assert!(st.records_digested >= 64, "{st:?}");
    assert!(
        st.writeback_rounds >= 1,
        "64 pages over a 16-page cache: {st:?}"
    );
    for i in 0..64u64 {
        let mut buf = vec![0u8; 512];
        pool.read(i * (size / 64) + 123, &mut buf).unwrap();
        assert_eq!(buf, pattern(i, 512));
    }
}

#[test]
fn a_younger_writer_of_a_locked_page_gets_a_conflict_and_the_older_commits_first() {
    let s = Scratch::new();
    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    let mut older = pool.begin().unwrap();
    let mut younger = pool.begin().unwrap();
    older.write(100, b"old").unwrap();
    let e = younger.write(200, b"young").unwrap_err(); // same page
    assert!(matches!(e, PmError::Conflict { page: 0 }), "{e}");
    assert!(
        younger.commit().is_err(),
        "a doomed transaction cannot commit"
    );
    older.commit().unwrap();
    assert_eq!(pool.stats().conflicts, 1);
    let mut buf = [0u8; 5];
    pool.read(200, &mut buf).unwrap();
    assert_eq!(buf, [0; 5]);
}

#[test]
fn concurrent_read_modify_writes_from_threads_are_serialised() {
    let s = Scratch::new();
    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    let per_thread = 300;
    std::thread::scope(|sc| {
        for _ in 0..4 {
            sc.spawn(|| {
                for _ in 0..per_thread {
                    loop {
                        let mut tx = pool.begin().unwrap();
                        let mut v = [0u8; 8];
                        match tx.read_for_update(64, &mut v) {
                            Ok(()) => {}
                            Err(PmError::Conflict { .. }) => continue,
                            Err(e) => panic!("{e}"),
                        }
                        let n = u64::from_le_bytes(v) + 1;
                        tx.write(64, &n.to_le_bytes()).unwrap();
                        tx.commit().unwrap();
                        break;
                    }
                }
            });
        }
    });
    let mut v = [0u8; 8];
    pool.read(64, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 4 * per_thread);
}

#[test]
fn two_handles_on_one_pool_see_each_others_commits() {
    let s = Scratch::new();
    let a = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    let b = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    assert!(b.recovery().is_none());
    let mut tx = a.begin().unwrap();
    tx.write(5000, b"from a").unwrap();
    tx.commit().unwrap();
    let mut buf = [0u8; 6];
    b.read(5000, &mut buf).unwrap();
    assert_eq!(
        &buf, b"from a",
        "visible in the other handle once commit returned"
    );
    drop(a);
    // b is still attached, so a's close must not have marked the pool clean.
    let mut tx = b.begin().unwrap();
    tx.write(6000, b"from b").unwrap();
    tx.commit().unwrap();
    b.close().unwrap();
    let c = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    let all = read_all(&c);
    assert_eq!(&all[5000..5006], b"from a");
    assert_eq!(&all[6000..6006], b"from b");
}

#[derive(Debug, Clone)]
enum Op {
    Tx {
        writes: Vec<(u64, Vec<u8>)>,
        commit: bool,
    },
    Maintain,
    Sync,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let write = (0u64..SIZE - 3000, 1usize..3000, any::<u64>())
        .prop_map(|(off, len, seed)| (off, pattern(seed, len)));
    prop_oneof![
        8 => (proptest::collection::vec(write, 1..4), proptest::bool::weighted(0.8))
            .prop_map(|(writes, commit)| Op::Tx { writes, commit }),
        1 => Just(Op::Maintain),
        1 => Just(Op::Sync),
        1 => Just(Op::Reopen),
    ]
}

/// Writes drawn from a few ranges, so one transaction often writes a range again (replaced
/// in place) or a range overlapping an earlier one (appended after it), across the number of
/// writes past which the transaction indexes them (`tx.rs`, `REWRITE_SCAN_MAX`).
fn rewrites() -> impl Strategy<Value = Vec<(u64, Vec<u8>)>> {
    let ranges = [
        (0u64, 4096usize),
        (4096, 4096),
        (2048, 4096),
        (100, 10),
        (4100, 8),
    ];
    proptest::collection::vec(
        (0..ranges.len(), any::<u64>()).prop_map(move |(r, seed)| {
            let (off, len) = ranges[r];
            (off, pattern(seed, len))
        }),
        1..24,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A transaction that writes ranges again, and ranges overlapping them, reads its own
    /// writes as a byte array applying them in order would hold, and commits exactly that.
    #[test]
    fn rewritten_ranges_read_and_commit_in_write_order(writes in rewrites()) {
        let s = Scratch::new();
        let room = PoolOptions {
            log_size_bytes: 1 << 20,
            cache_size_bytes: 1 << 20,
            ..s.small()
        };
        let pool = Pool::open(s.backing(), SIZE, &room).unwrap();
        let mut model = vec![0u8; 3 * 4096];
        let mut tx = pool.begin().unwrap();
        for (off, data) in &writes {
            tx.write(*off, data).unwrap();
            model[*off as usize..*off as usize + data.len()].copy_from_slice(data);
            let mut seen = vec![0u8; model.len()];
            tx.read(0, &mut seen).unwrap();
            prop_assert!(seen == model, "the transaction's view differs");
        }
        tx.commit().unwrap();
        let mut after = vec![0u8; model.len()];
        pool.read(0, &mut after).unwrap();
        prop_assert!(after == model, "the commit differs");
    }

    /// Any sequence of transactions, aborts, maintenance and reopenings leaves the pool equal
    /// to a byte array that applied exactly the committed transactions in order.
    #[test]
    fn pool_matches_a_reference_array(ops in proptest::collection::vec(op(), 1..60), background in any::<bool>()) {
        let s = Scratch::new();
        let opts = PoolOptions { background, ..s.small() };
        let mut model = vec![0u8; SIZE as usize];
        let mut pool = Some(Pool::open(s.backing(), SIZE, &opts).unwrap());
        for op in ops {
            let p = pool.as_ref().unwrap();
            match op {
                Op::Tx { writes, commit } => {
                    let mut tx = p.begin().unwrap();
                    for (off, data) in &writes {
                        tx.write(*off, data).unwrap();
                    }
                    if commit {
                        tx.commit().unwrap();
                        for (off, data) in &writes {
                            model[*off as usize..*off as usize + data.len()].copy_from_slice(data);
                        }
                    } else {
                        tx.abort();
                    }
                }
                Op::Maintain => p.maintain().unwrap(),
                Op::Sync => p.sync().unwrap(),
                Op::Reopen => {
                    pool.take().unwrap().close().unwrap();
                    pool = Some(Pool::open(s.backing(), SIZE, &opts).unwrap());
                }
            }
            prop_assert!(read_all(pool.as_ref().unwrap()) == model, "pool differs from the model");
        }
    }
}
