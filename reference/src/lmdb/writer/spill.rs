//! The `r` and `s` values kept aside until `finish` (they sort after every
//! frame), in temporary files without a name beside the collection.

use super::*;

/// Values kept aside until `finish`, in a temporary file without a name
/// (gone with the writer, even a killed one): each is `u64 LE record |
/// u64 LE length | bytes`, in record order.
pub(super) struct Spill {
    pub(super) file: BufWriter<File>,
}

impl Spill {
    /// A new spill file in `dir` (the collection's directory: the same file
    /// system, not a possibly memory-backed `/tmp`).
    pub(super) fn new(dir: &Path) -> Result<Spill> {
        Ok(Spill {
            file: BufWriter::with_capacity(1 << 16, unnamed_file_in(dir)?),
        })
    }

    pub(super) fn push(&mut self, r: u64, value: &[u8]) -> Result<()> {
        self.file.write_all(&r.to_le_bytes())?;
        self.file.write_all(&(value.len() as u64).to_le_bytes())?;
        self.file.write_all(value)?;
        Ok(())
    }

    /// The spilled values from the first, for reading back.
    pub(super) fn reader(&mut self) -> Result<BufReader<&mut File>> {
        self.file.flush()?;
        let file = self.file.get_mut();
        file.seek(SeekFrom::Start(0))?;
        Ok(BufReader::with_capacity(1 << 16, file))
    }
}

/// A read-write file in `dir` that no path names: Linux's `O_TMPFILE`
/// where the file system has it, otherwise a new file unlinked as soon as
/// it is open (on Unix it lives on until closed; where a system refuses to
/// unlink an open file, it is left behind under a name that says what it is).
pub(super) fn unnamed_file_in(dir: &Path) -> std::io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let unnamed = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(dir);
        if let Ok(file) = unnamed {
            return Ok(file);
        }
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut attempt = 0u32;
    loop {
        let path = dir.join(format!(
            ".mrec-writer-spill-{}-{stamp}-{attempt}",
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => {
                let _ = std::fs::remove_file(&path);
                return Ok(file);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The next spilled value: its record number and length, or `None` at the end.
pub(super) fn next_spilled(reader: &mut impl Read) -> Result<Option<(u64, usize)>> {
    let mut head = [0u8; 16];
    match reader.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let r = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
    let len = usize::try_from(len).map_err(|_| Error::Lmdb("spill file: bad length".into()))?;
    Ok(Some((r, len)))
}
