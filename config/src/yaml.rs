//! Reading one YAML file into a serde "raw" struct, with errors that carry line, column and
//! a dotted key path.
//!
//! Owns the serde-saphyr options and the translation of its errors into [`ConfigError`]. It
//! knows nothing about agents or fleets: callers hand it a raw type and get it back or a
//! located error. It must not hand-scan YAML text; every position comes from serde-saphyr
//! (its error locations and [`Spanned`] values).
//!
//! A file is parsed twice. First into a schema-less [`Node`] tree: if that fails, the text is
//! not well-formed YAML ([`ConfigError::Syntax`]). Then into the raw struct: that error is a
//! schema error, and the tree maps its location back to the key path it happened under
//! (serde-saphyr errors carry a location but no path). Config files are small; the second
//! parse costs nothing that matters.

use std::borrow::Cow;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::options::{DuplicateKeyPolicy, NonFiniteFloatPolicy};
use serde_saphyr::{Error as YamlError, MessageFormatter, Options, Spanned, UserMessageFormatter};

use crate::error::ConfigError;

/// A 1-based line and column in a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pos {
    pub line: u64,
    pub column: u64,
}

impl Pos {
    pub(crate) const START: Self = Self { line: 1, column: 1 };

    pub(crate) fn of<T>(s: &Spanned<T>) -> Self {
        Self::from_location(s.referenced)
    }

    fn from_location(l: serde_saphyr::Location) -> Self {
        // Location::UNKNOWN is (0, 0); clamp so every reported position stays 1-based.
        Self {
            line: l.line().max(1),
            column: l.column().max(1),
        }
    }
}

/// A dotted key path: `tools[1].database`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeyPath(Vec<Seg>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

impl KeyPath {
    pub(crate) fn root() -> Self {
        Self(Vec::new())
    }
    pub(crate) fn key(&self, k: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(k.to_owned()));
        p
    }
    pub(crate) fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }
    fn parent(&self) -> Self {
        let mut p = self.clone();
        p.0.pop();
        p
    }
    fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for KeyPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if i == 0 => f.write_str(k)?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Builds located errors for one file.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub file: &'a Path,
}

impl Ctx<'_> {
    pub(crate) fn invalid(
        &self,
        at: Pos,
        key: &KeyPath,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.to_path_buf(),
            line: at.line,
            column: at.column,
            key: key.to_string(),
            message: message.into(),
        }
    }
    pub(crate) fn schema(&self, at: Pos, key: &KeyPath, message: impl Into<String>) -> ConfigError {
        ConfigError::Schema {
            file: self.file.to_path_buf(),
            line: at.line,
            column: at.column,
            key: key.to_string(),
            message: message.into(),
        }
    }
    fn syntax(&self, at: Pos, message: impl Into<String>) -> ConfigError {
        ConfigError::Syntax {
            file: self.file.to_path_buf(),
            line: at.line,
            column: at.column,
            message: message.into(),
        }
    }
}

fn options(duplicate_keys: DuplicateKeyPolicy) -> Options {
    let mut o = Options::default();
    o.duplicate_keys = duplicate_keys;
    // We render our own diagnostics; the snippet would only be stripped again.
    o.with_snippet = false;
    // `1e400` is well-formed YAML; whether a field accepts it is the schema pass's business.
    o.non_finite_float_policy = NonFiniteFloatPolicy::AsString;
    o
}

/// Reads `file` and parses it into `T`. `what` names the document for the "empty file" and
/// "not a mapping" messages (e.g. "an agent declaration").
pub(crate) fn load_file<T: DeserializeOwned>(file: &Path, what: &str) -> Result<T, ConfigError> {
    let bytes = std::fs::read(file).map_err(|source| ConfigError::Io {
        path: file.to_path_buf(),
        source,
    })?;
    parse_bytes(file, &bytes, what)
}

pub(crate) fn parse_bytes<T: DeserializeOwned>(
    file: &Path,
    bytes: &[u8],
    what: &str,
) -> Result<T, ConfigError> {
    let ctx = Ctx { file };
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            // The valid prefix is UTF-8 by definition, so counting its lines is exact.
            let prefix = String::from_utf8_lossy(&bytes[..e.valid_up_to()]);
            let line = prefix.matches('\n').count() as u64 + 1;
            let column = prefix.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u64 + 1;
            return Err(ctx.syntax(Pos { line, column }, "file is not valid UTF-8 text"));
        }
    };

    // The typed parse first: a file that reads is read once. Only a file that does not (or
    // one with no document at all, which a struct of optional keys would take for an empty
    // mapping) is parsed again into a tree with positions, to say where and why.
    if !is_empty_document(text)
        && let Ok(value) =
            serde_saphyr::from_str_with_options::<T>(text, options(DuplicateKeyPolicy::Error))
    {
        return Ok(value);
    }

    // Is it YAML at all? Duplicate keys pass through here so that the schema pass can report
    // them with their key path.
    let tree: Spanned<Node> =
        match serde_saphyr::from_str_with_options(text, options(DuplicateKeyPolicy::PassThrough)) {
            Ok(t) => t,
            Err(e) => {
                let e = unwrap_error(&e);
                let at = e.location().map(Pos::from_location).unwrap_or(Pos::START);
                return Err(ctx.syntax(at, message_of(e)));
            }
        };
    match &tree.value {
        Node::Map(_) => {}
        Node::Null => {
            return Err(ctx.schema(
                Pos::START,
                &KeyPath::root(),
                format!("the file is empty; expected a mapping ({what})"),
            ));
        }
        other => {
            return Err(ctx.schema(
                Pos::of(&tree),
                &KeyPath::root(),
                format!(
                    "expected a mapping ({what}) at the top level, found {}",
                    other.kind()
                ),
            ));
        }
    }

    // The real shape again, for its error with the tree's positions.
    serde_saphyr::from_str_with_options::<T>(text, options(DuplicateKeyPolicy::Error))
        .map_err(|e| schema_error(ctx, unwrap_error(&e), &tree))
}

/// Whether `text` holds no YAML document: only blank lines, comments and document markers.
fn is_empty_document(text: &str) -> bool {
    text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---" || line == "..."
    })
}

/// The error a formatter should describe: without snippet and alias wrappers.
fn unwrap_error(e: &YamlError) -> &YamlError {
    let mut e = e.without_snippet();
    while let YamlError::AliasError { error, .. } = e {
        e = error.without_snippet();
    }
    e
}

fn message_of(e: &YamlError) -> String {
    let m: Cow<'_, str> = UserMessageFormatter.format_message(e);
    // The formatter's contract: its text is not sanitised; keep control characters out of
    // terminal output.
    m.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_debug().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

fn backticked(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn schema_error(ctx: Ctx<'_>, e: &YamlError, tree: &Spanned<Node>) -> ConfigError {
    let at = e.location().map(Pos::from_location).unwrap_or(Pos::START);
    let entries = flatten(tree);
    let key_at = entries.iter().find(|en| en.is_key && en.pos == at);
    // Pre-order: the first value found at a position is the outermost one there (a block
    // mapping starts where its first key does).
    let value_at = entries.iter().find(|en| !en.is_key && en.pos == at);
    let nearest = entries
        .iter()
        .filter(|en| en.pos <= at)
        .max_by_key(|en| en.pos);
    let in_map = |p: &KeyPath| {
        if p.is_root() {
            "at the top level".to_owned()
        } else {
            format!("in `{p}`")
        }
    };
    let map_pos = |p: &KeyPath| {
        entries
            .iter()
            .find(|en| !en.is_key && en.path == *p)
            .map_or(Pos::of(tree), |en| en.pos)
    };

    match e {
        YamlError::SerdeUnknownField {
            field, expected, ..
        } => {
            let parent = key_at.map(|k| k.path.parent()).unwrap_or_default();
            let key = parent.key(field);
            let msg = format!(
                "unknown key `{field}` {}; expected one of {}",
                in_map(&parent),
                backticked(expected)
            );
            ctx.schema(at, &key, msg)
        }
        YamlError::SerdeMissingField { field, .. } => {
            // serde-saphyr reports a missing field at the mapping's last key (or at the mapping
            // itself when it is empty); point at the start of that mapping instead.
            let parent = match (key_at, value_at) {
                (Some(k), _) => k.path.parent(),
                (None, Some(v)) => v.path.clone(),
                (None, None) => KeyPath::root(),
            };
            let msg = format!("missing required key `{field}` {}", in_map(&parent));
            ctx.schema(map_pos(&parent), &parent.key(field), msg)
        }
        YamlError::SerdeUnknownVariant {
            variant, expected, ..
        } => match (key_at, value_at) {
            (Some(k), _) => {
                let parent = k.path.parent();
                let msg = format!(
                    "unknown key `{variant}` {}; expected one of {}",
                    in_map(&parent),
                    backticked(expected)
                );
                ctx.schema(at, &k.path, msg)
            }
            (None, v) => {
                let path = v.or(nearest).map(|v| v.path.clone()).unwrap_or_default();
                let msg = format!(
                    "unknown value `{variant}`; expected one of {}",
                    backticked(expected)
                );
                ctx.schema(at, &path, msg)
            }
        },
        YamlError::ExpectedMappingEndAfterEnumVariantValue { .. } => {
            let (path, name) = match key_at {
                Some(k) => (k.path.parent(), k.text.clone()),
                None => (
                    nearest.map(|n| n.path.clone()).unwrap_or_default(),
                    String::new(),
                ),
            };
            let msg = format!(
                "unexpected second key `{name}`: `{path}` takes exactly one key (the kind of entry)"
            );
            ctx.schema(at, &path, msg)
        }
        YamlError::DuplicateMappingKey { key, .. } => {
            let path = key_at
                .or(nearest)
                .map(|k| k.path.clone())
                .unwrap_or_default();
            let name = key.clone().unwrap_or_else(|| path.to_string());
            ctx.schema(at, &path, format!("duplicate key `{name}`"))
        }
        other => {
            let v = value_at.or(key_at).or(nearest);
            let path = v.map(|v| v.path.clone()).unwrap_or_default();
            let found = v.map(|v| v.found()).unwrap_or_default();
            let msg = match other {
                YamlError::SerdeInvalidType { expected, .. } => {
                    format!("expected {expected}{found}")
                }
                YamlError::InvalidScalar { ty, .. } => {
                    format!("expected {}{found}", describe_type(ty))
                }
                YamlError::Unexpected { expected, .. } => {
                    format!("expected {}{found}", describe_type(expected))
                }
                YamlError::NullIntoString { .. } => "expected a string, found nothing".to_owned(),
                e => message_of(e),
            };
            ctx.schema(at, &path, msg)
        }
    }
}

/// serde-saphyr names Rust types and parser events; operators read YAML.
fn describe_type(t: &str) -> Cow<'_, str> {
    match t {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more".into(),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "bool" => "`true` or `false`".into(),
        "mapping start" | "mapping" => "a mapping".into(),
        "sequence start" | "sequence" => "a list".into(),
        "string scalar" | "string" => "a string".into(),
        other => other.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// The schema-less tree.

/// Any YAML value, with the location of every key and value (through [`Spanned`]).
#[derive(Debug)]
pub(crate) enum Node {
    Null,
    Scalar(String),
    Seq(Vec<Spanned<Self>>),
    Map(Vec<(Spanned<Self>, Spanned<Self>)>),
}

impl Node {
    fn kind(&self) -> &'static str {
        match self {
            Self::Null => "nothing",
            Self::Scalar(_) => "a scalar",
            Self::Seq(_) => "a list",
            Self::Map(_) => "a mapping",
        }
    }
    fn key_text(&self) -> String {
        match self {
            Self::Scalar(s) => s.clone(),
            Self::Null => "null".to_owned(),
            Self::Seq(_) => "[list]".to_owned(),
            Self::Map(_) => "{mapping}".to_owned(),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::Scalar(v))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Node, E> {
                Ok(Node::Scalar(String::from_utf8_lossy(v).into_owned()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_u128<E>(self, v: u128) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_char<E>(self, v: char) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Node, D2::Error> {
                Node::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(Node::Seq(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut v = Vec::new();
                while let Some(k) = a.next_key()? {
                    let val = a.next_value()?;
                    v.push((k, val));
                }
                Ok(Node::Map(v))
            }
        }
        d.deserialize_any(V)
    }
}

struct Entry {
    pos: Pos,
    path: KeyPath,
    is_key: bool,
    /// The scalar text (keys) or a short description of the value, for messages.
    text: String,
    scalar: bool,
}

impl Entry {
    fn found(&self) -> String {
        if self.scalar {
            format!(", found `{}`", self.text)
        } else {
            format!(", found {}", self.text)
        }
    }
}

/// Every key and value of the tree in document (pre-)order with its path.
fn flatten(root: &Spanned<Node>) -> Vec<Entry> {
    fn walk(n: &Spanned<Node>, path: KeyPath, out: &mut Vec<Entry>) {
        let (text, scalar) = match &n.value {
            Node::Scalar(s) => (s.clone(), true),
            other => (other.kind().to_owned(), false),
        };
        out.push(Entry {
            pos: Pos::of(n),
            path: path.clone(),
            is_key: false,
            text,
            scalar,
        });
        match &n.value {
            Node::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, path.index(i), out);
                }
            }
            Node::Map(pairs) => {
                for (k, v) in pairs {
                    let kp = path.key(&k.value.key_text());
                    out.push(Entry {
                        pos: Pos::of(k),
                        path: kp.clone(),
                        is_key: true,
                        text: k.value.key_text(),
                        scalar: true,
                    });
                    walk(v, kp, out);
                }
            }
            Node::Null | Node::Scalar(_) => {}
        }
    }
    let mut out = Vec::new();
    walk(root, KeyPath::root(), &mut out);
    out
}

/// A mapping read as ordered (key, value) pairs, so that keys keep their positions
/// (`BTreeMap<Spanned<..>, _>` is impossible: `Spanned` is not `Ord`).
#[derive(Debug, Default)]
pub(crate) struct SpannedPairs(pub Vec<(Spanned<String>, Spanned<String>)>);

impl<'de> Deserialize<'de> for SpannedPairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SpannedPairs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping of strings to strings")
            }
            fn visit_unit<E: de::Error>(self) -> Result<SpannedPairs, E> {
                Ok(SpannedPairs::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<SpannedPairs, A::Error> {
                let mut v = Vec::new();
                while let Some(k) = a.next_key()? {
                    v.push((k, a.next_value()?));
                }
                Ok(SpannedPairs(v))
            }
        }
        d.deserialize_map(V)
    }
}
