//! Reading a saved MCP `tools/list` for `fusebox tools import`: the file's
//! size is bounded here, its shape checked by
//! [`fusebox_api::manifest::parse_manifest`].

use crate::failure::Failure;
use crate::limits::MANIFEST_BYTES_MAX;
use fusebox_api::manifest::parse_manifest;
use fusebox_proto::v1 as pb;
use serde_json::Value;
use std::path::Path;

/// Reads and parses a manifest file.
pub fn read_manifest(file: &Path) -> Result<Vec<pb::ManifestTool>, Failure> {
    let shown = file.display();
    let size = std::fs::metadata(file)
        .map_err(|e| Failure::bad_input(format!("cannot read {shown}: {e}")))?
        .len();
    if size > MANIFEST_BYTES_MAX {
        let message = format!("{shown} is {size} bytes, at most {MANIFEST_BYTES_MAX}");
        return Err(Failure::bad_input(message));
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::bad_input(format!("cannot read {shown}: {e}")))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::bad_input(format!("{shown} is not JSON: {e}")))?;
    parse_manifest(&value).map_err(|e| Failure::bad_input(format!("{shown}: {e}")))
}
