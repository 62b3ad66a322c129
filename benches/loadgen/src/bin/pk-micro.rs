//! `pk-micro`: the kernel's criterion micro-benchmarks (`benches/micro/
//! suite.rs`, also `cargo bench --bench hot_path`) as a release binary of the
//! workspace. `make bench` runs `pk-micro --bench`: it is built by the same
//! `cargo build --release --workspace` as the other binaries of the harness,
//! with the production feature set, where `cargo bench` would build the
//! kernel again with its dev-dependencies' features (tokio's test-util among
//! them). Arguments are criterion's (`--bench` to measure; without it each
//! benchmark runs once, as a test).

#[path = "../../../micro/suite.rs"]
mod suite;

fn main() {
    suite::benches();
    criterion::Criterion::default().configure_from_args().final_summary();
}
