"""SQLite on the VFS `nvarray` while NVARRAY_INJECT_FAULTS fails the pool's fdatasyncs and
fallocates (issue 58). Driven by tests/sqlite_vfs.rs and `scripts/campaign.sh pm-faults`.

usage: sqlite_faults.py VFS_LIB DIR STEPS SEED

A seeded stream of connection opens, transactions and closes on one database (journal off: each
SQLite transaction is one nvarray-pm transaction). Transaction t inserts rows (t, i, payload)
for i < n. A transaction whose COMMIT returned is committed; one that failed anywhere may be
there or not, but whole. After every open that succeeds: `integrity_check` is ok, every
committed transaction's rows are there with their payloads, and every other transaction's rows
are all there or none. Prints one JSON line of counts, or {"failure": ...} and exits 1.
"""

import ctypes
import json
import random
import sqlite3
import sys


def payload(t, i):
    return (f"{t}:{i}:" * 8).encode()


def main():
    vfs_lib, directory = sys.argv[1:3]
    steps, seed = int(sys.argv[3]), int(sys.argv[4])
    assert ctypes.CDLL(vfs_lib).nvarray_sqlite_register() == 0
    # The library the VFS loaded (by the name it needs, so the very copy whichever path it
    # came from: under `cargo test` the library path leads to the test build's): its count.
    pm = ctypes.CDLL("libnvarray_pm.so")
    pm.nv_injected_faults.restype = ctypes.c_uint64
    uri = f"file:{directory}/faults.db?vfs=nvarray&pool_size=1048576"
    rng = random.Random(seed)
    committed = {}  # transaction -> rows
    uncertain = {}  # transaction -> rows: failed somewhere, all there or none
    counts = dict(opens=0, failed_opens=0, commits=0, failed_transactions=0, closes=0)
    db = None
    next_t = 0

    def fail(what, step):
        print(json.dumps({"failure": f"seed {seed}, step {step}: {what}"}))
        sys.exit(1)

    def check(step):
        if db.execute("pragma integrity_check").fetchone()[0] != "ok":
            fail("integrity_check failed", step)
        rows = {}
        for t, i, p in db.execute("select t, i, p from r"):
            if p != payload(t, i):
                fail(f"row ({t}, {i}) holds another payload", step)
            rows[t] = rows.get(t, 0) + 1
        for t, n in committed.items():
            if rows.get(t, 0) != n:
                fail(f"committed transaction {t} has {rows.get(t, 0)} of its {n} rows", step)
        for t, n in uncertain.items():
            if rows.get(t, 0) not in (0, n):
                fail(f"failed transaction {t} has {rows[t]} of its {n} rows: torn", step)
            if rows.get(t, 0) == n:
                committed[t] = n  # it did land: from now on it must stay
        uncertain.clear()
        for t in rows:
            if t not in committed:
                fail(f"rows of transaction {t}, which never ran", step)

    step = 0
    while step < steps or db is None:
        if db is None:
            try:
                db = sqlite3.connect(uri, uri=True, isolation_level=None)
                db.execute("pragma journal_mode=off")
                db.execute("create table if not exists r(t integer, i integer, p blob)")
                check(step)
                counts["opens"] += 1
            except sqlite3.Error:
                counts["failed_opens"] += 1
                if db is not None:
                    db.close()
                db = None
            step += 1
            continue
        if rng.random() < 0.9:
            next_t += 1
            t, n = next_t, rng.randint(1, 20)
            try:
                db.execute("begin")
                db.executemany("insert into r values (?, ?, ?)",
                               [(t, i, payload(t, i)) for i in range(n)])
                db.execute("commit")
                committed[t] = n
                counts["commits"] += 1
            except sqlite3.Error:
                # As an application should after an I/O error: drop the connection (and its
                # page cache) and open again; with journal off SQLite cannot roll back itself,
                # the library's transaction is what is all or nothing.
                uncertain[t] = n
                counts["failed_transactions"] += 1
                db.close()
                db = None
        else:
            # A close that fails (its write-back) still ends the connection.
            db.close()
            db = None
            counts["closes"] += 1
        step += 1
    db.close()
    counts["faults_injected"] = pm.nv_injected_faults()
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
