//! Tool names as metric labels: how many names of a route get a series of their own (an even
//! share of a fixed total, so one route's catalog cannot take another's), and the longest label
//! (an upstream writes the names) — pure.

/// The tool names with a series of their own, shared out over the routes ([`tool_budget`]);
/// later names count as `other`.
pub(crate) const MAX_TOOL_SERIES: usize = 256;

/// The least budget of tool series a route gets, however many routes there are.
const MIN_TOOL_SERIES_PER_ROUTE: usize = 32;

/// The longest tool label: longer names (an upstream writes them) are cut at a character
/// boundary and end in `…`.
pub(crate) const MAX_TOOL_LABEL_BYTES: usize = 128;

/// How many tool names of one route get a series of their own when there are `routes` routes:
/// an even share of [`MAX_TOOL_SERIES`], at least [`MIN_TOOL_SERIES_PER_ROUTE`], so one
/// route's catalog cannot take another route's series.
pub(crate) fn tool_budget(routes: usize) -> usize {
    (MAX_TOOL_SERIES / routes.max(1)).max(MIN_TOOL_SERIES_PER_ROUTE)
}

/// A tool name as a label: at most [`MAX_TOOL_LABEL_BYTES`], cut at a character boundary.
pub(crate) fn tool_label(name: &str) -> std::borrow::Cow<'_, str> {
    if name.len() <= MAX_TOOL_LABEL_BYTES {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut end = MAX_TOOL_LABEL_BYTES - '…'.len_utf8();
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}…", &name[..end]))
}
