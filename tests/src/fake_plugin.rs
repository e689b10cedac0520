//! Shell-script CNI plugins that log every call (CNI_* env and stdin) and answer with a
//! canned result or error: for testing runtimes (libcni, cnitool) without root.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::TempDir;

/// Call `n` leaves `calls/<n>.{stdin,env,plugin}`; `<name>.<COMMAND>.error` makes the
/// command fail with that error JSON; ADD prints `<name>.result`.
const SCRIPT: &str = r#"#!/bin/sh
d="@DIR@"
n=$(ls "$d/calls" | wc -l)
n=$(printf '%04d' "$n")
cat > "$d/calls/$n.stdin"
env | grep '^CNI_' > "$d/calls/$n.env"
echo "@NAME@" > "$d/calls/$n.plugin"
if [ -f "$d/@NAME@.$CNI_COMMAND.error" ]; then
    cat "$d/@NAME@.$CNI_COMMAND.error"
    exit 1
fi
case "$CNI_COMMAND" in
ADD) cat "$d/@NAME@.result" ;;
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}' ;;
esac
"#;

/// A temp dir with `bin/` (the plugins, for CNI_PATH), `calls/` (their log) and an
/// empty `cache/` for the runtime under test; removed on drop.
#[derive(Debug)]
pub struct FakePlugins {
    dir: TempDir,
}

/// One logged plugin call.
#[derive(Debug)]
pub struct Call {
    pub plugin: String,
    pub command: String,
    /// The CNI_* variables it saw.
    pub env: BTreeMap<String, String>,
    /// Its stdin as JSON (Null if it was not JSON).
    pub stdin: Value,
}

impl FakePlugins {
    pub fn new(plugins: &[&str]) -> FakePlugins {
        let dir = TempDir::new("fake-plugins");
        for sub in ["bin", "calls", "cache"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        let fake = FakePlugins { dir };
        for p in plugins {
            fake.plugin(p);
        }
        fake
    }

    /// The temp dir's root.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `self.path().join(rel)`.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.dir.join(rel)
    }

    /// `bin/`: where the plugins are.
    pub fn bin_dir(&self) -> PathBuf {
        self.dir.join("bin")
    }

    /// Adds plugin `name` to `bin/`.
    pub fn plugin(&self, name: &str) {
        let script = SCRIPT
            .replace("@DIR@", &self.path().display().to_string())
            .replace("@NAME@", name);
        let path = self.bin_dir().join(name);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// What `plugin` prints for ADD.
    pub fn result(&self, plugin: &str, result: &Value) {
        let file = self.dir.join(format!("{plugin}.result"));
        std::fs::write(file, result.to_string()).unwrap();
    }

    /// Makes `plugin` fail `command` with this CNI error.
    pub fn fail(&self, plugin: &str, command: &str, code: u32, msg: &str) {
        let file = self.dir.join(format!("{plugin}.{command}.error"));
        std::fs::write(file, json!({"code": code, "msg": msg}).to_string()).unwrap();
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        let calls = self.dir.join("calls");
        let mut names: Vec<String> = std::fs::read_dir(&calls)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter_map(|n| n.strip_suffix(".plugin").map(String::from))
            .collect();
        names.sort();
        names
            .iter()
            .map(|n| {
                let read =
                    |ext: &str| std::fs::read_to_string(calls.join(format!("{n}.{ext}"))).unwrap();
                let env: BTreeMap<String, String> = read("env")
                    .lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                Call {
                    plugin: read("plugin").trim().to_string(),
                    command: env["CNI_COMMAND"].clone(),
                    stdin: serde_json::from_str(&read("stdin")).unwrap_or(Value::Null),
                    env,
                }
            })
            .collect()
    }

    /// "plugin COMMAND" per call.
    pub fn trace(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|c| format!("{} {}", c.plugin, c.command))
            .collect()
    }

    /// Forgets the calls so far.
    pub fn clear_calls(&self) {
        std::fs::remove_dir_all(self.dir.join("calls")).unwrap();
        std::fs::create_dir(self.dir.join("calls")).unwrap();
    }
}
