//! The service beyond the core (one test binary, one module per theme): every tool's answer
//! against its published `outputSchema` (`tool_answers`), `mcp-service check`'s exit codes as a
//! CI job sees them (`check_cli`), and the environment variables the code reads against the docs
//! (`env_docs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod check_cli;
mod env_docs;
mod tool_answers;
