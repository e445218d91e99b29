//! jq over a stored document, with jaq. This module compiles and runs a
//! filter; it has no resource limits of its own (jaq has none), so the
//! gateway runs it in a worker process with a memory limit and a clock.
//!
//! Functions that reach outside the document (`env`, `$ENV`, `input`,
//! `inputs`, `input_filename`) are not defined; `unwrap_valr`, which exits
//! the process on `halt`, is never called (`halt` ends the query with an
//! error instead).

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data};
use jaq_json::Val;

/// Names left out of the function set: what reaches outside the document.
/// (`halt`, `stderr` and `debug` stay: `halt` only ends the query here, as
/// `unwrap_valr` is never called, and the worker's stderr goes nowhere.)
const BANNED: [&str; 4] = ["env", "input", "inputs", "input_filename"];

/// Limits on what a query produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// The most outputs.
    pub max_outputs: usize,
    /// The most bytes of output (compact JSON, one value per line).
    pub max_bytes: usize,
}

/// Why a query failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The filter does not parse, or names something undefined.
    #[error("{0}")]
    Compile(String),
    /// The document is not JSON.
    #[error("the stored result is not JSON: {0}")]
    Input(String),
    /// The filter raised an error at run time.
    #[error("the filter failed: {0}")]
    Runtime(String),
    /// Too many outputs.
    #[error(
        "the filter produced more than {0} outputs: narrow it (e.g. `limit(100; …)`, `first(…)`, or a `select`)"
    )]
    TooManyOutputs(usize),
    /// Too much output.
    #[error("the filter's output passed {0} bytes: narrow it or `length` it")]
    TooLarge(usize),
}

/// Runs `filter` over the JSON `doc`; the outputs as compact JSON, one per
/// entry.
pub fn run(filter: &str, doc: &[u8], limits: OutputLimits) -> Result<Vec<String>, QueryError> {
    let input = jaq_json::read::parse_single(doc).map_err(|e| QueryError::Input(e.to_string()))?;
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .filter(|(name, _, _)| !BANNED.contains(name));
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let modules = loader
        .load(
            &arena,
            File {
                code: filter,
                path: (),
            },
        )
        .map_err(|errors| QueryError::Compile(describe_load_errors(filter, errors)))?;
    let compiled = Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errors| QueryError::Compile(describe_compile_errors(filter, errors)))?;
    let ctx = Ctx::<data::JustLut<Val>>::new(&compiled.lut, Vars::new([]));
    let mut outputs = Vec::new();
    let mut bytes = 0;
    for out in compiled.id.run((ctx, input)) {
        let value = match out {
            Ok(v) => v,
            Err(exn) => match exn.get_err() {
                Ok(err) => return Err(QueryError::Runtime(err.to_string())),
                Err(_) => return Err(QueryError::Runtime("the filter halted".into())),
            },
        };
        if outputs.len() == limits.max_outputs {
            return Err(QueryError::TooManyOutputs(limits.max_outputs));
        }
        let text = value.to_string();
        // jaq can make values JSON cannot hold (NaN, Infinity, non-string
        // keys): never pass them on as JSON.
        if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_err() {
            return Err(QueryError::Runtime(format!(
                "output {} is not valid JSON ({}): jaq allows NaN, infinities and non-string object keys, JSON does not",
                outputs.len() + 1,
                text.chars().take(80).collect::<String>()
            )));
        }
        bytes += text.len() + 1;
        if bytes > limits.max_bytes {
            return Err(QueryError::TooLarge(limits.max_bytes));
        }
        outputs.push(text);
    }
    Ok(outputs)
}

/// `filter` with a caret under byte `offset`.
fn caret(filter: &str, offset: usize) -> String {
    let offset = offset.min(filter.len());
    let line_start = filter[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = filter[offset..]
        .find('\n')
        .map_or(filter.len(), |i| offset + i);
    let column = filter[line_start..offset].chars().count();
    format!("{}\n{}^", &filter[line_start..line_end], " ".repeat(column))
}

/// The byte offset of `part` in `whole`, if it is a slice of it.
fn offset_in(whole: &str, part: &str) -> Option<usize> {
    let start = part.as_ptr() as usize;
    let base = whole.as_ptr() as usize;
    (start >= base && start + part.len() <= base + whole.len()).then(|| start - base)
}

fn describe_load_errors<P>(filter: &str, errors: jaq_core::load::Errors<&str, P>) -> String {
    let mut out = Vec::new();
    for (_, error) in errors {
        match error {
            jaq_core::load::Error::Lex(errs) => {
                for (expected, found) in errs {
                    let at = offset_in(filter, found).unwrap_or(filter.len());
                    out.push(format!(
                        "syntax error: expected {}\n{}",
                        expected.as_str(),
                        caret(filter, at)
                    ));
                }
            }
            jaq_core::load::Error::Parse(errs) => {
                for (expected, found) in errs {
                    let at = offset_in(filter, found).unwrap_or(filter.len());
                    let found = if found.is_empty() {
                        "the end".to_owned()
                    } else {
                        format!("`{}`", found.chars().take(20).collect::<String>())
                    };
                    out.push(format!(
                        "syntax error: expected {}, found {found}\n{}",
                        expected.as_str(),
                        caret(filter, at)
                    ));
                }
            }
            jaq_core::load::Error::Io(errs) => {
                for (path, message) in errs {
                    out.push(format!("cannot load `{path}`: {message}"));
                }
            }
        }
    }
    out.join("\n")
}

fn describe_compile_errors<P>(filter: &str, errors: jaq_core::compile::Errors<&str, P>) -> String {
    let mut out = Vec::new();
    for (_, errs) in errors {
        for (name, undefined) in errs {
            let at = offset_in(filter, name).unwrap_or(0);
            out.push(format!(
                "undefined {}: `{name}`\n{}",
                undefined.as_str(),
                caret(filter, at)
            ));
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: OutputLimits = OutputLimits {
        max_outputs: 1000,
        max_bytes: 1 << 20,
    };

    fn q(filter: &str, doc: &str) -> Result<Vec<String>, QueryError> {
        run(filter, doc.as_bytes(), LIMITS)
    }

    #[test]
    fn filters_run_and_print_compact_json() {
        let doc = r#"{"rows":[{"n":"a","x":3},{"n":"b","x":9}]}"#;
        assert_eq!(q(".rows[] | .n", doc).unwrap(), ["\"a\"", "\"b\""]);
        assert_eq!(
            q("[.rows[] | select(.x > 5)]", doc).unwrap(),
            [r#"[{"n":"b","x":9}]"#]
        );
        assert_eq!(q("[.. | numbers] | add", doc).unwrap(), ["12"]);
        assert_eq!(
            q(".rows | group_by(.x > 5) | map(length)", doc).unwrap(),
            ["[1,1]"]
        );
    }

    #[test]
    fn mistakes_say_where_and_what() {
        let err = q(".rows[] | selec(.x)", "{}").unwrap_err().to_string();
        assert!(err.starts_with("undefined filter: `selec`"), "{err}");
        assert!(err.ends_with(".rows[] | selec(.x)\n          ^"), "{err}");
        let err = q(".a | [", "{}").unwrap_err().to_string();
        assert!(err.starts_with("syntax error: expected"), "{err}");
        assert!(err.contains("^"), "{err}");
        for outside in ["env", "input", "inputs", "$ENV", "input_filename"] {
            assert!(q(outside, "{}").is_err(), "{outside} must not be defined");
        }
        assert!(matches!(
            q(".a + 1", r#"{"a":"x"}"#),
            Err(QueryError::Runtime(_))
        ));
        assert_eq!(
            q("halt", "{}"),
            Err(QueryError::Runtime("the filter halted".into()))
        );
        assert!(matches!(q(".", "not json"), Err(QueryError::Input(_))));
    }

    #[test]
    fn outputs_are_bounded_and_always_json() {
        let limits = OutputLimits {
            max_outputs: 10,
            max_bytes: 1000,
        };
        assert_eq!(
            run("range(100)", b"null", limits),
            Err(QueryError::TooManyOutputs(10))
        );
        assert_eq!(
            run("\"x\" * 2000", b"null", limits),
            Err(QueryError::TooLarge(1000))
        );
        let err = q("[nan]", "null").unwrap_err().to_string();
        assert!(err.contains("not valid JSON"), "{err}");
    }
}
