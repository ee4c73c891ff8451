//! JSON text read and edited where it lies: the byte ranges of an object's members and of an
//! array's elements found by a scan of the text, and edits (a value replaced, a member added or
//! removed) spliced into it — so everything not edited keeps the bytes its author wrote: key
//! order, number text (`1.0`, integers past 2^53) and string escapes. Also [`IdFinder`], which
//! finds a message's top-level `id` in a stream of bytes without holding them. Pure.
//!
//! The scanning functions take text already known to be valid JSON ([`is_valid`]); on anything
//! else they answer `None` rather than panic.

use std::{borrow::Cow, ops::Range};

/// A byte range in a JSON text.
pub(crate) type Span = Range<usize>;

/// Whether `text` is exactly one JSON value (whitespace around it allowed). Nothing is kept.
pub(crate) fn is_valid(text: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(text).is_ok()
}

/// The span of the value in `text` without the whitespace around it.
pub(crate) fn trimmed(text: &[u8]) -> Span {
    let start = skip_ws(text, 0);
    let mut end = text.len();
    while end > start && text.get(end - 1).is_some_and(|b| is_ws(*b)) {
        end -= 1;
    }
    start..end
}

/// One member of an object: its key (decoded) and where its key and value lie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member<'a> {
    pub(crate) key: Cow<'a, str>,
    /// From the key's opening quote.
    pub(crate) key_at: usize,
    pub(crate) value: Span,
}

/// The members of the object at `span` (which must start with `{`), in text order; `None`
/// when it is not an object.
pub(crate) fn members(text: &[u8], span: Span) -> Option<Vec<Member<'_>>> {
    let body = text.get(..span.end)?;
    if body.get(span.start) != Some(&b'{') {
        return None;
    }
    let mut out = Vec::new();
    let mut at = skip_ws(body, span.start + 1);
    if body.get(at) == Some(&b'}') {
        return Some(out);
    }
    loop {
        let key_at = at;
        let key_end = skip_value(body, at)?;
        let key = string(body.get(at..key_end)?)?;
        at = skip_ws(body, key_end);
        if body.get(at) != Some(&b':') {
            return None;
        }
        let value_at = skip_ws(body, at + 1);
        let value_end = skip_value(body, value_at)?;
        out.push(Member {
            key,
            key_at,
            value: value_at..value_end,
        });
        at = skip_ws(body, value_end);
        match body.get(at) {
            Some(b',') => at = skip_ws(body, at + 1),
            Some(b'}') => return Some(out),
            _ => return None,
        }
    }
}

/// The value of the last member named `key` of the object at `span` (the one JSON parsers keep).
pub(crate) fn get(text: &[u8], span: Span, key: &str) -> Option<Span> {
    members(text, span)?
        .into_iter()
        .rev()
        .find(|m| m.key == key)
        .map(|m| m.value)
}

/// The spans of the elements of the array at `span` (which must start with `[`).
pub(crate) fn elements(text: &[u8], span: Span) -> Option<Vec<Span>> {
    let body = text.get(..span.end)?;
    if body.get(span.start) != Some(&b'[') {
        return None;
    }
    let mut out = Vec::new();
    let mut at = skip_ws(body, span.start + 1);
    if body.get(at) == Some(&b']') {
        return Some(out);
    }
    loop {
        let end = skip_value(body, at)?;
        out.push(at..end);
        at = skip_ws(body, end);
        match body.get(at) {
            Some(b',') => at = skip_ws(body, at + 1),
            Some(b']') => return Some(out),
            _ => return None,
        }
    }
}

/// A JSON string value (with its quotes) decoded; borrowed when it has no escapes.
pub(crate) fn string(raw: &[u8]) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if !inner.contains(&b'\\') {
        return std::str::from_utf8(inner).ok().map(Cow::Borrowed);
    }
    serde_json::from_slice::<String>(raw).ok().map(Cow::Owned)
}

/// Whether a value's text is a JSON string or number (the ids JSON-RPC allows).
pub(crate) fn is_string_or_number(raw: &[u8]) -> bool {
    matches!(raw.first(), Some(b'"' | b'-' | b'0'..=b'9'))
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_ws(text: &[u8], mut at: usize) -> usize {
    while text.get(at).is_some_and(|b| is_ws(*b)) {
        at += 1;
    }
    at
}

/// The end (exclusive) of the string whose opening quote is at `at`.
fn skip_string(text: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        let rest = text.get(i..)?;
        let j = rest.iter().position(|b| *b == b'"' || *b == b'\\')?;
        i += j;
        if text.get(i) == Some(&b'\\') {
            i += 2;
        } else {
            return Some(i + 1);
        }
    }
}

/// The end (exclusive) of the value starting at `at`.
fn skip_value(text: &[u8], at: usize) -> Option<usize> {
    match text.get(at)? {
        b'"' => skip_string(text, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match text.get(i)? {
                    b'"' => {
                        i = skip_string(text, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let mut i = at;
            while text
                .get(i)
                .is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !is_ws(*b))
            {
                i += 1;
            }
            (i > at).then_some(i)
        }
    }
}

/// Edits of one text: each replaces a span (an insertion is an empty span); spans must not
/// overlap.
#[derive(Debug, Default)]
pub(crate) struct Edits(Vec<(Span, Vec<u8>)>);

impl Edits {
    pub(crate) fn replace(&mut self, span: Span, with: impl Into<Vec<u8>>) {
        self.0.push((span, with.into()));
    }

    /// Applies the edits to `text` in place (from the last one back, so earlier spans hold).
    pub(crate) fn apply(mut self, text: &mut Vec<u8>) {
        self.0
            .sort_by_key(|(span, _)| std::cmp::Reverse(span.start));
        for (span, with) in self.0 {
            if span.start <= span.end && span.end <= text.len() {
                text.splice(span, with);
            }
        }
    }
}

/// The edit that adds the member `"key":value` (`member`, already JSON) at the end of the object
/// at `span`.
pub(crate) fn append_member(text: &[u8], span: &Span, member: &[u8], edits: &mut Edits) {
    let close = span.end.saturating_sub(1);
    let empty = members(text, span.clone()).is_some_and(|m| m.is_empty());
    let mut with = Vec::with_capacity(member.len() + 1);
    if !empty {
        with.push(b',');
    }
    with.extend_from_slice(member);
    edits.replace(close..close, with);
}

/// The object at `span` without its members named `key`, every other member's bytes (and the
/// text between kept members) as they were; `None` when it has no such member.
pub(crate) fn without_members(text: &[u8], span: &Span, key: &str) -> Option<Vec<u8>> {
    let all = members(text, span.clone())?;
    if !all.iter().any(|m| m.key == key) {
        return None;
    }
    let spans: Vec<Span> = all.iter().map(|m| m.key_at..m.value.end).collect();
    let keep: Vec<bool> = all.iter().map(|m| m.key != key).collect();
    Some(join_kept(text, span, &spans, &keep))
}

/// The array at `span` (its elements `all`) with only the elements `keep` says, each element's
/// bytes and the separators before kept elements as they were.
pub(crate) fn retain_elements(text: &[u8], span: &Span, all: &[Span], keep: &[bool]) -> Vec<u8> {
    join_kept(text, span, all, keep)
}

/// The container at `span` (an object's members or an array's elements: `all`) with the items
/// `keep` says: its brackets and the text before the first item, each kept item after the
/// separator that preceded it in the text (the first one kept after none), the text after the
/// last item.
fn join_kept(text: &[u8], span: &Span, all: &[Span], keep: &[bool]) -> Vec<u8> {
    let slice = |r: Span| text.get(r).unwrap_or_default();
    let inner_start = span.start + 1;
    let inner_end = span.end.saturating_sub(1).max(inner_start);
    let mut out = Vec::with_capacity(span.len());
    out.extend_from_slice(slice(span.start..inner_start));
    out.extend_from_slice(slice(
        inner_start..all.first().map_or(inner_end, |s| s.start),
    ));
    let mut wrote = false;
    for (j, item) in all.iter().enumerate() {
        if !keep.get(j).copied().unwrap_or(false) {
            continue;
        }
        if wrote && let Some(previous) = j.checked_sub(1).and_then(|p| all.get(p)) {
            out.extend_from_slice(slice(previous.end..item.start));
        }
        out.extend_from_slice(slice(item.clone()));
        wrote = true;
    }
    if wrote && let Some(last) = all.last() {
        out.extend_from_slice(slice(last.end..inner_end));
    }
    out.extend_from_slice(slice(inner_end..span.end));
    out
}

/// Finds the top-level `id` of one JSON object fed in pieces (a message too long to hold),
/// keeping at most a few hundred bytes: the last top-level `id` that is a string or number, and
/// whether the object has a top-level `method`.
#[derive(Debug, Default)]
pub(crate) struct IdFinder {
    depth: usize,
    in_string: bool,
    escape: bool,
    /// At depth 1: the key being read (bounded), or the last key read.
    key: Vec<u8>,
    reading_key: bool,
    /// At depth 1: the next value is a member's value (after `:`).
    in_value: bool,
    /// The scalar value of the member `id` being read (bounded).
    capture: Option<Vec<u8>>,
    id: Option<Vec<u8>>,
    method: bool,
}

/// The most of a key or an `id` the finder keeps.
const FINDER_KEEP: usize = 256;

impl IdFinder {
    /// Feeds the next bytes of the object.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        loop {
            if self.in_string && !self.escape && !self.reading_key && self.capture.is_none() {
                // Inside a string nothing is kept of: on to its next quote or backslash.
                match bytes.iter().position(|b| *b == b'"' || *b == b'\\') {
                    Some(i) => bytes = bytes.get(i..).unwrap_or_default(),
                    None => return,
                }
            }
            let Some((&b, rest)) = bytes.split_first() else {
                return;
            };
            self.byte(b);
            bytes = rest;
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            if self.escape {
                self.escape = false;
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.reading_key {
                    self.reading_key = false;
                    return;
                }
            }
            self.keep(b);
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && !self.in_value {
                    self.reading_key = true;
                    self.key.clear();
                    return;
                }
                self.start_value();
                self.keep(b);
            }
            b'{' | b'[' => {
                if self.depth == 1 && self.in_value {
                    // A structured value: not an id.
                    self.in_value = false;
                }
                self.depth += 1;
            }
            b'}' | b']' => {
                self.end_value();
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 => {
                self.in_value = true;
                if self.key == b"method" {
                    self.method = true;
                }
            }
            b',' if self.depth == 1 => {
                self.end_value();
            }
            _ if is_ws(b) => {}
            _ => {
                self.start_value();
                self.keep(b);
            }
        }
    }

    fn start_value(&mut self) {
        if self.depth == 1 && self.in_value && self.capture.is_none() && self.key == b"id" {
            self.capture = Some(Vec::new());
        }
    }

    fn keep(&mut self, b: u8) {
        if self.reading_key {
            if self.key.len() < FINDER_KEEP {
                self.key.push(b);
            }
        } else if let Some(c) = &mut self.capture
            && c.len() <= FINDER_KEEP
        {
            c.push(b);
        }
    }

    fn end_value(&mut self) {
        if self.depth == 1 {
            if let Some(value) = self.capture.take()
                && value.len() <= FINDER_KEEP
                && is_string_or_number(&value)
            {
                self.id = Some(value);
            }
            self.in_value = false;
        }
    }

    /// The top-level `id`'s text, and whether the object has a top-level `method`.
    pub(crate) fn finish(self) -> (Option<Vec<u8>>, bool) {
        (self.id, self.method)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const MSG: &str = r#" {"z":1.0, "id" :9007199254740993,"a":{"k":"\u00e9\"}"},"arr":[ 1 , {"x":[]} ,"s" ],"e":{}} "#;

    fn at<'a>(text: &'a str, span: &Span) -> &'a str {
        &text[span.clone()]
    }

    #[test]
    fn members_and_elements_keep_their_bytes() {
        let t = MSG.as_bytes();
        let all = members(t, trimmed(t)).unwrap();
        let keys: Vec<&str> = all.iter().map(|m| m.key.as_ref()).collect();
        assert_eq!(keys, ["z", "id", "a", "arr", "e"]);
        assert_eq!(at(MSG, &all[0].value), "1.0");
        assert_eq!(at(MSG, &all[1].value), "9007199254740993");
        assert_eq!(&MSG[all[1].key_at..all[1].key_at + 4], "\"id\"");
        assert_eq!(at(MSG, &all[2].value), r#"{"k":"\u00e9\"}"}"#);
        let k = get(t, all[2].value.clone(), "k").unwrap();
        assert_eq!(string(&t[k]).unwrap(), "é\"}");
        let arr = elements(t, all[3].value.clone()).unwrap();
        let shown: Vec<&str> = arr.iter().map(|s| at(MSG, s)).collect();
        assert_eq!(shown, ["1", r#"{"x":[]}"#, "\"s\""]);
        assert_eq!(members(t, all[4].value.clone()).unwrap(), []);
        assert!(members(t, all[0].value.clone()).is_none());
        assert_eq!(elements(b"[]", 0..2).unwrap(), Vec::<Span>::new());
        // Duplicate keys: the last one, as parsers keep it.
        let dup = br#"{"id":1,"id":2}"#;
        assert_eq!(&dup[get(dup, 0..dup.len(), "id").unwrap()], b"2");
        let escaped_key = br#"{"\u0069d":3}"#;
        assert_eq!(
            &escaped_key[get(escaped_key, 0..escaped_key.len(), "id").unwrap()],
            b"3"
        );
    }

    #[test]
    fn edits_splice_in_place() {
        let mut t = MSG.as_bytes().to_vec();
        let span = trimmed(&t);
        let id = get(&t, span.clone(), "id").unwrap();
        let mut edits = Edits::default();
        edits.replace(id, b"\"c-1\"".to_vec());
        append_member(&t, &span, br#""new":true"#, &mut edits);
        edits.apply(&mut t);
        assert_eq!(
            String::from_utf8(t).unwrap(),
            MSG.replace("9007199254740993", "\"c-1\"")
                .replace("{}} ", "{},\"new\":true} ")
        );
        let mut empty = b"{ }".to_vec();
        let mut edits = Edits::default();
        append_member(&empty, &(0..3), b"\"a\":1", &mut edits);
        edits.apply(&mut empty);
        assert_eq!(empty, b"{ \"a\":1}");
    }

    #[test]
    fn members_and_elements_removed_keep_the_rest_as_written() {
        let t = br#"{ "a":1,  "x":2 ,"b":[3] }"#;
        let out = without_members(t, &(0..t.len()), "x").unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), r#"{ "a":1 ,"b":[3] }"#);
        let first = without_members(t, &(0..t.len()), "a").unwrap();
        assert_eq!(String::from_utf8(first).unwrap(), r#"{ "x":2 ,"b":[3] }"#);
        assert!(without_members(t, &(0..t.len()), "nope").is_none());
        let only = br#"{"x":1}"#;
        assert_eq!(without_members(only, &(0..7), "x").unwrap(), b"{}");
        let arr = b"[\n  1,\n  2,\n  3\n]";
        let all = elements(arr, 0..arr.len()).unwrap();
        let out = retain_elements(arr, &(0..arr.len()), &all, &[false, true, true]);
        assert_eq!(String::from_utf8(out).unwrap(), "[\n  2,\n  3\n]");
        let out = retain_elements(arr, &(0..arr.len()), &all, &[true, false, true]);
        assert_eq!(String::from_utf8(out).unwrap(), "[\n  1,\n  3\n]");
        let out = retain_elements(arr, &(0..arr.len()), &all, &[false, false, false]);
        assert_eq!(String::from_utf8(out).unwrap(), "[\n  ]");
    }

    #[test]
    fn the_id_is_found_in_pieces_wherever_it_is() {
        let find = |text: &[u8], piece: usize| {
            let mut f = IdFinder::default();
            for chunk in text.chunks(piece) {
                f.push(chunk);
            }
            f.finish()
        };
        let last = br#"{"result":{"id":"inner","t":"a\"b}"},"jsonrpc":"2.0","id":17}"#;
        let first = br#"{"id": "a\"b" ,"result":{"content":[{"id":1}]}}"#;
        let request = br#"{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage"}"#;
        let none = br#"{"method":"notifications/progress","params":{"id":2}}"#;
        for piece in [1, 3, 1000] {
            assert_eq!(find(last, piece), (Some(b"17".to_vec()), false));
            assert_eq!(find(first, piece), (Some(br#""a\"b""#.to_vec()), false));
            assert_eq!(find(request, piece), (Some(b"4".to_vec()), true));
            assert_eq!(find(none, piece), (None, true));
        }
        // A cut message: the id seen so far.
        assert_eq!(
            find(br#"{"id":5,"result":{"text":"xxxx"#, 2),
            (Some(b"5".to_vec()), false)
        );
    }
}
