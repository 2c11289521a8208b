//! Every quote of `spec-map.toml` (and every contrary text) is verbatim in
//! the text its `source` names: the seeds (`000 LMDB binding`, `001
//! Collection`, files `000_*.txt`, `001_*.txt`) or a v1 chapter
//! (`ragged.md @ f6ef43bf`, file `ragged@f6ef43bf.md`). Whitespace and
//! the seeds' `¶` marks are ignored; ` … ` joins parts of one quote.

use harness::suite::SpecMap;
use std::path::{Path, PathBuf};

/// The problems: a source whose text is not here, or a quote not in it.
pub fn check(map: &SpecMap, seeds: &Path, v1: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for (id, clause) in map {
        let mut quoted = Vec::new();
        if let Some(q) = &clause.quote {
            quoted.push((clause.source.as_str(), q.as_str(), "quote"));
        }
        if let Some(c) = &clause.contrary {
            quoted.push((c.source.as_str(), c.quote.as_str(), "contrary"));
        }
        for (source, quote, what) in quoted {
            let texts = match texts(source, seeds, v1) {
                Ok(texts) => texts,
                Err(e) => {
                    problems.push(format!("{id}: {what}: {e}"));
                    continue;
                }
            };
            for part in quote.split(" … ") {
                let part = normalize(part);
                if !texts.iter().any(|t| t.contains(&part)) {
                    problems.push(format!(
                        "{id}: {what}: not verbatim in `{source}`: {part:?}"
                    ));
                }
            }
        }
    }
    problems
}

/// The texts of a `source` (several separated by `; `), normalized.
fn texts(source: &str, seeds: &Path, v1: &Path) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for one in source.split("; ") {
        let name = one.split(" > ").next().unwrap_or("").trim();
        let path: PathBuf = match name {
            "000 LMDB binding" => seed(seeds, "000_")?,
            "001 Collection" => seed(seeds, "001_")?,
            _ => match name.split_once(" @ ") {
                Some((chapter, commit)) => {
                    let stem = chapter.strip_suffix(".md").unwrap_or(chapter);
                    v1.join(format!("{stem}@{commit}.md"))
                }
                None => return Err(format!("`{name}` is neither a seed nor a chapter @ commit")),
            },
        };
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(normalize(&text));
    }
    Ok(out)
}

fn seed(dir: &Path, prefix: &str) -> Result<PathBuf, String> {
    std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".txt"))
        })
        .ok_or_else(|| format!("no {prefix}*.txt in {}", dir.display()))
}

/// Whitespace runs become one space; the seeds' `¶` marks go.
fn normalize(text: &str) -> String {
    text.replace('¶', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}
