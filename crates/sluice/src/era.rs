//! The two protocol eras sluice speaks, on both sides: one name for what
//! was spelled four ways (a `legacy` flag, `speaks_2026()`, version string
//! comparisons, the config's `protocol` choice).

use rmcp::model::ProtocolVersion;

/// Which protocol era a peer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2025-11-25 and before: `initialize`, sessions, list-change
    /// notifications on the session.
    Legacy,
    /// 2026-07-28: no `initialize`, every request stands alone
    /// (`server/discover`, `subscriptions/listen`, cache hints in results).
    Stateless,
}

impl Era {
    /// The era of a negotiated protocol version; a peer that gave none
    /// (it never initialized) is taken as legacy.
    pub fn of(version: Option<&ProtocolVersion>) -> Self {
        match version {
            Some(v) if v.as_str() >= ProtocolVersion::V_2026_07_28.as_str() => Era::Stateless,
            _ => Era::Legacy,
        }
    }

    /// Whether this is the 2025-11-25 era (results must not carry the
    /// 2026-07-28 fields).
    pub fn is_legacy(self) -> bool {
        self == Era::Legacy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eras_follow_the_negotiated_version() {
        assert_eq!(Era::of(None), Era::Legacy);
        assert_eq!(Era::of(Some(&ProtocolVersion::V_2025_11_25)), Era::Legacy);
        assert_eq!(
            Era::of(Some(&ProtocolVersion::V_2026_07_28)),
            Era::Stateless
        );
    }
}
