//! Every simulator figure of the StorageFuture seed, within its tolerance or at its documented
//! difference (see `nvarray_repro::seeds` and `nvarray repro storage-future`).

mod common;

#[test]
fn every_device_figure_holds() {
    common::check_seed(nvarray_repro::Seed::StorageFuture);
}
