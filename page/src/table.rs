//! Tables: headed columns, each cell labelled with its column so that rows stack on a phone.

use crate::escape;

/// A table; `rows` are `<tr>…</tr>` already; `empty` (text) is shown instead when there are
/// none. Each cell gets its column's heading as `data-label`: on a phone the rows stack and
/// each cell shows it (see [`crate::STYLESHEET`]); the last column (the actions) stays on one
/// line on a wide screen.
pub fn table(headings: &[&str], rows: &str, empty: &str) -> String {
    if rows.is_empty() {
        return format!("<p class=\"muted\">{}</p>", escape(empty));
    }
    let head: String = headings
        .iter()
        .map(|h| format!("<th scope=\"col\">{}</th>", escape(h)))
        .collect();
    format!(
        "<div class=\"scroll\"><table class=\"stack\"><thead><tr>{head}</tr></thead><tbody>{}</tbody></table></div>",
        labelled(headings, rows)
    )
}

/// `rows` with each `<td` given `data-label="HEADING"` of its column (counted per `<tr`).
fn labelled(headings: &[&str], rows: &str) -> String {
    let mut out = String::with_capacity(rows.len() + rows.len() / 4);
    let mut column = 0;
    let mut rest = rows;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if rest.starts_with("<tr") {
            column = 0;
        } else if rest.starts_with("<td") {
            let label = headings.get(column).copied().unwrap_or_default();
            out.push_str(&format!("<td data-label=\"{}\"", escape(label)));
            rest = &rest[3..];
            column += 1;
            continue;
        }
        out.push('<');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn table_cells_carry_their_column() {
        let rows = "<tr><td>a</td><td class=\"nowrap\">b</td><td><form><button>Revoke</button></form></td></tr>\
                    <tr><td>c</td><td>d</td><td>e</td></tr>";
        let html = table(&["Who", "When", ""], rows, "none");
        assert!(html.contains("<table class=\"stack\">"), "{html}");
        assert!(
            html.contains("<tr><td data-label=\"Who\">a</td><td data-label=\"When\" class=\"nowrap\">b</td><td data-label=\"\"><form>"),
            "{html}"
        );
        assert!(html.contains("<tr><td data-label=\"Who\">c</td>"), "{html}");
        assert_eq!(
            table(&["A"], "", "No <rows>."),
            "<p class=\"muted\">No &lt;rows&gt;.</p>"
        );
    }
}
