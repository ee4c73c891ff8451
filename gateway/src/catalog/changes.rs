//! What a virtual server's event stream learns from a member's catalog (issue 42 point 2): a
//! count per list that moves when that list changed as a client sees it — tools when the
//! member went down (its tools leave the merged list), came back, or listed other definitions;
//! resources and prompts when the member announced it on the catalog's GET stream.

use serde_json::Value;

use super::Catalog;

/// How often each of a member's lists changed since the gateway started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    pub(crate) tools: u64,
    pub(crate) resources: u64,
    pub(crate) prompts: u64,
}

/// One of a member's lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listed {
    Tools,
    Resources,
    Prompts,
}

impl Listed {
    /// The notification a client gets when this list changed.
    pub(crate) fn notification(self) -> &'static str {
        match self {
            Self::Tools => "notifications/tools/list_changed",
            Self::Resources => "notifications/resources/list_changed",
            Self::Prompts => "notifications/prompts/list_changed",
        }
    }
}

impl Changes {
    /// The lists that changed from `before` to `self` — pure.
    pub(crate) fn since(self, before: Self) -> Vec<Listed> {
        [
            (self.tools != before.tools, Listed::Tools),
            (self.resources != before.resources, Listed::Resources),
            (self.prompts != before.prompts, Listed::Prompts),
        ]
        .into_iter()
        .filter_map(|(changed, list)| changed.then_some(list))
        .collect()
    }
}

/// The resources or prompts list an SSE event's data announces as changed (the catalog's own
/// refresh follows `notifications/tools/list_changed`) — pure.
pub(super) fn announced(data: &[u8]) -> Option<Listed> {
    let message = serde_json::from_slice::<Value>(data).ok()?;
    match message.get("method")?.as_str()? {
        "notifications/resources/list_changed" => Some(Listed::Resources),
        "notifications/prompts/list_changed" => Some(Listed::Prompts),
        _ => None,
    }
}

/// Whether a refresh changed the tools a client sees: the member came back or went down
/// (`was_up` → `up`), or listed other definitions — pure.
pub(super) fn tools_changed(was_up: bool, up: bool, before: &[Value], now: &[Value]) -> bool {
    was_up != up || (up && before != now)
}

impl Catalog {
    /// The member's changes so far, watched.
    pub(crate) fn changes(&self) -> tokio::sync::watch::Receiver<Changes> {
        self.changes.subscribe()
    }

    /// Counts a change of `list`.
    pub(super) fn note_change(&self, list: Listed) {
        self.changes.send_modify(|c| match list {
            Listed::Tools => c.tools += 1,
            Listed::Resources => c.resources += 1,
            Listed::Prompts => c.prompts += 1,
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_member_down_back_or_listing_anew_changes_its_tools() {
        let a = [json!({"name": "a"})];
        let b = [json!({"name": "b"})];
        assert!(tools_changed(true, false, &a, &a), "went down");
        assert!(tools_changed(false, true, &a, &a), "came back");
        assert!(tools_changed(true, true, &a, &b), "other definitions");
        assert!(!tools_changed(true, true, &a, &a));
        assert!(!tools_changed(false, false, &a, &b), "still down");
    }

    #[test]
    fn announced_lists_and_what_changed_since() {
        let data = br#"{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}"#;
        assert_eq!(announced(data), Some(Listed::Prompts));
        let data = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        assert_eq!(announced(data), None);
        let before = Changes::default();
        let now = Changes {
            tools: 1,
            prompts: 2,
            ..before
        };
        assert_eq!(now.since(before), [Listed::Tools, Listed::Prompts]);
        assert!(now.since(now).is_empty());
    }
}
