//! `${NAME}` in the config file's values that hold secrets (an HTTP
//! upstream's `url` and `headers`, a stdio upstream's `env`): replaced by
//! the variable of sluice's environment, so that a config can be shared or
//! committed without the tokens in it.
//!
//! - `${NAME}`: the variable's value; unset, the config is refused, naming
//!   it (a missing token is found at start, not at the first call).
//! - `${NAME:-default}`: the default when the variable is unset or empty
//!   (the shell's `:-`); the default is taken as written.
//! - `$${`: a literal `${`. A `$` not followed by `{` is itself.
//!
//! `NAME` is letters, digits and `_`, not starting with a digit. What a
//! value expands to is never quoted in an error (it may be a secret): the
//! errors name the variable.

/// Why a value cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VarError {
    /// `${NAME}` names a variable that is not set (and gives no default).
    #[error(
        "`${{{0}}}` names a variable that is not set in sluice's environment: set it, or give a default as `${{{0}:-…}}`"
    )]
    Unset(String),
    /// `${` without its `}`.
    #[error("`${{` opens a variable that no `}}` closes (a literal `${{` is written `$${{`)")]
    Unclosed,
    /// `${…}` whose name is not a variable's name.
    #[error(
        "`${{{0}}}` is not a variable: a name is letters, digits and `_`, not starting with a digit (a literal `${{` is written `$${{`)"
    )]
    BadName(String),
}

/// `text` with every `${NAME}` replaced by `lookup(NAME)` (see the module
/// doc); one pass, linear in `text`: what a variable holds is never
/// expanded again.
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, VarError> {
    if !text.contains('$') {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        if let Some(literal) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = literal;
        } else if let Some(inside) = after.strip_prefix("${") {
            let end = inside.find('}').ok_or(VarError::Unclosed)?;
            let (name, default) = match inside[..end].split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (&inside[..end], None),
            };
            if !is_name(name) {
                return Err(VarError::BadName(cut(&inside[..end])));
            }
            match (lookup(name), default) {
                (Some(value), Some(default)) if value.is_empty() => out.push_str(default),
                (Some(value), _) => out.push_str(&value),
                (None, Some(default)) => out.push_str(default),
                (None, None) => return Err(VarError::Unset(name.to_owned())),
            }
            rest = &inside[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether `name` may name a variable.
fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What an error quotes of a bad name: on one line, at most 64 characters.
fn cut(name: &str) -> String {
    crate::format::one_line(&crate::format::cut(name, 64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".into()),
            "EMPTY" => Some(String::new()),
            "DOLLAR" => Some("${TOKEN}".into()),
            _ => None,
        }
    }

    #[test]
    fn variables_are_replaced_once_and_the_rest_kept() {
        let cases = [
            ("Bearer ${TOKEN}", "Bearer s3cret"),
            ("${TOKEN}${TOKEN}", "s3crets3cret"),
            ("no variable", "no variable"),
            ("a $ sign, $TOKEN, $5", "a $ sign, $TOKEN, $5"),
            ("$${TOKEN} is literal", "${TOKEN} is literal"),
            ("${MISSING:-fallback}", "fallback"),
            ("${EMPTY:-fallback}", "fallback"),
            ("${TOKEN:-fallback}", "s3cret"),
            ("${EMPTY}", ""),
            ("${MISSING:-}", ""),
            ("${MISSING:-a:-b}", "a:-b"),
            // A value is not expanded again.
            ("${DOLLAR}", "${TOKEN}"),
            ("trailing $", "trailing $"),
        ];
        for (text, expected) in cases {
            assert_eq!(expand(text, &env).as_deref(), Ok(expected), "{text}");
        }
    }

    #[test]
    fn what_cannot_be_expanded_is_named_not_shown() {
        assert_eq!(
            expand("Bearer ${GITHUB_TOKEN}", &env),
            Err(VarError::Unset("GITHUB_TOKEN".into()))
        );
        assert_eq!(expand("${TOKEN", &env), Err(VarError::Unclosed));
        assert_eq!(expand("${1X}", &env), Err(VarError::BadName("1X".into())));
        assert_eq!(expand("${}", &env), Err(VarError::BadName(String::new())));
        assert_eq!(expand("${A B}", &env), Err(VarError::BadName("A B".into())));
        let message = VarError::Unset("GITHUB_TOKEN".into()).to_string();
        assert_eq!(
            message,
            "`${GITHUB_TOKEN}` names a variable that is not set in sluice's environment: set it, or give a default as `${GITHUB_TOKEN:-…}`"
        );
        let long = format!("${{{}\n}}", "x".repeat(100));
        let message = expand(&long, &env).unwrap_err().to_string();
        assert!(
            !message.contains('\n') && message.contains('…'),
            "{message}"
        );
    }
}
