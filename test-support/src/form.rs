//! HTML forms read the way a browser submits them: the one form of a page (or each of them), its `action`
//! resolved against the page's URL, every named `<input>` with its value, the named submit
//! buttons. Enough for the authorization server's login and consent pages, which the tests of
//! the oauth crate and the end-to-end tests both drive.

use anyhow::{Context as _, ensure};
use url::Url;

/// One HTML form as a browser sees it.
#[derive(Debug, Clone)]
pub struct Form {
    /// The `action` resolved against the page's URL.
    pub action: Url,
    /// The `action` attribute as written.
    pub action_attr: String,
    /// `get` or `post` (lower case).
    pub method: String,
    /// Every named `<input>` in document order, with its value.
    pub fields: Vec<(String, String)>,
    /// Every named submit `<button>` (name, value).
    pub buttons: Vec<(String, String)>,
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let needle = format!(" {name}=\"");
    let start = tag.find(&needle)? + needle.len();
    let end = tag[start..].find('"')? + start;
    Some(unescape(&tag[start..end]))
}

/// The opening tags `<tag …>` in `html`.
pub fn tags<'a>(html: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag}");
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(&open) {
        let after = rest[i + open.len()..].chars().next();
        let Some(end) = rest[i..].find('>').map(|e| e + i) else {
            break;
        };
        if after.is_some_and(|c| c.is_whitespace() || c == '>') {
            out.push(&rest[i..end]);
        }
        rest = &rest[end..];
    }
    out
}

impl Form {
    /// The page's only form; fails when there is none or more than one.
    pub fn parse(page_url: &Url, html: &str) -> anyhow::Result<Self> {
        let forms = tags(html, "form");
        ensure!(forms.len() == 1, "expected one form, found {}", forms.len());
        let action_attr = attr(forms[0], "action").unwrap_or_default();
        let method = attr(forms[0], "method")
            .unwrap_or_else(|| "get".to_owned())
            .to_ascii_lowercase();
        let fields = tags(html, "input")
            .into_iter()
            .filter_map(|t| Some((attr(t, "name")?, attr(t, "value").unwrap_or_default())))
            .collect();
        let buttons = tags(html, "button")
            .into_iter()
            .filter(|t| attr(t, "type").is_none_or(|ty| ty == "submit"))
            .filter_map(|t| Some((attr(t, "name")?, attr(t, "value").unwrap_or_default())))
            .collect();
        Ok(Self {
            action: page_url.join(&action_attr)?,
            action_attr,
            method,
            fields,
            buttons,
        })
    }

    /// Every form of the page, in document order (each with the inputs and buttons between its
    /// `<form>` and `</form>`).
    pub fn parse_all(page_url: &Url, html: &str) -> anyhow::Result<Vec<Self>> {
        let mut out = Vec::new();
        let mut rest = html;
        while let Some(start) = rest.find("<form") {
            let end = rest[start..]
                .find("</form>")
                .map_or(rest.len(), |e| start + e + "</form>".len());
            out.push(Self::parse(page_url, &rest[start..end])?);
            rest = &rest[end..];
        }
        Ok(out)
    }

    /// The value of the input `name`.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Types `value` into the input `name`.
    pub fn set(&mut self, name: &str, value: &str) -> anyhow::Result<()> {
        let f = self
            .fields
            .iter_mut()
            .find(|(n, _)| n == name)
            .with_context(|| format!("no input named {name:?}"))?;
        f.1 = value.to_owned();
        Ok(())
    }

    /// Drops the input `name` (what a forged cross-site form without the CSRF token sends).
    pub fn without(mut self, name: &str) -> Self {
        self.fields.retain(|(n, _)| n != name);
        self
    }

    /// The body a browser sends when the button with `value` is clicked (`None`: a button
    /// without a name, e.g. "Sign in", contributes nothing).
    pub fn body(&self, button_value: Option<&str>) -> anyhow::Result<Vec<(String, String)>> {
        let mut out = self.fields.clone();
        if let Some(v) = button_value {
            let b = self
                .buttons
                .iter()
                .find(|(_, bv)| bv == v)
                .with_context(|| format!("no button with value {v:?} in {:?}", self.buttons))?;
            out.push(b.clone());
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_login_form_reads_like_a_browser_submits_it() {
        let page = Url::parse("https://gw.example/authorize?client_id=c").unwrap();
        let html = r#"<html><body><formation>not a form</formation>
            <form method="POST" action="/authorize"><input type="hidden" name="csrf" value="a&amp;b">
            <input name="username" value=""><input type="password" name="password">
            <button>Sign in</button><button type="submit" name="decision" value="approve">Approve</button>
            <button type="button" name="noise" value="x">Not submitted</button></form></body></html>"#;
        let mut form = Form::parse(&page, html).unwrap();
        assert_eq!(form.action.as_str(), "https://gw.example/authorize");
        assert_eq!(form.action_attr, "/authorize");
        assert_eq!(form.method, "post");
        assert_eq!(form.field("csrf"), Some("a&b"));
        form.set("username", "alice").unwrap();
        assert!(form.set("nosuch", "x").is_err());
        assert_eq!(
            form.body(Some("approve")).unwrap().last().unwrap(),
            &("decision".to_owned(), "approve".to_owned())
        );
        assert_eq!(form.body(None).unwrap().len(), 3);
        assert_eq!(form.clone().without("csrf").fields.len(), 2);
        assert!(form.body(Some("deny")).is_err());
        assert!(Form::parse(&page, "<p>no form</p>").is_err());
    }
}
