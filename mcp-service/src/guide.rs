//! The agent guide to the Werkbaum notation, served as the `werkbaum://guide` resource.

/// URI of the guide resource.
pub(crate) const URI: &str = "werkbaum://guide";
/// MIME type of the guide.
pub(crate) const MIME: &str = "text/markdown";
/// The guide text (Markdown), embedded at build time.
pub(crate) const TEXT: &str = include_str!("guide.md");
