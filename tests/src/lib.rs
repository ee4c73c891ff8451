//! Shared helpers for the end-to-end tests: starting real binaries on loopback and waiting for readiness.
