//! `dcgmi diag -j` read as DCGM writes it (NVIDIA/DCGM `dcgmi/Diag.cpp`,
//! keys in `nvvs/include/NvvsJsonStrings.h`).
//!
//! - DCGM 4.x: `{"DCGM Diagnostic": {"test_categories": [{"category",
//!   "tests": [{"name", "results": [{"entity_group", "entity_group_id",
//!   "entity_id", "status", "warnings": [{"warning", "error_id",
//!   "error_category", "error_severity"}], "info"}], "test_summary"}]}]},
//!   "entity_groups": [...], "metadata": {"version", ...}}`. A test not run
//!   on an entity has no result for it; a failure that belongs to no entity
//!   is only in the test's `test_summary`. A run that could not start
//!   prints `{"DCGM Diagnostic": {"version", "runtime_error"}}`.
//! - DCGM 3.x (3.3.9): `{"DCGM GPU Diagnostic": {"test_categories":
//!   [...]}, "version", "Driver Version Detected", "GPU Device IDs"}`. A
//!   deployment check has one result for the whole group (`gpu_id`, a
//!   number, only when it reports an error, whose text is under
//!   `"warnings"`); other tests one per GPU (`gpu_id` as text). Older
//!   outputs name `gpu_ids` (`"0,1"`).

use serde_json::Value;

/// The top-level key of DCGM 4.x (`NVVS_NAME`).
pub(super) const V4_KEY: &str = "DCGM Diagnostic";
/// The top-level key of DCGM 3.x.
pub(super) const V3_KEY: &str = "DCGM GPU Diagnostic";

/// What a result is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entity {
    Gpu(u32),
    /// Another entity group (CPU, Switch, ConnectX...) and its id.
    Other(String, u64),
}

/// One DCGM error attached to a result (`dcgmDiagError_v1`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Warning {
    pub text: String,
    pub error_id: Option<u64>,
    /// `dcgmErrorCategory_t` (`DCGM_FR_EC_*`).
    pub category: Option<u64>,
    /// `dcgmErrorSeverity_t` (`DCGM_ERROR_*`).
    pub severity: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Pass,
    Fail,
    Warn,
    Skip,
    NotRun,
    /// A word DCGM does not print: never read as a pass.
    Unknown,
}

impl Status {
    fn parse(s: &str) -> Status {
        match s.trim().to_ascii_lowercase().as_str() {
            "pass" => Status::Pass,
            "fail" => Status::Fail,
            "warn" => Status::Warn,
            "skip" => Status::Skip,
            "not run" => Status::NotRun,
            _ => Status::Unknown,
        }
    }
}

/// One test's result for its entities (DCGM 3.x deployment results may
/// name several GPUs; a 4.x test summary names none).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TestResult {
    pub category: String,
    pub test: String,
    pub entities: Vec<Entity>,
    pub status: Status,
    pub warnings: Vec<Warning>,
    /// The test's `test_summary` (4.x), not a per-entity result.
    pub summary: bool,
}

/// A diag document read.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Report {
    /// "DCGM 4.2.3", "DCGM 3.3.5", or "DCGM 4.x" when no version is given.
    pub printed_by: String,
    pub results: Vec<TestResult>,
    pub runtime_error: Option<String>,
}

/// The report in a diag document, or `None` for a document of neither
/// version's shape.
pub(super) fn read(doc: &Value) -> Option<Report> {
    let (diag, major) = match (doc.get(V4_KEY), doc.get(V3_KEY)) {
        (Some(d), _) => (d, 4),
        (None, Some(d)) => (d, 3),
        (None, None) => return None,
    };
    let version = doc
        .get("metadata")
        .and_then(|m| m.get("version"))
        .or_else(|| diag.get("version"))
        .or_else(|| doc.get("version"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let printed_by = match version {
        Some(v) => format!("DCGM {v}"),
        None => format!("DCGM {major}.x"),
    };
    let mut results = Vec::new();
    for cat in array(diag, "test_categories") {
        let category = text(cat, "category");
        for t in array(cat, "tests") {
            let test = text(t, "name");
            for r in array(t, "results") {
                results.push(result(&category, &test, r, false));
            }
            if let Some(s) = t.get("test_summary") {
                results.push(result(&category, &test, s, true));
            }
        }
    }
    let runtime_error = diag.get("runtime_error").map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    Some(Report {
        printed_by,
        results,
        runtime_error,
    })
}

fn array<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or("unnamed")
        .to_string()
}

fn result(category: &str, test: &str, r: &Value, summary: bool) -> TestResult {
    TestResult {
        category: category.to_string(),
        test: test.to_string(),
        entities: entities(r),
        status: Status::parse(r.get("status").and_then(Value::as_str).unwrap_or("")),
        warnings: array(r, "warnings").filter_map(warning).collect(),
        summary,
    }
}

fn entities(r: &Value) -> Vec<Entity> {
    if let Some(id) = r.get("entity_id").and_then(Value::as_u64) {
        let group = r.get("entity_group").and_then(Value::as_str).unwrap_or("");
        let group_id = r.get("entity_group_id").and_then(Value::as_u64);
        // DCGM_FE_GPU is 1 and is written "GPU".
        let gpu = group == "GPU" || (group.is_empty() && group_id.is_none_or(|g| g == 1));
        return match (gpu, u32::try_from(id)) {
            (true, Ok(g)) => vec![Entity::Gpu(g)],
            _ => vec![Entity::Other(group.to_string(), id)],
        };
    }
    let ids = r.get("gpu_ids").or_else(|| r.get("gpu_id"));
    match ids {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Entity::Gpu)
            .into_iter()
            .collect(),
        Some(Value::String(s)) => s
            .split(',')
            .filter_map(|g| g.trim().parse().ok())
            .map(Entity::Gpu)
            .collect(),
        _ => Vec::new(),
    }
}

fn warning(w: &Value) -> Option<Warning> {
    match w {
        Value::String(s) => Some(Warning {
            text: s.clone(),
            ..Warning::default()
        }),
        Value::Object(o) => Some(Warning {
            // DCGM 3.x writes a deployment check's text under "warnings".
            text: o
                .get("warning")
                .or_else(|| o.get("warnings"))
                .and_then(Value::as_str)?
                .to_string(),
            error_id: o.get("error_id").and_then(Value::as_u64),
            category: o.get("error_category").and_then(Value::as_u64),
            severity: o.get("error_severity").and_then(Value::as_u64),
        }),
        _ => None,
    }
}
