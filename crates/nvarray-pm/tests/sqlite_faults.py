"""SQLite on the VFS `nvarray` while NVARRAY_INJECT_FAULTS fails the pool's fdatasyncs and
fallocates (issue 58). Driven by tests/sqlite_vfs.rs and `scripts/campaign.sh pm-faults`.

usage: sqlite_faults.py VFS_LIB DIR STEPS SEED

A seeded stream of connection opens, transactions and closes on one database (journal off: each
SQLite transaction is one nvarray-pm transaction). Transaction t picks a slot s (one of
SLOTS, so the table stays small), deletes the slot's rows and inserts rows (s, i, t, payload)
for i < n. A transaction whose COMMIT returned is committed; one that failed anywhere may have
committed or not, but whole. After every open that succeeds: `integrity_check` is ok, and each
slot holds exactly the rows of its last committed transaction or of a failed one after it.
Prints one JSON line of counts, or {"failure": ...} and exits 1.
"""

import ctypes
import json
import random
import sqlite3
import sys


def payload(t, i):
    return (f"{t}:{i}:" * 8).encode()


SLOTS = 500


def main():
    vfs_lib, directory = sys.argv[1:3]
    steps, seed = int(sys.argv[3]), int(sys.argv[4])
    assert ctypes.CDLL(vfs_lib).nvarray_sqlite_register() == 0
    # The library the VFS loaded (by the name it needs, so the very copy whichever path it
    # came from: under `cargo test` the library path leads to the test build's): its count.
    pm = ctypes.CDLL("libnvarray_pm.so")
    pm.nv_injected_faults.restype = ctypes.c_uint64
    uri = f"file:{directory}/faults.db?vfs=nvarray&pool_size=4194304"
    rng = random.Random(seed)
    committed = {}  # slot -> (t, n) of its last committed transaction
    uncertain = {}  # slot -> [(t, n)] failed since the last check, oldest first
    counts = dict(opens=0, failed_opens=0, commits=0, failed_transactions=0, closes=0)
    db = None
    next_t = 0

    def fail(what, step):
        print(json.dumps({"failure": f"seed {seed}, step {step}: {what}"}))
        sys.exit(1)

    def check(step):
        if db.execute("pragma integrity_check").fetchone()[0] != "ok":
            fail("integrity_check failed", step)
        slots = {}
        for s, i, t, p in db.execute("select s, i, t, p from r"):
            if p != payload(t, i):
                fail(f"row ({s}, {i}) of transaction {t} holds another payload", step)
            slots.setdefault(s, {}).setdefault(t, 0)
            slots[s][t] += 1
        for s in set(slots) | set(committed) | set(uncertain):
            held = slots.get(s, {})
            if len(held) > 1:
                fail(f"slot {s} holds rows of transactions {sorted(held)}: torn", step)
            may = ([committed[s]] if s in committed else []) + uncertain.get(s, [])
            shown = next(iter(held.items()), None)
            if shown is None and s in committed:
                fail(f"slot {s} lost committed transaction {committed[s][0]}", step)
            if shown is not None and shown not in may:
                fail(f"slot {s} holds {shown[1]} rows of transaction {shown[0]}, "
                     f"expected one of {may}", step)
            if shown is not None:
                committed[s] = shown  # what it holds now must stay
        uncertain.clear()

    step = 0
    while step < steps or db is None:
        if db is None:
            try:
                db = sqlite3.connect(uri, uri=True, isolation_level=None)
                db.execute("pragma journal_mode=off")
                db.execute("create table if not exists r(s integer, i integer, t integer, "
                           "p blob, primary key (s, i))")
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
            t, s, n = next_t, rng.randrange(SLOTS), rng.randint(1, 20)
            try:
                db.execute("begin")
                db.execute("delete from r where s = ?", (s,))
                db.executemany("insert into r values (?, ?, ?, ?)",
                               [(s, i, t, payload(t, i)) for i in range(n)])
                db.execute("commit")
                committed[s] = (t, n)
                uncertain.pop(s, None)
                counts["commits"] += 1
            except sqlite3.Error:
                # As an application should after an I/O error: drop the connection (and its
                # page cache) and open again; with journal off SQLite cannot roll back itself,
                # the library's transaction is what is all or nothing.
                uncertain.setdefault(s, []).append((t, n))
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
