//! `nvarray fit` (issue 61): a preset fitted to fio runs on a real device.
//!
//! Work in progress on branch `issue-61`: `grid` (the jobs and the subset a time budget
//! allows) is written; collecting (running fio, refusing a device with data), fitting and
//! the held-out error are not yet.

pub mod grid;
