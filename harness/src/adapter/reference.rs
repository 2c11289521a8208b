//! The reference implementation, in process, behind the same trait as any
//! other implementation. Nothing else in the harness calls the reference.

use super::{Capabilities, Description, Implementation, Outcome};
use molrec::lmdb::{write_collection, Reader, WriterOptions};
use molrec::model_json::{collection_from_json, collection_to_json};
use serde_json::Value;
use std::path::Path;

/// The bundled reference implementation, called directly.
pub struct Reference {
    description: Description,
    page_size: u32,
}

impl Reference {
    /// The reference, able to write and read.
    pub fn new() -> Reference {
        Reference {
            description: Description {
                name: "molrec-reference".into(),
                version: molrec::VERSION.into(),
                capabilities: Capabilities {
                    write: true,
                    read: true,
                },
            },
            page_size: molrec::lmdb::DEFAULT_PAGE_SIZE,
        }
    }

    /// The reference writing files with LMDB pages of `page_size` bytes
    /// (golden files use 4 KiB: small committed files, and every reader
    /// meets a page size other than the writer's default).
    pub fn with_page_size(page_size: u32) -> Reference {
        Reference {
            page_size,
            ..Reference::new()
        }
    }
}

impl Default for Reference {
    fn default() -> Self {
        Reference::new()
    }
}

fn refused<T>(e: molrec::Error) -> Outcome<T> {
    Outcome::Refused {
        message: e.to_string(),
        clause: e.clause().map(|c| c.id().to_string()),
    }
}

impl Implementation for Reference {
    fn describe(&self) -> &Description {
        &self.description
    }

    fn write(&mut self, collection: &Value, path: &Path) -> Outcome<()> {
        let options = WriterOptions {
            overwrite: true,
            page_size: self.page_size,
            ..WriterOptions::default()
        };
        match collection_from_json(collection).and_then(|c| write_collection(path, c, options)) {
            Ok(_) => Outcome::Done(()),
            Err(e) => refused(e),
        }
    }

    fn read(&mut self, path: &Path) -> Outcome<Value> {
        match Reader::open(path).and_then(|r| r.read_collection()) {
            Ok(c) => Outcome::Done(collection_to_json(&c)),
            Err(e) => refused(e),
        }
    }
}
