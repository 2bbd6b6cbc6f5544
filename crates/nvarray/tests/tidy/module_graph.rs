//! The import graph between the files of one crate, and its loops.
//!
//! A file imports another when it names an item through a path that ends in that file's
//! module: `use crate::a::b::Item`, `super::Item`, `self::child::f()`, or `child::Item` for a
//! module the file declares. A re-export (`pub use x::Item`) is followed to where the item
//! lives, so a crate's root re-exporting its modules' types does not tie every module to the
//! root. Test modules (`#[cfg(test)] mod x { .. }` and `#[cfg(test)] mod x;`) are not part of
//! the graph: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module of the crate: its path from the crate root (`[]` for `lib.rs` / `main.rs`).
type ModPath = Vec<String>;

/// One file of the crate, read.
struct ModFile {
    shown: String,
    /// Its non-test code, comments and string literals blanked.
    code: String,
    /// Modules it declares (`mod x;`), test modules left out.
    children: BTreeSet<String>,
    /// Names it re-exports (`pub use`, `pub(crate) use`, ...) → the path they were imported by.
    reexports: BTreeMap<String, Vec<String>>,
}

/// An import of one file by another: which names.
pub type Edges = BTreeMap<(String, String), BTreeSet<String>>;

/// The crate's files by module path, from its `src` directory: `lib.rs` or `main.rs` is the
/// root, `a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`. Files declared only as test
/// modules are left out.
fn read_crate(src: &Path, shown_root: &Path) -> BTreeMap<ModPath, ModFile> {
    let mut files = Vec::new();
    crate::rust_files(src, &mut files);
    let mut modules = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let mut parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if parts == ["main"] || parts == ["lib"] {
            parts.clear();
        } else if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        } else if parts.first().is_some_and(|p| p == "bin") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file
            .strip_prefix(shown_root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let (code, test_modules) = without_test_modules(&code_only(&text));
        add_module(&mut modules, parts, &shown, &code, &test_modules);
    }
    // Keep only modules reachable from the root through non-test declarations.
    let mut reachable = BTreeSet::new();
    let mut stack = vec![ModPath::new()];
    while let Some(m) = stack.pop() {
        let Some(file) = modules.get(&m) else {
            continue;
        };
        for child in &file.children {
            let mut c = m.clone();
            c.push(child.clone());
            if reachable.insert(c.clone()) {
                stack.push(c);
            }
        }
    }
    modules.retain(|m, _| m.is_empty() || reachable.contains(m));
    modules
}

/// Blanks comments, string and character literals (keeping line breaks), so that only code
/// is searched for paths.
pub fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                if b[j] == b'\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j + close.len();
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    // An escape: the next byte is taken with it, but a line continued with
                    // `\` still ends a line.
                    i += 1;
                    if b.get(i) == Some(&b'\n') {
                        out.push('\n');
                    }
                } else if b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    out.push_str("' '");
                    i = e + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            // Copy one whole UTF-8 character.
            let len = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + len]);
            i += len;
        }
    }
    out
}

/// Where a file's test modules are: the byte ranges of every module under an attribute
/// `#[cfg(..)]` that names `test` (`#[cfg(test)]`, `#[cfg(all(test, not(loom)))]`), inline
/// (`mod x { .. }`, attribute to closing brace) or declared (`mod x;`), and the names of the
/// declared ones (their files are tests too). `code` is `code_only`'s.
pub fn test_module_spans(code: &str) -> (Vec<std::ops::Range<usize>>, BTreeSet<String>) {
    let mut spans = Vec::new();
    let mut declared = BTreeSet::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("#[cfg(") {
        let at = from + found;
        let attribute_end = code[at..].find(']').map_or(code.len(), |e| at + e + 1);
        from = attribute_end;
        let names_test = code[at..attribute_end]
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == "test");
        let after = code[attribute_end..].trim_start();
        let Some(decl) = strip_visibility(after)
            .strip_prefix("mod ")
            .filter(|_| names_test)
        else {
            continue;
        };
        let name: String = decl
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let body = decl[name.len()..].trim_start();
        let body_at = code.len() - body.len();
        if body.starts_with(';') {
            declared.insert(name);
            spans.push(at..body_at + 1);
            from = body_at + 1;
            continue;
        }
        let Some(open) = body.find('{') else {
            continue;
        };
        let end = matching_brace(code, body_at + open);
        spans.push(at..end);
        from = end;
    }
    (spans, declared)
}

/// The position just past the brace that closes the one at `open`.
pub fn matching_brace(code: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, ch) in code[open..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// `code` without its test modules (`test_module_spans`), and the declared test modules' names.
fn without_test_modules(code: &str) -> (String, BTreeSet<String>) {
    let (spans, declared) = test_module_spans(code);
    let mut out = String::new();
    let mut at = 0;
    for span in spans {
        out.push_str(&code[at..span.start]);
        at = span.end;
    }
    out.push_str(&code[at..]);
    (out, declared)
}

/// Adds the module at `path` whose code (test modules removed) is `code`, and the modules
/// written inline in it (`mod x { .. }`), which live in the same file.
fn add_module(
    modules: &mut BTreeMap<ModPath, ModFile>,
    path: ModPath,
    shown: &str,
    code: &str,
    test_modules: &BTreeSet<String>,
) {
    let (code, inline) = split_inline(code);
    let mut children = BTreeSet::new();
    for line in code.lines() {
        let l = strip_visibility(line.trim_start());
        if let Some(decl) = l.strip_prefix("mod ") {
            let name: String = decl
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if decl[name.len()..].trim_start().starts_with(';') && !test_modules.contains(&name) {
                children.insert(name);
            }
        }
    }
    let mut reexports = BTreeMap::new();
    for (public, used) in use_statements(&code) {
        match used.last() {
            Some(name) if public && name != "*" => {
                reexports.insert(name.clone(), used.clone());
            }
            _ => {}
        }
    }
    for (name, body) in inline {
        children.insert(name.clone());
        let mut inner = path.clone();
        inner.push(name);
        add_module(modules, inner, shown, &body, &BTreeSet::new());
    }
    modules.insert(
        path,
        ModFile {
            shown: shown.to_string(),
            code,
            children,
            reexports,
        },
    );
}

/// Takes the bodies of inline modules (`mod x { .. }`) out of `code`: the code left, and
/// each module's name and body.
fn split_inline(code: &str) -> (String, Vec<(String, String)>) {
    let mut out = String::new();
    let mut inline = Vec::new();
    let mut rest = code;
    while let Some(at) = find_word(rest, "mod") {
        let decl = rest[at + 3..].trim_start();
        let name: String = decl
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let body = decl[name.len()..].trim_start();
        if name.is_empty() || !body.starts_with('{') {
            out.push_str(&rest[..at + 3]);
            rest = &rest[at + 3..];
            continue;
        }
        out.push_str(&rest[..at]);
        let end = matching_brace(body, 0);
        inline.push((name, body[1..end.saturating_sub(1)].to_string()));
        rest = &body[end..];
    }
    out.push_str(rest);
    (out, inline)
}

/// `pub `, `pub(crate) `, `pub(super) `, `pub(in path) ` stripped from the front of an item.
fn strip_visibility(l: &str) -> &str {
    if let Some(rest) = l.strip_prefix("pub(") {
        return rest.split_once(')').map_or(l, |(_, r)| r.trim_start());
    }
    l.strip_prefix("pub ").unwrap_or(l)
}

/// Every `use` statement's paths, expanded (`use a::{b, c::d as e}` gives `a::b` and
/// `a::c::d`; what a path is renamed to is not needed), with whether it is a re-export. A
/// path's last segment is what it imports.
fn use_statements(code: &str) -> Vec<(bool, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        let before = rest[..at].trim_end();
        let public = before.ends_with("pub") || (before.ends_with(')') && before.contains("pub("));
        let statement_start = at + 3;
        let Some(end) = rest[statement_start..].find(';') else {
            break;
        };
        // `x as y` becomes `x@y`, then whitespace goes.
        let statement = &rest[statement_start..statement_start + end];
        let tree: String = statement
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace(" as ", "@")
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let mut paths = Vec::new();
        expand(&tree, &mut Vec::new(), &mut paths);
        out.extend(paths.into_iter().map(|p| (public, p)));
        rest = &rest[statement_start + end + 1..];
    }
    out
}

/// The position of `word` in `text` as a whole word, at the start of an item.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        let starts = before.is_none_or(|c| c.is_whitespace() || c == ';' || c == '}' || c == '{');
        let ends = after.is_some_and(char::is_whitespace);
        if starts && ends {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// Expands a use tree without whitespace (`a::{b,c::{d,e@f}}`) into its paths.
fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let segments = |s: &str| -> Vec<String> {
        s.split("::")
            .filter(|x| !x.is_empty())
            .map(|x| x.split('@').next().unwrap_or(x).to_string())
            .collect()
    };
    let depth_before = prefix.len();
    match tree.find('{') {
        Some(open) => {
            prefix.extend(segments(&tree[..open]));
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            for part in split_top(inner).into_iter().filter(|p| !p.is_empty()) {
                if part == "self" || part.starts_with("self@") {
                    out.push(prefix.clone());
                } else {
                    expand(part, prefix, out);
                }
            }
        }
        None => {
            let mut full = prefix.clone();
            full.extend(segments(tree));
            out.push(full);
        }
    }
    prefix.truncate(depth_before);
}

/// Splits a use tree's inside at its top-level commas.
fn split_top(inner: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
}

/// The paths a file's code names outside `use` statements (`crate::a::f()`, `super::X`,
/// `child::Y`), each as its segments up to where the path stops being `ident::ident`.
fn code_paths(code: &str) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = is_ident(b[i])
            && !b[i].is_ascii_digit()
            && (i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b':'));
        if !starts {
            i += 1;
            continue;
        }
        let mut segments = Vec::new();
        let mut j = i;
        loop {
            let s = j;
            while j < b.len() && is_ident(b[j]) {
                j += 1;
            }
            segments.push(code[s..j].to_string());
            if code[j..].starts_with("::") && b.get(j + 2).is_some_and(|&c| is_ident(c)) {
                j += 2;
            } else {
                break;
            }
        }
        // A use tree's prefix (`crate::a::{B, C}`, `crate::a::*`) is read whole by
        // `use_statements`: its items, not the module, are what the file takes.
        let tree_prefix = code[j..].starts_with("::{") || code[j..].starts_with("::*");
        if segments.len() > 1 && !tree_prefix {
            out.push(segments);
        }
        i = j.max(i + 1);
    }
    out
}

/// Where the item a path names from module `at` lives: the module file and the item's name
/// (`*` for a glob, the module's own name for a path to a module). `None` for a path outside
/// the crate.
fn resolve(
    modules: &BTreeMap<ModPath, ModFile>,
    at: &ModPath,
    path: &[String],
    hops: u32,
) -> Option<(ModPath, String)> {
    let (mut base, rest): (ModPath, &[String]) = match path.first()?.as_str() {
        "crate" => (ModPath::new(), &path[1..]),
        "self" => (at.clone(), &path[1..]),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let keep = at.len().checked_sub(ups)?;
            (at[..keep].to_vec(), &path[ups..])
        }
        first if modules.get(at)?.children.contains(first) => (at.clone(), path),
        _ => return None,
    };
    for (i, segment) in rest.iter().enumerate() {
        let mut next = base.clone();
        next.push(segment.clone());
        if modules.contains_key(&next) {
            base = next;
            continue;
        }
        // An item of `base`: where it was re-exported from, if it was.
        if hops < 8 && i + 1 == rest.len() {
            if let Some(from) = modules[&base].reexports.get(segment) {
                if from.last() == Some(segment) {
                    if let Some(found) = resolve(modules, &base, from, hops + 1) {
                        return Some(found);
                    }
                }
            }
        }
        return Some((base, segment.clone()));
    }
    let name = base.last().cloned().unwrap_or_default();
    Some((base, name))
}

/// The imports between a crate's files: (importer, imported) → the names.
pub fn edges(src: &Path, shown_root: &Path) -> Edges {
    let modules = read_crate(src, shown_root);
    let mut edges = Edges::new();
    for (at, file) in &modules {
        let mut paths: Vec<Vec<String>> = use_statements(&file.code)
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        paths.extend(code_paths(&file.code));
        for path in paths {
            let Some((target, name)) = resolve(&modules, at, &path, 0) else {
                continue;
            };
            // Inline modules and their parent share a file: not an import between files.
            if modules[&target].shown != file.shown {
                edges
                    .entry((file.shown.clone(), modules[&target].shown.clone()))
                    .or_default()
                    .insert(name);
            }
        }
    }
    edges
}

/// The loops: groups of files each of which imports, directly or not, every other, with the
/// imports between them, one line each (`a.rs -> b.rs: Name, Other`).
pub fn loops(edges: &Edges) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().insert(to);
    }
    let reach = |start: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(n) = stack.pop() {
            for &m in next.get(n).into_iter().flatten() {
                if seen.insert(m) {
                    stack.push(m);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|&n| (n, reach(n))).collect();
    let mut grouped = BTreeSet::new();
    let mut out = Vec::new();
    for (&n, r) in &reached {
        if grouped.contains(n) || !r.contains(n) {
            continue;
        }
        let group: BTreeSet<&str> = r
            .iter()
            .copied()
            .filter(|m| reached.get(m).is_some_and(|rm| rm.contains(n)))
            .collect();
        grouped.extend(group.iter().copied());
        out.push(
            edges
                .iter()
                .filter(|((f, t), _)| group.contains(f.as_str()) && group.contains(t.as_str()))
                .map(|((f, t), names)| {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    format!("{f} -> {t}: {}", names.join(", "))
                })
                .collect(),
        );
    }
    out
}

/// The crate's source files (paths as shown from `shown_root`), test modules' files left out.
pub fn source_files(src: &Path, shown_root: &Path) -> BTreeSet<String> {
    read_crate(src, shown_root)
        .into_values()
        .map(|m| m.shown)
        .collect()
}
