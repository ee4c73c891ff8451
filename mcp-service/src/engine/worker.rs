//! Engine workers: one OS thread per pooled QuickJS runtime, the runtime's limits and deadline,
//! the call into the core's `dispatch`, and the single mapping of JS failures to `EngineError`.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rquickjs::loader::bundle::Bundle;
use rquickjs::{CatchResultExt, CaughtError, Context, Function, Module, Persistent, Runtime};
use tokio::sync::oneshot;

use serde_json::value::RawValue;

use super::bundle::{Bytecode, ENTRY};
use super::{EngineError, Limits, RuntimeMemory};

/// The form in which a caller wants the core's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// A parsed `serde_json::Value` (parsed on the worker thread, off the async executor).
    Value,
    /// The result's JSON text as the core wrote it, validated but not parsed into a tree.
    Raw,
}

/// A core result in the form the caller asked for.
#[derive(Debug)]
pub(crate) enum Reply {
    Value(serde_json::Value),
    Raw(Box<RawValue>),
}

/// A unit of work for a worker.
pub(crate) enum Job {
    Call {
        method: String,
        params: String,
        form: Form,
        reply: oneshot::Sender<Result<Reply, EngineError>>,
    },
    Memory {
        reply: oneshot::Sender<Result<RuntimeMemory, EngineError>>,
    },
}

/// Deadline state shared between a worker and its runtime's interrupt handler.
struct Guard {
    origin: Instant,
    /// Nanoseconds after `origin` at which the running call must stop; `u64::MAX` = no call.
    deadline_ns: AtomicU64,
    fired: AtomicBool,
}

impl Guard {
    fn new() -> Self {
        Guard {
            origin: Instant::now(),
            deadline_ns: AtomicU64::new(u64::MAX),
            fired: AtomicBool::new(false),
        }
    }

    fn arm(&self, budget: Duration) {
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let budget = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
        self.fired.store(false, Ordering::SeqCst);
        self.deadline_ns
            .store(now.saturating_add(budget), Ordering::SeqCst);
    }

    fn disarm(&self) -> bool {
        self.deadline_ns.store(u64::MAX, Ordering::SeqCst);
        self.fired.load(Ordering::SeqCst)
    }

    /// The interrupt handler: true stops the interpreter with an uncatchable exception.
    fn should_interrupt(&self) -> bool {
        let deadline = self.deadline_ns.load(Ordering::Relaxed);
        if deadline == u64::MAX {
            return false;
        }
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if now >= deadline {
            self.fired.store(true, Ordering::SeqCst);
            true
        } else {
            false
        }
    }
}

/// One QuickJS runtime with the core loaded. Field order matters: the saved `dispatch`
/// function must be released before its context and runtime.
pub(crate) struct Slot {
    dispatch: Persistent<Function<'static>>,
    ctx: Context,
    rt: Runtime,
    guard: Arc<Guard>,
    limits: Limits,
}

impl Slot {
    /// Creates a runtime with the limits, the bundle's resolver/loader (and nothing else), and
    /// evaluates the entry module once.
    pub(crate) fn new(bytecode: Bytecode, limits: Limits) -> Result<Slot, EngineError> {
        let engine_err = |e: rquickjs::Error| EngineError::Engine(format!("runtime setup: {e}"));
        let rt = Runtime::new().map_err(engine_err)?;
        rt.set_memory_limit(limits.memory_limit);
        rt.set_max_stack_size(limits.max_stack_size);
        let guard = Arc::new(Guard::new());
        let handler_guard = Arc::clone(&guard);
        rt.set_interrupt_handler(Some(Box::new(move || handler_guard.should_interrupt())));
        // The only modules this runtime can ever import are the bundle's own.
        rt.set_loader(Bundle(bytecode), Bundle(bytecode));
        let ctx = Context::full(&rt).map_err(engine_err)?;
        guard.arm(limits.deadline);
        let loaded = ctx.with(|ctx| {
            let namespace = Module::import(&ctx, ENTRY)
                .and_then(|promise| promise.finish::<rquickjs::Object>())
                .catch(&ctx)
                .map_err(|e| format!("cannot load {ENTRY}: {e}"))?;
            let dispatch: Function = namespace
                .get("dispatch")
                .catch(&ctx)
                .map_err(|e| format!("{ENTRY} does not export a function `dispatch`: {e}"))?;
            Ok::<_, String>(Persistent::save(&ctx, dispatch))
        });
        let fired = guard.disarm();
        let dispatch = match loaded {
            Ok(d) => d,
            Err(_) if fired => {
                return Err(EngineError::Bundle(format!(
                    "loading the core took longer than the deadline of {:?}",
                    limits.deadline
                )));
            }
            Err(message) => return Err(EngineError::Bundle(message)),
        };
        Ok(Slot {
            dispatch,
            ctx,
            rt,
            guard,
            limits,
        })
    }

    /// Calls `dispatch(method, params)` and returns its raw string reply. Any error from here
    /// means this runtime must not be used again.
    fn dispatch(&self, method: &str, params: &str) -> Result<String, EngineError> {
        self.guard.arm(self.limits.deadline);
        let outcome = self.ctx.with(|ctx| {
            let f = self
                .dispatch
                .clone()
                .restore(&ctx)
                .map_err(|e| EngineError::Engine(format!("core function lost: {e}")))?;
            f.call::<_, String>((method, params))
                .catch(&ctx)
                .map_err(|caught| classify(&caught, &self.limits))
        });
        let fired = self.guard.disarm();
        match outcome {
            // The deadline wins over whatever the interrupted code reported.
            Err(_) if fired => Err(EngineError::Deadline(self.limits.deadline)),
            other => other,
        }
    }

    fn memory(&self) -> RuntimeMemory {
        let usage = self.rt.memory_usage();
        RuntimeMemory {
            malloc_size: usage.malloc_size,
            malloc_limit: usage.malloc_limit,
            memory_used_size: usage.memory_used_size,
            obj_count: usage.obj_count,
            str_count: usage.str_count,
        }
    }

    fn run_gc(&self) {
        self.rt.run_gc();
    }
}

/// The one place where a JS exception or a QuickJS limit becomes an `EngineError` (the
/// deadline is decided by the caller, which knows whether the interrupt handler fired).
pub(crate) fn classify(caught: &CaughtError<'_>, limits: &Limits) -> EngineError {
    let (name, message) = match caught {
        CaughtError::Exception(e) => {
            let name: Option<String> = e.as_object().get("name").ok();
            (name.unwrap_or_default(), e.message().unwrap_or_default())
        }
        CaughtError::Value(v) => (String::new(), format!("{v:?}")),
        CaughtError::Error(rquickjs::Error::Allocation) => {
            return EngineError::OutOfMemory(limits.memory_limit);
        }
        CaughtError::Error(e) => return EngineError::Engine(e.to_string()),
    };
    classify_message(&name, &message, limits)
}

/// Classifies an error by the name and message QuickJS gives its limit errors. Also used for
/// core replies that report a caught engine failure.
pub(crate) fn classify_message(name: &str, message: &str, limits: &Limits) -> EngineError {
    if message.contains("out of memory") || message.trim() == "null" {
        EngineError::OutOfMemory(limits.memory_limit)
    } else if message.contains("Maximum call stack size exceeded")
        || message.contains("stack overflow")
    {
        EngineError::StackOverflow(limits.max_stack_size)
    } else if message == "interrupted" {
        EngineError::Deadline(limits.deadline)
    } else if name.is_empty() {
        EngineError::Engine(format!("uncaught exception: {message}"))
    } else {
        EngineError::Engine(format!("uncaught {name}: {message}"))
    }
}

/// The contract's error code for an exception the core caught but did not expect.
pub(crate) const INTERNAL: &str = "internal";

/// True for the messages QuickJS gives its catchable limit errors, as a core's catch-all
/// reports them: "out of memory", "Maximum call stack size exceeded", and "null" (QuickJS
/// throws `null` when it cannot even allocate the out-of-memory error object).
fn is_limit_message(message: &str) -> bool {
    let m = message.trim();
    m.ends_with("out of memory") || m.ends_with("Maximum call stack size exceeded") || m == "null"
}

/// The deepest JSON nesting accepted in a reply (a tree level is two: node object + children
/// array). Parsing and dropping a `serde_json::Value` recurse per level, so this bounds the
/// stack a reply needs on the worker and on the caller's thread.
pub(crate) const MAX_REPLY_DEPTH: usize = 2048;

/// Maximum nesting depth of a JSON text, without recursion.
fn json_depth(raw: &str) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in raw.bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The envelope of a reply, read without building the result's tree.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<CoreErrorBody>,
}

#[derive(serde::Deserialize)]
struct CoreErrorBody {
    #[serde(default)]
    code: Option<serde_json::Value>,
    #[serde(default)]
    message: Option<serde_json::Value>,
}

/// Turns the core's reply string into the result (in the requested form) or the core's own
/// error. The envelope is read with serde_json's default nesting limit; the result is skipped
/// over as raw text (an iterative scan, any depth). Only a result parsed into a `Value` has its
/// depth bounded first: parsing and dropping a `Value` recurse per level.
pub(crate) fn parse_reply(raw: &str, form: Form) -> Result<Reply, EngineError> {
    let mut de = serde_json::Deserializer::from_str(raw);
    let envelope: Envelope<'_> = serde::Deserialize::deserialize(&mut de)
        .and_then(|envelope| de.end().map(|()| envelope))
        .map_err(|e| EngineError::Engine(format!("the core's reply is not a JSON object: {e}")))?;
    if let Some(error) = envelope.error {
        let text = |v: Option<serde_json::Value>| match v {
            Some(serde_json::Value::String(s)) => s,
            _ => String::new(),
        };
        let code = text(error.code);
        if code.is_empty() {
            return Err(EngineError::Engine(
                "the core's error has no code".to_owned(),
            ));
        }
        return Err(EngineError::Core {
            code,
            message: text(error.message),
        });
    }
    let result = envelope.result.ok_or_else(|| {
        EngineError::Engine("the core's reply has neither `result` nor `error`".to_owned())
    })?;
    match form {
        Form::Raw => Ok(Reply::Raw(result.to_owned())),
        Form::Value => {
            let depth = json_depth(result.get());
            if depth > MAX_REPLY_DEPTH {
                return Err(EngineError::Engine(format!(
                    "the core's result is nested {depth} levels deep, more than {MAX_REPLY_DEPTH}"
                )));
            }
            let mut de = serde_json::Deserializer::from_str(result.get());
            de.disable_recursion_limit();
            serde::Deserialize::deserialize(&mut de)
                .map(Reply::Value)
                .map_err(|e| EngineError::Engine(format!("the core's result is not JSON: {e}")))
        }
    }
}

/// The worker loop: owns one slot, rebuilds it after any engine-level failure.
pub(crate) fn run(
    bytecode: Bytecode,
    limits: Limits,
    first: Slot,
    jobs: Arc<Mutex<Receiver<Job>>>,
) {
    let mut slot = Some(first);
    loop {
        let job = {
            let Ok(rx) = jobs.lock() else { return };
            match rx.recv() {
                Ok(job) => job,
                Err(_) => return, // every Engine handle is gone
            }
        };
        if slot.is_none() {
            slot = Slot::new(bytecode, limits).ok();
        }
        match job {
            Job::Call {
                method,
                params,
                form,
                reply,
            } => {
                if reply.is_closed() {
                    continue; // the caller gave up while the job was queued
                }
                let Some(current) = slot.as_ref() else {
                    let _ = reply.send(Err(EngineError::Engine(
                        "no runtime available: the core failed to load".to_owned(),
                    )));
                    continue;
                };
                // A panic inside rquickjs must not take the worker (and a pool slot) with it.
                let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    current.dispatch(&method, &params)
                }))
                .unwrap_or_else(|_| Err(EngineError::Engine("the engine panicked".to_owned())));
                let result = match outcome {
                    Ok(raw) => match parse_reply(&raw, form) {
                        // The core caught an unexpected exception itself (its catch-all code
                        // `internal`): the runtime may have hit a limit, so it is replaced; a
                        // caught limit error is still reported as that limit.
                        Err(EngineError::Core { code, message }) if code == INTERNAL => {
                            slot = None;
                            if is_limit_message(&message) {
                                Err(classify_message("", &message, &limits))
                            } else {
                                Err(EngineError::Core { code, message })
                            }
                        }
                        other => other,
                    },
                    Err(e) => {
                        // Discard the runtime: it hit a limit, the deadline or an engine failure.
                        slot = None;
                        Err(e)
                    }
                };
                let _ = reply.send(result);
            }
            Job::Memory { reply } => {
                let result = match slot.as_ref() {
                    Some(s) => {
                        s.run_gc();
                        Ok(s.memory())
                    }
                    None => Err(EngineError::Engine("no runtime available".to_owned())),
                };
                let _ = reply.send(result);
            }
        }
        if slot.is_none() {
            // Replace a discarded runtime right away so the next call does not pay for it.
            slot = Slot::new(bytecode, limits).ok();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_ignores_brackets_in_strings() {
        assert_eq!(json_depth(r#"{"a":"[[[{\"]]","b":[[1]]}"#), 3);
        assert_eq!(json_depth("1"), 0);
    }

    fn value(raw: &str) -> Result<serde_json::Value, EngineError> {
        match parse_reply(raw, Form::Value)? {
            Reply::Value(v) => Ok(v),
            Reply::Raw(_) => panic!("asked for a value"),
        }
    }

    #[test]
    fn replies_are_parsed_per_contract() {
        assert_eq!(value(r#"{"result":{"x":1}}"#).unwrap(), json!({"x": 1}));
        assert_eq!(
            value(r#"{"error":{"code":"unknownNode","message":"m"}}"#).unwrap_err(),
            EngineError::Core {
                code: "unknownNode".into(),
                message: "m".into()
            }
        );
        assert!(matches!(value("[]"), Err(EngineError::Engine(_))));
        assert!(matches!(value("{}"), Err(EngineError::Engine(_))));
        assert!(matches!(
            value(r#"{"result":1} x"#),
            Err(EngineError::Engine(_))
        ));
        assert!(matches!(
            value(r#"{"error":{}}"#),
            Err(EngineError::Engine(_))
        ));
        assert!(matches!(
            value(r#"{"error":"nope"}"#),
            Err(EngineError::Engine(_))
        ));
        let deep = format!("{{\"result\":{}1{}}}", "[".repeat(1000), "]".repeat(1000));
        assert!(value(&deep).is_ok());
        let too_deep = format!("{{\"result\":{}1{}}}", "[".repeat(3000), "]".repeat(3000));
        assert!(matches!(value(&too_deep), Err(EngineError::Engine(_))));
    }

    #[test]
    fn raw_replies_keep_the_core_text() {
        let Ok(Reply::Raw(raw)) = parse_reply(r#"{"result": {"b":1, "a":[2]} }"#, Form::Raw) else {
            panic!("a raw reply");
        };
        assert_eq!(raw.get(), r#"{"b":1, "a":[2]}"#);
        assert!(matches!(
            parse_reply(r#"{"result": {"b":1,} }"#, Form::Raw),
            Err(EngineError::Engine(_))
        ));
        // raw results may nest deeper than a Value may
        let deep = format!("{{\"result\":{}1{}}}", "[".repeat(5000), "]".repeat(5000));
        assert!(matches!(parse_reply(&deep, Form::Raw), Ok(Reply::Raw(_))));
        assert!(matches!(
            parse_reply(&deep, Form::Value),
            Err(EngineError::Engine(_))
        ));
        // a deep error body stays within serde_json's own limit instead of the stack
        let deep_error = format!(
            "{{\"error\":{{\"code\":{}1{}}}}}",
            "[".repeat(5000),
            "]".repeat(5000)
        );
        assert!(matches!(
            parse_reply(&deep_error, Form::Raw),
            Err(EngineError::Engine(_))
        ));
    }

    #[test]
    fn limit_messages_are_classified() {
        let limits = Limits {
            memory_limit: 1,
            max_stack_size: 2,
            deadline: Duration::from_secs(3),
        };
        assert_eq!(
            classify_message("InternalError", "out of memory", &limits),
            EngineError::OutOfMemory(1)
        );
        assert_eq!(
            classify_message("", "null", &limits),
            EngineError::OutOfMemory(1)
        );
        assert_eq!(
            classify_message("RangeError", "Maximum call stack size exceeded", &limits),
            EngineError::StackOverflow(2)
        );
        assert_eq!(
            classify_message("InternalError", "interrupted", &limits),
            EngineError::Deadline(Duration::from_secs(3))
        );
        assert!(matches!(
            classify_message("TypeError", "x", &limits),
            EngineError::Engine(_)
        ));
        assert!(is_limit_message("InternalError: out of memory"));
        assert!(!is_limit_message("no node with id #x"));
    }
}
