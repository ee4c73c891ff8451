//! The one stylesheet, inline in every page's `<head>` (allowed by its hash in the one CSP):
//! the console's frame (a dark header, a wide `main` of cards and tables) and the card pages
//! (`body.center`: one white card in the middle — sign-in, consent, account, connect, refusals).
//! On a phone, table rows stack (each cell under its column's name, see [`crate::table`]), so
//! no action column needs a sideways scroll.

/// The stylesheet.
pub const STYLESHEET: &str = "\
*{box-sizing:border-box}\
body{margin:0;font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;background:#f3f4f6;color:#111827}\
body.center{min-height:100vh;display:flex;align-items:center;justify-content:center;font-size:16px}\
header{background:#111827;color:#f9fafb;padding:.6rem 1rem;display:flex;flex-wrap:wrap;gap:.5rem 1.25rem;align-items:center}\
header .brand{font-weight:700;letter-spacing:.02em}\
header nav{display:flex;flex-wrap:wrap;gap:.25rem .9rem}\
header a{color:#d1d5db;text-decoration:none}header a.on{color:#fff;border-bottom:2px solid #60a5fa}\
header .who{margin-left:auto;display:flex;gap:.6rem;align-items:center;font-size:.9rem;color:#d1d5db}\
header form{margin:0}header button{padding:.2rem .6rem;font-size:.85rem}\
main{max-width:76rem;margin:0 auto;padding:1rem}\
main.page{width:100%;max-width:28rem;margin:1rem;padding:2rem;background:#fff;border-radius:12px;\
box-shadow:0 1px 3px rgba(0,0,0,.1),0 8px 24px rgba(0,0,0,.06)}\
main.page.wide{max-width:40rem}main.page.wide:has(table){max-width:60rem}\
h1{font-size:1.35rem;margin:.25rem 0 .75rem}h2{font-size:1.05rem;margin:1.5rem 0 .5rem}\
main.page h1{margin:0 0 .25rem}main.page h2{font-size:1.1rem;margin:0}main.page h2.section{margin:1.75rem 0 .5rem}\
main.page p{margin:.5rem 0}main.page ul{padding-left:1.25rem}main.page li{margin:.25rem 0}\
.muted{color:#6b7280;font-size:.9rem}\
.deployment{margin:0 0 1rem;color:#374151;font-weight:600;letter-spacing:.02em}\
code{font-size:.85em;overflow-wrap:anywhere}\
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:.6rem .75rem}\
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(10rem,1fr));gap:.75rem}\
.card{background:#fff;border:1px solid #e5e7eb;border-radius:10px;padding:.75rem 1rem}\
.card .v{font-size:1.4rem;font-weight:700}.card .k{color:#6b7280;font-size:.85rem}\
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(22rem,1fr));gap:.75rem}\
.charts .card{padding:.5rem}\
main.page ul.items{list-style:none;padding:0;margin:0}\
.item{border:1px solid #e5e7eb;border-radius:10px;padding:1rem;margin:.75rem 0}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:.15rem .75rem;margin:.5rem 0}\
dt{color:#6b7280}dd{margin:0;overflow-wrap:anywhere}\
.scroll{overflow-x:auto;background:#fff;border:1px solid #e5e7eb;border-radius:10px;margin:.5rem 0}\
table{border-collapse:collapse;width:100%;font-size:.9rem}\
th,td{text-align:left;padding:.45rem .6rem;border-bottom:1px solid #f1f5f9;vertical-align:top}\
th{background:#f9fafb;font-weight:600;white-space:nowrap}\
td{overflow-wrap:anywhere}td.nowrap{white-space:nowrap}td:last-child{white-space:nowrap}\
td form{margin:0}td form.inline{display:inline}main.page td button{padding:.3rem .6rem}\
.ok{color:#047857;font-weight:600}.bad{color:#b91c1c;font-weight:600}.warn{color:#b45309;font-weight:600}\
.pill{display:inline-block;padding:0 .45rem;border-radius:999px;font-size:.8rem;background:#eef2ff;color:#3730a3;margin:0 .2rem .2rem 0}\
form.filters{display:grid;grid-template-columns:repeat(auto-fit,minmax(9.5rem,1fr));gap:.5rem .75rem;align-items:end;\
background:#fff;border:1px solid #e5e7eb;border-radius:10px;padding:.75rem;margin-bottom:.75rem}\
form.filter{display:grid;gap:0 .75rem}\
label{display:block;font-weight:600;font-size:.85rem;margin-bottom:.15rem}\
main.page label{margin:1rem 0 .25rem;font-size:.95rem}\
input,select{width:100%;padding:.4rem .5rem;border:1px solid #d1d5db;border-radius:6px;font:inherit;background:#fff}\
main.page input{padding:.6rem .75rem;border-radius:8px}\
input:focus{outline:2px solid #2563eb;outline-offset:1px}\
label.check{display:flex;gap:.4rem;align-items:center;font-weight:400;font-size:.9rem;margin:.15rem 0}\
label.check input{width:auto;margin:0}\
button{padding:.45rem .9rem;border-radius:6px;border:1px solid #d1d5db;font:inherit;font-weight:600;cursor:pointer;background:#fff;color:#111827}\
button:focus{outline:2px solid #1d4ed8;outline-offset:2px}\
button.primary{background:#2563eb;border-color:#2563eb;color:#fff}\
button.danger{background:#fff;border-color:#dc2626;color:#b91c1c}\
.actions{display:flex;gap:.75rem;margin-top:1.5rem}.actions button{flex:1;padding:.65rem 1rem;border-radius:8px}\
.notice{margin:.75rem 0;padding:.6rem .75rem;border-radius:8px;background:#ecfdf5;color:#065f46;border:1px solid #a7f3d0}\
.error{margin:.75rem 0;padding:.6rem .75rem;border-radius:8px;background:#fef2f2;color:#991b1b;border:1px solid #fecaca}\
.secret{display:block;padding:.6rem;background:#111827;color:#f9fafb;border-radius:6px;font-size:.95rem;overflow-wrap:anywhere;margin:.4rem 0}\
.pager{display:flex;gap:1rem;align-items:center;margin:.75rem 0}\
@media (max-width:40rem){header .who{margin-left:0}main{padding:.6rem}\
main.page{padding:1.25rem}\
.scroll{overflow-x:visible;background:none;border:none}\
table.stack thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}\
table.stack tr{display:block;background:#fff;border:1px solid #e5e7eb;border-radius:10px;margin:0 0 .6rem;padding:.35rem 0}\
table.stack td{display:grid;grid-template-columns:7.5rem 1fr;gap:.5rem;border:none;padding:.25rem .75rem;white-space:normal}\
table.stack td::before{content:attr(data-label);color:#6b7280;font-size:.85rem;font-weight:600}\
table.stack td[data-label=\"\"]{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center}\
table.stack td[data-label=\"\"]::before{content:none}}\
";

#[cfg(test)]
mod tests {
    use super::STYLESHEET;

    #[test]
    fn tables_stack_on_a_phone_and_keep_their_actions_on_one_line() {
        for rule in [
            "@media (max-width:40rem)",
            "table.stack td::before{content:attr(data-label)",
            "table.stack td[data-label=\"\"]::before{content:none}",
            "td:last-child{white-space:nowrap}",
            "body.center{",
            "main.page{",
        ] {
            assert!(STYLESHEET.contains(rule), "{rule}");
        }
        // The hash covers the text between `<style>` and `</style>`: nothing in it may end it.
        assert!(!STYLESHEET.contains('<'));
    }
}
