//! Fuzz targets for what parses untrusted input in `sluice-core`, as
//! property tests: the JSON scanner, JSON Pointer resolution, cursors,
//! search patterns and the configuration file.
//!
//! Each target first runs its seed corpus (tricky real inputs checked into
//! `tests/fuzz/<target>/` at the repository root), then a bounded number of
//! generated cases: 256 by default, more with `PROPTEST_CASES=100000`.
//! Failures proptest finds are kept in `tests/fuzz/regressions/<target>.txt`
//! and replayed first on every run.
//!
//! Inputs that expose a known bug owned elsewhere are kept under
//! `tests/fuzz/<target>/known/` and run by an `#[ignore]`d test that says why.
#![forbid(unsafe_code)]

mod config;
mod corpus;
mod cursor;
mod json;
mod pointer;
mod scan;
mod search;
