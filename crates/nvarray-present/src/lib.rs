//! `nvarray-present`: a report, laid out. It turns what the engines measured (a
//! `nvarray_report::RunReport`, a device's configuration, a workload) into text and pictures:
//! the human table (`table`), fio's own layouts so fio's tools read nvarray's results
//! (`fio_output`), and charts of series already computed (`plot`, SVG or PNG).
//!
//! It only presents: it never runs, measures or models anything (the one clock it reads is
//! the date fio's layouts carry), never decides what to run or plot, and never prints; it
//! returns strings and JSON values, and writes only the chart file it is given. The CLI (`nvarray`) parses, calls the engines, then calls this crate and
//! prints what it returns. Every layout is byte for byte what scripts and fio's tools read:
//! change one only on purpose.

pub mod fio_output;
pub mod plot;
pub mod table;
