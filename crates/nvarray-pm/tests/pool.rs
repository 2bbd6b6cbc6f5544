//! The pool through its Rust API: commits, aborts, isolation, reopening, bad input, and a
//! property test against a reference byte array.

mod common;

use common::{pattern, Scratch};
use nvarray_pm::{PmError, Pool, PoolOptions};
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

#[test]
fn wrong_size_damaged_header_and_wrong_version_are_clear_errors() {
    let s = Scratch::new();
    let pool = Pool::open(s.backing(), SIZE, &s.small()).unwrap();
    let nvm = pool.nvm_path().to_path_buf();
    pool.close().unwrap();

    let e = Pool::open(s.backing(), SIZE * 2, &s.small()).unwrap_err();
    assert!(matches!(e, PmError::Mismatch { .. }), "{e}");
    assert!(e.to_string().contains("pool.data"), "names the file: {e}");

    let original = std::fs::read(&nvm).unwrap();
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
    Pool::open(s.backing(), SIZE, &s.small()).unwrap();
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
    // 4 GiB pool (sparse file) over 64 KiB of log and 64 KiB of cache.
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

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
