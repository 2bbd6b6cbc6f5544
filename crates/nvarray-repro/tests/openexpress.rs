//! Every simulator figure of the OpenExpress seed, within its tolerance or at its documented
//! difference (see `nvarray_repro::seeds` and `nvarray repro openexpress`).

mod common;

#[test]
fn every_device_figure_holds() {
    common::check_seed(nvarray_repro::Seed::OpenExpress);
}
