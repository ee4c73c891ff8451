//! The Werkbaum core engine: a pool of sandboxed QuickJS runtimes (rquickjs) running the core's
//! ES modules, with a memory limit, a stack limit and a per-call deadline.
//!
//! The core is compiled to bytecode once; each runtime is instantiated from that bytecode and
//! can import nothing but the bundle's own modules (no host functions, no file system, no
//! network). Every call runs on a dedicated worker thread, never on the async executor. A
//! runtime that hit a limit, the deadline or any engine-level exception is discarded and
//! replaced, so the pool recovers by itself.
//!
//! The contract with the core: its entry module `index.js` exports
//! `dispatch(method, paramsJson)`, which returns `{"result": ...}` or
//! `{"error": {"code", "message"}}` as a JSON string (see `mcp-service/core/CONTRACT.md`).

mod bundle;
mod worker;

use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::oneshot;

pub use bundle::CoreSource;
use worker::{Form, Job, Reply, Slot};

/// Why a call into the core failed. `Core` is the core's own, precise answer; every other
/// variant is a failure of the engine or of its limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The core rejected the call (unknown node, invalid status, ...): `code` is the contract's.
    #[error("{code}: {message}")]
    Core { code: String, message: String },
    /// The call ran longer than the per-call deadline.
    #[error("the core did not finish within the deadline of {0:?}")]
    Deadline(Duration),
    /// The call exceeded the runtime's memory limit (bytes).
    #[error("the core ran out of memory (limit {0} bytes)")]
    OutOfMemory(usize),
    /// The call exceeded the runtime's stack limit (bytes), e.g. through very deep recursion.
    #[error("the core exceeded its stack limit of {0} bytes")]
    StackOverflow(usize),
    /// Anything else that went wrong inside the engine (uncaught exception, bad reply, ...).
    #[error("core engine failure: {0}")]
    Engine(String),
    /// The core bundle could not be read, compiled or loaded.
    #[error("core bundle: {0}")]
    Bundle(String),
    /// Every runtime is working and the queue in front of them is full: refused at once,
    /// nothing ran. The caller may retry.
    #[error("the plan engine is busy ({0} calls already waiting); retry in a moment")]
    Busy(usize),
}

impl EngineError {
    /// The core's error code, when the core itself rejected the call.
    pub fn core_code(&self) -> Option<&str> {
        match self {
            EngineError::Core { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// Calls that may wait for a runtime unless configured otherwise.
pub(crate) const DEFAULT_QUEUE_CAPACITY: usize = 64;

/// Engine configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Number of runtimes (and worker threads).
    pub pool_size: usize,
    /// Memory limit per runtime, bytes.
    pub memory_limit: usize,
    /// QuickJS stack limit per runtime, bytes.
    pub max_stack_size: usize,
    /// Wall-clock limit for one call.
    pub deadline: Duration,
    /// Calls that may wait for a free runtime; one more is refused with [`EngineError::Busy`].
    pub queue_capacity: usize,
    /// Where the core comes from.
    pub core: CoreSource,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            pool_size: std::thread::available_parallelism()
                .map(|n| n.get().min(4))
                .unwrap_or(2),
            memory_limit: 64 * 1024 * 1024,
            max_stack_size: 1024 * 1024,
            deadline: Duration::from_secs(2),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            core: CoreSource::BuiltIn,
        }
    }
}

/// The per-runtime limits, copied into every worker.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub memory_limit: usize,
    pub max_stack_size: usize,
    pub deadline: Duration,
}

/// Memory figures of one runtime (from QuickJS' `JS_ComputeMemoryUsage`, after a GC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeMemory {
    /// Bytes currently allocated by the runtime.
    pub malloc_size: i64,
    /// The runtime's memory limit (-1 or 0 when unlimited).
    pub malloc_limit: i64,
    /// Bytes in use by QuickJS objects.
    pub memory_used_size: i64,
    pub obj_count: i64,
    pub str_count: i64,
}

/// Extra stack for a worker thread beyond the JS stack limit (Rust frames, QuickJS' C frames).
const WORKER_STACK_HEADROOM: usize = 32 * 1024 * 1024;

/// A pool of core runtimes. Cheap to clone; the workers stop when the last clone is dropped.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: Mutex<SyncSender<Job>>,
    config: EngineConfig,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Reads and compiles the core, then starts `pool_size` runtimes. Fails with
    /// `EngineError::Bundle` when the core cannot be read, compiled or loaded.
    pub fn new(config: EngineConfig) -> Result<Engine, EngineError> {
        let modules = config.core.read()?;
        let bytecode = bundle::compile(modules)?;
        let limits = Limits {
            memory_limit: config.memory_limit,
            max_stack_size: config.max_stack_size,
            deadline: config.deadline,
        };
        let (tx, rx) = mpsc::sync_channel::<Job>(config.queue_capacity);
        let rx = Arc::new(Mutex::new(rx));
        let pool_size = config.pool_size.max(1);
        for index in 0..pool_size {
            // Each worker builds its runtime on its own thread (QuickJS measures the stack of
            // the thread it runs on); the first error aborts the start.
            let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), EngineError>>(1);
            let jobs = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("core-engine-{index}"))
                .stack_size(config.max_stack_size + WORKER_STACK_HEADROOM)
                .spawn(move || match Slot::new(bytecode, limits) {
                    Ok(slot) => {
                        let _ = ready_tx.send(Ok(()));
                        worker::run(bytecode, limits, slot, jobs);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                })
                .map_err(|e| EngineError::Engine(format!("cannot start a worker: {e}")))?;
            ready_rx
                .recv()
                .map_err(|_| EngineError::Engine("a worker died while starting".to_owned()))??;
        }
        Ok(Engine {
            inner: Arc::new(Inner {
                jobs: Mutex::new(tx),
                config,
            }),
        })
    }

    /// The configuration this engine runs with.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    fn submit(&self, job: Job) -> Result<(), EngineError> {
        let jobs = self
            .inner
            .jobs
            .lock()
            .map_err(|_| EngineError::Engine("engine queue poisoned".to_owned()))?;
        jobs.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => EngineError::Busy(self.inner.config.queue_capacity),
            TrySendError::Disconnected(_) => {
                EngineError::Engine("the engine's workers are gone".to_owned())
            }
        })
    }

    fn enqueue_call(
        &self,
        method: &str,
        params: &Value,
        form: Form,
    ) -> Result<oneshot::Receiver<Result<Reply, EngineError>>, EngineError> {
        let params = serde_json::to_string(params)
            .map_err(|e| EngineError::Engine(format!("cannot encode params: {e}")))?;
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Call {
            method: method.to_owned(),
            params,
            form,
            reply,
        })?;
        Ok(rx)
    }

    /// Calls a core method with JSON params; returns the contract's `result` or the core's
    /// error as `EngineError::Core`.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, EngineError> {
        let rx = self.enqueue_call(method, &params, Form::Value)?;
        into_value(rx.await)
    }

    /// Like [`Engine::call`], but returns the result's JSON text as the core wrote it
    /// (validated, not parsed into a tree): for callers that pass it on or read it into their
    /// own types.
    pub async fn call_raw(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Box<RawValue>, EngineError> {
        let rx = self.enqueue_call(method, &params, Form::Raw)?;
        match rx.await {
            Ok(Ok(Reply::Raw(raw))) => Ok(raw),
            Ok(Ok(Reply::Value(_))) => Err(EngineError::Engine(
                "a worker answered in the wrong form".to_owned(),
            )),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(dropped()),
        }
    }

    /// Like [`Engine::call`], for synchronous callers. Must not be called from inside an async
    /// task (it blocks the thread until the worker answers).
    pub fn call_blocking(&self, method: &str, params: Value) -> Result<Value, EngineError> {
        let rx = self.enqueue_call(method, &params, Form::Value)?;
        into_value(rx.blocking_recv())
    }

    /// Memory figures of one runtime of the pool (whichever worker is free), after a GC.
    pub async fn memory_usage(&self) -> Result<RuntimeMemory, EngineError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Memory { reply })?;
        rx.await.map_err(|_| dropped())?
    }

    /// `inspect(text, {id?, include?})`.
    pub async fn inspect(
        &self,
        text: &str,
        id: Option<&str>,
        include: Option<&[&str]>,
    ) -> Result<Value, EngineError> {
        let mut params = serde_json::json!({ "text": text });
        if let Some(id) = id {
            params["id"] = Value::from(id);
        }
        if let Some(include) = include {
            params["include"] = Value::from(include.to_vec());
        }
        self.call("inspect", params).await
    }

    /// `check(text, {against?})`.
    pub async fn check(&self, text: &str, against: Option<&str>) -> Result<Value, EngineError> {
        let mut params = serde_json::json!({ "text": text });
        if let Some(against) = against {
            params["against"] = Value::from(against);
        }
        self.call("check", params).await
    }
}

fn dropped() -> EngineError {
    EngineError::Engine("a worker dropped the call".to_owned())
}

fn into_value<E>(received: Result<Result<Reply, EngineError>, E>) -> Result<Value, EngineError> {
    match received {
        Ok(Ok(Reply::Value(v))) => Ok(v),
        Ok(Ok(Reply::Raw(_))) => Err(EngineError::Engine(
            "a worker answered in the wrong form".to_owned(),
        )),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(dropped()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    /// A stub core: echoes, fails on request, loops, hogs memory, recurses, throws.
    const STUB: &str = r#"
import { wrap } from "./util.js";
export function dispatch(method, paramsJson) {
  const p = JSON.parse(paramsJson);
  switch (method) {
    case "echo": return wrap({ method, params: p });
    case "fail": return JSON.stringify({ error: { code: "unknownNode", message: "no node " + p.id } });
    case "loop": for (;;) {}
    case "catchLoop": for (;;) { try { for (;;) {} } catch (e) {} }
    case "hog": { const a = []; for (;;) a.push("x".repeat(65536) + a.length); }
    case "catchHog": try { const a = []; for (;;) a.push("y".repeat(65536) + a.length); } catch (e) { return JSON.stringify({ error: { code: "internal", message: String(e) } }); }
    case "deep": { const f = (n) => f(n + 1) + 1; return wrap(f(0)); }
    case "throw": throw new TypeError("boom");
    case "bad": return "not json";
    case "globals": return wrap({ print: typeof print, console: typeof console, os: typeof os, std: typeof std, fetch: typeof fetch, require: typeof require });
    case "import": return wrap(typeof import("./util.js"));
    default: return JSON.stringify({ error: { code: "unknownMethod", message: method } });
  }
}
"#;
    const UTIL: &str = r#"export function wrap(result) { return JSON.stringify({ result }); }"#;

    fn stub_config() -> EngineConfig {
        EngineConfig {
            pool_size: 1,
            memory_limit: 16 * 1024 * 1024,
            max_stack_size: 256 * 1024,
            deadline: Duration::from_millis(1000),
            queue_capacity: 64,
            core: CoreSource::Modules(vec![
                ("index.js".into(), STUB.into()),
                ("util.js".into(), UTIL.into()),
            ]),
        }
    }

    #[tokio::test]
    async fn echo_roundtrip_through_imports() {
        let engine = Engine::new(stub_config()).unwrap();
        let r = engine.call("echo", json!({"a": [1, "ü"]})).await.unwrap();
        assert_eq!(r, json!({"method": "echo", "params": {"a": [1, "ü"]}}));
    }

    #[tokio::test]
    async fn raw_results_are_the_core_text_validated() {
        let engine = Engine::new(stub_config()).unwrap();
        let raw = engine
            .call_raw("echo", json!({"a": [1, "ü"]}))
            .await
            .unwrap();
        assert_eq!(raw.get(), r#"{"method":"echo","params":{"a":[1,"ü"]}}"#);
        let err = engine
            .call_raw("fail", json!({"id": "x"}))
            .await
            .unwrap_err();
        assert_eq!(err.core_code(), Some("unknownNode"));
        let err = engine.call_raw("bad", json!({})).await.unwrap_err();
        assert!(matches!(err, EngineError::Engine(_)), "{err:?}");
    }

    #[tokio::test]
    async fn core_errors_stay_distinguishable() {
        let engine = Engine::new(stub_config()).unwrap();
        let err = engine.call("fail", json!({"id": "x"})).await.unwrap_err();
        assert_eq!(err.core_code(), Some("unknownNode"));
        assert_eq!(
            err,
            EngineError::Core {
                code: "unknownNode".into(),
                message: "no node x".into()
            }
        );
    }

    #[tokio::test]
    async fn limits_are_enforced_and_the_pool_recovers() {
        let engine = Engine::new(stub_config()).unwrap();
        let started = std::time::Instant::now();
        let err = engine.call("loop", json!({})).await.unwrap_err();
        assert!(matches!(err, EngineError::Deadline(_)), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        let err = engine.call("catchLoop", json!({})).await.unwrap_err();
        assert!(matches!(err, EngineError::Deadline(_)), "{err:?}");
        let err = engine.call("hog", json!({})).await.unwrap_err();
        assert!(matches!(err, EngineError::OutOfMemory(_)), "{err:?}");
        let err = engine.call("deep", json!({})).await.unwrap_err();
        assert!(matches!(err, EngineError::StackOverflow(_)), "{err:?}");
        let err = engine.call("throw", json!({})).await.unwrap_err();
        assert!(
            matches!(err, EngineError::Engine(ref m) if m.contains("boom")),
            "{err:?}"
        );
        let err = engine.call("bad", json!({})).await.unwrap_err();
        assert!(matches!(err, EngineError::Engine(_)), "{err:?}");
        // After every failure the (single) runtime was replaced and answers again.
        let r = engine.call("echo", json!(1)).await.unwrap();
        assert_eq!(r["params"], json!(1));
    }

    #[tokio::test]
    async fn caught_out_of_memory_is_reported_as_out_of_memory() {
        let engine = Engine::new(stub_config()).unwrap();
        let err = engine.call("catchHog", json!({})).await.unwrap_err();
        assert!(matches!(err, EngineError::OutOfMemory(_)), "{err:?}");
        assert!(engine.call("echo", json!(2)).await.is_ok());
    }

    #[tokio::test]
    async fn sandbox_has_no_host_api_and_no_foreign_modules() {
        let engine = Engine::new(stub_config()).unwrap();
        let r = engine.call("globals", json!({})).await.unwrap();
        for (k, v) in r.as_object().unwrap() {
            assert_eq!(v, "undefined", "{k} is visible in the sandbox");
        }
        let bad = CoreSource::Modules(vec![(
            "index.js".into(),
            "import { x } from './nope.js'; export function dispatch() { return x; }".into(),
        )]);
        let err = Engine::new(EngineConfig {
            core: bad,
            ..stub_config()
        })
        .unwrap_err();
        assert!(matches!(err, EngineError::Bundle(_)), "{err:?}");
    }

    #[tokio::test]
    async fn bundle_without_dispatch_is_refused() {
        let core = CoreSource::Modules(vec![("index.js".into(), "export const x = 1;".into())]);
        let err = Engine::new(EngineConfig {
            core,
            ..stub_config()
        })
        .unwrap_err();
        assert!(
            matches!(err, EngineError::Bundle(ref m) if m.contains("dispatch")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_and_the_engine_recovers() {
        let engine = Engine::new(EngineConfig {
            pool_size: 1,
            queue_capacity: 1,
            deadline: Duration::from_millis(500),
            ..stub_config()
        })
        .unwrap();
        // One runtime and one waiting place: of three calls submitted together at most two are
        // taken; every other one is refused without waiting for the looping ones.
        let started = std::time::Instant::now();
        let pending: Vec<_> = (0..3)
            .map(|_| engine.enqueue_call("loop", &json!({}), Form::Value))
            .collect();
        let busy: Vec<_> = pending.iter().filter(|p| p.is_err()).collect();
        assert!(!busy.is_empty(), "a third call was queued");
        assert!(started.elapsed() < Duration::from_millis(400));
        for refused in busy {
            let err = refused.as_ref().unwrap_err();
            assert_eq!(err, &EngineError::Busy(1));
            assert!(err.to_string().contains("busy") && err.to_string().contains("retry"));
        }
        for taken in pending.into_iter().flatten() {
            let err = into_value(taken.await).unwrap_err();
            assert!(matches!(err, EngineError::Deadline(_)), "{err:?}");
        }
        assert_eq!(
            engine.call("echo", json!(3)).await.unwrap()["params"],
            json!(3)
        );
    }

    #[tokio::test]
    async fn concurrent_calls_use_the_pool() {
        let engine = Engine::new(EngineConfig {
            pool_size: 3,
            ..stub_config()
        })
        .unwrap();
        let calls = (0..30).map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move { engine.call("echo", json!(i)).await })
        });
        for (i, call) in calls.enumerate() {
            assert_eq!(call.await.unwrap().unwrap()["params"], json!(i));
        }
        let mem = engine.memory_usage().await.unwrap();
        assert!(mem.malloc_size > 0 && mem.malloc_size < 16 * 1024 * 1024);
    }

    #[test]
    fn blocking_call_works_outside_async() {
        let engine = Engine::new(stub_config()).unwrap();
        assert!(engine.call_blocking("echo", json!(null)).is_ok());
    }
}
