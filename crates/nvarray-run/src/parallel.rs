//! Independent runs on several threads: the points of a simulator sweep. Each point is a
//! whole simulation of its own (its own model, its own seeds), so running points side by side
//! changes no figure, only how long the sweep takes. The emulator's points do not come here:
//! they measure the machine and need its cores quiet.
//!
//! Hand-written over a thread pool crate: the work is a counter handed out under an atomic and
//! a channel back to the caller, which is all a pool would add, and the caller needs the
//! results in completion order on its own thread (to write each as it arrives) with a fraction
//! of every point in flight for one progress bar.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

/// One point's run: its index and a callback for the fraction of it done.
pub type PointRun<'a, T, E> = dyn Fn(usize, &mut dyn FnMut(f64)) -> Result<T, E> + Sync + 'a;

/// Points finished, and the fraction done of the point each worker is running.
type Done = (usize, Vec<f64>);

/// Runs `run(i, progress)` for every `i` in `0..count` on `jobs` threads (at least one).
///
/// `done(i, result)` is called on the calling thread as each point finishes, in the order they
/// finish. `progress(points)` is called with how many points are done, counting the finished
/// fraction of those in flight (from 0 to `count`). After the first error no new point starts;
/// the points in flight finish, and the error of the lowest point that failed is returned with
/// its index.
pub fn run_points<T: Send, E: Send>(
    count: usize,
    jobs: usize,
    run: &PointRun<'_, T, E>,
    progress: &(dyn Fn(f64) + Sync),
    done: &mut dyn FnMut(usize, T),
) -> Result<(), (usize, E)> {
    let jobs = jobs.clamp(1, count.max(1));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let state: Mutex<Done> = Mutex::new((0, vec![0.0; jobs]));
    let report = |update: &dyn Fn(&mut Done)| {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        update(&mut s);
        // Finished points and the fractions of those in flight, never more than all.
        let points = s.0 as f64 + s.1.iter().sum::<f64>();
        assert!(
            points <= count as f64,
            "progress {points} of {count} points"
        );
        progress(points);
    };
    let (tx, rx) = mpsc::channel::<(usize, Result<T, E>)>();
    let first_error = std::thread::scope(|scope| {
        for worker in 0..jobs {
            let tx = tx.clone();
            let (next, stop, report) = (&next, &stop, &report);
            scope.spawn(move || work(worker, (count, next, stop), run, report, tx));
        }
        // The workers hold the only senders left: the loop ends when the last one finishes.
        drop(tx);
        deliver_results(rx, done)
    });
    // Without an error nothing stops the workers before every point has run.
    let finished = state.lock().unwrap_or_else(|e| e.into_inner()).0;
    assert!(
        first_error.is_some() || finished == count,
        "{finished} of {count} points ran, and none failed"
    );
    first_error.map_or(Ok(()), Err)
}

/// Worker `worker`'s loop: takes the next of the `count` points until none is left or
/// `stop` is set (a point failed, which sets it), runs it, reporting its fraction done, and
/// sends its result back on `tx`.
fn work<T, E>(
    worker: usize,
    (count, next, stop): (usize, &AtomicUsize, &AtomicBool),
    run: &PointRun<'_, T, E>,
    report: &impl Fn(&dyn Fn(&mut Done)),
    tx: mpsc::Sender<(usize, Result<T, E>)>,
) {
    while !stop.load(Ordering::Relaxed) {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= count {
            break;
        }
        let result = run(i, &mut |f| {
            let f = if f.is_finite() {
                f.clamp(0.0, 1.0)
            } else {
                0.0
            };
            report(&|s| s.1[worker] = f);
        });
        if result.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        report(&|s| {
            s.0 += 1;
            s.1[worker] = 0.0;
        });
        if tx.send((i, result)).is_err() {
            break;
        }
    }
}

/// Hands each result from `rx` to `done` as it arrives, until every sender is gone;
/// returns the error of the lowest point that failed, with its index.
fn deliver_results<T, E>(
    rx: mpsc::Receiver<(usize, Result<T, E>)>,
    done: &mut dyn FnMut(usize, T),
) -> Option<(usize, E)> {
    let mut first_error: Option<(usize, E)> = None;
    for (i, result) in rx {
        match result {
            Ok(value) => done(i, value),
            Err(e) => {
                if first_error.as_ref().is_none_or(|(j, _)| i < *j) {
                    first_error = Some((i, e));
                }
            }
        }
    }
    first_error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_runs_once_and_arrives_with_its_index() {
        for jobs in [1, 2, 3, 8] {
            let mut seen = Vec::new();
            run_points::<usize, ()>(10, jobs, &|i, _| Ok(i * i), &|_| {}, &mut |i, v| {
                seen.push((i, v))
            })
            .unwrap();
            seen.sort();
            assert_eq!(
                seen,
                (0..10).map(|i| (i, i * i)).collect::<Vec<_>>(),
                "{jobs}"
            );
        }
    }

    #[test]
    fn no_points_is_no_work() {
        let mut calls = 0;
        run_points::<(), ()>(0, 4, &|_, _| Ok(()), &|_| {}, &mut |_, _| calls += 1).unwrap();
        assert_eq!(calls, 0);
    }

    #[test]
    fn progress_ends_at_the_count_and_never_exceeds_it() {
        let seen = Mutex::new(Vec::new());
        run_points::<(), ()>(
            6,
            2,
            &|_, p| {
                p(0.5);
                p(2.0); // an estimate past the end counts as the whole point
                Ok(())
            },
            &|x| seen.lock().unwrap().push(x),
            &mut |_, _| {},
        )
        .unwrap();
        let seen = seen.into_inner().unwrap();
        assert!(seen.iter().all(|&x| (0.0..=6.0).contains(&x)), "{seen:?}");
        assert_eq!(*seen.last().unwrap(), 6.0);
    }

    #[test]
    fn an_error_stops_new_points_and_names_the_lowest_failure() {
        let started = AtomicUsize::new(0);
        let err = run_points::<(), String>(
            1000,
            1,
            &|i, _| {
                started.fetch_add(1, Ordering::Relaxed);
                if i == 3 {
                    Err(format!("point {i}"))
                } else {
                    Ok(())
                }
            },
            &|_| {},
            &mut |_, _| {},
        )
        .unwrap_err();
        assert_eq!(err, (3, "point 3".to_string()));
        assert_eq!(
            started.load(Ordering::Relaxed),
            4,
            "one worker stops at its error"
        );
    }
}
