//! Slow calls as operations: the `[operations]` settings and how long a call
//! waits before it goes on in the background. (The operations themselves,
//! which hold tasks and results, live in the gateway.)

use std::time::Duration;

use serde_json::Value;

/// The argument every upstream tool gains: seconds to wait before the call
/// goes on in the background. Stripped before the call is forwarded.
pub const TIMEOUT_ARG: &str = "_timeout_s";

/// The `[operations]` settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OperationSettings {
    /// How long a call waits when neither it nor its tool says
    /// (`default_timeout_s`, 10).
    pub default_timeout: Duration,
    /// The longest wait, for `_timeout_s`, a tool's `timeout_s` and
    /// `sluice_result`'s `wait_s` (`max_timeout_s`, 300).
    pub max_timeout: Duration,
    /// How long an ended operation is kept (`retention_h`, 24).
    pub retention: Duration,
    /// Operations running at once per session (`max_running`, 16).
    pub max_running: usize,
    /// Operations running at once in all (`max_running_total`, 256).
    pub max_running_total: usize,
    /// Ended operations kept per client within `retention` (`max_ended`,
    /// 256): past it, the ones that ended first are forgotten.
    pub max_ended: usize,
    /// Ended operations kept in all (`max_ended_total`, 4096).
    pub max_ended_total: usize,
}

impl Default for OperationSettings {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(300),
            retention: Duration::from_secs(24 * 3600),
            max_running: 16,
            max_running_total: 256,
            max_ended: 256,
            max_ended_total: 4096,
        }
    }
}

impl OperationSettings {
    /// How long a call waits: `_timeout_s` if given (at most
    /// `max_timeout`), else the tool's `timeout_s`, else the default. A
    /// `_timeout_s` that is not a positive number is refused with a message
    /// for the model.
    pub fn timeout(&self, argument: Option<&Value>, tool: Option<f64>) -> Result<Duration, String> {
        let seconds = match argument {
            None | Some(Value::Null) => {
                // Capped before it becomes a Duration, as below.
                return Ok(tool
                    .and_then(|t| {
                        Duration::try_from_secs_f64(t.min(self.max_timeout.as_secs_f64())).ok()
                    })
                    .unwrap_or(self.default_timeout)
                    .min(self.max_timeout));
            }
            Some(value) if let Some(seconds) = seconds_in(value) => seconds,
            Some(other) => {
                return Err(format!(
                    "`{TIMEOUT_ARG}` must be a number of seconds, not {}: e.g. \"{TIMEOUT_ARG}\": 60 (at most {})",
                    crate::format::quoted_cut(&other.to_string()),
                    self.max_timeout.as_secs()
                ));
            }
        };
        if seconds.is_nan() || seconds <= 0.0 || !seconds.is_finite() {
            return Err(format!(
                "`{TIMEOUT_ARG}` must be more than 0 seconds, not {seconds}: e.g. \"{TIMEOUT_ARG}\": 60 (at most {})",
                self.max_timeout.as_secs()
            ));
        }
        // Capped before it becomes a Duration: `from_secs_f64` panics past
        // u64::MAX seconds (`1e20`).
        Ok(Duration::from_secs_f64(
            seconds.min(self.max_timeout.as_secs_f64()),
        ))
    }

    /// `wait_s` of `sluice_result`: 0 when absent, a number of seconds up to
    /// `max_timeout`.
    pub fn wait(&self, argument: Option<&Value>) -> Result<Duration, String> {
        let max = self.max_timeout.as_secs_f64();
        match argument {
            None | Some(Value::Null) => Ok(Duration::ZERO),
            // Checked against the cap before it becomes a Duration
            // (`from_secs_f64` panics past u64::MAX seconds).
            Some(value) => match seconds_in(value) {
                Some(s) if (0.0..=max).contains(&s) => {
                    Duration::try_from_secs_f64(s).map_err(|e| e.to_string())
                }
                Some(_) => Err(format!(
                    "`wait_s` must be from 0 to {max} seconds (`[operations] max_timeout_s`), not {}",
                    crate::format::quoted_cut(&value.to_string())
                )),
                None => Err(format!(
                    "`wait_s` must be a number of seconds from 0 to {max}, not {}",
                    crate::format::quoted_cut(&value.to_string())
                )),
            },
        }
    }
}

/// The seconds `value` says: a JSON number, or a number's text in a
/// string (`"10"`, `"2.5"`), as some clients send every argument; `None`
/// for anything else (a string with a sign, an exponent, `inf`, or over 32
/// characters: refused as before).
fn seconds_in(value: &Value) -> Option<f64> {
    if let Value::Number(n) = value {
        return Some(n.as_f64().unwrap_or(f64::NAN));
    }
    let text = value.as_str()?.trim();
    let plain = !text.is_empty()
        && text.len() <= 32
        && text.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && text.bytes().filter(|&b| b == b'.').count() <= 1
        && text.bytes().any(|b| b.is_ascii_digit());
    plain.then(|| text.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timeouts_come_from_the_argument_the_tool_or_the_default() {
        let s = OperationSettings::default();
        let secs = |d: Duration| d.as_secs_f64();
        assert_eq!(secs(s.timeout(None, None).unwrap()), 10.0);
        assert_eq!(secs(s.timeout(None, Some(42.0)).unwrap()), 42.0);
        assert_eq!(secs(s.timeout(Some(&json!(2.5)), Some(42.0)).unwrap()), 2.5);
        // Capped, not refused.
        assert_eq!(secs(s.timeout(Some(&json!(1e9)), None).unwrap()), 300.0);
        // Past what a Duration holds: capped too, not a panic.
        assert_eq!(secs(s.timeout(Some(&json!(1e20)), None).unwrap()), 300.0);
        assert_eq!(secs(s.timeout(Some(&json!(1.7e308)), None).unwrap()), 300.0);
        assert_eq!(secs(s.timeout(None, Some(1000.0)).unwrap()), 300.0);
        // A number as a string, as some clients send it.
        assert_eq!(secs(s.timeout(Some(&json!(" 2.5")), None).unwrap()), 2.5);
        assert_eq!(secs(s.timeout(Some(&json!("1000")), None).unwrap()), 300.0);
        for bad in [
            json!(0),
            json!(-1),
            json!("ten"),
            json!("-1"),
            json!("0"),
            json!("inf"),
            json!("1e3"),
            json!("."),
            json!(true),
            json!([1]),
        ] {
            let err = s.timeout(Some(&bad), None).unwrap_err();
            assert!(err.starts_with("`_timeout_s` must be"), "{bad}: {err}");
        }
    }

    #[test]
    fn waits_are_bounded() {
        let s = OperationSettings::default();
        assert_eq!(s.wait(None).unwrap(), Duration::ZERO);
        assert_eq!(s.wait(Some(&json!(30))).unwrap(), Duration::from_secs(30));
        assert_eq!(s.wait(Some(&json!("5"))).unwrap(), Duration::from_secs(5));
        // Past what a Duration holds, not a number: refused, not a panic.
        for bad in [
            json!(-1),
            json!(301),
            json!("301"),
            json!("five"),
            json!(1e20),
            json!(f64::MAX),
        ] {
            assert!(s.wait(Some(&bad)).unwrap_err().contains("`wait_s` must be"));
        }
        // A huge value is quoted cut.
        let huge = json!("9".repeat(1 << 20));
        assert!(s.wait(Some(&huge)).unwrap_err().len() < 300);
        assert!(s.timeout(Some(&huge), None).unwrap_err().len() < 300);
        // A tool's configured timeout past what a Duration holds is capped.
        assert_eq!(s.timeout(None, Some(1e20)).unwrap(), s.max_timeout);
    }
}
