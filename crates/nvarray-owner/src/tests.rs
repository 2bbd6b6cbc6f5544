//! Every pair of openers, in both orders, in this process (OFD locks conflict between open
//! files whatever their process); the kill-and-reopen case is nvarray-emu's
//! (`backing_kill_tests.rs`).

use super::*;

fn file_in(dir: &tempfile::TempDir, name: &str) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join(name))
        .unwrap()
}

const WRITABLE: Role = Role::Device { writable: true };
const READ_ONLY: Role = Role::Device { writable: false };

/// `second` after `first` on one file: `None` if both hold it, else what the refusal says
/// the first holds it as.
fn check(first: Role, second: Role) -> Option<HeldAs> {
    let dir = tempfile::tempdir().unwrap();
    let a = file_in(&dir, "f");
    let b = file_in(&dir, "f");
    claim(&a, first).unwrap();
    match claim(&b, second) {
        Ok(()) => None,
        Err(Refused::Held(h)) => {
            assert_eq!(h.pid, Some(std::process::id()), "{h}");
            Some(h.held_as)
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn only_pools_share_a_file_and_read_only_devices_share_one() {
    let cases = [
        (WRITABLE, WRITABLE, Some(HeldAs::Device)),
        (WRITABLE, READ_ONLY, Some(HeldAs::Device)),
        (READ_ONLY, WRITABLE, Some(HeldAs::Device)),
        (READ_ONLY, READ_ONLY, None),
        (WRITABLE, Role::Pool, Some(HeldAs::Device)),
        (READ_ONLY, Role::Pool, Some(HeldAs::Device)),
        (Role::Pool, WRITABLE, Some(HeldAs::Pool)),
        (Role::Pool, READ_ONLY, Some(HeldAs::Pool)),
        (Role::Pool, Role::Pool, None),
    ];
    for (first, second, expected) in cases {
        assert_eq!(check(first, second), expected, "{first:?} then {second:?}");
    }
}

#[test]
fn a_refused_read_only_claim_leaves_no_lock_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pool = file_in(&dir, "f");
    let device = file_in(&dir, "f");
    claim(&pool, Role::Pool).unwrap();
    assert!(claim(&device, READ_ONLY).is_err());
    drop(pool);
    // The device's read lock was taken and given back: a writer now gets the file.
    claim(&file_in(&dir, "f"), WRITABLE).unwrap();
}

#[test]
fn the_lock_goes_with_the_open_file() {
    let dir = tempfile::tempdir().unwrap();
    let first = file_in(&dir, "f");
    claim(&first, WRITABLE).unwrap();
    let again = first.try_clone().unwrap();
    drop(first);
    // A handle sharing the description keeps it.
    assert!(claim(&file_in(&dir, "f"), Role::Pool).is_err());
    drop(again);
    claim(&file_in(&dir, "f"), Role::Pool).unwrap();
}

#[test]
fn marks_keep_devices_off_pools_and_states_and_pools_off_states() {
    let dir = tempfile::tempdir().unwrap();
    let state = file_in(&dir, "state");
    std::os::unix::fs::FileExt::write_all_at(&state, STATE_MAGIC, 0).unwrap();
    assert_eq!(mark(&state), Some(Mark::PoolState));
    for role in [WRITABLE, READ_ONLY, Role::Pool] {
        assert!(
            matches!(claim(&state, role), Err(Refused::Marked(Mark::PoolState))),
            "{role:?}"
        );
    }
    let pool = file_in(&dir, "pool");
    let id = [7u8; 16];
    // SAFETY: valid fd, NUL-terminated name, 16 readable bytes.
    let rc = unsafe {
        libc::fsetxattr(
            pool.as_raw_fd(),
            POOL_ID_XATTR.as_ptr(),
            id.as_ptr().cast(),
            id.len(),
            0,
        )
    };
    if rc != 0 {
        eprintln!("no user extended attributes here: the pool-file mark is not checked");
        return;
    }
    assert_eq!(mark(&pool), Some(Mark::PoolFile));
    let refused = claim(&pool, WRITABLE).unwrap_err().to_string();
    assert!(refused.contains("pool's file"), "{refused}");
    claim(&pool, Role::Pool).unwrap();
    // A plain file has no mark.
    assert_eq!(mark(&file_in(&dir, "plain")), None);
}

#[test]
fn a_lock_line_says_what_the_file_is_held_as() {
    let info = "pos:\t0\nflags:\t0100002\nino:\t884743\n\
                lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:884743 0 EOF\n\
                lock:\t2: OFDLCK ADVISORY  READ -1 fe:00:884743 4611686018427387904 4611686018427387904\n";
    let lines = lock_lines(info);
    assert_eq!(lines.len(), 2);
    let held: Vec<HeldAs> = lines
        .iter()
        .map(|l| HeldAs::of_range(lock_start(l).unwrap()))
        .collect();
    assert_eq!(held, [HeldAs::Device, HeldAs::Pool]);
    let cases = [
        (STATE_LIVENESS_BASE + 3, HeldAs::PoolState),
        (STATE_LIVENESS_BASE + STATE_LIVENESS_SLOTS, HeldAs::Other),
        (SQLITE_LOCK_FIRST + 1, HeldAs::SqliteConnection),
        (SQLITE_LOCK_END, HeldAs::Other),
        (4096, HeldAs::Other),
    ];
    for (start, expected) in cases {
        assert_eq!(HeldAs::of_range(start), expected, "start {start}");
    }
    assert!(lock_lines("pos:\t0\n").is_empty());
}
