//! Every checked-in fuzz input, on stable: the seeds each target starts from and every
//! input that once crashed a target (`fuzz/regressions/<target>/`), run through the same
//! bodies cargo-fuzz runs (`cni_tests::fuzz`).

use std::path::Path;

use cni_tests::fuzz::TARGETS;

const FUZZ: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz");

fn inputs(kind: &str, target: &str) -> Vec<std::path::PathBuf> {
    let dir = Path::new(FUZZ).join(kind).join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return vec![];
    };
    let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    files.sort();
    files
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
