//! `gpu-health watch` on the real NVML code path (nvml-wrapper loading
//! the stand-in): nvidia-smi's CSV columns with the scenario's values,
//! health per GPU, JSON lines, and Ctrl-C ending it cleanly.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpu_health_testkit::{output, scenario, SimNode};

/// (power draw in W, temperature) of each GPU, as the scenario file says.
fn scenario_values(name: &str) -> Vec<(f64, u64)> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(scenario(name)).unwrap()).unwrap();
    v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["power"]["draw_mw"].as_f64().unwrap() / 1000.0,
                g["temperature_c"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn watch(node: &SimNode, args: &[&str]) -> (i32, String, String) {
    let cfg = node.write_config("");
    output(
        Command::new(gpu_health_testkit::program(env!(
            "CARGO_BIN_EXE_gpu-health"
        )))
        .arg("watch")
        .args(args)
        .env_clear()
        .env("GPU_HEALTH_CONFIG", &cfg),
    )
}

#[test]
fn csv_has_nvidia_smis_columns_and_the_scenarios_values() {
    let node = SimNode::new("h100x8-pcie-degraded");
    let (code, out, err) = watch(&node, &["--csv", "-l", "0.2", "--count", "2"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    // Issue 24: nvidia-smi's timestamp, utilization.gpu, memory.used and
    // memory.total columns, same names and units.
    assert_eq!(
        lines[0],
        "timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], \
         power.draw [W], power.limit [W], temperature.gpu, fan.speed [%], health"
    );
    assert_eq!(
        lines.len(),
        1 + 2 * 8,
        "the header once, 8 GPUs per refresh\n{out}"
    );
    for (i, (watts, temp)) in scenario_values("h100x8-pcie-degraded").iter().enumerate() {
        let health = if i == 2 { "warn: pcie-link" } else { "ok" };
        let f: Vec<&str> = lines[1 + i].split(", ").collect();
        assert_eq!(f.len(), 11, "{}", lines[1 + i]);
        // nvidia-smi's `2024/05/01 12:00:00.123`.
        assert!(
            f[0].len() == 23 && f[0].as_bytes()[4] == b'/' && f[0].as_bytes()[19] == b'.',
            "{}",
            f[0]
        );
        assert!(f[3].ends_with(" %") && f[4].ends_with(" MiB") && f[5].ends_with(" MiB"));
        assert_eq!(
            f[1..3]
                .iter()
                .chain(&f[6..])
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
            format!("{i}, NVIDIA H100 80GB HBM3, {watts:.2} W, 700.00 W, {temp}, [N/A], {health}")
        );
    }
    let degraded: Vec<&&str> = lines
        .iter()
        .filter(|l| l.ends_with("warn: pcie-link"))
        .collect();
    assert_eq!(degraded.len(), 2, "one GPU warns in each refresh\n{out}");
    assert!(!out.contains('\x1b'), "no colour without a terminal");
}

/// Issue 24: NVML's failure was Rust debug text in the CSV
/// (`Timeout { deadline_ms: 2000 }`) and the exit was 0.
#[test]
fn nvml_failures_are_sentences_and_exit_1() {
    let node = SimNode::new("nvml-hang");
    let (code, out, err) = watch(&node, &["--csv", "--count", "1"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("# ")
                && l.ends_with(": NVML: NVML did not answer within 1500 ms")),
        "{out}"
    );
    assert!(!out.contains("{ ") && !out.contains("Timeout"), "{out}");
    let (code, out, _) = watch(&node, &["--json", "--count", "1"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(v["nvml_error"], "NVML did not answer within 1500 ms");
}

/// Issue 24: the lost GPU's row says so, the others stay ok, and the
/// node's finding (the GPU count) is a line of its own.
#[test]
fn a_lost_gpu_marks_its_own_row_only() {
    let node = SimNode::new("h100x8-fallen-off");
    let (code, out, err) = watch(&node, &["--count", "1"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with(char::is_numeric) && l.len() > 4 && l.as_bytes()[1] == b' ')
        .collect();
    assert_eq!(rows.len(), 8, "{out}");
    assert_eq!(
        rows.iter().filter(|l| l.ends_with("  ok")).count(),
        7,
        "{out}"
    );
    assert!(rows[5].ends_with("drain: gpu-lost"), "{out}");
    assert!(out.contains("\nnode: drain: gpu-count: "), "{out}");
    assert!(!out.contains("fatal"), "{out}");
}

/// Issue 24: a configuration error is in watch's own output, not only on
/// stderr.
#[test]
fn a_configuration_error_is_in_the_output() {
    let node = SimNode::new("h100x8-healthy");
    let cfg = node.write_config("[dcgm]\nlevle = 2\n");
    let (code, out, _) = output(
        Command::new(gpu_health_testkit::program(env!(
            "CARGO_BIN_EXE_gpu-health"
        )))
        .args(["watch", "--csv", "--count", "1"])
        .env_clear()
        .env("GPU_HEALTH_CONFIG", &cfg),
    );
    assert_eq!(code, 2, "{out}");
    let second = out.lines().nth(1).unwrap_or("");
    assert!(
        second.starts_with("# configuration error: ") && second.contains("in [dcgm]: levle = 2"),
        "{out}"
    );
}

#[test]
fn json_lines_and_a_fatal_gpu() {
    let node = SimNode::new("h100x8-dbe");
    let (code, out, err) = watch(&node, &["--json", "--count", "1"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 8);
    // Issue 24: one vocabulary, the action itself (was "fatal").
    assert_eq!(rows[3]["health"], "drain");
    assert_eq!(rows[3]["findings"], serde_json::json!(["ecc-uncorrected"]));
    assert_eq!(rows[0]["health"], "ok");
    let (watts, temp) = scenario_values("h100x8-dbe")[0];
    assert_eq!(rows[0]["power_draw_w"], watts);
    assert_eq!(rows[0]["temperature_c"], temp);
    assert_eq!(rows[0]["fan_speed_pct"], serde_json::Value::Null);
    // Watching never drains: no Slurm command was run.
    assert!(node.scontrol_calls().is_empty());
}

#[test]
fn ctrl_c_ends_it_cleanly() {
    let node = SimNode::new("h100x8-healthy");
    let cfg = node.write_config("");
    let child = Command::new(env!("CARGO_BIN_EXE_gpu-health"))
        .args(["watch", "--csv", "-l", "60"])
        .env_clear()
        .env("GPU_HEALTH_CONFIG", &cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let sent = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "it stops at once, not after the 60 s interval"
    );
    assert!(out.status.success(), "{:?}", out.status);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().count(),
        9,
        "the header and one whole refresh\n{text}"
    );
    assert!(text.ends_with('\n'));
}
