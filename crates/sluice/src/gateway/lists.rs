//! Merged lists: what sluice declares to clients (`initialize` / discover)
//! and the tools, prompts, resources and templates of every upstream under
//! one namespace, with sluice's own tools first.

use super::*;
use crate::jsonrpc::RawObject;
use serde_json::value::RawValue;

/// How long a request sluice makes of every upstream at once (a merged
/// list, a log level) waits for each: one that never answers must not
/// hold up the others' answer, nor the client's every list. Longer than
/// the wait for a handshake, which the request may begin with: an upstream
/// still in its handshake is said to be that.
pub(super) const EACH_UPSTREAM_WAIT: std::time::Duration =
    crate::upstream::HANDSHAKE_WAIT.saturating_add(std::time::Duration::from_secs(5));

impl Gateway {
    /// What sluice declares to clients: the union of what its upstreams
    /// declare (tools always), and their instructions.
    pub async fn server_info(&self) -> ServerConfig {
        // The union of what the upstreams declare, flag by flag, so that
        // one upstream's capabilities come through exactly.
        // Tools and resources always: sluice's own tools and stored results.
        // Tasks always: sluice's operations are tasks to clients that
        // declare the extension.
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_tasks()
            .build();
        let mut instructions = Vec::new();
        let mut names = Vec::new();
        for upstream in &self.upstreams {
            let Some(info) = upstream.current().await.and_then(|c| c.info()) else {
                continue;
            };
            let declared = &info.capabilities;
            if let Some(tools) = &declared.tools {
                let merged = capabilities.tools.get_or_insert_with(Default::default);
                merged.list_changed = either(merged.list_changed, tools.list_changed);
            }
            if let Some(prompts) = &declared.prompts {
                let merged = capabilities.prompts.get_or_insert_with(Default::default);
                merged.list_changed = either(merged.list_changed, prompts.list_changed);
            }
            if let Some(resources) = &declared.resources {
                let merged = capabilities.resources.get_or_insert_with(Default::default);
                merged.list_changed = either(merged.list_changed, resources.list_changed);
                merged.subscribe = either(merged.subscribe, resources.subscribe);
            }
            if let Some(completions) = &declared.completions {
                capabilities.completions = Some(completions.clone());
            }
            if let Some(logging) = &declared.logging {
                capabilities.logging = Some(logging.clone());
            }
            if let Some(text) = &info.instructions {
                if self.namer.prefixed() {
                    instructions.push(format!(
                        "## {} (tools prefixed `{}__`)\n{text}",
                        upstream.name(),
                        upstream.name()
                    ));
                } else {
                    instructions.push(text.clone());
                }
            }
            if let Some(server) = &info.server_info {
                names.push(server.name.clone());
            }
        }
        let mut config = ServerConfig::new(capabilities);
        config.server_info = Implementation::new("sluice", env!("CARGO_PKG_VERSION"))
            .with_title(format!("sluice → {}", names.join(", ")));
        config.instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
        config
    }

    /// Runs `op` on every upstream at once, waiting for each at most
    /// [`EACH_UPSTREAM_WAIT`]; the results of those that answered, and an
    /// error only if none did. `what`: the method `op` asks (`tools/list`),
    /// for the warning about an upstream that did not answer in time.
    pub(super) async fn on_all<T, F, Fut>(
        &self,
        what: &str,
        op: F,
    ) -> Result<Vec<(Arc<Upstream>, T)>, ErrorData>
    where
        F: Fn(Arc<Upstream>) -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        let results = futures::future::join_all(self.upstreams.iter().map(|u| {
            let fut = op(u.clone());
            async move {
                // Given up, the request is forgotten (its answer, if it
                // ever comes, goes nowhere).
                let answered = tokio::time::timeout(EACH_UPSTREAM_WAIT, fut)
                    .await
                    .unwrap_or_else(|_| {
                        Err(CallError::Unavailable(format!(
                            "upstream `{}` did not answer sluice's `{what}` within {} s (it is asked again the next time)",
                            u.name(),
                            EACH_UPSTREAM_WAIT.as_secs()
                        )))
                    });
                (u.clone(), answered)
            }
        }))
        .await;
        let mut answered = Vec::new();
        let mut errors = Vec::new();
        for (upstream, result) in results {
            match result {
                Ok(value) => answered.push((upstream, value)),
                Err(e) => {
                    tracing::warn!(upstream = %upstream.name(), "{e}");
                    errors.push(e);
                }
            }
        }
        if answered.is_empty() && !errors.is_empty() {
            // One upstream's own error goes to the client as it was.
            if errors.len() == 1 {
                return Err(call_error(errors.remove(0)));
            }
            let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Err(ErrorData::internal_error(messages.join("\n"), None));
        }
        Ok(answered)
    }

    /// All the tools, named for the client.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, ErrorData> {
        Ok(self
            .listed_tools()
            .await?
            .into_iter()
            .map(|listed| listed.tool)
            .collect())
    }

    /// All the tools, named for the client, each as the JSON text to send:
    /// an upstream's as it sent it but for sluice's documented changes (see
    /// `edited_as_sent`), sluice's own as it describes them.
    pub async fn list_tools_as_sent(&self) -> Result<Vec<String>, ErrorData> {
        Ok(self
            .listed_tools()
            .await?
            .into_iter()
            .map(|listed| {
                listed.sent.unwrap_or_else(|| {
                    serde_json::to_string(&listed.tool).expect("a tool serializes")
                })
            })
            .collect())
    }

    /// The input schema of the upstream tool the client calls `name`, as
    /// of the last tool listing (its upstream's, without sluice's own
    /// arguments); `None` for an unknown tool, one of sluice's own, or
    /// before any listing. Read without waiting, for checks made while a
    /// request is still being taken (SEP-2243's `Mcp-Param-*` headers).
    pub fn tool_input_schema(&self, name: &str) -> Option<serde_json::Value> {
        // The lock is held only to take the Arc; the copy is made after.
        let schema = lock(&self.input_schemas).get(name)?.schema.clone();
        Some(serde_json::Value::Object((*schema).clone()))
    }

    /// Whether the upstream tool the client calls `name` marks arguments
    /// for SEP-2243's `Mcp-Param-*` headers (`x-mcp-header`), as of the
    /// last tool listing: its calls' headers must be checked against their
    /// arguments.
    pub fn tool_has_param_headers(&self, name: &str) -> bool {
        lock(&self.param_header_tools).contains(name)
    }

    async fn listed_tools(&self) -> Result<Vec<Listed>, ErrorData> {
        let lists = self
            .on_all(
                "tools/list",
                |u| async move { upstream_tools_as_sent(&u).await },
            )
            .await?;
        let mut schemas = HashMap::new();
        let mut all: Vec<(Tool, Option<Box<RawValue>>, bool)> = lists
            .into_iter()
            .flat_map(|(u, tools)| {
                tools.into_iter().map(move |(mut tool, sent)| {
                    let settings = u.spec.tools.get(tool.name.as_ref());
                    // A stored result's answer cannot meet the tool's output
                    // schema: clients that validate structured content would
                    // reject it. Only tools never governed keep theirs.
                    let passthrough = settings.and_then(|s| s.mode) == Some(Mode::Passthrough);
                    if !passthrough {
                        tool.output_schema = None;
                    }
                    tool.name = self.namer.expose(u.name(), &tool.name).into();
                    (tool, sent, passthrough)
                })
            })
            .inspect(|(tool, _, _)| {
                let narrowing =
                    sluice_core::summary::narrowing_arguments(&tool.input_schema).into();
                schemas.insert(
                    tool.name.to_string(),
                    super::ListedSchema {
                        schema: tool.input_schema.clone(),
                        narrowing,
                    },
                );
            })
            .collect();
        let annotated: std::collections::HashSet<String> = all
            .iter()
            .filter(|(t, _, _)| {
                t.annotations.as_ref().is_some_and(|a| {
                    a.read_only_hint == Some(true) && a.idempotent_hint == Some(true)
                })
            })
            .map(|(t, _, _)| t.name.to_string())
            .collect();
        *lock(&self.annotated_idempotent) = annotated;
        // Every upstream tool takes sluice's `_timeout_s` (its type only:
        // `sluice_result` says once what it does, for every tool).
        let timeout = crate::tools::timeout_property();
        let mut listed = Vec::with_capacity(all.len() + 8);
        for (mut tool, sent, passthrough) in all.drain(..) {
            let cached = self.cache_policy(&tool.name).is_some();
            let schema = Arc::make_mut(&mut tool.input_schema);
            if !matches!(schema.get("properties"), Some(serde_json::Value::Object(_))) {
                schema.insert("properties".to_owned(), serde_json::json!({}));
            }
            if let Some(serde_json::Value::Object(properties)) = schema.get_mut("properties") {
                properties.insert(
                    sluice_core::operation::TIMEOUT_ARG.to_owned(),
                    timeout.clone(),
                );
                // Cached tools also take `_fresh`.
                if cached {
                    properties.insert(
                        sluice_core::cache::FRESH_ARG.to_owned(),
                        crate::tools::fresh_property(),
                    );
                }
            }
            let sent = sent.and_then(|sent| edited_as_sent(&sent, &tool.name, passthrough, cached));
            listed.push(Listed { tool, sent });
        }
        let marked = schemas
            .iter()
            .filter(|(_, listed)| listed.schema.values().any(crate::param_headers::marks_any))
            .map(|(name, _)| name.clone())
            .collect();
        *lock(&self.param_header_tools) = marked;
        *lock(&self.input_schemas) = schemas;
        listed.extend(
            crate::tools::list(self.operations.settings())
                .into_iter()
                .map(|tool| Listed { tool, sent: None }),
        );
        Ok(listed)
    }

    /// All the prompts, named for the client, each as its upstream sent it
    /// but for its name, which is the exposed one.
    pub async fn list_prompts_as_sent(&self) -> Result<Vec<String>, ErrorData> {
        Ok(self
            .listed_prompts()
            .await?
            .into_iter()
            .map(|(prompt, sent)| {
                sent.and_then(|sent| renamed_as_sent(&sent, &prompt.name))
                    .unwrap_or_else(|| serde_json::to_string(&prompt).expect("a prompt serializes"))
            })
            .collect())
    }

    async fn listed_prompts(&self) -> Result<Vec<(Prompt, Option<Box<RawValue>>)>, ErrorData> {
        let lists = self
            .on_all("prompts/list", |u| async move {
                if !declares(&u, |c| c.prompts.is_some()).await {
                    return Ok(Vec::new());
                }
                list_all::<Prompt>(
                    &u,
                    |cursor| {
                        ClientRequest::ListPromptsRequest(ListPromptsRequest::with_param(page(
                            cursor,
                        )))
                    },
                    "prompts",
                )
                .await
            })
            .await?;
        Ok(lists
            .into_iter()
            .flat_map(|(u, prompts)| {
                prompts.into_iter().map(move |(mut prompt, sent)| {
                    prompt.name = self.namer.expose(u.name(), &prompt.name);
                    (prompt, sent)
                })
            })
            .collect())
    }

    /// All the resources (URIs are not renamed), each as its upstream sent
    /// it.
    pub async fn list_resources_as_sent(&self) -> Result<Vec<String>, ErrorData> {
        Ok(as_sent(self.listed_resources().await?))
    }

    async fn listed_resources(&self) -> Result<Vec<(Resource, Option<Box<RawValue>>)>, ErrorData> {
        let lists = self
            .on_all("resources/list", |u| async move {
                if !declares(&u, |c| c.resources.is_some()).await {
                    return Ok(Vec::new());
                }
                list_all::<Resource>(
                    &u,
                    |cursor| {
                        ClientRequest::ListResourcesRequest(ListResourcesRequest::with_param(page(
                            cursor,
                        )))
                    },
                    "resources",
                )
                .await
            })
            .await?;
        let mut owners = lock(&self.resource_owners);
        let mut all = Vec::new();
        for (u, resources) in lists {
            for (resource, sent) in resources {
                owners.insert(resource.uri.clone(), u.name().to_owned());
                all.push((resource, sent));
            }
        }
        Ok(all)
    }

    /// All the resource templates, sluice's own first, each upstream
    /// template as its upstream sent it.
    pub async fn list_resource_templates_as_sent(&self) -> Result<Vec<String>, ErrorData> {
        Ok(as_sent(self.listed_resource_templates().await?))
    }

    async fn listed_resource_templates(
        &self,
    ) -> Result<Vec<(ResourceTemplate, Option<Box<RawValue>>)>, ErrorData> {
        let lists = self
            .on_all("resources/templates/list", |u| async move {
                if !declares(&u, |c| c.resources.is_some()).await {
                    return Ok(Vec::new());
                }
                list_all::<ResourceTemplate>(
                    &u,
                    |cursor| {
                        ClientRequest::ListResourceTemplatesRequest(
                            ListResourceTemplatesRequest::with_param(page(cursor)),
                        )
                    },
                    "resourceTemplates",
                )
                .await
            })
            .await?;
        let mut owners = lock(&self.template_owners);
        owners.clear();
        let mut all = vec![(crate::tools::resource::template(), None)];
        for (u, templates) in lists {
            for (template, sent) in templates {
                let prefix = template
                    .uri_template
                    .split('{')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                owners.push((prefix, u.name().to_owned()));
                all.push((template, sent));
            }
        }
        Ok(all)
    }
}

/// Each item as its upstream sent it, or serialized where that text is not
/// known.
fn as_sent<T: serde::Serialize>(items: Vec<(T, Option<Box<RawValue>>)>) -> Vec<String> {
    items
        .into_iter()
        .map(|(item, sent)| match sent {
            Some(sent) => String::from(Box::<str>::from(sent)),
            None => serde_json::to_string(&item).expect("list items serialize"),
        })
        .collect()
}

/// An item of a list as sent, named `exposed` (its text edited only if its
/// name differs). `None` if the text is not an object.
fn renamed_as_sent(sent: &RawValue, exposed: &str) -> Option<String> {
    let mut item = RawObject::parse(sent.get()).ok()?;
    if item.get_str("name").as_deref() == Some(exposed) {
        return Some(sent.get().to_owned());
    }
    item.insert_value("name", exposed).ok()?;
    Some(item.to_json())
}

pub(super) fn either(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (None, None) => None,
        _ => Some(false),
    }
}

pub(super) fn page(cursor: Option<String>) -> PaginatedRequestParams {
    PaginatedRequestParams::default().with_cursor(cursor)
}

/// Follows an upstream's list cursors to the end: each item of every
/// page's `key` array (`tools`, `prompts`, …) that reads as a `T`, with its
/// text as sent. An item that does not (a member of the wrong type: a
/// hand-written server's slip, or a later revision's) is left out with a
/// warning that names it and says why, and the others are listed: read as
/// a whole, one such item lost the upstream's whole list. A page that is
/// not an object with a `key` array fails the listing.
pub(super) async fn list_all<T: serde::de::DeserializeOwned + Send + 'static>(
    upstream: &Upstream,
    request: impl Fn(Option<String>) -> ClientRequest,
    key: &'static str,
) -> Result<Vec<(T, Option<Box<RawValue>>)>, CallError> {
    // A server that keeps returning cursors must not keep sluice paging forever.
    const MAX_PAGES: usize = 1000;
    let mut all = Vec::new();
    let mut cursor = None;
    let never = CancellationToken::new();
    for _ in 0..MAX_PAGES {
        let answer = upstream
            .send(
                request(cursor.take()),
                false,
                || crate::upstream::rpc::ForClient::NONE,
                &never,
                |_| Vec::new(),
            )
            .await?;
        // A large page is read off the async threads.
        let page = crate::govern::read_result(&answer.raw, move |text| page_of::<T>(text, key));
        let Some(page) = page.await else {
            return Err(CallError::Unavailable(format!(
                "upstream `{}` answered a list request with an unexpected result (not an object with a `{key}` array)",
                upstream.name()
            )));
        };
        // Said once per item: the upstream is listed again for each client.
        for (item, why) in page.unread {
            let said = format!(
                "left out of the list of {key}: {item}, which sluice cannot read ({why}); the upstream's other {key} are listed"
            );
            if upstream.first_said(&said) {
                tracing::warn!(upstream = %upstream.name(), "{said}");
            } else {
                tracing::debug!(upstream = %upstream.name(), "{said}");
            }
        }
        all.extend(
            page.items
                .into_iter()
                .map(|(item, sent)| (item, Some(sent))),
        );
        match page.next {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => return Ok(all),
        }
    }
    Ok(all)
}

/// The most characters of why a list item cannot be read that a warning
/// quotes.
const WHY_CHARS: usize = 300;

/// One page of an upstream's list, read item by item.
struct Page<T> {
    /// The items that read, each with its text as sent.
    items: Vec<(T, Box<RawValue>)>,
    /// The items that did not: what names each, and why.
    unread: Vec<(String, String)>,
    /// Its `nextCursor`.
    next: Option<String>,
}

/// The page of a list result `text` whose items are under `key`; `None` if
/// it is not an object with a `key` array.
fn page_of<T: serde::de::DeserializeOwned>(text: &str, key: &str) -> Option<Page<T>> {
    let result = RawObject::parse(text).ok()?;
    let sent: Vec<Box<RawValue>> = serde_json::from_str(result.get_parsed(key)?).ok()?;
    let mut page = Page {
        items: Vec::with_capacity(sent.len()),
        unread: Vec::new(),
        next: result.get_str("nextCursor").map(String::from),
    };
    for item in sent {
        match serde_json::from_str::<T>(item.get()) {
            Ok(read) => page.items.push((read, item)),
            // serde quotes the value it refused: cut, as an upstream's
            // value may be as long as a message (to a line that still says
            // what was expected and where).
            Err(e) => {
                let why = sluice_core::format::cut(&e.to_string(), WHY_CHARS).into_owned();
                page.unread.push((named(&item), why));
            }
        }
    }
    Some(page)
}

/// What names a list item in a warning: its `name` (else its `uri`), or
/// the head of its text.
fn named(item: &RawValue) -> String {
    let object = RawObject::parse(item.get()).ok();
    let name = object
        .as_ref()
        .and_then(|o| o.get_str("name").or_else(|| o.get_str("uri")));
    match name {
        Some(name) => format!("`{}`", sluice_core::format::quoted_cut(&name)),
        None => sluice_core::format::quoted_cut(item.get()).into_owned(),
    }
}

/// All of one upstream's tools, under their own names.
pub(super) async fn upstream_tools(upstream: &Upstream) -> Result<Vec<Tool>, CallError> {
    Ok(upstream_tools_as_sent(upstream)
        .await?
        .into_iter()
        .map(|(tool, _)| tool)
        .collect())
}

/// All of one upstream's tools, each also as the upstream sent it.
async fn upstream_tools_as_sent(
    upstream: &Upstream,
) -> Result<Vec<(Tool, Option<Box<RawValue>>)>, CallError> {
    list_all(
        upstream,
        |cursor| ClientRequest::ListToolsRequest(ListToolsRequest::with_param(page(cursor))),
        "tools",
    )
    .await
}

/// An upstream tool as the client sees it, edited in its text as sent:
/// its exposed name, no `outputSchema` unless the tool is never governed,
/// and sluice's `_timeout_s` (and `_fresh` for a cached tool) in
/// `inputSchema.properties` (made if absent). Every other member, and the
/// spelling of every value, is the upstream's. `None` if the text is not
/// an object with an object `inputSchema` (the decoded tool is listed).
fn edited_as_sent(
    sent: &RawValue,
    exposed: &str,
    keep_output_schema: bool,
    cached: bool,
) -> Option<String> {
    let mut tool = RawObject::parse(sent.get()).ok()?;
    if tool.get_str("name").as_deref() != Some(exposed) {
        tool.insert_value("name", exposed).ok()?;
    }
    if !keep_output_schema {
        tool.remove("outputSchema");
    }
    tool.edit_path(&["inputSchema"], |schema| {
        let has_properties = schema.get("properties").is_some_and(|p| p.starts_with('{'));
        if !has_properties {
            schema.insert_value("properties", &serde_json::json!({}))?;
        }
        schema
            .edit_path(&["properties"], |properties| {
                properties.insert_value(
                    sluice_core::operation::TIMEOUT_ARG,
                    &crate::tools::timeout_property(),
                )?;
                if cached {
                    properties.insert_value(
                        sluice_core::cache::FRESH_ARG,
                        &crate::tools::fresh_property(),
                    )?;
                }
                Ok::<(), serde_json::Error>(())
            })
            .ok()
            .flatten()
            .transpose()
    })
    .ok()
    .flatten()?
    .ok()?;
    Some(tool.to_json())
}

/// A `[upstreams.NAME.tools.TOOL]` table for a tool the upstream does not
/// have is most likely a typo: say so (the settings would apply to nothing).
pub(super) async fn warn_unknown_tool_settings(upstream: &Upstream) {
    let Ok(tools) = upstream_tools(upstream).await else {
        return;
    };
    for name in upstream.spec.tools.keys() {
        if !tools.iter().any(|t| t.name == name.as_str()) {
            let known: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
            tracing::warn!(
                "the config has settings for tool `{name}` of upstream `{}`, which has no such tool (it has: {})",
                upstream.name(),
                known.join(", ")
            );
        }
    }
}

/// Whether the upstream declared a capability (starting it if needed).
pub(super) async fn declares(
    upstream: &Upstream,
    test: impl Fn(&ServerCapabilities) -> bool,
) -> bool {
    match upstream.connection().await {
        Ok(conn) => conn.info().is_some_and(|info| test(&info.capabilities)),
        Err(_) => false,
    }
}

pub(super) fn unexpected(upstream: &Upstream, method: &str, result: &ServerResult) -> ErrorData {
    let kind = format!("{result:?}");
    let kind = kind.split('(').next().unwrap_or_default();
    ErrorData::internal_error(
        format!(
            "upstream `{}` answered {method} with an unexpected {kind}",
            upstream.name()
        ),
        None,
    )
}

/// A tool as listed: decoded, and as the text to send when it is an
/// upstream's.
struct Listed {
    tool: Tool,
    sent: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page is read item by item: what reads is kept with its text as
    /// sent, what does not is named and why said, cut to a bounded size
    /// (serde quotes the value it refused, which may be as long as a
    /// message); a page that is not an object with the array is refused.
    #[test]
    fn a_page_is_read_item_by_item() {
        let long = "y".repeat(100_000);
        let text = format!(
            r#"{{"tools":[{{"name":"a","inputSchema":{{"type":"object"}},"x-v":1.50}},
            {{"name":"b","inputSchema":{{}},"title":7}},{{"inputSchema":"{long}"}}],"nextCursor":"c2"}}"#
        );
        let page = page_of::<Tool>(&text, "tools").unwrap();
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].0.name, "a");
        assert_eq!(
            page.items[0].1.get(),
            r#"{"name":"a","inputSchema":{"type":"object"},"x-v":1.50}"#
        );
        assert_eq!(page.next.as_deref(), Some("c2"));
        let [(b, why_b), (unnamed, why_long)] = page.unread.as_slice() else {
            panic!("{:?}", page.unread);
        };
        assert_eq!(b, "`b`");
        assert!(why_b.contains("invalid type"), "{why_b}");
        assert!(
            unnamed.len() < 1_000 && unnamed.starts_with(r#"{"inputSchema":"#),
            "{unnamed}"
        );
        assert!(why_long.len() < 1_000, "{} bytes", why_long.len());
        // A cursor that is not a string ends the listing.
        let odd_cursor = page_of::<Tool>(r#"{"tools":[],"nextCursor":7}"#, "tools").unwrap();
        assert!(odd_cursor.items.is_empty() && odd_cursor.next.is_none());
        for refused in [
            r#"[]"#,
            r#"{"tools":{}}"#,
            r#"{"prompts":[]}"#,
            r#"{"tools":null}"#,
        ] {
            assert!(page_of::<Tool>(refused, "tools").is_none(), "{refused}");
        }
    }
}
