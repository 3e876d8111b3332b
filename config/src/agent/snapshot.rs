//! The compiled snapshot of an agent set: the checked [`AgentConfig`] of every agent, kept in
//! the host's data folder so that a host restarted on unchanged agent folders does not parse
//! every `agent.yaml` again.
//!
//! This module owns the snapshot file's format (a header, a checksum, the entries), the key an
//! entry is trusted under ([`FileStamp`]: the agent.yaml's size, modification and change times,
//! device and inode, found under the same canonical path) and which agents may be kept at all
//! ([`keepable`]). It reads and writes that one file and nothing else.
//!
//! What it must never do: hand back an entry whose key does not match what the file system
//! says now, or one written by another build of the program (the header names the crate
//! version, the format and the running executable's own stamp; any mismatch, a bad checksum or
//! a decode error discards the whole file). A snapshot is a cache: losing it, or failing to
//! write it, costs a parse and nothing else. The cross-file checks of a set are never cached;
//! they run over every load (see `set.rs`).

use std::collections::HashMap;
use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::{AgentConfig, ToolKind};

/// The first bytes of a snapshot file.
const MAGIC: &[u8; 8] = b"CNSAGSET";

/// The layout of the header and the entries. Bump it when either changes, or when what a
/// loaded [`AgentConfig`] holds changes for the same agent.yaml.
const FORMAT: u32 = 2;

/// How recent a file's last change may be and still be kept: a file changed within the
/// file system's timestamp granularity of the read could change again under the same stamp
/// (2 s covers the coarsest common file systems).
pub(crate) const RACY_MARGIN: Duration = Duration::from_secs(2);

/// What one stat of a file says about its content's identity: if any of these differ, the
/// file may have changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    len: u64,
    modified_ns: i128,
    changed_ns: i128,
    device: u64,
    inode: u64,
}

impl FileStamp {
    /// The stamp of a file from its metadata (followed through symlinks by the caller's stat).
    pub fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
            Self {
                len: meta.len(),
                modified_ns: ns(meta.mtime(), meta.mtime_nsec()),
                changed_ns: ns(meta.ctime(), meta.ctime_nsec()),
                device: meta.dev(),
                inode: meta.ino(),
            }
        }
        #[cfg(not(unix))]
        {
            let modified_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128);
            Self {
                len: meta.len(),
                modified_ns,
                changed_ns: modified_ns,
                device: 0,
                inode: 0,
            }
        }
    }

    /// Stats `path` (following symlinks) and returns its stamp.
    pub fn read(path: &Path) -> std::io::Result<Self> {
        std::fs::metadata(path).map(|m| Self::of(&m))
    }

    /// Whether the file changed so close to `read_at` that a later change could keep this
    /// stamp (see [`RACY_MARGIN`]).
    pub(crate) fn is_racy(&self, read_at: SystemTime, margin: Duration) -> bool {
        let Ok(since_epoch) = read_at.duration_since(SystemTime::UNIX_EPOCH) else {
            return true;
        };
        let read_ns = i128::try_from(since_epoch.as_nanos()).unwrap_or(i128::MAX);
        let margin_ns = i128::try_from(margin.as_nanos()).unwrap_or(i128::MAX);
        self.changed_ns.max(self.modified_ns) >= read_ns.saturating_sub(margin_ns)
    }
}

/// Whether an agent's config depends only on its agent.yaml (and its canonical folder), so a
/// matching stamp is enough to trust it. A sql tool's `database:` is resolved and checked on
/// disk at load: such agents are parsed on every load.
pub(crate) fn keepable(config: &AgentConfig) -> bool {
    !config
        .tools
        .iter()
        .any(|t| matches!(t.kind, ToolKind::Sql { .. }))
}

/// What a load with a snapshot did, for the host's log and for tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotReport {
    /// Agents taken from the snapshot.
    pub from_snapshot: usize,
    /// Agents parsed from their agent.yaml.
    pub parsed: usize,
    /// Why the snapshot file was discarded as a whole (damaged, truncated, written by another
    /// version or build), if it was.
    pub discarded: Option<String>,
    /// How many agents the snapshot written holds, when one was written.
    pub written: Option<usize>,
    /// Why writing the snapshot failed, if it did (the load itself succeeded).
    pub write_failed: Option<String>,
}

/// The header: who wrote the snapshot. Any difference from the reader's discards the file.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Header {
    format: u32,
    crate_version: String,
    /// The stamp of the executable that wrote it: another build may read agent.yaml
    /// differently even under the same version.
    built_by: FileStamp,
}

impl Header {
    fn current() -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("the running program: {e}"))?;
        let built_by = FileStamp::read(&exe)
            .map_err(|e| format!("the running program {}: {e}", exe.display()))?;
        Ok(Self {
            format: FORMAT,
            crate_version: env!("CARGO_PKG_VERSION").to_owned(),
            built_by,
        })
    }
}

/// One agent as kept: its config (whose `file` is the canonical agent.yaml, the entry's
/// key) and the stamp its agent.yaml had when it was read.
#[derive(Serialize, Deserialize)]
struct Entry {
    stamp: FileStamp,
    config: AgentConfig,
}

/// The entries of a snapshot that was read, found by canonical agent.yaml path.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// Where each entry is in `entries` (an index: a config is large to move around).
    index: HashMap<PathBuf, usize>,
    entries: Vec<Option<Entry>>,
}

impl Snapshot {
    /// Takes the config kept for `file` if its stamp is `stamp`; an entry is used once.
    pub(crate) fn take(&mut self, file: &Path, stamp: &FileStamp) -> Option<AgentConfig> {
        let at = self.index.remove(file)?;
        match self.entries.get_mut(at).and_then(Option::take) {
            Some(entry) if entry.stamp == *stamp => Some(entry.config),
            _ => None,
        }
    }

    /// How many entries were not taken.
    pub(crate) fn left(&self) -> usize {
        self.index.len()
    }
}

fn bincode_config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// A checksum of the entries' bytes, to catch a file damaged in place. It need not be stable
/// across builds: another build's snapshot is refused by its header anyway.
fn checksum(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(bytes);
    h.finish()
}

/// Reads the snapshot at `path`: `Ok(None)` when there is none, `Err(why)` when there is one
/// that cannot be trusted as a whole (the caller loads from the YAML files and rewrites it).
pub(crate) fn read(path: &Path) -> Result<Option<Snapshot>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    decode(&bytes, &Header::current()?).map(Some)
}

fn decode(bytes: &[u8], expected: &Header) -> Result<Snapshot, String> {
    let rest = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or("not a snapshot file")?;
    let (header, used): (Header, usize) = bincode::serde::decode_from_slice(rest, bincode_config())
        .map_err(|e| format!("unreadable header: {e}"))?;
    if header.format != expected.format || header.crate_version != expected.crate_version {
        return Err(format!(
            "written by version {} (format {}), this is {} (format {})",
            header.crate_version, header.format, expected.crate_version, expected.format
        ));
    }
    if header.built_by != expected.built_by {
        return Err("written by another build of the program".into());
    }
    let rest = &rest[used..];
    let (sum, body) = rest.split_at_checked(8).ok_or("truncated")?;
    let sum = u64::from_le_bytes(sum.try_into().map_err(|_| "truncated")?);
    if checksum(body) != sum {
        return Err("checksum mismatch (truncated or damaged)".into());
    }
    let (list, used): (Vec<Entry>, usize) =
        bincode::serde::decode_from_slice(body, bincode_config())
            .map_err(|e| format!("unreadable entries: {e}"))?;
    if used != body.len() {
        return Err("trailing bytes after the entries".into());
    }
    let mut index = HashMap::with_capacity(list.len());
    for (at, entry) in list.iter().enumerate() {
        index.insert(entry.config.file.clone(), at);
    }
    Ok(Snapshot {
        index,
        entries: list.into_iter().map(Some).collect(),
    })
}

/// Writes a snapshot of `agents` (with the stamp each agent.yaml had when it was read) to
/// `path`, atomically: a temporary file beside it, then a rename. Agents that are not
/// [`keepable`], and those whose file changed within `margin` of `read_at`, are left out.
/// Returns how many agents were kept.
pub(crate) fn write<'a>(
    path: &Path,
    agents: impl Iterator<Item = (&'a AgentConfig, &'a FileStamp)>,
    read_at: SystemTime,
    margin: Duration,
) -> Result<usize, String> {
    #[derive(Serialize)]
    struct EntryRef<'a> {
        stamp: &'a FileStamp,
        config: &'a AgentConfig,
    }
    let kept: Vec<EntryRef<'_>> = agents
        .filter(|(config, stamp)| keepable(config) && !stamp.is_racy(read_at, margin))
        .map(|(config, stamp)| EntryRef { stamp, config })
        .collect();
    let header = Header::current()?;
    let body = bincode::serde::encode_to_vec(&kept, bincode_config())
        .map_err(|e| format!("encoding: {e}"))?;
    let mut bytes = MAGIC.to_vec();
    bincode::serde::encode_into_std_write(&header, &mut bytes, bincode_config())
        .map_err(|e| format!("encoding: {e}"))?;
    bytes.extend_from_slice(&checksum(&body).to_le_bytes());
    bytes.extend_from_slice(&body);

    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp_name);
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(&bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    Ok(kept.len())
}

/// `serde_json::Value` fields as JSON text for a binary format (which cannot carry a
/// self-describing value), and as themselves for a human-readable one.
pub(crate) mod json_value {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        value: &serde_json::Value,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            value.serialize(s)
        } else {
            s.serialize_str(&value.to_string())
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<serde_json::Value, D::Error> {
        if d.is_human_readable() {
            serde_json::Value::deserialize(d)
        } else {
            let text = String::deserialize(d)?;
            serde_json::from_str(&text).map_err(serde::de::Error::custom)
        }
    }

    /// The same for an optional value.
    pub(crate) mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        pub(crate) fn serialize<S: Serializer>(
            value: &Option<serde_json::Value>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            struct Wrapped<'a>(&'a serde_json::Value);
            impl serde::Serialize for Wrapped<'_> {
                fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    super::serialize(self.0, s)
                }
            }
            match value {
                Some(v) => s.serialize_some(&Wrapped(v)),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<serde_json::Value>, D::Error> {
            #[derive(serde::Deserialize)]
            struct Wrapped(#[serde(with = "super")] serde_json::Value);
            Ok(Option::<Wrapped>::deserialize(d)?.map(|w| w.0))
        }
    }
}
