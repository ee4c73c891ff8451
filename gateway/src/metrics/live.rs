//! Series read at scrape time rather than counted on the request path: the process's own
//! (`process_*`, from `/proc/self` on Linux), each upstream instance's health, live sessions
//! and stdio children. The sources arrive once the gateway is built ([`Live::attach`]); until
//! then only the process series are written.

use std::sync::{
    Arc, OnceLock,
    atomic::{AtomicBool, Ordering},
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::{MetricType, counter::ConstCounter, family::Family, gauge::ConstGauge, gauge::Gauge},
};

use super::RouteName;
use crate::{balance::Instances, sessions::Sessions, stdio::LiveChildren};

/// What the live series are read from, handed over when the gateway is built.
#[derive(Debug, Default)]
pub(crate) struct Sources {
    /// Per route, its instances' health.
    pub(crate) routes: Vec<RouteSource>,
    /// The session table (its live count is written only for the in-process table: with
    /// redis the table is shared, and this gateway's view of it is not its own count).
    pub(crate) sessions: Option<Arc<Sessions>>,
    /// Per `command` route, its live children.
    pub(crate) children: Vec<(String, LiveChildren)>,
}

/// One route's instances, each by the URL as configured, and where their health is read.
#[derive(Debug)]
pub(crate) struct RouteSource {
    pub(crate) route: RouteName,
    pub(crate) instances: Vec<String>,
    pub(crate) health: InstanceHealth,
}

/// Where an instance's health is known.
#[derive(Debug)]
pub(crate) enum InstanceHealth {
    /// Several `urls`: the balancer's (the prober keeps it current).
    Balanced(Arc<Instances>),
    /// One upstream: whether the last connect to it succeeded (set on the request path and by
    /// `/readyz`'s probe).
    Single(Arc<AtomicBool>),
}

impl InstanceHealth {
    fn up(&self, i: usize) -> bool {
        match self {
            Self::Balanced(instances) => instances.is_healthy(i),
            Self::Single(reached) => reached.load(Ordering::Relaxed),
        }
    }
}

/// The collector registered with the registry; shares its sources with [`super::Metrics`].
#[derive(Debug, Default, Clone)]
pub(crate) struct Live {
    sources: Arc<OnceLock<Sources>>,
}

impl Live {
    /// Hands the sources over (once; a second call is ignored).
    pub(crate) fn attach(&self, sources: Sources) {
        let _ = self.sources.set(sources);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstanceLabels {
    route: RouteName,
    /// The upstream URL as configured. Not `instance`: Prometheus sets that label on every
    /// series to the scraped gateway, and a target's own `instance` would be renamed
    /// `exported_instance` (or overwrite it with `honor_labels`).
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteOnly {
    route: String,
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(p) = ProcessStats::read() {
            let cpu = ConstCounter::new(p.cpu_seconds);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent, in seconds",
                None,
                cpu.metric_type(),
            )?)?;
            for (name, help, value) in [
                (
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes",
                    p.rss_bytes,
                ),
                (
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes",
                    p.vsize_bytes,
                ),
                (
                    "process_start_time_seconds",
                    "Start time of the process since the Unix epoch, in seconds",
                    p.start_time_seconds,
                ),
                ("process_open_fds", "Open file descriptors", p.open_fds),
                (
                    "process_max_fds",
                    "The most file descriptors the process may open",
                    p.max_fds,
                ),
            ] {
                let gauge = ConstGauge::new(value);
                gauge.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
            }
        }
        let Some(sources) = self.sources.get() else {
            return Ok(());
        };
        let up = Family::<InstanceLabels, Gauge>::default();
        for route in &sources.routes {
            for (i, instance) in route.instances.iter().enumerate() {
                up.get_or_create(&InstanceLabels {
                    route: route.route.clone(),
                    upstream: instance.clone(),
                })
                .set(i64::from(route.health.up(i)));
            }
        }
        up.encode(encoder.encode_descriptor(
            "pforte_upstream_up",
            "1 while an upstream instance takes requests (several urls: the prober's view; one \
             url: its last connect)",
            None,
            MetricType::Gauge,
        )?)?;
        if let Some(live) = sources.sessions.as_ref().and_then(|s| s.live_local()) {
            let gauge = ConstGauge::new(live as i64);
            gauge.encode(encoder.encode_descriptor(
                "pforte_sessions_live",
                "MCP sessions bound in this gateway's table (not written with redis_url)",
                None,
                MetricType::Gauge,
            )?)?;
        }
        let children = Family::<RouteOnly, Gauge>::default();
        for (route, count) in &sources.children {
            children
                .get_or_create(&RouteOnly {
                    route: route.clone(),
                })
                .set(count.count() as i64);
        }
        children.encode(encoder.encode_descriptor(
            "pforte_stdio_children",
            "Running programs of each command route (sessions and pool)",
            None,
            MetricType::Gauge,
        )?)?;
        Ok(())
    }
}

/// The process's own numbers, read from `/proc/self`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ProcessStats {
    pub(crate) cpu_seconds: f64,
    pub(crate) rss_bytes: f64,
    pub(crate) vsize_bytes: f64,
    pub(crate) start_time_seconds: f64,
    pub(crate) open_fds: f64,
    pub(crate) max_fds: f64,
}

/// Clock ticks per second of `/proc/PID/stat` (`USER_HZ`: 100 on every Linux ABI).
const TICKS_PER_SECOND: f64 = 100.0;

impl ProcessStats {
    /// The numbers now; `None` where `/proc` is not there (not Linux).
    pub(crate) fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
        parse(&stat, &status, &boot, &limits, open_fds)
    }
}

/// [`ProcessStats`] from the texts of `/proc/self/stat`, `/proc/self/status`, `/proc/stat` and
/// `/proc/self/limits`, and the count of `/proc/self/fd` — pure.
pub(crate) fn parse(
    stat: &str,
    status: &str,
    boot: &str,
    limits: &str,
    open_fds: usize,
) -> Option<ProcessStats> {
    // The command name (field 2) is in parentheses and may hold spaces: count after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field N is fields[N - 3].
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    let cpu_ticks = field(14)? + field(15)?;
    let start_ticks = field(22)?;
    let vsize = field(23)?;
    let rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let btime: f64 = boot
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let max_fds = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()
        .and_then(|soft| soft.parse().ok())
        .unwrap_or(f64::INFINITY);
    Some(ProcessStats {
        cpu_seconds: cpu_ticks / TICKS_PER_SECOND,
        rss_bytes: rss_kib * 1024.0,
        vsize_bytes: vsize,
        start_time_seconds: btime + start_ticks / TICKS_PER_SECOND,
        open_fds: open_fds as f64,
        max_fds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_texts_become_process_stats() {
        let stat = "4242 (pforte (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 1000 123456789 2048 18446744073709551615";
        let status = "Name:\tpforte\nVmPeak:\t  200000 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 10\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        let p = parse(stat, status, boot, limits, 17);
        assert_eq!(
            p,
            Some(ProcessStats {
                cpu_seconds: 3.0,
                rss_bytes: 40960.0 * 1024.0,
                vsize_bytes: 123_456_789.0,
                start_time_seconds: 1_700_000_010.0,
                open_fds: 17.0,
                max_fds: 1024.0,
            })
        );
        assert_eq!(parse("garbage", status, boot, limits, 1), None);
    }

    #[test]
    fn this_process_can_be_read() {
        let p = ProcessStats::read();
        assert!(p.is_some_and(|p| p.rss_bytes > 0.0 && p.open_fds > 0.0 && p.max_fds > 0.0));
    }
}
