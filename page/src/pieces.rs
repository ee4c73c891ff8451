//! The small pieces pages share: hidden fields (the CSRF token), submit buttons and their row,
//! notice and error lines.

use crate::escape;

/// A hidden form field.
pub fn hidden(name: &str, value: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
        escape(name),
        escape(value)
    )
}

/// The hidden CSRF field every POST form carries (`csrf`).
pub fn csrf_field(csrf: &str) -> String {
    hidden("csrf", csrf)
}

/// How a button looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Button {
    Plain,
    /// The action the page is for (blue).
    Primary,
    /// An action that takes something away (revoke, delete).
    Danger,
}

/// A submit button labelled `label`; `choice` is the `(name, value)` it submits, if any.
pub fn button(kind: Button, label: &str, choice: Option<(&str, &str)>) -> String {
    let class = match kind {
        Button::Plain => "",
        Button::Primary => " class=\"primary\"",
        Button::Danger => " class=\"danger\"",
    };
    let choice = choice
        .map(|(n, v)| format!(" name=\"{}\" value=\"{}\"", escape(n), escape(v)))
        .unwrap_or_default();
    format!(
        "<button{class} type=\"submit\"{choice}>{}</button>",
        escape(label)
    )
}

/// A form's row of buttons (HTML already), full width on a card.
pub fn actions(buttons: &str) -> String {
    format!("<div class=\"actions\">{buttons}</div>")
}

/// A green line saying what was done.
pub fn notice(text: &str) -> String {
    format!("<p class=\"notice\" role=\"status\">{}</p>", escape(text))
}

/// A red line saying what went wrong.
pub fn error(text: &str) -> String {
    format!("<p class=\"error\" role=\"alert\">{}</p>", escape(text))
}

/// The notice and error lines after an action, either or both.
pub fn alerts(notice_text: Option<&str>, error_text: Option<&str>) -> String {
    let mut out = notice_text.map(notice).unwrap_or_default();
    out.push_str(&error_text.map(error).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_escape_what_they_are_given() {
        assert_eq!(
            csrf_field("a\"b"),
            "<input type=\"hidden\" name=\"csrf\" value=\"a&quot;b\">"
        );
        assert_eq!(
            button(Button::Primary, "Go <now>", Some(("decision", "approve"))),
            "<button class=\"primary\" type=\"submit\" name=\"decision\" value=\"approve\">Go &lt;now&gt;</button>"
        );
        assert_eq!(
            button(Button::Plain, "Sign out", None),
            "<button type=\"submit\">Sign out</button>"
        );
        assert_eq!(
            alerts(Some("done"), Some("<x>")),
            "<p class=\"notice\" role=\"status\">done</p><p class=\"error\" role=\"alert\">&lt;x&gt;</p>"
        );
        assert_eq!(alerts(None, None), "");
    }
}
