//! Core bundles: where the Werkbaum core's ES modules come from (built in, a directory, or in
//! memory) and their one-time compilation to QuickJS bytecode.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use rquickjs::Ctx;
use rquickjs::loader::{BuiltinResolver, ImportAttributes, Loader};
use rquickjs::module::Declared;
use rquickjs::{CatchResultExt, Context, Module, Runtime, WriteOptions};

use super::EngineError;

/// The module every bundle must provide; it exports `dispatch(method, paramsJson)`.
pub(crate) const ENTRY: &str = "index.js";

/// A bundle that is larger than this is refused (the built-in core is a few hundred KiB).
const MAX_BUNDLE_BYTES: usize = 16 * 1024 * 1024;

mod builtin {
    include!(concat!(env!("OUT_DIR"), "/builtin_core.rs"));
}

/// Where the engine takes the core's modules from.
#[derive(Debug, Clone, Default)]
pub enum CoreSource {
    /// The core embedded in this binary at build time (`mcp-service/core/*.js`).
    #[default]
    BuiltIn,
    /// Every `*.js` file below a directory (module names are the paths relative to it, with `/`).
    Dir(PathBuf),
    /// Modules given in memory as `(name, source)`; used by tests and embedders.
    Modules(Vec<(String, String)>),
}

impl CoreSource {
    /// Reads the module sources, sorted by name. Checks that the entry module is present.
    pub fn read(&self) -> Result<Vec<(String, String)>, EngineError> {
        let mut modules = match self {
            CoreSource::BuiltIn => builtin::BUILTIN_CORE
                .iter()
                .map(|(n, s)| ((*n).to_owned(), (*s).to_owned()))
                .collect(),
            CoreSource::Dir(dir) => read_dir(dir)?,
            CoreSource::Modules(m) => m.clone(),
        };
        modules.sort_by(|a, b| a.0.cmp(&b.0));
        if !modules.iter().any(|(n, _)| n == ENTRY) {
            return Err(EngineError::Bundle(format!(
                "the core bundle ({}) has no entry module {ENTRY}",
                self.describe()
            )));
        }
        let total: usize = modules.iter().map(|(_, s)| s.len()).sum();
        if total > MAX_BUNDLE_BYTES {
            return Err(EngineError::Bundle(format!(
                "the core bundle is {total} bytes, more than {MAX_BUNDLE_BYTES}"
            )));
        }
        Ok(modules)
    }

    /// A short human description, for error messages and logs.
    pub fn describe(&self) -> String {
        match self {
            CoreSource::BuiltIn => "built-in core".to_owned(),
            CoreSource::Dir(d) => format!("core directory {}", d.display()),
            CoreSource::Modules(m) => format!("{} in-memory modules", m.len()),
        }
    }
}

fn read_dir(dir: &Path) -> Result<Vec<(String, String)>, EngineError> {
    let mut out = Vec::new();
    walk(dir, "", &mut out)?;
    if out.is_empty() {
        return Err(EngineError::Bundle(format!(
            "no .js modules in core directory {}",
            dir.display()
        )));
    }
    Ok(out)
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, String)>) -> Result<(), EngineError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| EngineError::Bundle(format!("cannot read {}: {e}", dir.display())))?;
    for entry in entries {
        let entry = entry
            .map_err(|e| EngineError::Bundle(format!("cannot read {}: {e}", dir.display())))?;
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with('.') || name == "node_modules" || name == "tests" {
            continue;
        }
        let rel = format!("{prefix}{name}");
        if path.is_dir() {
            walk(&path, &format!("{rel}/"), out)?;
        } else if name.ends_with(".js") {
            let source = std::fs::read_to_string(&path)
                .map_err(|e| EngineError::Bundle(format!("cannot read {}: {e}", path.display())))?;
            out.push((rel, source));
        }
    }
    Ok(())
}

/// Compiled modules as `(name, bytecode)`, the shape rquickjs' bundle loader wants.
pub(crate) type Bytecode = &'static [(&'static str, &'static [u8])];

/// Compiles the modules to bytecode once per distinct bundle content.
///
/// rquickjs' bytecode loader needs `'static` data, so compiled bundles are kept for the life of
/// the process; they are interned by content, so creating many engines over the same bundle
/// (as tests do) compiles and keeps it only once.
pub(crate) fn compile(modules: Vec<(String, String)>) -> Result<Bytecode, EngineError> {
    type Sources = Vec<(String, String)>;
    static CACHE: OnceLock<Mutex<HashMap<Sources, Bytecode>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = cache
        .lock()
        .map_err(|_| EngineError::Engine("bytecode cache poisoned".to_owned()))?;
    if let Some(hit) = cache.get(&modules) {
        return Ok(hit);
    }
    let compiled = compile_uncached(&modules)?;
    let leaked: Vec<(&'static str, &'static [u8])> = compiled
        .into_iter()
        .map(|(name, code)| {
            let name: &'static str = Box::leak(name.into_boxed_str());
            let code: &'static [u8] = Box::leak(code.into_boxed_slice());
            (name, code)
        })
        .collect();
    let table: Bytecode = Box::leak(leaked.into_boxed_slice());
    cache.insert(modules, table);
    Ok(table)
}

/// Loads modules from their sources, any number of times (rquickjs' `BuiltinLoader` hands each
/// module out only once, but every compiled module links its imports afresh).
struct SourceLoader(HashMap<String, String>);

impl Loader for SourceLoader {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<Module<'js, Declared>> {
        match self.0.get(name) {
            Some(source) => Module::declare(ctx.clone(), name, source.as_str()),
            None => Err(rquickjs::Error::new_loading(name)),
        }
    }
}

fn compile_uncached(modules: &[(String, String)]) -> Result<Vec<(String, Vec<u8>)>, EngineError> {
    let bundle_err = |e: rquickjs::Error| EngineError::Bundle(format!("compiler: {e}"));
    let rt = Runtime::new().map_err(bundle_err)?;
    // Declaring a module links its imports, so the compiler resolves them from the sources.
    let mut resolver = BuiltinResolver::default();
    for (name, _) in modules {
        resolver.add_module(name.as_str());
    }
    rt.set_loader(resolver, SourceLoader(modules.iter().cloned().collect()));
    modules
        .iter()
        .map(|(name, source)| {
            // A fresh context per module keeps each declaration independent.
            let ctx = Context::full(&rt).map_err(bundle_err)?;
            ctx.with(|ctx| {
                let module = Module::declare(ctx.clone(), name.as_str(), source.as_str())
                    .catch(&ctx)
                    .map_err(|e| EngineError::Bundle(format!("{name}: {e}")))?;
                let code = module
                    .write(WriteOptions {
                        strip_source: true,
                        ..WriteOptions::default()
                    })
                    .catch(&ctx)
                    .map_err(|e| {
                        EngineError::Bundle(format!("{name}: cannot write bytecode: {e}"))
                    })?;
                Ok((name.clone(), code))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn modules(src: &str) -> Vec<(String, String)> {
        vec![(ENTRY.to_owned(), src.to_owned())]
    }

    #[test]
    fn compiles_once_per_content() {
        let a = compile(modules("export const x = 1;")).unwrap();
        let b = compile(modules("export const x = 1;")).unwrap();
        assert!(std::ptr::eq(a, b));
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].0, ENTRY);
    }

    #[test]
    fn syntax_error_is_a_bundle_error() {
        let err = compile(modules("export const = ;")).unwrap_err();
        assert!(
            matches!(err, EngineError::Bundle(ref m) if m.contains("index.js")),
            "{err}"
        );
    }

    #[test]
    fn missing_entry_is_refused() {
        let src = CoreSource::Modules(vec![("other.js".into(), "export {}".into())]);
        assert!(matches!(src.read(), Err(EngineError::Bundle(_))));
    }

    #[test]
    fn missing_dir_is_a_bundle_error() {
        let src = CoreSource::Dir(PathBuf::from("/nonexistent/pforte-core"));
        assert!(matches!(src.read(), Err(EngineError::Bundle(_))));
    }
}
