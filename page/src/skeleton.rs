//! The page skeleton: doctype, head (charset, viewport, no referrer, the title, the one
//! stylesheet), an optional header, `main`. Two layouts use it: a card in the middle of the
//! window (sign-in, consent, account, connect, refusals) and the console's (header with
//! navigation, a wide `main`).

use crate::{STYLESHEET, escape};

/// A whole page. `header` and `body` are HTML already (their text escaped by their authors);
/// `title` and `site` are text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page<'a> {
    /// The page's name, first in the window's title.
    pub title: &'a str,
    /// Whose page it is, after the title: the deployment's name, "Pforte console".
    pub site: &'a str,
    /// `center` (a card in the middle of the window) or empty.
    pub body_class: &'a str,
    /// HTML before `main` (the console's navigation), or empty.
    pub header: &'a str,
    /// The class of `main`: `page`, `page wide` (cards) or empty (the console).
    pub main_class: &'a str,
    pub body: &'a str,
}

/// The page as HTML.
pub fn document(p: &Page<'_>) -> String {
    let attr = |name: &str, value: &str| {
        if value.is_empty() {
            String::new()
        } else {
            format!(" {name}=\"{}\"", escape(value))
        }
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <title>{} · {}</title><style>{STYLESHEET}</style></head>\
         <body{}>{}<main{}>{}</main></body></html>\n",
        escape(p.title),
        escape(p.site),
        attr("class", p.body_class),
        p.header,
        attr("class", p.main_class),
        p.body,
    )
}

/// A card in the middle of the window, of the deployment called `deployment` (`[oauth]
/// display_name`, default "Pforte": then no banner); `wide` for a page with a table or list.
pub fn card_page(title: &str, deployment: &str, wide: bool, body: &str) -> String {
    let banner = if deployment == "Pforte" {
        String::new()
    } else {
        format!("<p class=\"deployment\">{}</p>", escape(deployment))
    };
    document(&Page {
        title,
        site: deployment,
        body_class: "center",
        header: "",
        main_class: if wide { "page wide" } else { "page" },
        body: &format!("{banner}{body}"),
    })
}

/// A console page: `header` (navigation, who is signed in) above a wide `main`.
pub fn console_page(title: &str, header: &str, body: &str) -> String {
    document(&Page {
        title,
        site: "Pforte console",
        body_class: "",
        header,
        main_class: "",
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every page starts with, up to its title, and what follows the title.
    fn skeleton_markers(html: &str) {
        assert!(
            html.starts_with("<!doctype html>\n<html lang=\"en\"><head>"),
            "{html}"
        );
        assert!(html.contains("<meta name=\"referrer\" content=\"no-referrer\">"));
        assert!(html.contains(&format!("<style>{STYLESHEET}</style></head>")));
        assert_eq!(html.matches("<style").count(), 1);
        assert!(html.ends_with("</main></body></html>\n"));
        assert!(!html.contains("<script"));
    }

    #[test]
    fn both_layouts_share_the_skeleton() {
        let card = card_page("Sign in", "Acme <MCP>", false, "<h1>Sign in</h1>");
        skeleton_markers(&card);
        assert!(card.contains("<title>Sign in · Acme &lt;MCP&gt;</title>"));
        assert!(card.contains("<body class=\"center\"><main class=\"page\"><p class=\"deployment\">Acme &lt;MCP&gt;</p><h1>"));
        assert!(!card_page("T", "Pforte", true, "").contains("class=\"deployment\""));
        assert!(card_page("T", "Pforte", true, "").contains("<main class=\"page wide\">"));
        let console = console_page("Overview", "<header>nav</header>", "<h1>Overview</h1>");
        skeleton_markers(&console);
        assert!(console.contains("<title>Overview · Pforte console</title>"));
        assert!(console.contains("<body><header>nav</header><main><h1>Overview</h1>"));
    }
}
