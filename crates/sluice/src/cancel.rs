//! What a request cancelled by its client gets.

/// The error a request gets when its client cancelled it (or left) before
/// sluice answered.
pub fn cancelled_error() -> rmcp::model::ErrorData {
    rmcp::model::ErrorData::new(
        rmcp::model::ErrorCode::INTERNAL_ERROR,
        "request cancelled",
        None,
    )
}
