//! Every checked-in fuzz input, on stable: the seeds each target starts from and every
//! input that once crashed a target (`fuzz/regressions/<target>/`), run through the same
//! bodies cargo-fuzz runs (`cni_tests::fuzz`).

use std::path::Path;

use cni_tests::fuzz::TARGETS;

const FUZZ: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz");

/// The inputs under `fuzz/<kind>/<target>/`. `fuzz/<kind>/` itself must exist (it is
/// tracked): a checkout without it would replay nothing and pass. A target without a
/// folder has no inputs of that kind yet.
fn inputs(kind: &str, target: &str) -> Vec<std::path::PathBuf> {
    let top = Path::new(FUZZ).join(kind);
    assert!(top.is_dir(), "{} is missing", top.display());
    let Ok(entries) = std::fs::read_dir(top.join(target)) else {
        return vec![];
    };
    let mut files: Vec<_> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    files
}

#[test]
fn every_regressions_folder_names_a_target() {
    let top = Path::new(FUZZ).join("regressions");
    for entry in std::fs::read_dir(&top).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                TARGETS.iter().any(|(t, _)| *t == name),
                "{} names no fuzz target: its inputs would never run",
                path.display()
            );
        }
    }
}

#[test]
fn every_target_has_seeds_and_a_cargo_fuzz_binary() {
    for (name, _) in TARGETS {
        assert!(
            !inputs("seeds", name).is_empty(),
            "fuzz/seeds/{name}/ is empty"
        );
        let bin = Path::new(FUZZ)
            .join("fuzz_targets")
            .join(format!("{name}.rs"));
        assert!(bin.is_file(), "{} is missing", bin.display());
    }
}

#[test]
fn seeds_and_regressions_pass_every_target() {
    for (name, body) in TARGETS {
        for kind in ["seeds", "regressions"] {
            for file in inputs(kind, name) {
                let data = std::fs::read(&file).unwrap();
                if std::panic::catch_unwind(|| body(&data)).is_err() {
                    panic!("{name} fails on {}", file.display());
                }
            }
        }
    }
}
