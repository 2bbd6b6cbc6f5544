//! A running `nvarray serve` for the front ends' end-to-end tests (NBD, channels): started
//! with its arguments, ready once it has printed how to connect, stopped by a signal.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `nvarray serve`, killed when dropped.
pub struct Serve {
    pub child: Child,
    /// Where clients connect (NBD's socket, or the channels').
    pub socket: PathBuf,
    stdout: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Serve {
    /// Starts `nvarray ARGS` and waits for the last line of its connection help (the one
    /// naming SIGUSR1), printed once every front end listens.
    pub fn start_with(args: &[String], socket: PathBuf) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nvarray"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nvarray serve");
        let out = child.stdout.take().unwrap();
        let stdout = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let collected = Arc::clone(&stdout);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let ready = line.starts_with("SIGUSR1");
                let mut s = collected.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
                drop(s);
                if ready {
                    let _ = tx.send(());
                }
            }
        });
        let mut serve = Serve {
            child,
            socket,
            stdout,
            reader: Some(reader),
        };
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let status = serve.child.try_wait();
            panic!(
                "nvarray serve did not start listening (status {status:?}); stdout:\n{}",
                serve.stdout.lock().unwrap()
            );
        }
        serve
    }

    /// Everything printed so far.
    pub fn output(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} failed");
    }

    /// Sends `sig` and waits for the exit; returns the status and everything printed.
    pub fn stop(mut self, sig: &str) -> (ExitStatus, String) {
        self.signal(sig);
        let status = wait_timeout(&mut self.child, Duration::from_secs(60));
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        let out = self.stdout.lock().unwrap().clone();
        (status, out)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn wait_timeout(child: &mut Child, limit: Duration) -> ExitStatus {
    let until = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < until,
            "process {} did not exit",
            child.id()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
