//! End to end, OAuth and `pforte up` (one test binary, one module per theme): the connector
//! flow through the gateway on the embedded store and on redis, a real browser on the login and
//! consent pages, the official Python SDK as a client (with step-up), the admin commands beside
//! a running gateway, `pforte up` itself (banner, restart, routes, file modes), and per-user
//! upstream credentials (`header`, `env` and `oauth` routes, against an echo server, a stdio
//! child and a second Pforte), and approvals (held calls decided in the console).

mod account;
mod admin_live;
mod approvals;
mod broker;
mod broker_policy;
mod console;
mod enterprise;
mod file_modes;
mod oauth_browser;
mod oauth_flow;
mod oauth_sdk;
mod oidc_claims;
mod oidc_login;
mod one_person;
mod pages;
mod step_up;
mod third_parties;
mod up;
mod upstream_auth;
mod upstream_catalog;
mod upstream_oauth;
