//! Criterion micro-benchmarks of the kernel's hot path: `cargo bench --bench
//! hot_path`. The suite (and what each benchmark measures) is in
//! `micro/suite.rs`, shared with the release binary `pk-micro`.

#[path = "micro/suite.rs"]
mod suite;

criterion::criterion_main!(suite::benches);
