//! `nvarray fit`: a preset fitted to fio runs on a real device, with its error on held-out
//! jobs. `grid` is the jobs; `target` and `collect` run them with real fio (`manifest` says
//! what ran, `measured` reads fio's JSON+, `steady` is SNIA's steady-state rule).

pub mod collect;
pub mod fit;
pub mod grid;
pub mod least_squares;
pub mod manifest;
pub mod measured;
pub mod objective;
pub mod params;
pub mod points;
pub mod preset_out;
pub mod search;
pub mod simulate;
pub mod steady;
pub mod steady_fit;
pub mod target;
pub mod uncertainty;
