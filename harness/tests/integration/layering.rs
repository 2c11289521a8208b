//! No cycles between the files of `harness/src` (ARCHITECTURE.md, "Files
//! by concern, no cycles"), and the report layer layered: its data
//! (`report/mod.rs`, `report/run.rs`, `report/groups.rs`) imports no
//! renderer. The same for `bindings/python/src`.
//!
//! What counts as an import of file B by file A: a path in A's code (not
//! in its comments or strings) that names an item of B's module, through
//! `crate::`, `super::`, `self::`, the library's name (from `main.rs`), or
//! a child module's name, in a `use` declaration or in an expression or
//! type. A `mod x;` declaration is not an import: it says where a module
//! is, not what the file uses. A glob (`use super::*`) imports the module
//! it names.
//!
//! What is allowed: a folder's module file (`x/mod.rs`, or `x.rs` beside a
//! folder `x/`, or `lib.rs`) is the folder's face, and may import its own
//! direct parts (`x/y.rs`, `x/y/mod.rs`): declare, re-export and call them.
//! Those imports are not counted. Every other import is, and the imports
//! counted form no cycle, of any length. So the parts of a folder may take
//! the shared types from its module file (`use super::*`) and use each
//! other one way only; two sibling files never import each other, and no
//! chain of imports leads from a file back to itself but through a module
//! file reaching down into its parts.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The library's own name, as `main.rs` (a crate of its own) spells it.
const LIBRARY: &str = "harness";

/// One import: where it is written and what it names.
#[derive(Clone, Debug)]
struct Import {
    line: usize,
    path: String,
}

/// Files (relative to `src/`) and the imports each makes of each other file.
type Graph = BTreeMap<String, BTreeMap<String, Vec<Import>>>;

#[test]
fn the_files_of_harness_src_import_each_other_in_no_cycle() {
    let files = rust_sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(files.len() > 30, "only {} files found", files.len());
    let graph = imports(&files);
    // The parser finds what it must: a part's `use super::*` and a
    // `crate::` path in the middle of an expression.
    assert!(edge(&graph, "report/groups.rs", "report/mod.rs"));
    assert!(edge(&graph, "interop.rs", "runner.rs"));
    assert!(edge(&graph, "main.rs", "report/run.rs"));
    let bad = forbidden_cycles(&graph);
    assert!(bad.is_empty(), "import cycles:\n{}", bad.join("\n"));

    // The report's data is the bottom layer: it imports no renderer.
    for data in ["report/mod.rs", "report/run.rs", "report/groups.rs"] {
        for renderer in [
            "report/html.rs",
            "report/markdown.rs",
            "report/junit.rs",
            "report/diff.rs",
            "report/files.rs",
        ] {
            assert!(
                !edge(&graph, data, renderer),
                "{data} imports {renderer}: {:?}",
                graph[data][renderer]
            );
        }
    }
}

/// The Python package's Rust half (`bindings/python/src`, outside the
/// workspace) by the same rule, and stricter: no file imports the crate
/// root (`lib.rs` only declares the modules and registers what they
/// define), so no two files import each other even counting the root's
/// imports of its parts.
#[test]
fn the_files_of_bindings_python_src_import_each_other_in_no_cycle() {
    let files = rust_sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../bindings/python/src"));
    assert!(files.len() >= 9, "only {} files found", files.len());
    let graph = imports(&files);
    assert!(edge(&graph, "read.rs", "structures.rs"));
    assert!(edge(&graph, "structures.rs", "acc.rs"));
    assert!(edge(&graph, "read.rs", "errors.rs"));
    let bad = forbidden_cycles(&graph);
    assert!(bad.is_empty(), "import cycles:\n{}", bad.join("\n"));
    for (file, targets) in &graph {
        assert!(
            !targets.contains_key("lib.rs"),
            "{file} imports the crate root: {:?}",
            targets["lib.rs"]
        );
    }
}

/// The checker itself, on made-up files: it finds a pair of files and a
/// longer ring, and allows a module file reaching down into its parts.
#[test]
fn the_cycle_check_finds_cycles_and_allows_a_module_file_with_its_parts() {
    let files = |list: &[(&str, &str)]| -> BTreeMap<String, String> {
        list.iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect()
    };
    let allowed = files(&[
        ("lib.rs", "pub mod x;"),
        ("x/mod.rs", "mod y; pub use y::Y; pub struct S;"),
        (
            "x/y.rs",
            "use super::*; // use crate::x::z;\n pub struct Y(S); fn f() { let s = \"crate::a::b\"; }",
        ),
    ]);
    assert_eq!(forbidden_cycles(&imports(&allowed)), Vec::<String>::new());
    let pair = files(&[
        ("lib.rs", "pub mod a; pub mod b;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        ("b.rs", "pub struct B; fn f() -> crate::a::A { todo!() }"),
    ]);
    let found = forbidden_cycles(&imports(&pair));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("a.rs -> b.rs -> a.rs"), "{found:?}");
    // Siblings in a ring, and a ring through another folder's part.
    let ring = files(&[
        ("lib.rs", "pub mod r; pub mod s;"),
        ("r/mod.rs", "mod a; mod b; mod c;"),
        ("r/a.rs", "use super::b::B; pub struct A;"),
        ("r/b.rs", "pub struct B(super::c::C);"),
        ("r/c.rs", "pub struct C(crate::s::S);"),
        ("s.rs", "pub struct S(crate::r::a::A);"),
    ]);
    let found = forbidden_cycles(&imports(&ring));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("r/a.rs -> r/b.rs -> r/c.rs -> s.rs -> r/a.rs"),
        "{found:?}"
    );
    // A module file calling its parts, which use its types and each other
    // one way: the folder's face reaching down, allowed.
    let face = files(&[
        ("lib.rs", "pub mod r;"),
        (
            "r/mod.rs",
            "mod run; mod html; pub struct Report; fn g() { html::render(); }",
        ),
        ("r/run.rs", "use super::Report;"),
        ("r/html.rs", "use super::run::Run; pub fn render() {}"),
    ]);
    assert_eq!(forbidden_cycles(&imports(&face)), Vec::<String>::new());
    // `super` inside an inline `mod tests` is the file itself.
    let inline = files(&[
        ("lib.rs", "pub mod a; pub mod b;"),
        ("a.rs", "use crate::b::B; mod tests { use super::*; }"),
        (
            "b.rs",
            "pub struct B; #[cfg(test)] mod tests { use super::B; }",
        ),
    ]);
    assert!(forbidden_cycles(&imports(&inline)).is_empty());
}

/// The `.rs` files under `src`, by their path relative to it, with their text.
fn rust_sources(src: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in walkdir::WalkDir::new(src) {
        let entry = entry.expect("a source directory");
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src).expect("under src");
            let rel = rel.to_string_lossy().replace('\\', "/");
            files.insert(rel, std::fs::read_to_string(path).expect("source"));
        }
    }
    files
}

fn edge(graph: &Graph, from: &str, to: &str) -> bool {
    graph.get(from).is_some_and(|m| m.contains_key(to))
}

/// The module path of each file: `lib.rs` and `main.rs` are crate roots,
/// `a/b.rs` and `a/b/mod.rs` are `a::b`.
fn module_of(file: &str) -> Vec<String> {
    if file == "lib.rs" || file == "main.rs" {
        return Vec::new();
    }
    let stem = file
        .strip_suffix("/mod.rs")
        .or_else(|| file.strip_suffix(".rs"))
        .unwrap_or(file);
    stem.split('/').map(str::to_owned).collect()
}

/// Every file's imports of other files.
fn imports(files: &BTreeMap<String, String>) -> Graph {
    let modules: BTreeMap<Vec<String>, String> = files
        .keys()
        .filter(|f| f.as_str() != "main.rs")
        .map(|f| (module_of(f), f.clone()))
        .collect();
    let mut graph = Graph::new();
    for (file, text) in files {
        let here = module_of(file);
        let targets = graph.entry(file.clone()).or_default();
        for (line, path, inline) in paths(&code_only(text)) {
            // The module the code stands in: the file's, inside any inline modules.
            let mut current = here.clone();
            current.extend(inline);
            let Some(target) = resolve(&modules, &current, &path, file == "main.rs") else {
                continue;
            };
            if target != *file {
                targets.entry(target).or_default().push(Import {
                    line,
                    path: path.join("::"),
                });
            }
        }
    }
    graph
}

/// The file that `path`, written in module `current`, names an item of.
fn resolve(
    modules: &BTreeMap<Vec<String>, String>,
    current: &[String],
    path: &[String],
    in_main: bool,
) -> Option<String> {
    let mut segments = path.iter().peekable();
    let mut module: Vec<String> = match segments.peek().map(|s| s.as_str()) {
        Some("crate") if !in_main => {
            segments.next();
            Vec::new()
        }
        Some(LIBRARY) if in_main => {
            segments.next();
            Vec::new()
        }
        Some("self") => {
            segments.next();
            current.to_vec()
        }
        Some("super") => {
            let mut m = current.to_vec();
            while segments.peek().is_some_and(|s| *s == "super") {
                segments.next();
                m.pop()?;
            }
            m
        }
        // A child module of the current one (2018 paths), else another crate.
        Some(first) if !in_main => {
            let mut child = current.to_vec();
            child.push(first.to_string());
            if !modules.contains_key(&child) {
                return None;
            }
            current.to_vec()
        }
        _ => return None,
    };
    for segment in segments {
        let mut deeper = module.clone();
        deeper.push(segment.clone());
        if modules.contains_key(&deeper) {
            module = deeper;
        } else {
            break;
        }
    }
    // An inline module belongs to the file that holds it.
    while !modules.contains_key(&module) {
        module.pop()?;
    }
    modules.get(&module).cloned()
}

/// The text with comments, string and character literals blanked out
/// (line breaks kept, so line numbers stay right).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && matches!(next, Some('"') | Some('#')) && !ident_before(&chars, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some(&ch) => {
                        out.push(blank(ch));
                        j += 1;
                    }
                }
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&ch) = chars.get(i) {
                    out.push(blank(ch));
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal.
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            // Code, a lifetime or a label included.
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Colons,
    Open,
    Close,
    Other(char),
}

fn tokens(code: &str) -> Vec<(usize, Token)> {
    let mut out = Vec::new();
    let mut line = 1;
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((line, Token::Ident(chars[start..i].iter().collect())));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push((line, Token::Colons));
            i += 2;
        } else if c == '{' {
            out.push((line, Token::Open));
            i += 1;
        } else if c == '}' {
            out.push((line, Token::Close));
            i += 1;
        } else {
            out.push((line, Token::Other(c)));
            i += 1;
        }
    }
    out
}

/// Every path of the code: (line, segments, the inline modules it stands in).
fn paths(code: &str) -> Vec<(usize, Vec<String>, Vec<String>)> {
    let tokens = tokens(code);
    let ident = |k: usize| match tokens.get(k) {
        Some((_, Token::Ident(s))) => Some(s.as_str()),
        _ => None,
    };
    let mut out = Vec::new();
    // Inline modules open: (name, brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut k = 0;
    while k < tokens.len() {
        let (line, token) = &tokens[k];
        let names = || inline.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        match token {
            Token::Open => {
                depth += 1;
                k += 1;
            }
            Token::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                k += 1;
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(name), Some((_, Token::Open))) = (ident(k + 1), tokens.get(k + 2)) {
                    inline.push((name.to_owned(), depth + 1));
                }
                k += 1;
            }
            Token::Ident(word) if word == "use" => {
                let end = (k..tokens.len())
                    .find(|&j| tokens[j].1 == Token::Other(';'))
                    .unwrap_or(tokens.len());
                let mut found = Vec::new();
                use_tree(&tokens[k + 1..end], Vec::new(), &mut found);
                for path in found {
                    out.push((*line, path, names()));
                }
                k = end;
            }
            Token::Ident(first) if tokens.get(k + 1).map(|t| &t.1) == Some(&Token::Colons) => {
                // A path in code: `a::b::c`; only its leading segments matter.
                let previous_colons = k > 0 && tokens[k - 1].1 == Token::Colons;
                let mut path = vec![first.clone()];
                let mut j = k + 1;
                while tokens.get(j).map(|t| &t.1) == Some(&Token::Colons) {
                    match ident(j + 1) {
                        Some(s) => path.push(s.to_owned()),
                        None => break,
                    }
                    j += 2;
                }
                if !previous_colons {
                    out.push((*line, path, names()));
                }
                k = j;
            }
            _ => k += 1,
        }
    }
    out
}

/// The paths a `use` tree names, `prefix` first.
fn use_tree(tokens: &[(usize, Token)], prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix.clone();
    let mut k = 0;
    while k < tokens.len() {
        match &tokens[k].1 {
            Token::Ident(s) if s == "as" => {
                // `x as y`: the alias is not a segment.
                k += 2;
            }
            Token::Ident(s) => {
                path.push(s.clone());
                k += 1;
            }
            Token::Colons | Token::Other('*') => k += 1,
            Token::Open => {
                // The group's items, split at top-level commas.
                let mut depth = 0;
                let mut start = k + 1;
                let mut j = k + 1;
                while j < tokens.len() {
                    match &tokens[j].1 {
                        Token::Open => depth += 1,
                        Token::Close if depth == 0 => break,
                        Token::Close => depth -= 1,
                        Token::Other(',') if depth == 0 => {
                            use_tree(&tokens[start..j], path.clone(), out);
                            start = j + 1;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                use_tree(&tokens[start..j], path.clone(), out);
                return;
            }
            _ => k += 1,
        }
    }
    // `self` in a group names the group's own module.
    if path.last().is_some_and(|s| s == "self") && path.len() > 1 {
        path.pop();
    }
    if path.len() > prefix.len() || !prefix.is_empty() {
        out.push(path);
    }
}

/// Whether `part` is a direct part of the folder whose module file is `module`.
fn is_part_of(part: &str, module: &str) -> bool {
    let (m, p) = (module_of(module), module_of(part));
    module != "main.rs" && p.len() == m.len() + 1 && p.starts_with(&m)
}

/// Every cycle of the imports counted (all but a module file's imports of
/// its own direct parts), as `a.rs -> b.rs -> a.rs` with the imports that
/// make it.
fn forbidden_cycles(graph: &Graph) -> Vec<String> {
    let nodes: Vec<&String> = graph.keys().collect();
    let index: BTreeMap<&String, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let next: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            graph[*n]
                .keys()
                .filter(|t| !is_part_of(t, n))
                .filter_map(|t| index.get(t).copied())
                .collect()
        })
        .collect();
    let mut cycles: BTreeSet<Vec<usize>> = BTreeSet::new();
    // Elementary cycles, each found once: from its smallest node, through
    // larger ones only. The graph is acyclic when the test passes; the cap
    // only bounds what a failing one prints.
    for start in 0..nodes.len() {
        let mut stack = vec![(start, 0usize)];
        let mut on_path = vec![start];
        while let Some((node, child)) = stack.pop() {
            if cycles.len() >= 20 {
                break;
            }
            if let Some(&t) = next[node].get(child) {
                stack.push((node, child + 1));
                if t == start {
                    cycles.insert(on_path.clone());
                } else if t > start && !on_path.contains(&t) {
                    on_path.push(t);
                    stack.push((t, 0));
                }
            } else {
                on_path.pop();
            }
        }
    }
    cycles
        .into_iter()
        .map(|c| {
            let mut names: Vec<&str> = c.iter().map(|&i| nodes[i].as_str()).collect();
            names.push(nodes[c[0]]);
            let why: Vec<String> = names
                .windows(2)
                .map(|w| {
                    let i = &graph[w[0]][w[1]][0];
                    format!("  {}:{} uses {}", w[0], i.line, i.path)
                })
                .collect();
            format!("{}\n{}", names.join(" -> "), why.join("\n"))
        })
        .collect()
}
