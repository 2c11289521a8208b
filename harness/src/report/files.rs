//! The four report files of a run in one directory: the top of the report
//! layer, above the data (`mod.rs`, `run.rs`) and every renderer.

use super::run::RunReport;
use super::Report;
use crate::suite::SpecMap;
use std::path::Path;

impl Report {
    /// Writes report.json, junit.xml, report.md, report.html into `dir` (created if missing).
    pub fn write_all(&self, dir: &Path, spec: &SpecMap) -> std::io::Result<()> {
        write_four(
            dir,
            [
                self.to_json(),
                self.to_junit(),
                self.to_markdown(spec),
                Report::to_html(std::slice::from_ref(self), spec),
            ],
        )
    }
}

impl RunReport {
    /// Writes report.json, junit.xml, report.md, report.html into `dir` (created if missing).
    pub fn write_all(&self, dir: &Path, spec: &SpecMap) -> std::io::Result<()> {
        write_four(
            dir,
            [
                self.to_json(),
                self.to_junit(),
                self.to_markdown(spec),
                self.to_html(spec),
            ],
        )
    }
}

/// The files' names, in the order [`write_four`] takes their texts.
const NAMES: [&str; 4] = ["report.json", "junit.xml", "report.md", "report.html"];

fn write_four(dir: &Path, texts: [String; 4]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, text) in NAMES.iter().zip(texts) {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}
