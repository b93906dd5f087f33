//! Shared by the generated-corpus tests: the committed files must equal what the generator
//! writes now; `VG_BLESS=1` rewrites them instead.

/// Compares (or, with `VG_BLESS=1`, writes) each generated `(file name, text)` under `tests/gen`.
pub fn check_or_bless(files: Vec<(String, String)>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gen");
    let bless = std::env::var_os("VG_BLESS").is_some();
    for (name, text) in files {
        let path = dir.join(&name);
        if bless {
            std::fs::write(&path, &text).unwrap();
        } else {
            let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                on_disk == text,
                "{name} is stale: run with VG_BLESS=1 and commit it"
            );
        }
    }
}
