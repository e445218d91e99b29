//! `sluice_query`'s jq runs outside the gateway process: [`pool`] is the
//! gateway's side (warm workers, fair shares, time limits), [`worker`] is the
//! `sluice jq-worker` process that runs one filter at a time under limits.
//! The filters themselves are `sluice_core::query`'s.

pub mod pool;
pub mod worker;
