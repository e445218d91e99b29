//! One namespace for the tools (and prompts) of several upstreams.
//!
//! With one upstream, names pass unchanged: the client sees exactly what the
//! server declares. With several, every name becomes `<upstream>__<name>`.
//! Upstream names never contain the separator (the config rejects them), so
//! the first separator in a prefixed name always ends the upstream's name,
//! even when the tool's own name contains `__`.

/// The separator between an upstream's name and a tool or prompt name.
pub const SEPARATOR: &str = "__";

/// Maps names between the upstreams' namespaces and the client's.
#[derive(Debug, Clone)]
pub struct Namer {
    upstreams: Vec<String>,
}

impl Namer {
    /// A namer for these upstreams (in configuration order).
    pub fn new(upstreams: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            upstreams: upstreams.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether names are prefixed (more than one upstream).
    pub fn prefixed(&self) -> bool {
        self.upstreams.len() > 1
    }

    /// The name the client sees for `name` of `upstream`.
    pub fn expose(&self, upstream: &str, name: &str) -> String {
        if self.prefixed() {
            format!("{upstream}{SEPARATOR}{name}")
        } else {
            name.to_owned()
        }
    }

    /// The upstream and its own name for a name the client sent, or `None`
    /// when no upstream owns it.
    pub fn route<'a>(&'a self, exposed: &'a str) -> Option<(&'a str, &'a str)> {
        if !self.prefixed() {
            return self.upstreams.first().map(|u| (u.as_str(), exposed));
        }
        let (upstream, name) = exposed.split_once(SEPARATOR)?;
        self.upstreams
            .iter()
            .find(|u| *u == upstream)
            .map(|u| (u.as_str(), name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_upstream_keeps_names() {
        let namer = Namer::new(["fs"]);
        assert_eq!(namer.expose("fs", "read_file"), "read_file");
        assert_eq!(namer.route("read_file"), Some(("fs", "read_file")));
        assert_eq!(namer.route("a__b"), Some(("fs", "a__b")));
    }

    #[test]
    fn several_upstreams_prefix_and_route_back() {
        let namer = Namer::new(["fs", "git"]);
        assert_eq!(namer.expose("git", "git_log"), "git__git_log");
        assert_eq!(namer.route("git__git_log"), Some(("git", "git_log")));
        assert_eq!(namer.route("fs__odd__name"), Some(("fs", "odd__name")));
        assert_eq!(namer.route("nope__x"), None);
        assert_eq!(namer.route("unprefixed"), None);
    }
}
