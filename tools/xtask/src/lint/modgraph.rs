//! The module graph of one crate target and its import cycles.
//!
//! Past ~800 lines: one algorithm (read a crate's modules, resolve paths to edges, find cycles)
//! whose steps share the path-resolution rules.
//!
//! Nodes are the crate's modules (files and inline `mod` blocks, `#[cfg(test)]` ones left out:
//! tests sit outside the layering). There is an edge A → B when A names B through a path that
//! starts with `crate::`, `super::`, `self::` or the name of one of A's child modules (the forms
//! a module can name another of the same crate by), in a `use` item or inline (types,
//! expressions, patterns, paths inside macro invocations). Paths are resolved through the
//! module tree and through `use` re-exports: `crate::Foo`, where the root has
//! `pub use zone::Foo`, names `zone`, not the root.
//!
//! A module contains its descendants, and the graph is one of siblings: a path written in
//! `a::x` that names `b::y` (a and b children of one module) is an edge `a -> b`, so two
//! modules that depend on each other through their children are a cycle too. A module naming
//! its own descendant (`mod.rs` calling `neigh::…`, `main.rs` calling `trap::init`) or its
//! ancestor (`super::RouterDrop`, `crate::fail`) is inside one unit and no edge: the tree already
//! draws that arrow. So a cycle always runs between modules neither of which contains another.
//!
//! A `#[macro_export]` macro named as `crate::name!` is an edge to the module defining it.
//!
//! A re-export (`pub use`, `pub(crate) use`, …) is an edge of the re-exporting module only
//! when that module itself uses the imported name; a facade that only re-exports (a crate root
//! listing its API) depends on nothing by doing so. A private `use` always counts.
//!
//! Parsing is `syn`'s (the compiler's grammar, comments and strings never mistaken for paths);
//! nothing is compiled and `cfg`s other than `test` are not evaluated, so an edge behind
//! `#[cfg(loom)]` or `#[cfg(target_os = "none")]` counts like any other.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// Where an edge was first seen: file, line and the path as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// Source file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// The path, segments joined with `::`.
    pub path: String,
    /// For an edge between two modules that contain the naming and the named one: the two
    /// modules the path is written in and names (`a::inner -> b::deep`).
    pub via: Option<String>,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} `{}`", self.file.display(), self.line, self.path)?;
        if let Some(v) = &self.via {
            write!(f, " ({v})")?;
        }
        Ok(())
    }
}

/// A crate's modules and the edges between them.
#[derive(Debug)]
pub struct ModuleGraph {
    /// Module names: `crate` for the root, else the path below it (`router::neigh`).
    pub names: Vec<String>,
    /// Edges (from, to) between sibling modules, indices into [`names`](Self::names), with the
    /// first site naming them (see the module docs: a path from `a::x` to `b::y` is an edge
    /// `a -> b`).
    pub edges: BTreeMap<(usize, usize), Site>,
    /// Files named by a `mod foo;` that were not found (a module behind a `cfg` for another
    /// platform, usually): reported, not fatal.
    pub missing: Vec<String>,
}

/// An elementary cycle: module names, each naming the next and the last naming the first,
/// rotated so that the smallest name comes first.
pub type Cycle = Vec<String>;

/// `a -> b -> a`.
pub fn cycle_text(c: &[String]) -> String {
    let mut s = c.join(" -> ");
    if let Some(first) = c.first() {
        s.push_str(" -> ");
        s.push_str(first);
    }
    s
}

/// Rotates a cycle so that its smallest module comes first (one spelling per cycle).
pub fn canonical(mut c: Cycle) -> Cycle {
    if let Some(i) = (0..c.len()).min_by(|&a, &b| c[a].cmp(&c[b])) {
        c.rotate_left(i);
    }
    c
}

/// At most this many elementary cycles are listed per crate; past it the caller reports the
/// strongly connected components instead (a tangle that large is fixed by layers, not edges).
pub const MAX_CYCLES: usize = 500;

/// Builds the graph of the crate whose root file is `root` (relative to `base`, and so are the
/// files in the result), reading files from disk.
pub fn from_disk(base: &Path, root: &Path) -> Result<ModuleGraph> {
    build(root, &mut |p: &Path| {
        std::fs::read_to_string(base.join(p)).ok()
    })
}

/// Builds the graph of the crate whose root file is `root`; `read` returns a file's text, or
/// `None` when it does not exist (the tests pass an in-memory file set).
pub fn build(root: &Path, read: &mut dyn FnMut(&Path) -> Option<String>) -> Result<ModuleGraph> {
    let mut b = Builder {
        mods: Vec::new(),
        missing: Vec::new(),
        exported_macros: HashMap::new(),
    };
    let text = read(root).with_context(|| format!("reading {}", root.display()))?;
    let file = parse(root, &text)?;
    let dir = root.parent().unwrap_or(Path::new("")).to_path_buf();
    b.module(None, String::new(), root, dir, &file.items, read)?;
    Ok(b.finish())
}

/// `syn::parse_file`, its error naming the file, line and column.
fn parse(path: &Path, text: &str) -> Result<syn::File> {
    syn::parse_file(text).map_err(|e| {
        let at = e.span().start();
        anyhow::anyhow!(
            "cannot parse {}:{}:{}: {e}",
            path.display(),
            at.line,
            at.column + 1
        )
    })
}

struct Module {
    /// Path below the root, `""` for the root.
    name: String,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// Names of the items defined here (for glob re-exports).
    defined: BTreeSet<String>,
    uses: Vec<UseLeaf>,
    /// Paths written outside `use` items.
    refs: Vec<(Vec<String>, Site)>,
    /// Every identifier that starts a path outside `use` items, and every identifier inside a
    /// macro invocation: whether an imported name is used here.
    idents: BTreeSet<String>,
}

enum Binding {
    /// `use a::b::c;` binds `c`; `use a::b as c;` binds `c`; `use a::{self}` binds `a`.
    Name(String),
    /// `use a::b::*;`
    Glob,
    /// `use a::b as _;`
    Underscore,
}

struct UseLeaf {
    /// The full path (for a glob, the module's path).
    segs: Vec<String>,
    binding: Binding,
    public: bool,
    site: Site,
}

struct Builder {
    mods: Vec<Module>,
    missing: Vec<String>,
    /// `#[macro_export]` macros (named `crate::name!` from anywhere): the module defining each.
    exported_macros: HashMap<String, usize>,
}

impl Builder {
    /// Adds the module `name` (items `items`, written in `file`; its children's files are looked
    /// up in `dir`) and, recursively, its children.
    fn module(
        &mut self,
        parent: Option<usize>,
        name: String,
        file: &Path,
        dir: PathBuf,
        items: &[syn::Item],
        read: &mut dyn FnMut(&Path) -> Option<String>,
    ) -> Result<usize> {
        let id = self.mods.len();
        self.mods.push(Module {
            name,
            parent,
            children: BTreeMap::new(),
            defined: BTreeSet::new(),
            uses: Vec::new(),
            refs: Vec::new(),
            idents: BTreeSet::new(),
        });
        let mut c = Collector {
            file,
            uses: Vec::new(),
            refs: Vec::new(),
            idents: BTreeSet::new(),
        };
        let mut submods = Vec::new();
        for item in items {
            if test_only(item_attrs(item)) {
                continue;
            }
            match item {
                syn::Item::Macro(m)
                    if m.attrs.iter().any(|a| a.path().is_ident("macro_export")) =>
                {
                    if let Some(n) = &m.ident {
                        self.exported_macros.insert(n.to_string(), id);
                    }
                }
                _ => {
                    if let Some(n) = item_name(item) {
                        self.mods[id].defined.insert(n);
                    }
                }
            }
            match item {
                syn::Item::Mod(m) => submods.push(m),
                other => c.visit_item(other),
            }
        }
        let Collector {
            uses, refs, idents, ..
        } = c;
        let m = &mut self.mods[id];
        m.uses = uses;
        m.refs = refs;
        m.idents = idents;

        for sm in submods {
            let child_name = sm.ident.to_string();
            let full = match &self.mods[id].name {
                n if n.is_empty() => child_name.clone(),
                n => format!("{n}::{child_name}"),
            };
            let child = match &sm.content {
                Some((_, items)) => {
                    let child_dir = dir.join(&child_name);
                    self.module(Some(id), full, file, child_dir, items, read)?
                }
                None => {
                    let candidates = match path_attr(&sm.attrs) {
                        Some(p) => vec![file.parent().unwrap_or(Path::new("")).join(p)],
                        None => vec![
                            dir.join(format!("{child_name}.rs")),
                            dir.join(&child_name).join("mod.rs"),
                        ],
                    };
                    let Some((path, text)) = candidates
                        .iter()
                        .find_map(|p| read(p).map(|t| (p.clone(), t)))
                    else {
                        self.missing.push(format!(
                            "{}: `mod {child_name};` (none of {})",
                            file.display(),
                            candidates
                                .iter()
                                .map(|p| p.display().to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                        continue;
                    };
                    let parsed = parse(&path, &text)?;
                    // A `foo/mod.rs` (or a `#[path]` file) keeps its children beside it; a
                    // `foo.rs` keeps them in `foo/`.
                    let is_mod_rs = path.file_name().is_some_and(|n| n == "mod.rs");
                    let child_dir = if is_mod_rs || path_attr(&sm.attrs).is_some() {
                        path.parent().unwrap_or(Path::new("")).to_path_buf()
                    } else {
                        dir.join(&child_name)
                    };
                    self.module(Some(id), full, &path, child_dir, &parsed.items, read)?
                }
            };
            self.mods[id].children.insert(child_name, child);
        }
        Ok(id)
    }

    fn finish(self) -> ModuleGraph {
        let mut edges = BTreeMap::new();
        let name = |i: usize| match self.mods[i].name.as_str() {
            "" => "crate".to_string(),
            n => n.to_string(),
        };
        for (id, m) in self.mods.iter().enumerate() {
            // Lift `id -> to` to the two children of their closest common ancestor that
            // contain them; nothing when one contains the other.
            let mut add = |to: usize, site: &Site| {
                let (from_chain, to_chain) = (self.chain(id), self.chain(to));
                let common = from_chain
                    .iter()
                    .zip(&to_chain)
                    .take_while(|(a, b)| a == b)
                    .count();
                let (Some(&a), Some(&b)) = (from_chain.get(common), to_chain.get(common)) else {
                    return;
                };
                edges.entry((a, b)).or_insert_with(|| Site {
                    via: (a != id || b != to).then(|| format!("{} -> {}", name(id), name(to))),
                    ..site.clone()
                });
            };
            for u in &m.uses {
                let counts = match &u.binding {
                    _ if !u.public => true,
                    Binding::Name(n) => m.idents.contains(n),
                    Binding::Glob | Binding::Underscore => false,
                };
                if counts {
                    if let Some(to) = self.resolve(id, &u.segs, 0) {
                        add(to, &u.site);
                    }
                }
            }
            for (segs, site) in &m.refs {
                if let Some(to) = self.resolve(id, segs, 0) {
                    add(to, site);
                }
            }
        }
        ModuleGraph {
            names: (0..self.mods.len()).map(name).collect(),
            edges,
            missing: self.missing,
        }
    }

    /// The modules from the root down to `m`, both included.
    fn chain(&self, m: usize) -> Vec<usize> {
        let mut v = vec![m];
        while let Some(p) = self.mods[*v.last().expect("not empty")].parent {
            v.push(p);
        }
        v.reverse();
        v
    }

    /// The module a path written in module `m` names, or `None` if it names none of this
    /// crate's (another crate, a local item, a generic parameter).
    fn resolve(&self, m: usize, segs: &[String], depth: u32) -> Option<usize> {
        let first = segs.first()?;
        let (start, rest) = match first.as_str() {
            "crate" => (0, &segs[1..]),
            "self" => (m, &segs[1..]),
            "super" => {
                let mut cur = m;
                let mut n = 0;
                while segs.get(n).is_some_and(|s| s == "super") {
                    cur = self.mods[cur].parent?;
                    n += 1;
                }
                (cur, &segs[n..])
            }
            name if self.mods[m].children.contains_key(name) => (m, segs),
            // A name imported into `m` (`use crate::router;` … `router::fib::Fib`).
            name if depth <= 16 => {
                let u = self.mods[m]
                    .uses
                    .iter()
                    .find(|u| matches!(&u.binding, Binding::Name(n) if n == name))?;
                if u.segs.first() == Some(first) {
                    return None; // `use log::info;`: the binding is the path itself
                }
                let target: Vec<String> = u.segs.iter().chain(&segs[1..]).cloned().collect();
                return self.resolve(m, &target, depth + 1);
            }
            _ => return None,
        };
        Some(self.walk(start, rest, depth))
    }

    /// Follows `segs` down from module `m` through child modules and re-exports; the module
    /// reached when the path leaves the module tree.
    fn walk(&self, m: usize, segs: &[String], depth: u32) -> usize {
        let mut cur = m;
        for (i, s) in segs.iter().enumerate() {
            let here = &self.mods[cur];
            if let Some(&c) = here.children.get(s) {
                cur = c;
                continue;
            }
            if here.defined.contains(s) || depth > 16 {
                return cur;
            }
            if cur == 0 {
                if let Some(&m) = self.exported_macros.get(s) {
                    return m;
                }
            }
            // Imported into `cur` by name: follow the import.
            let rest = &segs[i + 1..];
            for u in &here.uses {
                if matches!(&u.binding, Binding::Name(n) if n == s) {
                    let target: Vec<String> = u.segs.iter().chain(rest).cloned().collect();
                    if let Some(t) = self.resolve(cur, &target, depth + 1) {
                        return t;
                    }
                }
            }
            // Through a glob import whose module has the name.
            for u in &here.uses {
                if matches!(u.binding, Binding::Glob) {
                    if let Some(g) = self.resolve(cur, &u.segs, depth + 1) {
                        if g != cur && self.has_name(g, s, depth + 1) {
                            let target: Vec<String> =
                                std::iter::once(s).chain(rest).cloned().collect();
                            return self.walk(g, &target, depth + 1);
                        }
                    }
                }
            }
            return cur;
        }
        cur
    }

    /// Whether module `m` defines, contains or imports `name`.
    fn has_name(&self, m: usize, name: &str, depth: u32) -> bool {
        let here = &self.mods[m];
        here.defined.contains(name)
            || here.children.contains_key(name)
            || here
                .uses
                .iter()
                .any(|u| matches!(&u.binding, Binding::Name(n) if n == name))
            || (depth <= 16
                && here.uses.iter().any(|u| {
                    matches!(u.binding, Binding::Glob)
                        && self
                            .resolve(m, &u.segs, depth + 1)
                            .is_some_and(|g| g != m && self.has_name(g, name, depth + 1))
                }))
    }
}

/// Collects the `use` leaves and paths of one module's items (not of its child modules).
struct Collector<'a> {
    file: &'a Path,
    uses: Vec<UseLeaf>,
    refs: Vec<(Vec<String>, Site)>,
    idents: BTreeSet<String>,
}

impl Collector<'_> {
    fn site(&self, span: proc_macro2::Span, segs: &[String]) -> Site {
        Site {
            file: self.file.to_path_buf(),
            line: span.start().line,
            path: segs.join("::"),
            via: None,
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, public: bool) {
        let leaf = |c: &mut Self, segs: Vec<String>, binding: Binding, span| {
            let site = c.site(span, &segs);
            c.uses.push(UseLeaf {
                segs,
                binding,
                public,
                site,
            });
        };
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, public);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let mut segs = prefix.clone();
                let binding = if name == "self" {
                    Binding::Name(prefix.last().cloned().unwrap_or_default())
                } else {
                    segs.push(name.clone());
                    Binding::Name(name)
                };
                leaf(self, segs, binding, n.ident.span());
            }
            syn::UseTree::Rename(r) => {
                let mut segs = prefix.clone();
                if r.ident != "self" {
                    segs.push(r.ident.to_string());
                }
                let binding = match r.rename.to_string().as_str() {
                    "_" => Binding::Underscore,
                    n => Binding::Name(n.to_string()),
                };
                leaf(self, segs, binding, r.ident.span());
            }
            syn::UseTree::Glob(g) => {
                leaf(self, prefix.clone(), Binding::Glob, g.star_token.span);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t, public);
                }
            }
        }
    }

    /// Paths and identifiers inside a macro invocation's tokens (`info!("{}", crate::x::Y)`,
    /// `$crate::serial::_print` in a `macro_rules!`).
    fn tokens(&mut self, ts: TokenStream) {
        let tokens: Vec<TokenTree> = ts.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) => {
                    let preceded_by_colons =
                        i >= 2 && is_colon(&tokens[i - 1], false) && is_colon(&tokens[i - 2], true);
                    let name = id.to_string();
                    self.idents.insert(name.clone());
                    if !preceded_by_colons && is_colon2_at(&tokens, i + 1) {
                        let mut segs = vec![name];
                        let mut j = i + 1;
                        while is_colon2_at(&tokens, j) {
                            match tokens.get(j + 2) {
                                Some(TokenTree::Ident(next)) => {
                                    segs.push(next.to_string());
                                    j += 3;
                                }
                                _ => break,
                            }
                        }
                        let site = self.site(id.span(), &segs);
                        self.refs.push((segs, site));
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

fn is_colon(t: &TokenTree, joint: bool) -> bool {
    matches!(t, TokenTree::Punct(p) if p.as_char() == ':'
        && (!joint || p.spacing() == proc_macro2::Spacing::Joint))
}

fn is_colon2_at(tokens: &[TokenTree], j: usize) -> bool {
    tokens.get(j).is_some_and(|t| is_colon(t, true))
        && tokens.get(j + 1).is_some_and(|t| is_colon(t, false))
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        if !test_only(item_attrs(i)) {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let public = !matches!(u.vis, syn::Visibility::Inherited);
        let mut prefix = Vec::new();
        if u.leading_colon.is_some() {
            // `use ::foo::…`: another crate.
            return;
        }
        self.use_tree(&mut prefix, &u.tree, public);
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // A `mod` inside a function body: not part of the module tree we follow.
    }

    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs = match i {
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            syn::ImplItem::Macro(m) => &m.attrs,
            _ => return syn::visit::visit_impl_item(self, i),
        };
        if !test_only(attrs) {
            syn::visit::visit_impl_item(self, i);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            if let Some(first) = p.segments.first() {
                self.idents.insert(first.ident.to_string());
                if p.segments.len() > 1 || first.ident == "self" {
                    let segs: Vec<String> =
                        p.segments.iter().map(|s| s.ident.to_string()).collect();
                    let site = self.site(first.ident.span(), &segs);
                    self.refs.push((segs, site));
                }
            }
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    use syn::Item::*;
    let id = match item {
        Const(i) => &i.ident,
        Enum(i) => &i.ident,
        ExternCrate(i) => i.rename.as_ref().map_or(&i.ident, |r| &r.1),
        Fn(i) => &i.sig.ident,
        Macro(i) => i.ident.as_ref()?,
        Mod(i) => &i.ident,
        Static(i) => &i.ident,
        Struct(i) => &i.ident,
        Trait(i) => &i.ident,
        TraitAlias(i) => &i.ident,
        Type(i) => &i.ident,
        Union(i) => &i.ident,
        _ => return None,
    };
    Some(id.to_string())
}

/// `#[test]`, or a `#[cfg(…)]` true only in test builds (`test`, `all(test, …)`).
fn test_only(attrs: &[syn::Attribute]) -> bool {
    fn pred(m: &syn::Meta) -> bool {
        match m {
            syn::Meta::Path(p) => p.is_ident("test"),
            syn::Meta::List(l) if l.path.is_ident("all") => l
                .parse_args_with(
                    syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
                )
                .is_ok_and(|list| list.iter().any(pred)),
            _ => false,
        }
    }
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg") && a.parse_args::<syn::Meta>().is_ok_and(|m| pred(&m)))
    })
}

/// The file a `#[path = "…"]` attribute names.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

impl ModuleGraph {
    /// Strongly connected components with more than one module, each sorted by name.
    pub fn tangles(&self) -> Vec<Vec<String>> {
        let comp = self.components();
        let mut groups: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (v, &c) in comp.iter().enumerate() {
            groups.entry(c).or_default().push(self.names[v].clone());
        }
        let mut out: Vec<Vec<String>> = groups
            .into_values()
            .filter(|g| g.len() > 1)
            .map(|mut g| {
                g.sort();
                g
            })
            .collect();
        out.sort();
        out
    }

    /// The strongly connected component of each module (Tarjan, iterative), as an id.
    fn components(&self) -> Vec<usize> {
        let n = self.names.len();
        let adj = self.adjacency();
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut comp = vec![usize::MAX; n];
        let mut stack = Vec::new();
        let mut next = 0;
        for root in 0..n {
            if index[root] != usize::MAX {
                continue;
            }
            // (node, next neighbour position).
            let mut work = vec![(root, 0usize)];
            while let Some(&mut (v, ref mut pos)) = work.last_mut() {
                if *pos == 0 && index[v] == usize::MAX {
                    index[v] = next;
                    low[v] = next;
                    next += 1;
                    stack.push(v);
                    on_stack[v] = true;
                }
                if let Some(&w) = adj[v].get(*pos) {
                    *pos += 1;
                    if index[w] == usize::MAX {
                        work.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                work.pop();
                if let Some(&(u, _)) = work.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp[w] = v;
                        if w == v {
                            break;
                        }
                    }
                }
            }
        }
        comp
    }

    /// Every elementary cycle (canonical, sorted), or `None` if there are more than
    /// [`MAX_CYCLES`].
    pub fn cycles(&self) -> Option<Vec<Cycle>> {
        let adj = self.adjacency();
        let comp = self.components();
        let mut out = Vec::new();
        // For each start s, the cycles through s whose other modules all come after s, within
        // s's strongly connected component (a path that leaves it never comes back).
        for s in 0..self.names.len() {
            let mut path = vec![s];
            let mut on_path = vec![false; self.names.len()];
            on_path[s] = true;
            let mut work = vec![0usize];
            while let Some(pos) = work.last_mut() {
                let v = *path.last().expect("path follows work");
                match adj[v].get(*pos) {
                    Some(&w) => {
                        *pos += 1;
                        if w == s {
                            out.push(canonical(
                                path.iter().map(|&i| self.names[i].clone()).collect(),
                            ));
                            if out.len() > MAX_CYCLES {
                                return None;
                            }
                        } else if w > s && comp[w] == comp[s] && !on_path[w] {
                            on_path[w] = true;
                            path.push(w);
                            work.push(0);
                        }
                    }
                    None => {
                        work.pop();
                        if let Some(v) = path.pop() {
                            on_path[v] = false;
                        }
                    }
                }
            }
        }
        out.sort();
        Some(out)
    }

    /// The site of the edge `from -> to`, by module name.
    pub fn site(&self, from: &str, to: &str) -> Option<&Site> {
        let idx: HashMap<&str, usize> = self
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        self.edges.get(&(*idx.get(from)?, *idx.get(to)?))
    }

    fn adjacency(&self) -> Vec<Vec<usize>> {
        let mut adj = vec![Vec::new(); self.names.len()];
        for &(a, b) in self.edges.keys() {
            adj[a].push(b);
        }
        adj
    }
}
