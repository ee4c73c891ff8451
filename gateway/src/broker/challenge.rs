//! `WWW-Authenticate` challenges (RFC 9110 §11.6.1) as an upstream sends them: several
//! challenges in one header or in several, quoted or bare parameter values, a token68 — read
//! leniently, since it is someone else's text; what the broker wants from them is the Bearer
//! challenge's `resource_metadata` (RFC 9728 §5.1) — pure.

/// One challenge: its scheme (lower-case) and its parameters (names lower-case, values as sent,
/// quotes and escapes removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Challenge {
    pub scheme: String,
    pub params: Vec<(String, String)>,
}

impl Challenge {
    /// The value of parameter `name` (case-insensitive), the first one when repeated.
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The `resource_metadata` URL of the first Bearer challenge that carries one, across every
/// `WWW-Authenticate` line of an answer.
pub(crate) fn resource_metadata<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<String> {
    lines
        .into_iter()
        .flat_map(parse)
        .filter(|c| c.scheme == "bearer")
        .find_map(|c| c.param("resource_metadata").map(str::to_owned))
        .filter(|v| !v.is_empty())
}

/// Whether `b` may appear in a token (RFC 9110 §5.6.2 `tchar`).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether `b` may appear in a token68 (before its `=` padding).
fn is_token68_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)
}

/// A cursor over one header value.
struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    /// Skips white space and list commas.
    fn skip_separators(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b',')) {
            self.at += 1;
        }
    }

    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a str {
        let start = self.at;
        while self.peek().is_some_and(&f) {
            self.at += 1;
        }
        // Only ASCII bytes were taken, so the slice is valid UTF-8.
        std::str::from_utf8(&self.s[start..self.at]).unwrap_or_default()
    }

    /// A quoted string after its opening quote: up to the closing quote (or the end),
    /// backslash escapes resolved.
    fn quoted(&mut self) -> String {
        let mut out = Vec::new();
        while let Some(b) = self.peek() {
            self.at += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    if let Some(next) = self.peek() {
                        out.push(next);
                        self.at += 1;
                    }
                }
                _ => out.push(b),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Whether a `name =` (an auth-param) starts here; the cursor does not move.
    fn param_ahead(&self) -> bool {
        let mut i = self.at;
        let start = i;
        while self.s.get(i).copied().is_some_and(is_tchar) {
            i += 1;
        }
        if i == start {
            return false;
        }
        while matches!(self.s.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        if self.s.get(i) != Some(&b'=') {
            return false;
        }
        // `abc=` followed by the end or a comma is a token68's padding, not a parameter.
        let mut j = i;
        while self.s.get(j) == Some(&b'=') {
            j += 1;
        }
        let padding = j > i + 1;
        while matches!(self.s.get(j), Some(b' ' | b'\t')) {
            j += 1;
        }
        !(padding || matches!(self.s.get(j), None | Some(b',')))
    }
}

/// Every challenge of one `WWW-Authenticate` value; what cannot be read is skipped.
pub(crate) fn parse(value: &str) -> Vec<Challenge> {
    let mut c = Cursor {
        s: value.as_bytes(),
        at: 0,
    };
    let mut out = Vec::new();
    loop {
        c.skip_separators();
        if c.peek().is_none() {
            return out;
        }
        let scheme = c.take_while(is_tchar).to_ascii_lowercase();
        if scheme.is_empty() {
            // Not a challenge: skip to the next comma.
            while c.peek().is_some_and(|b| b != b',') {
                c.at += 1;
            }
            continue;
        }
        let mut challenge = Challenge {
            scheme,
            params: Vec::new(),
        };
        c.skip_ws();
        if !c.param_ahead() && c.peek().is_some_and(is_token68_char) {
            // A token68 (`Basic abc==`): kept as a nameless parameter.
            let t = c.take_while(is_token68_char).to_owned();
            let pad = c.take_while(|b| b == b'=');
            challenge.params.push((String::new(), format!("{t}{pad}")));
        }
        loop {
            c.skip_ws();
            if c.peek() == Some(b',') {
                // A list comma: another parameter of this challenge, or the next challenge.
                let mark = c.at;
                c.skip_separators();
                if !c.param_ahead() {
                    c.at = mark;
                    break;
                }
            }
            if !c.param_ahead() {
                break;
            }
            let name = c.take_while(is_tchar).to_ascii_lowercase();
            c.skip_ws();
            c.at += 1; // '='
            c.skip_ws();
            let value = if c.peek() == Some(b'"') {
                c.at += 1;
                c.quoted()
            } else {
                c.take_while(|b| b != b',' && b != b' ' && b != b'\t')
                    .to_owned()
            };
            challenge.params.push((name, value));
        }
        out.push(challenge);
        // Whatever is left before the next comma is unreadable: skip it.
        while c.peek().is_some_and(|b| b != b',') {
            c.at += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRM: &str = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp";

    #[test]
    fn a_quoted_resource_metadata() {
        let h = format!(r#"Bearer resource_metadata="{PRM}""#);
        assert_eq!(resource_metadata([h.as_str()]).as_deref(), Some(PRM));
    }

    #[test]
    fn an_unquoted_one_among_other_parameters() {
        let h = format!(
            r#"Bearer realm="mcp", error="invalid_token", error_description="a, b \"c\"", resource_metadata={PRM}, scope="x y""#
        );
        let all = parse(&h);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].param("error_description"), Some(r#"a, b "c""#));
        assert_eq!(all[0].param("scope"), Some("x y"));
        assert_eq!(resource_metadata([h.as_str()]).as_deref(), Some(PRM));
    }

    #[test]
    fn several_challenges_in_one_line_and_across_lines() {
        let h = format!(
            r#"Basic realm="x", charset="UTF-8", Bearer  RESOURCE_METADATA = "{PRM}" ,DPoP algs="ES256""#
        );
        let all = parse(&h);
        let schemes: Vec<&str> = all.iter().map(|c| c.scheme.as_str()).collect();
        assert_eq!(schemes, ["basic", "bearer", "dpop"], "{all:?}");
        assert_eq!(all[0].param("charset"), Some("UTF-8"));
        assert_eq!(resource_metadata([h.as_str()]).as_deref(), Some(PRM));

        let lines = [
            r#"Basic realm="x""#,
            "Bearer",
            "Bearer resource_metadata=\"\"",
        ];
        assert_eq!(resource_metadata(lines), None);
        let with = format!(r#"bearer resource_metadata="{PRM}""#);
        assert_eq!(
            resource_metadata([r#"Basic realm="x""#, with.as_str()]).as_deref(),
            Some(PRM)
        );
    }

    #[test]
    fn token68_and_odd_input_do_not_confuse_it() {
        let all = parse("Negotiate abc+/def==, Bearer realm=x");
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0].param(""), Some("abc+/def=="));
        assert_eq!(all[1].param("realm"), Some("x"));
        // Only a Bearer challenge counts.
        let other = format!(r#"Basic resource_metadata="{PRM}""#);
        assert_eq!(resource_metadata([other.as_str()]), None);
        for junk in [
            "",
            ",,,",
            "=",
            "Bearer =",
            "Bearer a=\"unterminated",
            "\"x\" Bearer",
        ] {
            let _ = parse(junk);
        }
        assert_eq!(
            resource_metadata(["Bearer resource_metadata=\"https://a/b"]).as_deref(),
            Some("https://a/b")
        );
    }
}
